# %% [markdown]
# # Real runs: `fit`, checkpoints and `train`
# > The bare loop of lesson 05 grown into `fit`: a logging window, evaluation, the checkpoints of lesson 07b in the loop (an exact resume, a clean stop on signals), and one to many processes through 🤗 Accelerate; then `train`, a few steps for real, an exact resume, the HF export

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# The loop of [05](05_pretraining.ipynb) is all of pre-training, but it cannot survive a crash, says nothing while it
# runs, and uses one device. This lesson grows it into `fit`, the loop that `train` and `finetune` run (pre-training here,
# fine-tuning in [09](09_finetuning.ipynb)), from the pieces of the lessons before: the evaluation of
# [05](05_pretraining.ipynb), the streams of [06](06_streams.ipynb), the config tree of [07](07_config.ipynb), the
# checkpoints of [07b](07b_checkpoints.ipynb). Then
# `train` puts the data around `fit`, and the payoff is a run you can kill and resume with the same losses and the same
# weights, bit for bit (on CPU; a GPU resume is not tested).

# %%
#| default_exp train

# %%
#| export
from __future__ import annotations

import contextlib
import json
import math
import os
import time
from pathlib import Path

import datasets
import torch
from omegaconf import OmegaConf

from nanot5_edu.data import is_c4_shards, load_corpus
from nanot5_edu.model import T5
from nanot5_edu.optim import get_lr_scheduler, get_optimizer
from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.tokenizer import load_tokenizer, train_tokenizer
from nanot5_edu.pretrain import evaluate, evaluation_batches, GAINS, unigram_baselines
from nanot5_edu.stream import BatchStream, FirstBatchHash, packed_rows, training_stream, _write_process_manifest
from nanot5_edu.config import (Config, ConfigError, flops_per_step, peak_flops, TrainingError, validate_config,
                               _explain_oom)
from nanot5_edu.checkpoint import (latest_checkpoint, resume_checkpoint, RunStopped, save_checkpoint, StopRequest,
                                   _any_process, _stoppable)

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import os, shutil, tempfile
datasets.disable_progress_bars()
from nanot5_edu.spans import pack_dataset
from nanot5_edu.config import make_config, matmul_peak_flops
# a small tokenizer for the small model of the steps below
tokenizer = train_tokenizer(load_corpus("sotu", "validation")["text"][:40], 2000, Path(tempfile.mkdtemp()) / "tok")
cpu_peak = {torch.bfloat16: matmul_peak_flops(torch.bfloat16)}  # 07: the CPU's measured bf16 matmul peak, for MFU

# %% [markdown]
# ## From the bare loop to `fit`
#
# `fit` is the bare loop plus what a real run needs. Each addition, and where it is built:
#
# | addition | why | where |
# |---|---|---|
# | evaluation | held-out loss, accuracy and the encoder gain (span gain + document gain), not the training loss, say what was learned | [05](05_pretraining.ipynb) |
# | a resumable data stream | the same batches after a restart; streamed corpora in worker processes | [06](06_streams.ipynb) |
# | one config tree, errors before compute; FLOPs, MFU, memory | every knob in one place; a typo stops the run at once; how much of the hardware the run uses | [07](07_config.ipynb) |
# | a logging window and evaluation during the run | numbers while it runs, without a device sync per step (under fp16 the loss scaler still syncs once a step) (evaluation time is kept out of ms/step) | step 1, below |
# | atomic, checked checkpoints; exact resume | a killed run loses only the steps since its last checkpoint | [07b](07b_checkpoints.ipynb); into the loop in step 2, below |
# | 🤗 Accelerate | the same loop on a CPU, a GPU or several | step 3, below |
# | a NaN guard, stopping on signals, MFU, compile | a clean stop; how much of the hardware the run uses | The loop, below (the signals: [07b](07b_checkpoints.ipynb)'s `StopRequest`) |
#
# Each addition goes into the bare loop on its own first, as a short function you can run (`fit_v1`, `fit_v2`,
# `fit_v3`; the lines marked `# new` are the diff), on a small model that trains in seconds; then `fit` puts them
# together.
#
# Two terms that come with Accelerate, and one GPU setting: **DDP** (DistributedDataParallel) runs one process per
# device, each on its own share of the batch, and averages the gradients across processes in the backward pass
# (inside `accelerator.accumulate`, only in the last micro-batch's: the loop below); **gloo** is PyTorch's
# communication backend for CPUs, which is how the tests run two DDP processes on a laptop (GPUs use NCCL).
# **TF32** is an NVIDIA matmul mode for fp32 inputs with a 10-bit mantissa, faster than full fp32 on the GPUs that
# have it: nanoT5's README times a T5-Base step on an A100 at about 1.39 s with TF32 against 4.10 s in full fp32
# (the course measures no TF32 speed-up itself: its fp32 benchmark rows run with TF32 on). `make_accelerator`
# (below) turns it on on a GPU for every matmul that runs in fp32 (all of them in an fp32 run; in a bf16 run only
# those outside autocast, such as the greedy samples of an evaluation).

# %% [markdown]
# ### Step 1: a logging window and evaluation
#
# The small model (d_model 64, one layer each side), a small tokenizer to match (2,000 pieces + 100 sentinels,
# trained in a hidden cell on validation speeches) and three validation speeches as data: the first 64 rows are held
# out as two fixed batches with fixed masks, the rest are training rows, read through a `BatchStream`
# ([06](06_streams.ipynb)):

# %%
small = make_config("cpu-demo", ["model.d_model=64", "model.d_kv=16", "model.num_heads=4", "model.d_ff=128",
                                 "model.vocab_size=2176", "data.inputs_length=64"])   # the tokenizer has 2,100 ids
rows = torch.tensor(pack_dataset(load_corpus("sotu", "validation").select(range(3)), tokenizer,
                                 SpanCorruptionCollator(tokenizer, 64).raw_length)["input_ids"])
held_out = [SpanCorruptionCollator(tokenizer, 64, seed=1)(rows[i:i + 32]) for i in (0, 32)]
new_stream = lambda: BatchStream(rows[64:], SpanCorruptionCollator(tokenizer, 64, seed=0), micro_batch=8, seed=0)
print(f"{len(rows)} rows: 64 held out, {len(rows) - 64} to train on")


# %% [markdown]
# The loop itself is [05](05_pretraining.ipynb)'s. Reading a loss with `.item()` makes the CPU wait until the
# device has finished the step, so the losses stay tensors and are read once per logging window; and every
# `eval_every` steps [05](05_pretraining.ipynb)'s `evaluate` scores the held-out batches (no document tags here:
# loss and accuracy, no gains):

# %%
def fit_v1(model, stream, steps, log_every=4, eval_every=6, eval_batches=held_out):
    "05's loop over a stream, with a logging window and evaluation"
    optimizer = get_optimizer("adamwscale", model.named_parameters(), lr=1e-2)
    scheduler = get_lr_scheduler("cosine", optimizer, total_steps=steps, warmup_steps=steps // 10)
    window, log = [], []
    for step in range(1, steps + 1):
        loss = model(**next(stream)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step(); scheduler.step(); optimizer.zero_grad()
        window.append(loss.detach())                                  # new: no .item() at every step
        if step % log_every == 0:                                     # new: one read per window
            log.append({"step": step, "loss": torch.stack(window).mean().item()}); window = []
        if step % eval_every == 0:                                    # new: fixed batches, fixed masks
            log.append({"step": step, **evaluate(model, eval_batches, contextlib.nullcontext)})
    return log


torch.manual_seed(0)
log = fit_v1(T5(small.model), new_stream(), 12)
for m in log:
    print({k: round(v, 3) for k, v in m.items() if k in ("step", "loss", "eval_loss", "eval_accuracy")})
evals = [m["eval_loss"] for m in log if "eval_loss" in m]
assert evals[-1] < evals[0]  # the held-out loss falls


# %% [markdown]
# ### Step 2: checkpoints in the loop, and an exact resume
#
# Into the loop go two lines, calling the checkpoint functions of lesson [07b](07b_checkpoints.ipynb): resume from the
# newest intact checkpoint before the first step (`resume_checkpoint`), and write one every `checkpoint_every` steps
# (`save_checkpoint`). To see what they buy, run 12 steps without a stop; then the same run again in a
# directory of its own, which "dies" after step 6 (its last checkpoint is step 4), and a fresh start on that
# directory, with a new model and a new stream as a new process would have: it resumes at step 4 and must log
# exactly the losses of the run that never stopped.

# %%
def fit_v2(model, stream, steps, run_dir, checkpoint_every=4, crash_after=None):
    "05's loop (logging and evaluation left out here) with checkpoints and a resume"
    optimizer = get_optimizer("adamwscale", model.named_parameters(), lr=1e-2)
    scheduler = get_lr_scheduler("cosine", optimizer, total_steps=steps, warmup_steps=steps // 10)
    _, start = resume_checkpoint(run_dir, small, model, optimizer, scheduler, stream)  # new: (None, 0) if none
    losses = {}
    for step in range(start + 1, steps + 1):
        loss = model(**next(stream)).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step(); scheduler.step(); optimizer.zero_grad()
        losses[step] = loss.item()
        if step % checkpoint_every == 0:                              # new: weights, optimizer, schedule, RNGs, stream
            save_checkpoint(run_dir, step, model, optimizer, scheduler, stream, small)
        if step == crash_after:
            break                                                     # the machine dies here
    return losses


torch.manual_seed(0)
whole = fit_v2(T5(small.model), new_stream(), 12, Path(tempfile.mkdtemp()))
crash_dir = Path(tempfile.mkdtemp())
torch.manual_seed(0)
before = fit_v2(T5(small.model), new_stream(), 12, crash_dir, crash_after=6)  # dies after step 6
after = fit_v2(T5(small.model), new_stream(), 12, crash_dir)                 # a new process: resumes at step 4
print("uninterrupted:", {s: round(l, 4) for s, l in whole.items()})
print("died at 6:    ", {s: round(l, 4) for s, l in before.items()})
print("resumed:      ", {s: round(l, 4) for s, l in after.items()})
test_eq(after, {s: l for s, l in whole.items() if s > 4})  # steps 5 and 6 done again, every loss equal

# %% [markdown]
# ### Step 3: 🤗 Accelerate
#
# The last addition changes who runs the loop: an `Accelerator` picks the device, wraps the model in DDP when
# `accelerate launch` starts several processes, runs the forward pass under the run's precision, and — while the loop draws a step's `grad_acc`
# micro-batches itself — divides each micro-batch's loss by `grad_acc` and all-reduces the gradients across processes
# only on the last one. On one CPU
# process, as here, the same code trains as before:

# %%
from accelerate import Accelerator


def fit_v3(model, stream, steps, grad_acc=2):
    "05's loop on 🤗 Accelerate: one process here, N under `accelerate launch`"
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=grad_acc)  # new (fit: a GPU when there is one)
    optimizer = get_optimizer("adamwscale", model.named_parameters(), lr=1e-2)
    scheduler = get_lr_scheduler("cosine", optimizer, total_steps=steps, warmup_steps=steps // 10)
    model, optimizer = accelerator.prepare(model, optimizer)                # new: wrapped in DDP when N > 1
    losses = []
    for step in range(1, steps + 1):
        for _ in range(grad_acc):                                           # new: micro-batches
            with accelerator.accumulate(model):                             # new: all-reduce on the last one only
                with accelerator.autocast():                                # new: the run's precision
                    loss = model(**next(stream)).loss
                accelerator.backward(loss)                                  # new: divides by grad_acc
        accelerator.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step(); scheduler.step(); optimizer.zero_grad()
        losses.append(loss.item())
    return losses


torch.manual_seed(0)
v3 = fit_v3(T5(small.model), new_stream(), 6)
print("last micro-batch's loss per step:", [round(l, 3) for l in v3])
assert v3[-1] < v3[0]


# %% [markdown]
# ## The loop
#
# `fit` is the part every job shares (pre-training here, fine-tuning in [09](09_finetuning.ipynb)): optimizer
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
# `backward` all-reduces the gradients (sums them across processes and divides by their number, so every process holds the same average)
# after every micro-batch; inside `accelerator.accumulate` it does so only on the last micro-batch of a step.
# A non-finite loss still stops the run before any evaluation or checkpoint comes after it: the window's losses
# are checked (one read for all of them) before each of those, and the message names the step and the last
# checkpoint. The logged tokens/s is this process's tokens (padding included) times the number of processes — the whole job's
# when every process's batches have the same shape, as in pre-training; MFU is this process's FLOPs over
# its own device's peak, which under N processes equals the job's when every process does the same FLOPs (batches of the same shape, as
# in pre-training): N times the FLOPs over N times the peak.
# With `train.compile=true` the compiled module runs the training steps only: evaluation (another mode, without gradients, with three encoder inputs and often
# another batch size, each of which would make the compiler build another graph) runs the same weights uncompiled; and the first step, which
# compiles, is left out of the first window's ms/step (its time is printed on its own), unless that step is itself a
# log step.

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


def _start_metrics(run_dir: Path, step: int, cfg: Config):
    "A fresh metrics.jsonl, or one cut back to `step` on a resume (lines written before a crash are redone); the config"
    path = run_dir / "metrics.jsonl"
    if step and path.exists():
        keep = [l for l in path.read_text().splitlines() if json.loads(l).get("step", 0) <= step]
        path.write_text("".join(l + "\n" for l in keep))
    elif not step:
        path.unlink(missing_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))


# %% [markdown]
# **Accelerate.** `make_accelerator` builds one `Accelerator` for the config: CPU or GPU, the precision's autocast,
# the number of micro-batches per optimizer step, and a tracker if asked for; it validates the config against the
# number of processes, and seeds the global generators (Python, NumPy, torch; the collators and streams seed their own). `accelerator.prepare` then wraps the model in DDP when there are
# several processes.

# %%
#| export
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


# %% [markdown]
# **The logging window.** What `fit` reports once per window lives in one small object: the micro-batch losses (kept
# on the device, read once per window), the tokens and FLOPs since the last line, and the window's clock, from which
# evaluation and checkpoint time are left out. Its NaN guard checks the losses not yet checked in one read, before
# every log line, evaluation or checkpoint, so a non-finite loss stops the run before a checkpoint could save the
# update it caused (the weights that produced it may already be in the last checkpoint: the NaN cell below); the message names the step and the last checkpoint.

# %%
#| export
class LogWindow:
    "The steps since the last log line: micro-batch losses (on the device), tokens, FLOPs and wall time"

    def __init__(self, carried_loss: list[torch.Tensor] = ()):
        self.carried_loss = list(carried_loss)  # a window a stop cut short (from the checkpoint): it counts in the mean
        self.restart()

    def restart(self):
        self.losses, self.tokens, self.flops, self.start = [], 0, 0.0, time.time()
        self.checked = 0     # losses already checked for NaN
        self.timed_from = 0  # ms/step counts micro-batches from here on (after a step that compiled the model)

    def add(self, loss: torch.Tensor, tokens: int, flops: float):
        self.losses.append(loss.detach().float())  # stays on the device: no sync per step
        self.tokens += tokens
        self.flops += flops

    def leave_out_time_so_far(self):
        "The step that compiled the model stays out of ms/step, tokens/s and MFU"
        self.tokens, self.flops, self.start, self.timed_from = 0, 0.0, time.time(), len(self.losses)

    @contextlib.contextmanager
    def paused(self):
        "Evaluation and checkpoints inside this block do not count in the window's time"
        t = time.time()
        try:
            yield
        finally:
            self.start += time.time() - t

    def all_losses(self) -> torch.Tensor:
        "Every loss of the window so far: what a checkpoint keeps, so a resume after a stop goes on with it"
        losses = self.carried_loss + self.losses
        return torch.stack(losses).cpu() if losses else torch.zeros(0)

    def stop_on_nan(self, step: int, grad_acc: int, run_dir: Path):
        "Raise TrainingError at the first non-finite micro-batch loss not yet checked (one device sync for them all)"
        losses = torch.stack(self.losses[self.checked:])
        bad = ~torch.isfinite(losses)
        if bad.any():
            first = int(bad.nonzero()[0])
            bad_step = step - len(self.losses) // grad_acc + 1 + (self.checked + first) // grad_acc  # window start + …
            last = latest_checkpoint(run_dir)
            raise TrainingError(f"Loss is {losses[first].item()} at step {bad_step}: training stopped. The last "
                                f"checkpoint, written before this loss was seen, is {last or 'none (no checkpoint yet)'}; "
                                "if the update before it already blew up the weights, resume from the one before "
                                "(checkpoint.keep_last keeps 2). Lower optim.lr, keep optim.grad_clip on, or under bf16 "
                                "or fp16 try train.precision=fp32 to find the cause (fp16 overflows above 65,504).")
        self.checked = len(self.losses)

    def close(self, grad_acc: int, num_processes: int, mean_over_processes) -> dict:
        "The window's mean loss (over every process), ms/step, tokens/s and FLOP/s; then a new window starts"
        dt = time.time() - self.start
        loss = mean_over_processes(torch.stack(self.carried_loss + self.losses).mean()).item()
        m = {"loss": loss, "ms_per_step": dt / ((len(self.losses) - self.timed_from) / grad_acc) * 1e3,
             "tokens_per_s": self.tokens * num_processes / dt, "flops_per_s": self.flops / dt}
        self.carried_loss = []
        self.restart()
        return m


# %% [markdown]
# **Evaluation during a run.** Every `eval.every_steps` (and at step 0, the start of the held-out curve) each process
# scores its share of the held-out batches with [05](05_pretraining.ipynb)'s `evaluate`, the sums are added across
# processes, and the main process writes a line, appends the scores to `metrics.jsonl` and (after step 0) prints a few greedy samples
# beside their targets:

# %%
#| export
def _append_jsonl(path: Path, row: dict):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def evaluate_during_run(step: int, model, unwrapped: T5, valid_batches: list[dict], accelerator, cfg: Config,
                        tokenizer, write=print) -> dict:
    "Held-out scores at `step` (each process scores its share; the sums are reduced); logged on the main process"
    rank, world = accelerator.process_index, accelerator.num_processes
    # documents of all the evaluation batches (the same on every process); fine-tuning batches have none: no gains
    num_documents = 1 + max((int(b["document"].max()) for b in valid_batches if "document" in b), default=-1)
    ev = evaluate(model, valid_batches[rank::world], accelerator.autocast,
                  reduce=lambda sums: accelerator.reduce(sums, "sum"), num_documents=num_documents)
    if accelerator.is_main_process:
        gain = (f" | encoder gain {ev['encoder_gain']:.3f} = span {ev['span_gain']:.3f} + document "
                f"{ev['document_gain']:.3f}" if ev["encoder_gain"] is not None else "")
        write(f"step {step:6d} | eval loss {ev['eval_loss']:.4f} | eval accuracy {ev['eval_accuracy']:.3f}{gain}")
        _append_jsonl(Path(cfg.logging.run_dir) / "metrics.jsonl", {"step": step, **ev})
        b = {k: v.to(accelerator.device) for k, v in valid_batches[0].items()}
        for i in range(min(cfg.eval.samples, len(b["input_ids"])) if step else 0):
            mask = None if "attention_mask" not in b else b["attention_mask"][i:i + 1]
            pred = unwrapped.generate(b["input_ids"][i:i + 1], b["labels"].shape[1], attention_mask=mask)
            target = b["labels"][i][b["labels"][i] >= 0]
            write(f"  target: {tokenizer.decode(target[:24])!r}\n  greedy: {tokenizer.decode(pred[0, 1:25])!r}")
    accelerator.log({k: v for k, v in ev.items() if v is not None}, step=step)
    return ev


# %% [markdown]
# **Out of memory.** `fit` runs each micro-batch's forward and backward inside `with _explain_oom(cfg, accelerator, batch)`
# (not the optimizer step, where the optimizer's state is first allocated, nor evaluation): a CUDA out-of-memory
# error comes back as a `TrainingError` that names the micro-batch, the memory estimate of [07](07_config.ipynb) and
# `optim.grad_acc` times the smallest factor (2–64, dividing the micro-batch) the estimate says fits, or times 2 when none does (built in 07's "Appendix: an out-of-memory error that names the fix").

# %% [markdown]
# **`fit`.** The bare loop's lines are all here, in the `while` loop: a micro-batch (`next(stream)`), forward under
# autocast, `accelerator.backward`, the clip, the optimizer step and the schedule; around them the resume, the logging
# window, evaluation and checkpoints. It runs inside a `StopRequest` (`@_stoppable`, lesson [07b](07b_checkpoints.ipynb)):
# after every step it asks whether a SIGTERM, a first Ctrl-C or `train.max_minutes` wants the run to stop, and if so
# writes a checkpoint and raises `RunStopped`:

# %%
#| export
@_stoppable  # SIGTERM / Ctrl-C / train.max_minutes: finish the step, checkpoint, stop
def fit(cfg: Config, accelerator, model: T5, tokenizer, stream, valid_batches: list[dict],
        stop: StopRequest | None = None) -> tuple[T5, int]:
    "Train `model` on `stream` as configured (resuming from the run dir); returns (unwrapped model, last step)"
    from tqdm.auto import tqdm
    run_dir, main, total = Path(cfg.logging.run_dir), accelerator.is_main_process, cfg.train.total_steps
    optimizer = get_optimizer(cfg.optim.name, model.named_parameters(), cfg.optim.lr, cfg.optim.weight_decay)
    scheduler = get_lr_scheduler(cfg.optim.scheduler, optimizer, total, cfg.optim.warmup_steps, cfg.optim.final_lr)
    step, carried = 0, {}
    if cfg.checkpoint.resume == "auto":  # the newest intact checkpoint (a changed setup is refused)
        last, step = resume_checkpoint(run_dir, cfg, model, optimizer, scheduler, stream, accelerator, carried)
        if last is not None:
            accelerator.print(f"resumed from {last} at step {step}")
    elif main and any((run_dir / "checkpoints").glob("step_*")):  # never: start over, the old run's checkpoints kept apart
        old = next(run_dir / f"checkpoints_replaced_{i}" for i in range(1, 10_000)
                   if not (run_dir / f"checkpoints_replaced_{i}").exists())
        os.replace(run_dir / "checkpoints", old)
        accelerator.print(f"checkpoint.resume=never: the earlier checkpoints moved to {old} (delete it when not needed)")
    accelerator.wait_for_everyone()
    if main:
        _start_metrics(run_dir, step, cfg)
    model, optimizer = accelerator.prepare(model, optimizer)
    prepared, unwrapped = model, accelerator.unwrap_model(model)  # `accumulate` needs the DDP wrapper itself
    if cfg.train.compile:  # training steps only: evaluation (another batch size) runs `prepared`, uncompiled
        model = torch.compile(model)
    device, peak = accelerator.device, peak_flops(accelerator.device, cfg.train.peak_tflops)
    if cfg.logging.tracker:
        accelerator.init_trackers("nanot5_edu", config=OmegaConf.to_container(OmegaConf.structured(cfg)))
    bar = tqdm(total=total, initial=step, disable=not (main and cfg.logging.progress_bar), desc="training",
               dynamic_ncols=True)
    run_eval = lambda step: evaluate_during_run(step, prepared, unwrapped, valid_batches, accelerator, cfg, tokenizer,
                                                bar.write)
    if step == 0:
        run_eval(0)  # the starting point of the held-out curve
    window = LogWindow(list(carried.get("window_loss", torch.zeros(0)).to(device)))  # a window cut by a stop goes on
    compiling = cfg.train.compile
    model.train()
    while step < total:
        for _ in range(cfg.optim.grad_acc):
            batch = to_device(next(stream), device)
            with _explain_oom(cfg, accelerator, batch), accelerator.accumulate(prepared):  # all-reduce on the last one
                with accelerator.autocast():
                    loss = model(batch["input_ids"], attention_mask=batch.get("attention_mask"),
                                 decoder_input_ids=batch.get("decoder_input_ids"), labels=batch["labels"],
                                 decoder_attention_mask=batch.get("decoder_attention_mask")).loss
                accelerator.backward(loss)  # divides by grad_acc
            window.add(loss, batch["input_ids"].numel() + batch["labels"].numel(),
                       flops_per_step(cfg.model, *batch["input_ids"].shape, batch["labels"].shape[1]))
        clip = cfg.optim.grad_clip if cfg.optim.grad_clip > 0 else float("inf")
        grad_norm = accelerator.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        if not accelerator.optimizer_step_was_skipped:  # fp16: a step the loss scaler skipped does not move the schedule
            scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        bar.update(1)

        # a stop asked of any process stops them all at this step: one number all-reduced on the CPU, every step
        stopping = _any_process(stop is not None and stop.requested(), accelerator) and step < total
        log_now = step % cfg.logging.every_steps == 0 or step == total
        evaluate_now = step % cfg.eval.every_steps == 0 or step == total
        checkpoint_now = step % cfg.checkpoint.every_steps == 0 or step == total or stopping
        if compiling and not log_now:  # the first step compiled the model: its time stays out of ms/step
            accelerator.print(f"step {step}: compiled and ran in {time.time() - window.start:.1f} s (not in ms/step)")
            window.leave_out_time_so_far()
        compiling = False
        if log_now or evaluate_now or checkpoint_now:
            window.stop_on_nan(step, cfg.optim.grad_acc, run_dir)  # before any evaluation or checkpoint
        if log_now:
            w = window.close(cfg.optim.grad_acc, accelerator.num_processes,
                             lambda loss: accelerator.reduce(loss.to(device), "mean"))
            m = {"step": step, "loss": w["loss"], "lr": scheduler.get_last_lr()[0], "grad_norm": float(grad_norm),
                 "ms_per_step": w["ms_per_step"], "tokens_per_s": w["tokens_per_s"],
                 "mfu": w["flops_per_s"] / peak if peak else None}  # this process's FLOPs on its own device
            if main:
                bar.write(_log_line(m))
                _append_jsonl(run_dir / "metrics.jsonl", m)
            accelerator.log({k: v for k, v in m.items() if v is not None}, step=step)
        with window.paused():  # evaluation and checkpoints do not count in the window's ms/step
            if evaluate_now:
                run_eval(step)
            if checkpoint_now:
                saved = save_checkpoint(run_dir, step, unwrapped, optimizer, scheduler, stream, cfg,
                                        cfg.checkpoint.keep_last, accelerator,
                                        extra={"window_loss": window.all_losses()})
        if stopping:
            bar.close()
            raise RunStopped(f"Stopped at step {step} of {total} ({stop.reason or 'asked on another process'}), after "
                             f"writing the checkpoint {saved}. Run the same command again to resume from it.", step,
                             saved, run_dir, main, accelerator.num_processes)
    bar.close()
    return unwrapped, step


# %% [markdown]
# With several processes, two things should be checkable after a run: that the processes' first batches differ (the
# hash is taken after each process's own corruption, so it differs even for equal rows; the rank split of
# [06](06_streams.ipynb) is what makes their rows differ, and 06 checks the rows themselves), and that they all end with the same weights. That instrumentation stays out of `fit`: `train` wraps the batch stream in
# `FirstBatchHash`, which passes every batch through and remembers a hash of the first, and after `fit` each process
# writes `processes/rank_R.json` with that hash and a hash of its weights (both in [06](06_streams.ipynb)'s "Appendix:
# which rows did each process train on?"; Try it 3 below compares the two files).
#
# The tokenizer comes from `data.tokenizer`, or is trained on the corpus (seconds for the embedded one) and
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


# %% [markdown]
# `train` is pre-training: the span-corruption data around `fit`, then the baselines and the HF export.

# %%
#| export
def export_hf(model: T5, tokenizer, out_dir: Path) -> Path:
    "Model + tokenizer in HF format: `T5ForConditionalGeneration.from_pretrained(out_dir)` and `AutoTokenizer` load it"
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def make_collator(cfg: Config, tokenizer, seed: int):
    "The run's objective: T5's span corruption here; prefix LM, causal LM and UL2 come from 09c_objectives"
    if cfg.data.objective == "span_corruption":
        return SpanCorruptionCollator(tokenizer, cfg.data.inputs_length, cfg.data.noise_density,
                                      cfg.data.mean_noise_span_length, seed=seed)
    from nanot5_edu.objectives import objective_collator
    return objective_collator(cfg, tokenizer, seed)


def make_model(cfg: Config):
    "T5, or (model.architecture=decoder-only) 09c_objectives's one-stack model from the same layers"
    if cfg.model.architecture == "decoder-only":
        from nanot5_edu.objectives import DecoderOnly
        return DecoderOnly(cfg.model)
    return T5(cfg.model)


def validation_batches(cfg: Config, tokenizer) -> list[dict]:
    """The fixed held-out batches every evaluation of a run scores (`evaluation_batches`: rows across all documents
    of an in-memory split, the first eval.batches × eval.batch_size rows of a streamed one; same on every process)"""
    collator = make_collator(cfg, tokenizer, seed=1234)
    rows, documents = packed_rows(cfg, tokenizer, "validation", collator.raw_length,
                                  cfg.eval.batches * cfg.eval.batch_size, documents=True)
    if cfg.data.objective != "span_corruption":  # a shape per batch (09c_objectives): corrupted batch by batch
        from nanot5_edu.objectives import objective_batches
        return objective_batches(rows, documents, collator, cfg.eval.batch_size, cfg.eval.batches, seed=1234)
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
    collator = make_collator(cfg, tokenizer, seed=cfg.train.seed + accelerator.process_index)
    micro = cfg.optim.batch_size // (cfg.optim.grad_acc * accelerator.num_processes)
    stream = training_stream(cfg, tokenizer, collator, micro, accelerator.process_index, accelerator.num_processes)
    valid_batches = validation_batches(cfg, tokenizer)

    stream = FirstBatchHash(stream)
    try:
        model, step = fit(cfg, accelerator, make_model(cfg), tokenizer, stream, valid_batches)
    except RunStopped:  # stopped on request, checkpoint written: no export or plot of a half run; the trackers close
        accelerator.end_training()
        raise
    finally:
        stream.close()  # a streamed corpus's data workers end here (lesson 06)
    _write_process_manifest(run_dir, accelerator, stream.sha256, model)

    summary = {"run_dir": str(run_dir), "steps": step, "wall_s": time.time() - t_start, "main_process": main}
    if main:
        if isinstance(stream.stream, BatchStream) and cfg.data.objective == "span_corruption":  # baselines from one corruption of every training row (in memory)
            rows = stream.rows
            corrupt = SpanCorruptionCollator(tokenizer, *spans, seed=7)
            train_labels = torch.cat([corrupt(rows[i:i + 4096])["labels"] for i in range(0, len(rows), 4096)])
            summary.update(unigram_baselines(train_labels, torch.cat([b["labels"] for b in valid_batches]),
                                             len(tokenizer)))
        summary.update(eval_summary(run_dir), hf_export=str(export_hf(model, tokenizer, run_dir / "hf")) if isinstance(model, T5) else
                       "none: a decoder-only model has no Hugging Face T5 export (its weights are in checkpoints/)",
                       loss_plot=str(plot_run(run_dir, {k: summary[k] for k in ("unigram", "per_position_unigram")
                                                        if k in summary})))
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    accelerator.end_training()
    return summary


# %% [markdown]
# ## Reading a run
#
# What a finished run's files say: `eval_summary` reads the first and last evaluation from `metrics.jsonl` (for the
# summary `train` returns), and `plot_run` draws a run from its `metrics.jsonl` and saves the figure as `loss.png` in the run directory:
# the losses (held-out with the three encoder inputs), the three gains (with the last evaluation's interval),
# the held-out token accuracy, and the gradient norm with the learning rate. One thing to know when
# reading it: the training loss is logged as the mean over each logging window (`logging.every_steps=50` in the
# demo), so the point at step `s` averages losses from weights up to a window earlier (less trained), while the held-out loss is
# measured on the weights of step `s` itself. Early in training, when the loss falls fast, that lag can by itself put
# the training curve *above* the held-out one, so the gap is no sign by itself that the held-out rows are easier. The
# quick run below (a window of 3 steps) shows such a gap (one run: it does not separate the lag from other causes): at step 6 the window's mean loss is 8.80, the held-out loss
# 8.41 (its `loss.png` is in its run directory, `summary["loss_plot"]`).

# %%
#| export
EVAL_SUMMARY_KEYS = ("eval_accuracy", "eval_loss_own", "eval_loss_same_document", "eval_loss_other_document",
                     "eval_loss_shuffled_encoder", *GAINS, *(g + "_ci95" for g in GAINS), "eval_documents",
                     "eval_gain_rows")


def eval_summary(run_dir: Path) -> dict:
    "First and last evaluation of a run, from its metrics.jsonl: held-out loss, the three gains with their intervals"
    evals = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines() if "eval_loss" in l]
    last = evals[-1] if evals else {}
    return {"first_eval_loss": evals[0]["eval_loss"] if evals else None, "final_eval_loss": last.get("eval_loss"),
            **{f"final_{k}": last.get(k) for k in EVAL_SUMMARY_KEYS}}


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
# The cell below runs `train` on the cpu-demo preset with a narrower feed-forward (`d_ff` 256; its `model.num_layers=1` is the preset's own
# value, so changes nothing) and a few steps: loss goes down,
# metrics are logged, checkpoints are written, and the HF export loads in plain `transformers`. With the
# CPU's measured bf16 matmul peak ([07](07_config.ipynb)'s `matmul_peak_flops`) as `train.peak_tflops`, the log lines report MFU on a CPU too.

# %%
os.chdir(tempfile.mkdtemp())  # a scratch folder: the runs below go in it, and their paths print relative to it
tmp = Path(".")
quick_overrides = ["model.num_layers=1", "model.d_ff=256", "train.total_steps=12", "optim.warmup_steps=2",
                   "optim.batch_size=8", "eval.every_steps=6", "eval.batches=2", "eval.batch_size=16",
                   "checkpoint.every_steps=6", "logging.every_steps=3", "logging.progress_bar=false", "optim.lr=1e-2",
                   f"train.peak_tflops={cpu_peak[torch.bfloat16] / 1e12:.4f}"]
quick = make_config("cpu-demo", [*quick_overrides, f"logging.run_dir={tmp / 'quick'}"])
summary = train(quick)
test_eq(summary["steps"], 12)
assert summary["final_eval_loss"] < summary["first_eval_loss"]
test_eq(sorted(p.name for p in (tmp / "quick" / "checkpoints").iterdir()), ["step_00000006", "step_00000012"])
import transformers; transformers.utils.logging.disable_progress_bar()
hf = transformers.T5ForConditionalGeneration.from_pretrained(summary["hf_export"])
hf_tok = transformers.AutoTokenizer.from_pretrained(summary["hf_export"])
test_eq(hf.config.num_layers, 1); test_eq(len(hf_tok), 8100)
{k: (round(v, 3) if isinstance(v, float) else v) for k, v in summary.items()}

# %%
from IPython.display import Image; Image(filename=summary["loss_plot"])


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
# stopped: the same losses and the same weights, bit for bit (on CPU, as here and in the tests; on a GPU some kernels
# are not deterministic, and that is not tested), because the checkpoint holds the data stream's
# position and every random generator's state next to the weights and the optimizer. (This demo has no dropout, so
# nothing after the resume draws from the global generators and the check below exercises the stream's state; the
# generators' restore is checked draw for draw in [07b](07b_checkpoints.ipynb), and by a test run with dropout 0.1.)
# To see it, take a copy of the 12-step run above and delete its step-12 checkpoint — a machine that died right after
# step 6 — then call `train` with the same config on that directory (on resume `train` cuts `metrics.jsonl` back to
# step 6, so the comparison that tests the resume is at steps 9 and 12):

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
# Here plain AdamW at an absurd learning rate without clipping blows the weights up in its first update (Adam's
# first step moves every weight whose gradient is well above Adam's eps by about the learning rate, 1e30: still finite in fp32), and the loss of step 2 is NaN. Note what the guard can and cannot promise: it
# sees a loss, so the checkpoint of step 1, written before that loss existed, already holds the blown-up
# weights. That is why the message points one checkpoint further back when needed (`checkpoint.keep_last`
# keeps two, for inspection: a resume from the older one — after moving the newest `step_*` folder out of
# `checkpoints/` — repeats the same updates exactly and restores the checkpoint's learning rate, so the message's
# "lower optim.lr" needs a new run) — here there is none before step 1, so the only way on is to start again (`checkpoint.resume=never`)
# with a sane learning rate:

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
# ## What you learned
#
# - `fit` is the bare loop plus a resume, Accelerate (`prepare`, `accumulate`, `backward`, `autocast`), a logging
#   window, evaluation and checkpoints; `train` and `finetune` run it.
# - Losses stay on the device and are read once per logging window: reading one per step would make the CPU wait for
#   the GPU at every step.
# - `fit` resumes from the newest intact checkpoint before its first step and writes one every
#   `checkpoint.every_steps` (the functions of [07b](07b_checkpoints.ipynb)), with the logging window so far inside.
# - A resumed run is the same run: the same losses and the same weights, bit for bit (on CPU; a GPU resume is not
#   tested).
# - SIGTERM or a first Ctrl-C finishes the step, writes a checkpoint and stops; the NaN guard stops before any
#   evaluation or checkpoint of a step with a non-finite loss.
# - Under DDP each process trains on its own share of every batch and the gradients are averaged, on the last
#   micro-batch of a step only.
# - `train` is the data around `fit`, then the baselines, a loss plot and an export that plain `transformers` loads.
#
# ## Questions
#
# 1. Why would `loss.item()` at every step slow a GPU run, and how does `fit` avoid it?
# 2. In step 2 the resumed run starts from `T5(small.model)` built without `torch.manual_seed(0)` first, so its
#    initial weights differ from the uninterrupted run's. Why are its losses still equal?
# 3. `fit` puts the losses of the logging window so far into each checkpoint (`extra`). What would the first log line
#    after a resume report without them, when the checkpoint fell inside a window (a Ctrl-C stop)?
# 4. Under DDP with `grad_acc=4`, how many gradient all-reduces does one optimizer step need, and what does
#    `accelerator.accumulate` change?
# 5. **Predict, then run:** in "Exact resume", will the resumed run's losses equal the uninterrupted run's to the last
#    digit, or only approximately? What would break the equality?
# 6. In the NaN cell, why can the step-1 checkpoint, written before the NaN was seen, already hold broken weights?
# 7. Why is the first step of a compiled run left out of the logged ms/step?
# 8. In the quick run, early on, the training curve sat above the held-out curve. Why is that not a sign of anything wrong?
#
# ## Try it
#
# 1. **Ctrl-C and resume.** In a terminal, run (the `nanot5-edu` command comes with the package; lesson
#    [10](10_cli.ipynb) builds it)
#    `nanot5-edu pretrain cpu-demo train.total_steps=300 checkpoint.every_steps=100 logging.run_dir=runs/try08`, press
#    Ctrl-C once after the first checkpoint is written and before the run ends, then run the same command again.
#    Look for: a checkpoint at the step where it stopped, a resume from it, and no training-loss line for any step
#    twice in `runs/try08/metrics.jsonl`.
# 2. **`kill -9` between checkpoints.** Start the same command with a new run dir and kill the process with `kill -9`
#    between two checkpoints; resume. How many steps were lost, and do the logged losses after the resume match an
#    uninterrupted run's?
# 3. **Two processes on a CPU.** Run
#    `accelerate launch --multi_gpu --num_processes 2 --num_machines 1 -m nanot5_edu pretrain cpu-demo train.total_steps=20 optim.warmup_steps=5 logging.run_dir=runs/try08-ddp`
#    (`--multi_gpu` works without a GPU: `make_accelerator` asks for a CPU accelerator when there is no CUDA, so the two
#    processes run DDP over gloo) and compare `runs/try08-ddp/processes/rank_0.json` with `rank_1.json`: which hash differs between the processes,
#    and which must not?

# %%
#| hide
import nbdev; nbdev.nbdev_export()
