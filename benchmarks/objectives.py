"""Step time and throughput of the five setups of lesson 09c (architecture x objective), side by side in one run.

cpu-demo sizes (a 1 + 1-layer encoder-decoder, d_model 256; the decoder-only models with 2 blocks), batch 16 of rows
of 142 raw tokens (T5's raw length for 128 encoder tokens), bf16 autocast, AdamWScale: the median of 20 training
steps (forward, backward, optimizer) after 3 warm-up steps, each step on a fresh batch from the setup's collator.
Printed per setup: ms/step, raw tokens/s (text consumed) and model tokens/s (encoder + decoder positions computed),
the expected training FLOPs of a step (`expected_flops_per_step`) and the achieved GFLOP/s, and each ratio to T5.
Run: python benchmarks/objectives.py
"""
import os
import statistics
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import torch

from nanot5_edu.config import make_config
from nanot5_edu.objectives import expected_flops_per_step
from nanot5_edu.optim import get_optimizer
from nanot5_edu.train import make_collator, make_model

SETUPS = {
    "T5 (enc-dec, span corruption)": ["data.objective=span_corruption"],
    "decoder-only LM (causal_lm)": ["model.architecture=decoder-only", "data.objective=causal_lm", "model.num_layers=2"],
    "decoder-only prefix LM": ["model.architecture=decoder-only", "data.objective=prefix_lm", "model.num_layers=2"],
    "enc-dec LM (prefix_lm)": ["data.objective=prefix_lm"],
    "UL2 (enc-dec, ul2)": ["data.objective=ul2"],
}
BATCH, STEPS, WARMUP = 16, 20, 3


class Ids:  # the demo tokenizer's ids: 8,000 pieces + 100 sentinels counted down from 8099 (an 8,192-row table)
    eos_token_id, pad_token_id, unk_token_id = 1, 0, 2
    def __len__(self): return 8100
    def convert_tokens_to_ids(self, tokens): return [8099 - int(t[len("<extra_id_"):-1]) for t in tokens]


def measure(overrides):
    torch.manual_seed(0)
    cfg = make_config("cpu-demo", overrides)
    collator = make_collator(cfg, Ids(), seed=0)
    model = make_model(cfg).train()
    optimizer = get_optimizer("adamwscale", model.named_parameters(), 2e-2, 0.0)
    rows = torch.randint(3, 8000, (BATCH * (STEPS + WARMUP), collator.raw_length), generator=torch.Generator().manual_seed(0))
    times, model_tokens = [], []
    for i in range(STEPS + WARMUP):
        batch = collator(rows[i * BATCH:(i + 1) * BATCH])
        t = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(batch["input_ids"], labels=batch["labels"], decoder_input_ids=batch["decoder_input_ids"]).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= WARMUP:
            times.append(time.perf_counter() - t)
            model_tokens.append(batch["input_ids"].numel() + batch["labels"].numel())
    flops = expected_flops_per_step(cfg.model, BATCH, collator)
    s = statistics.median(times)
    return {"ms": s * 1e3, "raw_tok_s": BATCH * collator.raw_length / s,
            "model_tok_s": statistics.mean(model_tokens) / s, "gflop": flops / 1e9, "gflops_s": flops / s / 1e9}


print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU "
      f"{next((l.split(':', 1)[1].strip() for l in open('/proc/cpuinfo') if l.startswith('model name')), '?')}; "
      f"batch {BATCH}, median of {STEPS} steps after {WARMUP}, bf16 autocast")
rows = {name: measure(o) for name, o in SETUPS.items()}
t5 = rows["T5 (enc-dec, span corruption)"]
print(f"{'setup':32} {'ms/step':>8} {'raw tok/s':>10} {'model tok/s':>12} {'GFLOP/step':>11} {'GFLOP/s':>8} "
      f"{'step / T5':>10} {'FLOP / T5':>10}")
for name, r in rows.items():
    print(f"{name:32} {r['ms']:8.1f} {r['raw_tok_s']:10,.0f} {r['model_tok_s']:12,.0f} {r['gflop']:11.2f} "
          f"{r['gflops_s']:8.1f} {r['ms'] / t5['ms']:9.2f}x {r['gflop'] / t5['gflop']:9.2f}x")
