"""Precision that fits the device and memory you can predict (issue 21): bf16 refused where it would be emulated,
fp16 loss-scaler skips that must not stop a run, a CUDA out-of-memory error that names its fix, and
`estimate_memory` against the CPU's measured peak of a whole training step."""
import functools
import json
import math
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from nanot5_edu.train import train
from nanot5_edu.config import ConfigError, TrainingError, estimate_memory, make_config, validate_config

TINY = ["model.num_layers=1", "model.num_decoder_layers=1", "model.d_model=64", "model.d_kv=16", "model.num_heads=4",
        "model.d_ff=128", "model.vocab_size=2048", "optim.batch_size=4", "optim.warmup_steps=1", "data.inputs_length=64",
        "eval.batches=1", "eval.batch_size=4", "eval.samples=0", "logging.progress_bar=false",
        "checkpoint.resume=never"]


@pytest.mark.parametrize("capability, refused", [((7, 5), True), ((8, 0), False)])
def test_bf16_refused_without_native_bf16(monkeypatch, capability, refused):
    """A T4 (7.5) reports bf16 'supported' (emulated): validate_config refuses bf16 there and names fp16 and fp32;
    an A100 (8.0) passes. Catches a T4 silently training in emulated bf16."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4" if refused else "NVIDIA A100-SXM4-40GB")
    if refused:
        with pytest.raises(ConfigError, match="Tesla T4.*train.precision=fp16.*train.precision=fp32"):
            validate_config(make_config("cpu-demo"))
    else:
        validate_config(make_config("cpu-demo"))
    validate_config(make_config("colab-t4"))  # fp16: fine on both


def test_fp16_skipped_steps_do_not_stop_training(tmp_path, small_data, monkeypatch):
    """fp16 with a loss scale so large that the first steps' gradients overflow: the scaler skips them (inf gradient
    norm, logged), the losses stay finite, so the NaN guard must not fire, and the run finishes with trained weights.
    Catches a guard that reads the gradient norm (or the scaled loss) instead of the loss, a log or plot that
    breaks on an inf gradient norm, and a learning-rate schedule that steps on skipped updates."""
    scalers = []
    original = torch.amp.GradScaler
    def big_scale(*args, **kwargs):
        scalers.append(original(*args, **{**kwargs, "init_scale": 2.0 ** 24}))
        return scalers[-1]
    monkeypatch.setattr(torch.amp, "GradScaler", big_scale)
    run = tmp_path / "fp16"
    summary = train(make_config("cpu-demo", [*TINY, *small_data, "train.precision=fp16", "train.total_steps=8",
                                             "eval.every_steps=8", "checkpoint.every_steps=8", "logging.every_steps=1",
                                             f"logging.run_dir={run}"]))
    assert summary["steps"] == 8 and scalers, "fp16 on CPU must get a loss scaler"
    logged = [json.loads(l) for l in (run / "metrics.jsonl").read_text().splitlines() if '"grad_norm"' in l]
    assert all(math.isfinite(m["loss"]) for m in logged)
    print([m["grad_norm"] for m in logged])
    assert not all(math.isfinite(m["grad_norm"]) for m in logged), "no step was skipped: the test did not test anything"
    assert math.isfinite(logged[-1]["grad_norm"]), "the scaler never recovered"
    skipped_lrs = {m["lr"] for m in logged if not math.isfinite(m["grad_norm"])}
    assert len(skipped_lrs) == 1, f"the schedule moved on steps the scaler skipped: {sorted(skipped_lrs)}"
    assert scalers[0].get_scale() < 2.0 ** 24
    assert (run / "loss.png").exists()


def test_cuda_oom_in_fit_names_micro_batch_estimate_and_fix(tmp_path, small_data, monkeypatch):
    "An out-of-memory error inside a training step becomes a TrainingError with the micro-batch, the estimate, the fix"
    from nanot5_edu.model import T5
    forward = T5.forward
    def oom_when_training(self, *args, **kwargs):
        if self.training:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(self, *args, **kwargs)
    monkeypatch.setattr(T5, "forward", oom_when_training)
    with pytest.raises(TrainingError, match=r"micro-batch 4 .*estimate_memory puts the step at .* GiB.*optim.grad_acc=2"):
        train(make_config("cpu-demo", [*TINY, *small_data, "train.total_steps=2", "eval.every_steps=2",
                                       "checkpoint.every_steps=2", f"logging.run_dir={tmp_path / 'oom'}"]))


PEAK_STEP = textwrap.dedent("""
    import dataclasses, gc, json, sys, torch
    from nanot5_edu.model import T5
    from nanot5_edu.optim import get_optimizer
    from nanot5_edu.config import make_config
    from nanot5_edu.noise import compute_input_and_target_lengths
    torch.set_num_threads(1)
    cfg = make_config("cpu-demo", json.loads(sys.argv[1]))
    padded = sys.argv[2] == "padded"  # fine-tuning: padding masks on the inputs and the targets
    L_t = compute_input_and_target_lengths(cfg.data.inputs_length)[1]
    B = cfg.optim.batch_size // cfg.optim.grad_acc
    ids, labels = torch.randint(3, 1000, (B, cfg.data.inputs_length)), torch.randint(3, 1000, (B, L_t))
    masks = {}
    if padded:
        am, dm = torch.ones_like(ids), torch.ones_like(labels)
        am[:, cfg.data.inputs_length * 3 // 4:] = 0; dm[:, L_t // 2:] = 0
        masks = {"attention_mask": am, "decoder_attention_mask": dm}
    autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.train.precision == "bf16")
    def steps(model, n, ids, labels, masks={}):
        opt = get_optimizer(cfg.optim.name, model.named_parameters(), 1e-3)
        for _ in range(n):
            with autocast():
                loss = model(input_ids=ids, labels=labels, **masks).loss
            loss.backward(); torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0); opt.step(); opt.zero_grad(set_to_none=True)
    # first calls set up kernels, thread pools and autocast: warm them up on a small model, outside the measurement
    steps(T5(dataclasses.replace(cfg.model, num_layers=1, num_decoder_layers=1, d_model=64, d_ff=64, num_heads=2,
                                 d_kv=32, vocab_size=1024)), 2, ids[:2] % 1024, labels[:2] % 1024)
    gc.collect()
    def status(key):  # Linux: /proc/self/status in kB
        return next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith(key + ":"))
    open("/proc/self/clear_refs", "w").write("5")  # reset the high-water mark VmHWM to the current resident set
    base = status("VmRSS")
    steps(T5(cfg.model), 2, ids, labels, masks)  # the second step has the optimizer state too
    print(json.dumps({"peak_bytes": status("VmHWM") - base}))
""")


@pytest.mark.parametrize("overrides, padded", [
    ([], False),  # the cpu-demo step: weights and optimizer state are most of it
    (["model.num_layers=4", "model.num_decoder_layers=4"], False),  # 4 + 4 layers: activations are most of it
    # fine-tuning's padded batches in bf16, long inputs, many heads: each stack's [B, H, L, L] bias + mask counts
    (["model.num_layers=4", "model.num_decoder_layers=4", "data.inputs_length=512", "model.num_heads=16",
      "model.d_kv=16", "train.precision=bf16"], True),
], ids=["cpu-demo", "tiny-4+4", "padded-bf16-512"])
def test_estimate_memory_within_30_percent_of_cpu_peak(overrides, padded):
    """estimate_memory(device='cpu') against the peak memory of two real training steps, in a fresh process: its
    resident-set high-water mark (VmHWM, reset just before the steps) minus the resident set then. glibc's malloc is
    told to serve every block over 64 KiB by mmap, so freed tensors go back to the OS and the high-water mark follows
    live tensors, not a fragmented heap. (An RSS high-water mark, not torch.profiler: it sees every allocation, the
    optimizer's and the allocator's included, and needs no parsing of a trace.)
    Measured ratios (peak / estimate) when written: 0.88 (cpu-demo), 0.88 (4 + 4), 0.82 (padded, bf16, 512 tokens,
    16 heads). Catches a missing or double-counted part (gradients, optimizer state, the fp32 logits, an activation
    per layer, the padded case's [B, H, L, L] bias per stack)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", PEAK_STEP, json.dumps(overrides), "padded" if padded else "-"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    peak = json.loads(out.stdout.strip().splitlines()[-1])["peak_bytes"]
    estimate = estimate_memory(make_config("cpu-demo", overrides), device="cpu", padding_mask=padded)["total"]
    print(f"peak {peak / 2**20:.0f} MiB, estimate {estimate / 2**20:.0f} MiB, ratio {peak / estimate:.2f}")
    assert 0.7 < peak / estimate < 1.3
