"""Optimizer step time: AdamWScale (foreach) vs torch.optim.AdamW(foreach=True) on T5-v1.1-small parameter shapes.
Random gradients; median of 20 steps after 3 warm-up steps.  Run: python benchmarks/optim.py
"""
import statistics
import time

import torch

from nanot5_edu.model import T5
from nanot5_edu.layers import get_config
from nanot5_edu.optim import AdamWScale


def time_steps(make_opt, n=20):
    torch.manual_seed(0)
    model = T5(get_config("t5-v1_1-small"))
    params = list(model.parameters())
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    opt = make_opt(params)
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(n):
        t = time.perf_counter(); opt.step(); times.append(time.perf_counter() - t)
    return statistics.median(times), sum(p.numel() for p in params), len(params)


ours, n_params, n_tensors = time_steps(lambda ps: AdamWScale(ps, lr=2e-2, foreach=True))
loop, _, _ = time_steps(lambda ps: AdamWScale(ps, lr=2e-2, foreach=False))
ref, _, _ = time_steps(lambda ps: torch.optim.AdamW(ps, lr=2e-2, eps=1e-6, weight_decay=0.0, foreach=True))
print(f"T5-v1.1-small: {n_params:,} parameters in {n_tensors} tensors; {torch.get_num_threads()} threads")
print(f"{'optimizer':40} {'ms/step':>9}")
print(f"{'AdamWScale (foreach)':40} {ours * 1e3:9.1f}")
print(f"{'AdamWScale (per-tensor loop)':40} {loop * 1e3:9.1f}")
print(f"{'torch.optim.AdamW(foreach=True)':40} {ref * 1e3:9.1f}")
print(f"ratio AdamWScale foreach / AdamW: {ours / ref:.2f}x   (goal <= 1.3x)")
