"""Sweep CPU pre-training recipes at equal wall-clock: which one makes the encoder matter soonest?

Each recipe is a list of `key=value` overrides of the cpu-demo preset. For each, a short calibration loop
times one training step (forward, backward, clip, optimizer step, under the recipe's precision) with
other niced processes paused, so the figure is the step's wall-clock on 2 idle cores. The real run then gets `total_steps = budget / (s/step)`, so its
schedule (warmup + cosine) ends at the budget. Held-out loss and encoder gain are read from its metrics.jsonl.
One JSON line per recipe is appended to nbs/results/demo_sweep.jsonl (re-running a name replaces it).

    python experiments/demo_sweep.py --budget 150 baseline d256-L2 ...
"""
import argparse, contextlib, json, os, signal, subprocess, sys, time

import torch
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false"); os.environ.setdefault("MPLBACKEND", "Agg")
from nanot5_edu.data import load_corpus
from nanot5_edu.tokenizer import train_tokenizer
from nanot5_edu.train import make_config, train

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "nbs" / "results" / "demo_sweep.jsonl"
RUNS = ROOT / "runs" / "sweep"

RECIPES = {
    "baseline": [],
    "lr1e-2": ["optim.lr=1e-2"],
    "adamw-1e-3": ["optim.name=adamw", "optim.lr=1e-3"],
    "adamw-3e-3": ["optim.name=adamw", "optim.lr=3e-3"],
    "L2": ["model.num_layers=2", "model.num_decoder_layers=2"],
    "L2-d128": ["model.num_layers=2", "model.num_decoder_layers=2", "model.d_model=128", "model.d_ff=512",
                "model.num_heads=4"],
    "enc6-dec2": ["model.num_layers=6", "model.num_decoder_layers=2"],
    "L1": ["model.num_layers=1", "model.num_decoder_layers=1"],
    "L2-ff512": ["model.num_layers=2", "model.num_decoder_layers=2", "model.d_ff=512"],
    "L2-B8": ["model.num_layers=2", "model.num_decoder_layers=2", "optim.batch_size=8"],
    "L2-B32": ["model.num_layers=2", "model.num_decoder_layers=2", "optim.batch_size=32"],
    "L2-adamw-1e-3": ["model.num_layers=2", "model.num_decoder_layers=2", "optim.name=adamw", "optim.lr=1e-3"],
    "L2-len64": ["model.num_layers=2", "model.num_decoder_layers=2", "data.inputs_length=64", "optim.batch_size=32"],
    "enc3-dec1": ["model.num_layers=3", "model.num_decoder_layers=1"],
    "L1-len64": ["model.num_layers=1", "model.num_decoder_layers=1", "data.inputs_length=64", "optim.batch_size=32"],
    "enc2-dec1": ["model.num_layers=2", "model.num_decoder_layers=1"],
    "L1-lr1e-2": ["model.num_layers=1", "model.num_decoder_layers=1", "optim.lr=1e-2"],
    "L1-lr4e-2": ["model.num_layers=1", "model.num_decoder_layers=1", "optim.lr=4e-2"],
    "L1-lr8e-2": ["model.num_layers=1", "model.num_decoder_layers=1", "optim.lr=8e-2"],
    "B64": ["optim.batch_size=64"],
    "B8": ["optim.batch_size=8"],
    "len64": ["data.inputs_length=64", "optim.batch_size=32"],
    "len256": ["data.inputs_length=256", "optim.batch_size=8"],
    "vocab1k": ["data.vocab_size=1000", "model.vocab_size=1152"],
    "vocab2k": ["data.vocab_size=2000", "model.vocab_size=2176"],
    "vocab32k": ["data.vocab_size=32000", "model.vocab_size=32128"],
    "fp32": ["train.precision=fp32"],
    "warmup20": ["optim.warmup_steps=20"],
}


def tokenizer_dir(vocab_size: int) -> Path:
    "One tokenizer per vocabulary size, trained once and shared by every recipe"
    d = RUNS / f"tokenizer_{vocab_size}"
    if not (d / "tokenizer.json").exists():
        train_tokenizer(load_corpus("sotu", "train")["text"], vocab_size, d)
    return d


# Every recipe is a change to the demo's *old* default (4 + 4 layers, lr 2e-2), pinned here so that re-running
# the sweep gives the same recipes whatever the cpu-demo preset has become since.
OLD_DEFAULT = ["model.num_layers=4", "model.num_decoder_layers=4", "optim.lr=2e-2"]


def with_tokenizer(overrides: list[str]) -> list[str]:
    vocab = next((int(o.split("=")[1]) for o in overrides if o.startswith("data.vocab_size=")), 8000)
    return overrides + [f"data.tokenizer={tokenizer_dir(vocab)}"]


def step_cpu_ms(cfg, warm: int = 10, timed: int = 12) -> float:
    "CPU ms of one training step divided by the thread count: the step's wall-clock on idle cores"
    from nanot5_edu.model import T5
    from nanot5_edu.optim import get_optimizer
    from nanot5_edu.spans import SpanCorruptionCollator
    from nanot5_edu.tokenizer import load_tokenizer
    torch.manual_seed(0)
    tok = load_tokenizer(cfg.data.tokenizer)
    collator = SpanCorruptionCollator(tok, cfg.data.inputs_length, cfg.data.noise_density, cfg.data.mean_noise_span_length)
    model = T5(cfg.model)
    opt = get_optimizer(cfg.optim.name, model.named_parameters(), cfg.optim.lr, cfg.optim.weight_decay)
    rows = torch.randint(3, len(tok) - 100, (cfg.optim.batch_size, collator.raw_length))
    batch = collator(rows)
    def one_step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.train.precision == "bf16"):
            loss = model(batch["input_ids"], labels=batch["labels"]).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        opt.step(); opt.zero_grad(set_to_none=True)
    for _ in range(warm):
        one_step()
    t0 = time.perf_counter()
    for _ in range(timed):
        one_step()
    return (time.perf_counter() - t0) / timed * 1000


@contextlib.contextmanager
def quiet_machine():
    """Create /tmp/quiet while timing. On the machine this sweep ran on, a watcher paused niced background jobs while
    that file existed (on 2 cores one busy neighbour stalls torch's threads 3-10x); elsewhere it does nothing."""
    flag = Path("/tmp/quiet")
    flag.touch()
    time.sleep(1)
    try:
        yield
    finally:
        flag.unlink(missing_ok=True)


def run(name: str, overrides: list[str], budget_s: float, seed: int, eval_points: int) -> dict:
    common = with_tokenizer(OLD_DEFAULT + overrides) + ["checkpoint.resume=never", "logging.progress_bar=false",
                                          f"train.seed={seed}", "checkpoint.every_steps=1000000"]
    ms = step_cpu_ms(make_config("cpu-demo", common))
    steps = max(50, int(budget_s * 1000 / ms))
    warmup = min(100, steps // 10)
    run_dir = RUNS / f"{name}_s{seed}"
    t0 = time.time()
    s = train(make_config("cpu-demo", common + [f"train.total_steps={steps}", f"optim.warmup_steps={warmup}",
                                                f"eval.every_steps={max(1, steps // eval_points)}", "eval.batches=8",
                                                f"logging.every_steps={max(1, steps // 20)}", f"logging.run_dir={run_dir}"]))
    wall = time.time() - t0
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_ms = [r["ms_per_step"] for r in rows if "ms_per_step" in r]
    gains = ("encoder_gain", "span_gain", "document_gain")
    curve = [{"step": r["step"], "eval_loss": r["eval_loss"], **{g: r.get(g) for g in gains}}
             for r in rows if "eval_loss" in r]
    return {"name": name, "overrides": overrides, "seed": seed, "budget_s": budget_s, "calib_ms_per_step": ms,
            "steps": steps, "ms_per_step": sum(train_ms) / len(train_ms), "wall_s": wall,
            "eval_loss": s["final_eval_loss"], **{g: s[f"final_{g}"] for g in gains},
            **{f"{g}_ci95": s[f"final_{g}_ci95"] for g in gains},
            "eval_accuracy": s["final_eval_accuracy"], "curve": curve}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+", help=f"recipes: {', '.join(RECIPES)}")
    ap.add_argument("--budget", type=float, default=150, help="training seconds per recipe")
    ap.add_argument("--seed", type=int, default=2137)
    ap.add_argument("--eval-points", type=int, default=4)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    for name in args.names:
        with quiet_machine():
            r = run(name, RECIPES[name], args.budget, args.seed, args.eval_points)
        old = [l for l in (args.out.read_text().splitlines() if args.out.exists() else [])
               if not (json.loads(l)["name"] == name and json.loads(l)["seed"] == args.seed
                       and json.loads(l)["budget_s"] == args.budget)]
        args.out.write_text("".join(l + "\n" for l in old + [json.dumps(r)]))
        print(f"== {name}: {r['steps']} steps x {r['ms_per_step']:.0f} ms, loss {r['eval_loss']:.3f}, "
              f"encoder gain {r['encoder_gain']:.3f}", flush=True)
