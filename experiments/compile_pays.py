"""Does torch.compile pay for itself in the CPU demo's budget? Eager vs compiled train step of a recipe, bf16 on
2 cores: cold-start seconds (first compiled step), steady ms/step, and the minute at which compile breaks even.

    python experiments/compile_pays.py model.num_layers=1 model.num_decoder_layers=1
"""
import json, os, sys, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
import torch
sys.path.insert(0, str(Path(__file__).parent))
from demo_sweep import quiet_machine, with_tokenizer
from nanot5_edu.model import T5
from nanot5_edu.optim import get_optimizer
from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.tokenizer import load_tokenizer
from nanot5_edu.train import make_config


def measure(cfg, compiled: bool, steps: int = 20) -> tuple[float, float]:
    "(seconds of the first step, steady ms/step over `steps` steps after 5 warm ones)"
    torch.manual_seed(0)
    tok = load_tokenizer(cfg.data.tokenizer)
    collator = SpanCorruptionCollator(tok, cfg.data.inputs_length)
    model = T5(cfg.model)
    opt = get_optimizer(cfg.optim.name, model.named_parameters(), cfg.optim.lr)
    fwd = torch.compile(model) if compiled else model
    batch = collator(torch.randint(3, len(tok) - 100, (cfg.optim.batch_size, collator.raw_length)))
    def one_step():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = fwd(batch["input_ids"], labels=batch["labels"]).loss
        loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step(); opt.zero_grad(set_to_none=True)
    t0 = time.perf_counter(); one_step(); first = time.perf_counter() - t0
    for _ in range(5):
        one_step()
    t0 = time.perf_counter()
    for _ in range(steps):
        one_step()
    return first, (time.perf_counter() - t0) / steps * 1000


if __name__ == "__main__":
    cfg = make_config("cpu-demo", with_tokenizer(sys.argv[1:]))
    with quiet_machine():
        (_, eager_ms), (cold_s, compiled_ms) = measure(cfg, False), measure(cfg, True)
    saved_per_step = (eager_ms - compiled_ms) / 1000
    breakeven = cold_s / saved_per_step * compiled_ms / 1000 / 60 if saved_per_step > 0 else float("inf")
    result = {"overrides": sys.argv[1:], "eager_ms_per_step": eager_ms, "compiled_ms_per_step": compiled_ms,
              "compile_cold_start_s": cold_s, "break_even_minutes": breakeven}
    print(json.dumps(result, indent=1))
    (Path(__file__).parents[1] / "nbs" / "results" / "compile_cpu.json").write_text(json.dumps(result, indent=1))
