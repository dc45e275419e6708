# %% [markdown]
# # Checkpoints that survive `kill -9`
# > A run's whole state on disk, written so that a crash never leaves half of it and checked on resume: `kill -9`, SIGTERM or a full disk costs at most the steps since the last checkpoint, a damaged checkpoint is named and skipped, and the resumed run draws exactly what the run that never stopped would have (bit for bit on CPU, in the tests)

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# A run of T5-Base takes many hours ([07](07_config.ipynb) estimates them), and on a shared cluster, a spot instance or Colab something stops it before it ends:
# `kill -9`, a scheduler's SIGTERM, a power loss, a disk that fills up, a copy to Drive cut off halfway. This lesson
# builds the checkpoint that makes such a stop cheap. It holds the run's whole state (weights, optimizer and schedule,
# every random generator, and the data stream's position of [06](06_streams.ipynb)), so that a resumed run draws exactly
# what the run that never stopped would have drawn; it is written so that a crash in the middle never leaves half a
# checkpoint; and it is checked when it is read back, so that a damaged one is named and the one before it is used.
# [08](08_real_runs.ipynb)'s `fit` calls these functions: it resumes once before its first step and writes a checkpoint
# every `checkpoint.every_steps`; here
# they are on their own: the idea, the code, a restore checked draw for draw, a damaged checkpoint skipped, and a
# SIGTERM turned into a clean stop.

# %%
#| default_exp checkpoint

# %%
#| export
from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from nanot5_edu.config import Config, ConfigError, TrainingError
from nanot5_edu.model import HF_ALIAS_KEYS, T5
from nanot5_edu.stream import BatchStream

# %%
#| hide
from fastcore.test import test_eq, test_fail
import tempfile
import datasets
datasets.disable_progress_bars()
from nanot5_edu.config import make_config
from nanot5_edu.data import load_corpus
from nanot5_edu.optim import get_lr_scheduler, get_optimizer
from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.tokenizer import train_tokenizer
# a small tokenizer for the collators below (their sentinels)
tokenizer = train_tokenizer(load_corpus("sotu", "validation")["text"][:40], 2000, Path(tempfile.mkdtemp()) / "tok")


# %% [markdown]
# ## The idea: write aside, hash, rename
#
# A checkpoint is a directory: model weights (safetensors), optimizer and scheduler state, fp16's loss-scaler
# state (its current scale and how many good steps it has counted toward the next growth: without them a resumed fp16
# run would restart at the initial scale of 65,536 and skip different steps), every RNG, the data stream's position,
# the config and the step. It is written under a temporary name and renamed into
# place only when complete, so a crash mid-write leaves the previous checkpoint intact; the last
# `keep_last` are kept. Loading uses safetensors and `torch.load(weights_only=True)`, and maps the weights and
# the optimizer state to the device of the loading process's own model (never to the GPU that saved it); the RNG and
# stream states stay on the CPU.
#
# "Complete" is not yet "intact". A copy to Drive cut off halfway, a network filesystem that ran full or a power
# loss can leave a checkpoint directory whose files are short or wrong. So every file is hashed (sha256): the weights
# and optimizer files as they are written, each process's small state file by process 0 reading it back; and the hashes go into `trainer_state.json`, written last; every file, and the directory, is flushed to
# disk (`fsync`) before the rename, and the parent after it (a rename is a change to the parent directory, and
# until the parent is flushed a power loss can undo it). On resume the newest checkpoint is checked against its
# hashes; if a file is missing (`trainer_state.json` included), short or changed, or fails to load, the run names the
# checkpoint and the problem (the file, or the loading error) and falls back to the checkpoint before it (that is what `keep_last=2` is for), moving the damaged one aside as
# `damaged_step_N_<date-time>`. (`trainer_state.json` itself, which holds the hashes, has none of its own: it is
# checked by loading, so an edit that leaves it valid JSON, such as another step number, is not caught.) What a run
# survives, and what it does not:
#
# - **survives**: `kill -9`, a crash or a power loss at any moment (it resumes from the last checkpoint and loses
#   the steps since); SIGTERM (a scheduler, `timeout`, a spot instance) or a first Ctrl-C (`fit` of
#   [08](08_real_runs.ipynb) finishes the step, writes a checkpoint and stops: it loses nothing, if the step and the checkpoint finish before a scheduler's follow-up SIGKILL; `train.max_minutes` does the same on a time budget); a damaged
#   newest checkpoint (it falls back one checkpoint); a disk that fills up while a checkpoint is written (it stops
#   with a message naming the space needed and free; the earlier checkpoints stay).
# - **does not survive**: every kept checkpoint damaged (a clear error: start again with `checkpoint.resume=never`,
#   which moves the old checkpoints aside, or a new run directory); a resume with another number of processes, of data workers, or another model setting (any `model.*` but the dropout)
#   (refused before training, naming both values: the saved state describes the old setup).

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
    way_out = "or start a new run (logging.run_dir=NEW, or checkpoint.resume=never to start over in this one)"
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


# %% [markdown]
# Every random generator's state goes into the checkpoint too (Python's, NumPy's, torch's and CUDA's: the dropout masks
# and anything else drawn after the resume), in types `torch.load(weights_only=True)` accepts (hidden: `_rng_state`).
# The checkpoint itself, and the three ways to read one back:

# %%
#| export
#| hide
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


# %%
#| export
def save_checkpoint(run_dir: Path, step: int, model: T5, optimizer, scheduler, stream: BatchStream,
                    cfg: Config, keep_last: int = 2, accelerator=None, extra: dict | None = None) -> Path:
    """Write checkpoints/step_N: every file hashed and fsynced, the hashes in trainer_state.json (written last), then
    an atomic rename; prune to the last `keep_last`. Every process calls it; a failed write stops every process."""
    from safetensors.torch import save
    rank, world = (accelerator.process_index, accelerator.num_processes) if accelerator else (0, 1)
    scaler = getattr(accelerator, "scaler", None)  # fp16's loss scaler: its scale and growth count go along
    ckpt_root = Path(run_dir) / "checkpoints"
    final, tmp = ckpt_root / f"step_{step:08d}", ckpt_root / f".tmp_step_{step:08d}"

    def fresh_dir():  # what a write that died left (a kill -9 mid-write) is never a checkpoint: its space back
        for leftover in [*ckpt_root.glob(".tmp_step_*"), *ckpt_root.glob(".old_step_*")]:
            shutil.rmtree(leftover, ignore_errors=True)
        new_root = not ckpt_root.exists()
        tmp.mkdir(parents=True)
        if new_root:  # the run directory's new entry `checkpoints/` must survive a power loss too
            _fsync(ckpt_root.parent)

    def own_state():  # every process: its data position and RNGs (and what the loop carries over, `extra`)
        _write_file(tmp / f"process_{rank}.pt",
                    lambda f: torch.save({"stream": stream.state_dict(), "rng": _rng_state(), "extra": extra or {}}, f))

    def shared_state():  # process 0: weights, optimizer, scheduler; the hashes last; then the rename
        weights = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k not in HF_ALIAS_KEYS}
        files = {"model.safetensors": _write_file(tmp / "model.safetensors", lambda f: f.write(save(weights))),
                 "state.pt": _write_file(tmp / "state.pt", lambda f: torch.save(
                     {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                      "scaler": scaler.state_dict() if scaler is not None else {}}, f))}
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
                    extra: dict | None = None, scaler=None) -> int:
    """Restore everything saved by save_checkpoint (this process's data position and RNGs, fp16's loss `scaler`,
    `extra` filled); returns the step"""
    from safetensors.torch import load_file
    device = next(model.parameters()).device  # each process loads onto its own model's device, not the saver's GPU
    missing, unexpected = model.load_state_dict(load_file(path / "model.safetensors", device=str(device)), strict=False)
    if unexpected or not set(missing) <= set(HF_ALIAS_KEYS):
        raise ValueError(f"model.safetensors does not match the model: unexpected {unexpected}, missing {missing}")
    state = torch.load(path / "state.pt", map_location=device, weights_only=True)
    optimizer.load_state_dict(state["optimizer"]); scheduler.load_state_dict(state["scheduler"])
    if scaler is not None and scaler.is_enabled():
        if state.get("scaler"):
            scaler.load_state_dict(state["scaler"])
        else:  # written by a bf16/fp32 run (or before scalers were saved): the scale starts afresh, as in a new run
            import warnings
            warnings.warn(f"{path} holds no loss-scaler state (not written by an fp16 run): the fp16 loss scale starts "
                          f"afresh at {scaler.get_scale():g}; the resumed run is not the one an fp16 run would have been.")
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
    # every step_* dir: one without trainer_state.json (a copy cut off before its last file) is damaged, not skipped
    candidates = sorted((p for p in (Path(run_dir) / "checkpoints").glob("step_*") if p.is_dir()), reverse=True)
    damaged = []
    for path in candidates:
        _check_same_setup(path, cfg, world, getattr(stream, "num_workers", None))  # a changed setup: no fallback
        problem = checkpoint_problem(path)
        if problem is None:
            try:
                step = load_checkpoint(path, model, optimizer, scheduler, stream, rank, extra,
                                       getattr(accelerator, "scaler", None))
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
                            "problem). Restore one from a copy, or start again: checkpoint.resume=never (starts over, "
                            "moving these checkpoints aside) or a new logging.run_dir.")
    return None, 0


# %% [markdown]
# ## An exact restore
#
# A new process builds a new model, optimizer and stream, and its random generators start wherever its own seeding
# left them; `load_checkpoint` must put every one of them back where the run was. To check it: a run three batches in
# is saved, and what it draws next (the next batch, masks included, and one number from each of torch's, NumPy's and
# Python's generators) is compared with what a new process draws without the checkpoint, and with what it draws after
# loading it (the collator's tokenizer, a small one, is trained in a hidden cell):

# %%
def new_process(cfg):
    "What a new process builds before it resumes: a model, optimizer, schedule and stream, none of them trained"
    model = T5(cfg.model)
    optimizer = get_optimizer("adamwscale", model.named_parameters(), 1e-2, 0.0)
    scheduler = get_lr_scheduler("constant", optimizer, 10, 0, 1e-5)
    collator = SpanCorruptionCollator(tokenizer, cfg.data.inputs_length)
    rows = torch.randint(200, 2000, (64, collator.raw_length), generator=torch.Generator().manual_seed(0))
    return model, optimizer, scheduler, BatchStream(rows, collator, micro_batch=4, seed=0)


def next_draws(stream) -> dict:
    "What a run draws next: a batch (its rows and masks) and one number from each random generator"
    return {"batch": next(stream)["input_ids"], "torch": torch.rand(1), "numpy": torch.tensor(np.random.rand()),
            "python": torch.tensor(random.random())}


cfg, run_dir = make_config("cpu-demo"), Path(tempfile.mkdtemp())
torch.manual_seed(0); np.random.seed(0); random.seed(0)
model, optimizer, scheduler, stream = new_process(cfg)
for _ in range(3):
    next(stream)                                                    # the run is 3 batches in
save_checkpoint(run_dir, 3, model, optimizer, scheduler, stream, cfg)
run = next_draws(stream)                                            # what the run draws next

torch.manual_seed(1); np.random.seed(1); random.seed(1)             # a new process: its generators elsewhere
not_resumed = next_draws(new_process(cfg)[3])                       # ... without the checkpoint
fresh = new_process(cfg)
step = load_checkpoint(latest_checkpoint(run_dir), *fresh)
resumed = next_draws(fresh[3])                                      # ... and with it
for name in run:
    print(f"{name:6}  resumed = run: {torch.equal(resumed[name], run[name])!s:5}   "
          f"without the checkpoint = run: {torch.equal(not_resumed[name], run[name])}")
same_weights = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), fresh[0].state_dict().values()))
print(f"resumed at step {step}; weights equal: {same_weights}")
test_eq((step, same_weights), (3, True))
test_eq([torch.equal(resumed[k], run[k]) for k in run], [True] * 4)

# %% [markdown]
# ## A damaged checkpoint, named and skipped
#
# Checking the hashes on resume costs little next to a save: the code cell after the next paragraph prints both (the
# time to save a checkpoint of the demo's model, hashing included, and the time to check its hashes, in one timing; with the files still in the OS's cache: a
# resume after a reboot, or from a network filesystem, also pays for reading them). Both grow with the checkpoint's bytes, so
# for a bigger model (T5-Base, with its optimizer state) both take longer; Try it 3 below checks whether the check
# stays a small part of the save as the checkpoint grows. Both are rare: thousands of training steps pass between two
# checkpoints of a long run (`checkpoint.every_steps=5000` in the `t5-base` preset).

# %% [markdown]
# Two checkpoints of the demo's model (`cpu-demo`, with its optimizer state), then one changed byte in the newer one's
# weights, as bit rot or a bad copy would leave it: resuming names the file and falls back to the older checkpoint.

# %%
ck_cfg = make_config("cpu-demo")
os.chdir(tempfile.mkdtemp())  # a scratch folder: checkpoint paths print relative to it
ck_dir, ck_model = Path("."), T5(ck_cfg.model)
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
# ## Stopping on a signal, with a checkpoint
#
# `kill -9` cannot be caught: what it costs is the steps since the last checkpoint. A scheduler's SIGTERM (Slurm, a spot
# instance, `timeout`) and a Ctrl-C can be, and then a run need lose nothing: `StopRequest`, a context manager `fit`
# ([08](08_real_runs.ipynb)) runs inside, turns the first one into a request, the loop finishes its step, writes a
# checkpoint and raises `RunStopped`; `train.max_minutes` asks the same on a time budget. A second signal does at once
# what it normally would, a way out if the checkpoint itself hangs in Python code or in a system call Python can
# interrupt (not in a collective waiting on a dead process, or a write stuck on a network disk: there, `kill -9`). Here the handler is called the way Python calls it
# when a SIGTERM arrives (Python runs signal handlers in the main thread only, and a test runner may run these cells in
# another; `tests/test_robust.py` sends real ones to a running `nanot5-edu pretrain`):

# %%
#| export
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


# %%
import signal
default = signal.getsignal(signal.SIGTERM)
with StopRequest() as stop:
    asked_before = stop.requested()
    stop._handle(signal.SIGTERM, None)              # a scheduler's SIGTERM arrives: the handler only takes note
    print(f"stop requested: {asked_before} before the signal, {stop.requested()} after it ({stop.reason})")
test_eq((asked_before, stop.reason), (False, "SIGTERM"))
test_eq(signal.getsignal(signal.SIGTERM), default)  # outside the block, SIGTERM does what it did before
with StopRequest(max_minutes=0.001) as budget:      # 0.06 s
    time.sleep(0.1)
    print("after the time budget:", budget.requested(), f"({budget.reason})")

# %% [markdown]
# ## What you learned
#
# - A checkpoint holds the run's whole state: the weights, the optimizer and the schedule, every random generator and
#   each process's data position. Restored, it makes a new process draw exactly what the run would have drawn.
# - It is written under a temporary name, its weights and optimizer files hashed as they are written (each process's
#   state file by process 0 reading it back), every file fsynced, the hashes in
#   `trainer_state.json` written last, then renamed into place and its parent fsynced: a crash at any moment leaves
#   either the whole checkpoint or none of it.
# - On resume the newest checkpoint is checked against its hashes; a damaged one is named with its problem and moved
#   aside, and the one before it is used. `keep_last=2` is what makes that fallback possible, and the oldest are pruned
#   only once a new checkpoint is complete.
# - A write that fails (a full disk) removes its partial checkpoint, keeps the earlier ones and stops every process with
#   the space needed and free.
# - A resume with another number of processes or data workers, or another model setting, is refused before any compute,
#   naming both values.
# - Checkpoints load with safetensors and `torch.load(weights_only=True)`, onto the loading process's own device.
# - `kill -9` costs the steps since the last checkpoint; SIGTERM, a first Ctrl-C or `train.max_minutes` costs nothing (when the step and the checkpoint finish before any SIGKILL):
#   `StopRequest` turns it into a request, and `fit` finishes the step, writes a checkpoint and raises `RunStopped`.
#
# ## Questions
#
# 1. Why is a checkpoint written under a temporary name and renamed, rather than written as `step_N` directly?
# 2. Why is the directory fsynced after the rename, and not only the files before it?
# 3. Why does a checkpoint hold the RNG states and the stream's position, not only the weights and the optimizer?
# 4. **Predict, then run:** in "An exact restore", which of the four draws would a resume get right if the checkpoint
#    held only the weights, the optimizer and the schedule? (The "without the checkpoint" column is close to that.)
# 5. Why does `save_checkpoint` hash the large files' bytes as they are written (`_Hashing`) instead of reading them back?
# 6. Why are the oldest checkpoints pruned only after the new one is complete, and why is each renamed to `.old_step_N`
#    before it is deleted?
# 7. What does a first Ctrl-C do to a run, and a second? Why not stop at once on the first?
# 8. **Predict, then run:** the damaged-checkpoint cell flips one byte in the newest checkpoint's weights. Which
#    checkpoint does `resume_checkpoint` load, and what happens to the damaged one?
# 9. **Predict, then run:** in the same cell, cut the file short instead of flipping a byte
#    (`(newest / "model.safetensors").write_bytes(bytes(weights[:-1]))`). What does the message say?
# 10. The disk fills up in the middle of a `save_checkpoint`. What is left on disk, and what does the error tell you?
# 11. Why does `load_checkpoint` load every tensor onto its own model's device, instead of where it was saved?
# 12. Why does a resume with another number of processes fail with an error instead of re-sharding the data?
#
# ## Try it
#
# 1. **A changed model on resume.** Run
#    `nanot5-edu pretrain cpu-demo train.total_steps=20 optim.warmup_steps=5 checkpoint.every_steps=10 logging.run_dir=runs/try07b` (the
#    command comes with the package; lesson [10](10_cli.ipynb) builds it), then the same command with
#    `train.total_steps=40 model.d_ff=512`. Look for: a refusal before any training, naming both values and the ways out.
# 2. **Every checkpoint damaged.** Cut both checkpoints of that run short
#    (`truncate -s 1000 runs/try07b/checkpoints/step_*/model.safetensors`) and run the first command again with
#    `train.total_steps=40`. Look for: each checkpoint named with its problem, then an error that none is intact, and
#    nothing moved aside.
# 3. **What the hashes cost.** In the damaged-checkpoint cell, build `ck_cfg` with `["model.d_model=512", "model.d_ff=2048"]`
#    and compare the save time with the check time: does the check stay a small part of the save as the checkpoint grows?

# %%
#| hide
import nbdev; nbdev.nbdev_export()
