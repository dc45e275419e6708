# %% [markdown]
# # Streams: batches that resume exactly
# > The training data as an endless stream of batches whose whole state is a position: rows in memory in a seeded order, and streamed corpora (C4) tokenized, packed, shuffled and corrupted in worker processes, so that a run restarted from a checkpoint sees exactly the batches it would have seen

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# The bare loop of [05](05_pretraining.ipynb) drew random rows with a generator of its own. A run of many hours needs
# more from its data: after a crash it must go on with *the same* batches it would have seen (or a resumed run is
# another run), each of several processes must read its own rows, and a corpus too big for memory (C4) must be
# tokenized, packed and corrupted on the way, fast enough that the GPU never waits. This lesson builds the two streams
# `train` uses ([08](08_real_runs.ipynb)): `BatchStream` over rows in memory, and `StreamingBatches` over a streamed
# corpus, prepared in `DataLoader` worker processes. Each is checked the same way: take batches, save the state, take
# more; a fresh stream loaded from the saved state must give the same batches.

# %%
#| default_exp stream

# %%
#| export
from __future__ import annotations

import atexit
import hashlib
import importlib
import itertools
import json
import os
import time
import warnings
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

import datasets
import numpy as np
import torch

from nanot5_edu.data import CorpusError, load_corpus
from nanot5_edu.spans import SpanCorruptionCollator, pack_dataset

if TYPE_CHECKING:  # type hints only: the config tree comes in lesson 07, the model in 03b
    from nanot5_edu.config import Config
    from nanot5_edu.model import T5

# %%
#| hide
from fastcore.test import test_eq, test_close
import tempfile, time
from pathlib import Path
import matplotlib.pyplot as plt
from nanot5_edu.data import write_c4_shards
from nanot5_edu.layers import MODEL_PRESETS
from nanot5_edu.spans import pack_token_rows
from nanot5_edu.tokenizer import DEMO_VOCAB_SIZE, encode_batch, train_tokenizer
datasets.disable_progress_bars()
corpus = load_corpus("sotu")
tokenizer = train_tokenizer(corpus["text"], DEMO_VOCAB_SIZE, Path(tempfile.mkdtemp()) / "tokenizer")  # 05's vocabulary


# %% [markdown]
# ## Rows in memory: a seeded order and a position
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

    def close(self):
        "Nothing to stop: the rows are in memory (`StreamingBatches.close` stops its workers)"


# %% [markdown]
# The check, on 05's demo corpus and tokenizer (`corpus`, `tokenizer`, rebuilt in a hidden cell): five
# batches, the state, three more; a fresh stream with a fresh collator, loaded from the state, gives
# the same three (the collator's RNG is part of the state, so the masks match too). And two processes of one run
# (`rank` 0 and 1 of `world_size` 2) take the two halves of the same global batch: disjoint rows, with no
# coordination between them but the seed.

# %%
collate = SpanCorruptionCollator(tokenizer, inputs_length=128, seed=0)
rows = torch.tensor(pack_dataset(corpus, tokenizer, collate.raw_length)["input_ids"])  # 05's packed training rows
stream = BatchStream(rows, collate, micro_batch=16, seed=0)
for _ in range(5):
    next(stream)
state = stream.state_dict()
after = [next(stream) for _ in range(3)]
again = BatchStream(rows, SpanCorruptionCollator(tokenizer, inputs_length=128, seed=99), micro_batch=16, seed=0)
again.load_state_dict(state)
for a, b in zip(after, [next(again) for _ in range(3)]):
    test_eq(a["input_ids"], b["input_ids"]); test_eq(a["labels"], b["labels"])
shares = [BatchStream(rows, collate, 16, seed=0, rank=r, world_size=2)._next_rows() for r in (0, 1)]
test_eq(torch.cat(shares), rows[torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))[:32]])
print(f"state after 5 batches: epoch {state['epoch']}, position {state['position']} rows (+ the collator's RNG)")

# %% [markdown]
# ## Streamed corpora and data workers
#
# C4 does not fit in memory, so it is read as a stream and tokenized, packed and corrupted on the way. How
# fast must that be? A T5-Base step at nanoT5's batch of 128 rows of 568 raw tokens (span corruption turns each into 512
# encoder and 114 target tokens: [02](02_span_corruption.ipynb); the batch of nanoT5's README loss and step-time runs; its time-budget configs use 256)
# is 54.5 TFLOP (`flops_per_step`, counted in
# [07](07_config.ipynb)); an H200 (989
# TFLOP/s dense bf16) at 50% MFU, an optimistic target (nanoT5's A100 step is about 31% by lesson 07's count, and
# the course's uncompiled bf16 H200 runs measured 12.1–16.2%: `benchmarks/results/h200_2026-12-04/gpu_check.log`), does one in about a tenth of a second, so it consumes about **660k raw tokens per
# second** (the cell below prints it). Here is what one process does, on a few speeches of the embedded corpus, with
# the demo's vocabulary:

# %%
from nanot5_edu.config import PEAK_TFLOPS, flops_per_step  # lesson 07
nanot5_step = flops_per_step(MODEL_PRESETS["t5-v1_1-base"], 128, 512, 114)  # 54.5 TFLOP
needed = 128 * 568 / (nanot5_step / (0.5 * PEAK_TFLOPS["NVIDIA H200"] * 1e12))  # raw tokens/s the GPU eats
test_close(needed, 660e3, eps=5e3)
sample = load_corpus("sotu", "validation")["text"][:10]  # speeches the tokenizer was not trained on
speed_tok = tokenizer  # the demo vocabulary of 05, trained on the training speeches
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
# **What was measured.** In the cell above one process prepared 0.30M raw tokens/s for the whole pipeline in the
# saved output (2 speeches per call, on a machine not recorded; the speed varies with the machine and its load, so your
# rerun may well be faster), against the 660k an H200 at 50% MFU consumes. The benchmark reached 936,268 raw tokens/s
# (`benchmarks/results/cpu_2026-12-05/spans.log`) with the whole corpus in one call, its tokenizer threads not limited
# in either run; which difference accounts for the gap is not isolated. The comparison is rough too (the 660k counts
# tokens of T5's vocabulary, these speeds the demo's, on speeches), and at the MFU the course measured a quarter to a
# third of that rate is needed, which one process covers in both measurements. So these measurements do not show
# that one process is too slow for this code on an H200.
#
# **Why workers anyway (design reasons, not measured here).** The training process has other work (launching
# kernels, logging, checkpoints), and a faster GPU or a better MFU needs more text; text prepared elsewhere takes
# none of the training process's CPU time. So, like nanoT5, the text is prepared in
# `torch.utils.data.DataLoader` **worker processes** (processes rather than threads: the packing, the conversion of
# rows to tensors and `datasets`' row-by-row iteration are Python code, which Python's global interpreter lock would
# run one thread at a time, though the Rust tokenizer, most of the pipeline's time in the cell above, releases it;
# threads against processes is not measured here), one core each, ahead of the trainer (how far: below); the training process
# only receives finished batches. `data.num_workers` sets how many: by default the cores left per process, at
# most 8, nanoT5's number (`data.num_workers` in nanoT5's `configs/default.yaml`). If each worker has a core of its
# own, their speeds should add up (on the 2-core benchmark machine, 2 workers streamed 1.96× the tokens per second of the
# training process alone, with a shuffled pipeline set up differently from the cell above: `benchmarks/results/cpu_2026-12-05/stream.log`; Try it 3 measures yours): a few at the
# printed pipeline speed (measured with the tokenizer free to use several threads, where a worker runs it on one, so
# somewhat slower per worker) would cover the 660k, and more leave headroom for a faster GPU and for bursts.
#
# ## How a stream resumes
#
# A checkpoint taken late in a `t5-base` run has consumed millions of rows (128 a step). Skipping them by reading
# them again would cost as much as producing them. `datasets`' streams instead *know where they are*:
# `IterableDataset.state_dict()` is a position (which shard, how many examples into it, and, after a
# batched `map`, where the current batch started), and `load_state_dict` starts reading there. torchdata's
# `StatefulDataLoader` collects that state from every worker, along with how far each worker's batches got.
# That state is one position per process and per worker (its own shards when they divide evenly among the processes, otherwise its own share of the examples), so a run must resume with
# the same number of processes and of data workers; a resume refuses any other ([07b](07b_checkpoints.ipynb)).
#
# One piece of the usual pipeline does not resume exactly: a rolling shuffle buffer (`IterableDataset.shuffle`)
# loses its contents on resume. We shuffle in **blocks** instead: `data.shuffle_buffer` packed rows are read,
# permuted and corrupted together, with a generator seeded by (seed, epoch, process, worker, index of the block's
# first row). The block is a pure function of its position, so on resume `datasets` re-reads it from its start
# (bounded work, whatever the step) and skips the rows already used; the packing step before it likewise restarts at
# the start of its current group of 1,000 documents. The pipeline, all in each worker:
# text shards → tokenize and pack (`pack_dataset`, [02b](02b_span_batches.ipynb)) → shuffle and corrupt each block → micro-batches.
#
# A block is built in one go: a worker tokenizes and packs 2,048 rows of 568 raw tokens before it hands out the
# first batch of it, seconds of one core at the speeds above. Meanwhile the training process lives on the batches
# the workers have ready. A few are not enough: the `DataLoader`'s `prefetch_factor` keeps 2 per worker unless told
# otherwise, so 2 workers have 4 micro-batches ready, at most 4 steps of about a tenth of a second on the H200 above:
# well under a second, against a build of seconds, so the GPU would wait at every block. So each worker
# keeps a **whole block's batches** ready (`prefetch`, by default `shuffle_buffer / micro_batch`): it builds its next
# block while the training process uses the current one, which is meant to hide the build. Measured: with the demo
# model and 2 workers the training process waited for data 2.5% of its steps' time
# (`benchmarks/results/cpu_2026-12-05/stream.log`, with nothing to compare against); on the H200, the colab-t4
# preset's 200 steps waited for data 21.9% of their time, the first batch included, so start-up is not separated out
# (`benchmarks/results/h200_2026-12-04/gpu_check.json`, `data_wait_fraction`; one run); with a faster consumer
# (`benchmarks/results/cpu_2026-12-05/stream_stalls.log`, one run per setting) it waited 21.0% of the time with 4 batches ready per worker (this package's earlier default, not torch's 2) and 15.0% with a
# block's worth, a difference of about one stall, and a wait as long as a block build remained in both: that the
# overlap works is not shown. The cost is memory for the finished batches: a block of token ids per worker, megabytes at T5-Base's
# sizes.
# [`benchmarks/stream_stalls.py`](https://github.com/nanot5-edu/nanot5_edu/blob/main/benchmarks/stream_stalls.py) measures the
# waits with 4 batches ready per worker (this package's earlier default) and with a block's worth. A bigger `data.shuffle_buffer`
# mixes rows over a longer stretch and keeps a longer block ready.

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


class _WorkerInit:
    """`worker_init_fn` of the data workers: SIGINT / SIGTERM sent to every process (Ctrl-C, Slurm) are the training
    process's to handle; the worker ends with the training process instead (`_die_with_trainer`), even when that one
    is killed by SIGKILL. Made in the training process, so it knows that process's pid whatever the start method"""

    def __init__(self):
        self.trainer = os.getpid()

    def __call__(self, worker_id: int):
        import signal
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        _die_with_trainer(self.trainer)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _die_with_trainer(trainer: int):
    "In a data worker: end as soon as the training process is gone, killed or not, whatever the worker is blocked on"
    import signal, sys, threading
    parent = os.getppid()
    if parent == trainer and sys.platform.startswith("linux"):  # started by the trainer itself (fork, spawn):
        import ctypes                                            # the kernel sends SIGKILL when it exits
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
        if os.getppid() != trainer:  # it died before the signal was set
            os._exit(1)
    def watch():  # elsewhere too (a forkserver's child, macOS): poll, and end the worker once the trainer is gone
        while os.getppid() == parent and _alive(trainer):
            time.sleep(1.0)
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="die-with-trainer").start()


_open_streams = weakref.WeakSet()  # streams with live workers: closed when Python exits


def _close_at_exit(stream):
    "Have `stream` closed when Python exits, before multiprocessing's exit handler waits for the workers"
    importlib.import_module("multiprocessing.util")  # registers that handler (once); atexit runs the later ones first
    atexit.unregister(_close_open_streams)  # registered once, after it
    atexit.register(_close_open_streams)
    _open_streams.add(stream)


def _close_open_streams():
    for stream in list(_open_streams):
        stream.close()


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
                                              worker_init_fn=_WorkerInit())
        if self._resume_from is not None:
            self._loader.load_state_dict(self._resume_from)
        self._iter, self._resume_from, self._batches_this_epoch = iter(self._loader), None, 0
        if self.num_workers:
            _close_at_exit(self)

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
        self.close()
        self.epoch, self._resume_from = state["epoch"], state["loader"]

    def close(self):
        "Stop the data workers now; the position is kept (a later `next` starts new workers there)"
        if self._iter is None:
            return
        self._resume_from, workers = self.state_dict()["loader"], list(getattr(self._iter, "_workers", []))
        if workers:  # the DataLoader's own stop: each worker is told to end and waited for (5 s at most) ...
            self._iter._shutdown_workers()
        for w in workers:  # ... then sent SIGTERM, which ours ignore: kill one still busy
            if w.is_alive():
                w.kill()
                w.join(timeout=5)
        self._iter = None
        _open_streams.discard(self)


# %% [markdown]
# A C4 stand-in written from the embedded corpus (`write_c4_shards`, [00](00_data.ipynb)) and read by two
# workers. Three batches, a checkpoint, three more; then a fresh stream loaded from the checkpoint gives the
# same three batches. The state is a position — which shard, how far into it, and how many rows of the current block
# are already used — not a count of rows to skip from the start (the appendix prints it):

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
stream.close(); resumed.close()  # their workers end now (why: below)

# %%
#| hide
test_eq([w.is_alive() for st in (stream, resumed) for w in st._loader._iterator._workers], [False] * 4)


# %% [markdown]
# Why `close()`: the workers ignore SIGINT and SIGTERM (`_WorkerInit`), because a Ctrl-C or a cluster's
# SIGTERM reaches every process, and stopping is the training process's job: it finishes its step and writes a
# checkpoint ([08](08_real_runs.ipynb)). But then nothing outside the stream can stop them: a Python that exits
# with them alive sends them SIGTERM (`multiprocessing`'s exit handler) and waits for them to end, forever. So
# `close()` stops them (the DataLoader's own stop, then SIGKILL for a worker still busy), `train` calls it when
# training ends, and a stream still open when Python exits is closed first. A training process killed outright
# (`kill -9`, the out-of-memory killer, a Colab runtime restart) runs none of that, so each worker also asks the
# kernel to kill it when its parent dies (Linux's `PR_SET_PDEATHSIG`, when the trainer started it directly) and keeps
# a thread that ends the worker once the trainer is gone (`_die_with_trainer`): otherwise a worker blocked in its work (a slow read, or a full pipe to a dead trainer), which never reaches
# torch's own 5-second check on its parent, would outlive the trainer with its memory and shared-memory files
# (`tests/test_robust.py` kills a trainer with SIGKILL, with idle workers and with workers held in their work by a long sleep, and
# finds no worker left).
#
# What `train` ([08](08_real_runs.ipynb)) calls: the corpus's documents (`load_texts`: in memory, or a stream for C4,
# C4 shards and `data.streaming`), all of its packed rows (`packed_rows`: the first `stream_limit` of a stream, and
# with `documents=True` each row's document, which [05](05_pretraining.ipynb)'s evaluation pairs rows by), and this
# process's training stream (`training_stream`: a `BatchStream` over rows in memory, `StreamingBatches` over a
# stream). They read a config (`cfg.data`, `cfg.train.seed`: lesson [07](07_config.ipynb)'s tree), only its fields:

# %%
#| export
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
# ## What you learned
#
# - A stream's whole state is a position: for rows in memory `(epoch, position)` plus the collator's RNG; restoring
#   it gives exactly the next batches, masks included.
# - For rows in memory, each process of a run takes its own slice of every global batch, drawn from one seeded permutation per epoch:
#   disjoint rows with no communication.
# - T5-Base on an H200 at 50% MFU consumes about 660k raw tokens per second; one process prepared 0.30M in the cell
#   above and 936k in the benchmark (`benchmarks/results/cpu_2026-12-05/spans.log`, set up differently), more than the measured MFU needs. A streamed corpus is
#   still prepared in `DataLoader` worker processes, to keep the training process free (a design reason, not
#   measured; nor are threads against processes).
# - `datasets`' streams resume from a position (shard, example), and torchdata's `StatefulDataLoader` collects it from
#   every worker.
# - A rolling shuffle buffer loses its contents on resume; a block shuffle seeded by the block's position does not,
#   and costs at most one block (and one packing group of 1,000 documents) of re-reading.
# - Each worker keeps a whole block's batches ready, meant to let it build the next block while training uses the
#   current one; measured once per setting (`benchmarks/results/cpu_2026-12-05/stream_stalls.log`), the share of time
#   spent waiting fell from 21.0% to 15.0%, about one stall, and a wait as long as a block build remained: the overlap
#   is not shown to work.
# - A resume needs the same number of processes and workers: the saved position is per process and per worker.
# - Workers that ignore SIGTERM (so that stopping stays the training process's job) must be stopped by their owner:
#   `close()`, called when training ends and when Python exits.
#
# ## Questions
#
# 1. `BatchStream` draws each epoch's permutation from `seed + epoch`. Why not one generator advanced through the run?
# 2. **Predict, then run:** the resume check loads the state into a stream whose collator was built with `seed=99`.
#    Will its batches match? Why?
# 3. Why does each process slice the global batch by its rank, instead of drawing its own rows with its own seed?
# 4. What does `BatchStream` do with the rows that do not fill the last global batch of an epoch? Why is that harmless
#    here?
# 5. An A100 (312 TFLOP/s dense bf16) at an MFU of `0.4` on the T5-Base step above (54.5 TFLOP, 128 rows of 568 raw tokens):
#    how many raw tokens per second must the data pipeline supply?
# 6. **Predict, then run:** in the speed cell, which is faster, the tokenizer alone or tokenize + pack + corrupt, and
#    by how much?
# 7. Why are the data workers processes and not threads?
# 8. Why would a rolling shuffle buffer make a resumed run differ from the uninterrupted one?
# 9. The block's seed includes the index of its first row, not a count of blocks built so far. Why?
# 10. What does `prefetch` = a block's batches cost, and what does it buy?
# 11. Why must a run resume with the same `data.num_workers`?
# 12. **Predict, then run:** in the C4 stand-in cell, the stream is saved after 3 batches of 8 rows with
#     `shuffle_buffer=100`, by two workers taking turns. How many rows of its current block has worker 0 handed out
#     (the appendix prints it)?
#
# ## Try it
#
# 1. **Workers and resume.** In the C4 stand-in cell, set `num_workers=0`, then `1`: does the resume check still pass?
#    Then save a state with 2 workers and load it into a stream with 1: what happens, and why?
# 2. **Time to the first batch.** Time `next(stream)` for a fresh C4 stand-in stream with `shuffle_buffer=100` and
#    `1000` (`num_workers=0`): how does the wait for the first batch grow with the block, and what does that mean for
#    `prefetch`?
# 3. **Throughput with workers.** Time 50 batches (after the first) with `num_workers=0`, `1` and `2` on 2 cores:
#    does a second worker help when the machine has two cores and the training process needs one?

# %% [markdown]
# ## Appendix: what a stream's state holds
#
# The saved state of the C4 stand-in above, worker 0's part (each worker reads its own blocks and keeps its own
# state), one line per stage of the pipeline: the block map (rows of the current block already handed out), the
# packing map, a rebatching stage that `datasets` adds, and the reader of the shards (which shard, how many examples
# into it).
# A resume re-reads the current block from its start and skips the rows already used: bounded work, whatever the step.
# (The reader's `shard_idx` counts this worker's own shards — each of the two workers reads two of the four — so
# `'shard_idx': 2` means worker 0 has read both of its shards: this small stand-in fit into its first packing group.)

# %%
def positions(state, depth=0):
    "Where each stage of a `datasets` stream state is (its `previous_state` is where it restarts from)"
    keys = ("shard_idx", "shard_example_idx", "previous_state_example_idx", "num_examples_since_previous_state")
    print("  " * depth + state["type"], {k: state[k] for k in keys if k in state})
    if "examples_iterable" in state:
        positions(state["examples_iterable"], depth + 1)
positions(saved["loader"]["_snapshot"]["_worker_snapshots"]["worker_0"]["dataset_state"]["examples_iterable"])


# %% [markdown]
# ## Appendix: which rows did each process train on?
#
# Lesson 08 trains in several processes (DDP), each with its own `rank` of the `BatchStream` above. Two things must
# then hold: the processes read *different* rows (the rank split above), and they
# end with the *same* weights (DDP averages their gradients). Lesson 08's `train` (exported to `nanot5_edu.train`,
# which lesson 05 imports) wraps its stream in `FirstBatchHash`: every batch passes through unchanged, and the sha256 of the
# first batch's `input_ids` is kept. After training, each process writes `processes/rank_R.json` with that hash and a
# hash of its final weights. The hash is taken after span corruption, and each process corrupts
# with its own seed, so different first-batch hashes show only that the processes' first batches differ — that they
# read different rows is what the rank split above ensures and its check shows; equal weight hashes show the copies stayed in sync. The
# package's two-process test ([tests/cli_runs.py](https://github.com/nanot5-edu/nanot5_edu/blob/main/tests/cli_runs.py))
# asserts both, and lesson 08's "Two processes on a CPU" exercise has you compare the two files. The code is hidden
# here (it has no output of its own); it lives in `nanot5_edu.stream`.

# %%
#| export
#| hide
class FirstBatchHash:
    "A batch stream that passes everything through and keeps the sha256 of the first batch's input_ids"
    def __init__(self, stream):
        self.stream, self.sha256 = stream, None

    def __next__(self) -> dict:
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
    weights = hashlib.sha256()
    for _, p in sorted(model.state_dict().items()):
        weights.update(p.detach().float().cpu().numpy().tobytes())
    out = run_dir / "processes"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank_{accelerator.process_index}.json").write_text(json.dumps({
        "rank": accelerator.process_index, "world_size": accelerator.num_processes,
        "first_batch_sha256": first_batch_sha, "weights_sha256": weights.hexdigest()}))


# %%
#| hide
# the wrapper changes nothing it passes on, hashes only the first batch, and forwards the stream's state
_a = BatchStream(rows, SpanCorruptionCollator(tokenizer, inputs_length=128, seed=0), 4, seed=0)
_b = BatchStream(rows, SpanCorruptionCollator(tokenizer, inputs_length=128, seed=0), 4, seed=0)
_w = FirstBatchHash(_b)
_first = next(_w); _sha = _w.sha256
test_eq(_first["input_ids"], next(_a)["input_ids"]); test_eq(next(_w)["input_ids"], next(_a)["input_ids"])
test_eq(_w.sha256, _sha); test_eq(_w.state_dict()["position"], 8)  # two batches of 4 rows, read through the wrapper

# %%
#| hide
import nbdev; nbdev.nbdev_export()
