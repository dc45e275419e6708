"""Span-corruption benchmark.

1. Collator: the exported vectorised `SpanCorruptionCollator` vs a per-example numpy reference (the HF flax
   example's algorithm, as drafted in nbs/02_span_corruption) on batches of 128 x 568 → examples/s and ratio.
2. End-to-end pipeline on the embedded corpus: tokenize + pack + corrupt, in raw tokens/s.
Run: python benchmarks/spans.py
"""
import os
import tempfile
import time
import timeit

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
import numpy as np
import torch

from nanot5_edu.data import load_corpus
from nanot5_edu.spans import SpanCorruptionCollator, pack_token_rows
from nanot5_edu.noise import noise_counts
from nanot5_edu.tokenizer import DEMO_VOCAB_SIZE, encode_batch, train_tokenizer


def reference_noise_mask(length, density, mean_span, rng):
    "Per-example T5 noise mask (numpy), as in HF's run_t5_mlm_flax.py"
    num_noise, num_spans = noise_counts(length, density, mean_span)

    def segmentation(num_items, num_segments):
        first = np.arange(num_items - 1) < num_segments - 1
        rng.shuffle(first)
        return np.bincount(np.cumsum(np.pad(first, [[1, 0]])), minlength=num_segments)

    interleaved = np.stack([segmentation(length - num_noise, num_spans), segmentation(num_noise, num_spans)], 1)
    starts = np.cumsum(interleaved.reshape(-1))[:-1]
    indicator = np.zeros(length, dtype=np.int8)
    indicator[starts] = 1
    return np.cumsum(indicator) % 2 == 1


def reference_collate(rows, first_sentinel, eos, rng, density=0.15, mean_span=3.0):
    "Per-example corruption of a [B, L] numpy batch, as in HF's flax collator"
    def sentinelize(ids, drop):
        starts = drop & ~np.pad(drop, [[1, 0]])[:-1]
        out = np.where(starts, first_sentinel + 1 - np.cumsum(starts), ids)[~(drop & ~starts)]
        return np.concatenate([out, [eos]])
    inputs, labels = [], []
    for ids in rows:
        mask = reference_noise_mask(len(ids), density, mean_span, rng)
        inputs.append(sentinelize(ids, mask)); labels.append(sentinelize(ids, ~mask))
    labels = np.stack(labels)
    return {"input_ids": np.stack(inputs), "labels": labels,
            "decoder_input_ids": np.concatenate([np.zeros((len(rows), 1), labels.dtype), labels[:, :-1]], 1)}


def per_call(fn):
    "Seconds per call: timeit's autorange picks calls per round (>= 0.2 s), best of 5 rounds"
    timer = timeit.Timer(fn)
    calls, _ = timer.autorange()
    return min(timer.repeat(5, calls)) / calls


texts = list(load_corpus("sotu")["text"])
tok = train_tokenizer(texts, DEMO_VOCAB_SIZE, tempfile.mkdtemp())
collate = SpanCorruptionCollator(tok, inputs_length=512, seed=0)
rows = torch.randint(3, DEMO_VOCAB_SIZE, (128, collate.raw_length))
rows_np, rng = rows.numpy(), np.random.default_rng(0)

t_ours = per_call(lambda: collate(rows))
t_ref = per_call(lambda: reference_collate(rows_np, collate.first_sentinel, tok.eos_token_id, rng))
print(f"threads: {torch.get_num_threads()}")
print(f"collator, batch 128 x {collate.raw_length} -> 128 x 512 / 114")
print(f"  {'ours (vectorised torch)':32} {128 / t_ours:12,.0f} examples/s")
print(f"  {'reference (per-example numpy)':32} {128 / t_ref:12,.0f} examples/s")
print(f"  ratio: {t_ref / t_ours:.1f}x   (goal >= 20x)")


def pipeline():
    n = 0
    ids = encode_batch(tok, texts)
    packed = torch.tensor(pack_token_rows(ids, collate.raw_length))
    for i in range(0, len(packed) - 127, 128):
        batch = collate(packed[i:i + 128]); n += 128 * collate.raw_length
    return n

t = time.perf_counter(); n = pipeline(); dt = time.perf_counter() - t
print(f"end-to-end tokenize + pack + corrupt on the embedded corpus: {n:,} raw tokens in {dt:.2f} s = "
      f"{n / dt:,.0f} raw tokens/s   (goal >= 700,000/s)")
