# %% [markdown]
# # Span corruption for batches: packing, a vectorised corruptor, the collator
# > `pack_dataset` (documents → fixed-length rows), `random_spans_noise_mask` and `corrupt_spans` (a whole batch in a few tensor ops, checked equal to lesson 02's `corrupt_example`), and `SpanCorruptionCollator`, which every span-corruption pre-training run uses

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# Lesson [02](02_span_corruption.ipynb) built T5's span corruption one row at a time: a raw chunk of 568 tokens,
# its noise mask (`example_noise_mask`), and `corrupt_example`, which turns them into a 512-token encoder input
# and a 114-token target; `uncorrupt` undoes it. Training needs two more things: rows to corrupt, cut from whole
# documents, and whole batches of them corrupted at once, cheaply enough that the model does not wait for them. This lesson
# builds both, and checks the fast version equal to the readable one on the same masks.
#
# **What it needs**: the corpus of [00](00_data.ipynb), the tokenizer of [01](01_tokenizer.ipynb), and from 02
# (`nanot5_edu.noise`): `noise_counts` (in its checked form, `_checked_noise_counts`) and `compute_input_and_target_lengths` (T5 fixes the numbers of noise
# tokens and spans per row, so every row of a given length corrupts to the same lengths), the mask layout
# (gap, span, gap, span, …: kept text first, a span last), `example_noise_mask`, `corrupt_example`, `uncorrupt`,
# `span_lengths` and `SpanCorruptionError`.
#
# **What you will build**: `pack_dataset` (documents → fixed-length rows, for a list or a stream), `random_cuts`
# and `random_spans_noise_mask` (a batch of T5 noise masks in a few tensor ops), `corrupt_spans` (a batch
# corrupted by `gather`), and `SpanCorruptionCollator`, the `DataLoader` collator every span-corruption pre-training run uses (09c's other objectives and fine-tuning have their own). They go
# into `nanot5_edu.spans` (lesson 02's one-row recipe stays in `nanot5_edu.noise`).

# %%
#| default_exp spans

# %%
#| export
from __future__ import annotations

import functools
import math
from typing import Sequence

import torch

from nanot5_edu.tokenizer import NUM_SENTINELS, TokenizerError, encode_batch, sentinel_ids
from nanot5_edu.noise import compute_input_and_target_lengths, SpanCorruptionError, _checked_noise_counts

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import random, tempfile
import numpy as np
from pathlib import Path
import matplotlib.pyplot as plt
from nanot5_edu.data import load_corpus
from nanot5_edu.tokenizer import train_tokenizer, DEMO_VOCAB_SIZE
from nanot5_edu.noise import corrupt_example, example_noise_mask, span_lengths, uncorrupt  # lesson 02's one-row recipe

random.seed(0); np.random.seed(0); torch.manual_seed(0);

# %% [markdown]
# The corpus and the 8,000-piece tokenizer with 100 sentinels of lessons 00 and 01, as in lesson 02:

# %%
texts = list(load_corpus("sotu")["text"])
tok = train_tokenizer(texts, DEMO_VOCAB_SIZE, Path(tempfile.mkdtemp()) / "tok")
test_eq(tok.convert_tokens_to_ids("<extra_id_0>"), len(tok) - 1)


# %% [markdown]
# ## Packing documents into rows
#
# nanoT5 tokenizes documents in groups of 1,000, appends EOS to each, concatenates the group and cuts it
# into rows of `raw_length` tokens, dropping the group's remainder. No padding is ever needed, and document
# boundaries show only as EOS. `pack_token_rows` does this for a group; `pack_dataset` maps it over a
# `datasets.Dataset` *or* a streaming `IterableDataset` (C4), so nothing needs to fit in memory. With
# `documents=True` it also tags each row with the document most of its tokens come from (`row_documents`);
# the evaluation in [05_pretraining](05_pretraining.ipynb) uses that tag to pair rows by speech.

# %%
#| export
def pack_token_rows(token_lists: Sequence[Sequence[int]], raw_length: int) -> list[list[int]]:
    "Concatenate tokenized documents and cut them into rows of `raw_length` (the remainder is dropped)"
    flat = [t for ids in token_lists for t in ids]
    return [flat[i:i + raw_length] for i in range(0, len(flat) - raw_length + 1, raw_length)]


def row_documents(token_lists: Sequence[Sequence[int]], raw_length: int) -> list[int]:
    "For each row `pack_token_rows` cuts from these documents: the index of the document most of its tokens come from"
    lengths = torch.tensor([len(ids) for ids in token_lists], dtype=torch.long)
    num_rows = int(lengths.sum()) // raw_length
    if num_rows == 0:
        return []
    owner = torch.repeat_interleave(torch.arange(len(lengths)), lengths)[:num_rows * raw_length]
    return torch.mode(owner.view(num_rows, raw_length), dim=1).values.tolist()


def pack_dataset(ds, tokenizer, raw_length: int, group_size: int = 1000, documents: bool = False):
    """Tokenize a `text` dataset (map-style or streaming) into packed rows: a dataset with `input_ids` [raw_length]
    (and with `documents=True`, `document`: the index in `ds` of the document most of the row comes from)"""
    def pack(batch, indices=None):
        ids = encode_batch(tokenizer, batch["text"])
        out = {"input_ids": pack_token_rows(ids, raw_length)}
        if documents:
            out["document"] = [indices[d] for d in row_documents(ids, raw_length)]
        return out
    # select first: a stream whose features are unknown (from the hub) has column_names None, so its other
    # columns (C4's timestamp, url) could not be named in remove_columns, and the batched map would keep them
    return ds.select_columns(["text"]).map(pack, batched=True, batch_size=group_size, remove_columns=["text"],
                                           with_indices=documents)


# %%
test_eq(pack_token_rows([[5, 6, 1], [7, 1], [8, 9, 10, 1]], 4), [[5, 6, 1, 7], [1, 8, 9, 10]])
test_eq(row_documents([[5, 6, 1], [7, 1], [8, 9, 10, 1]], 4), [0, 2])  # row 0: 3 tokens of doc 0; row 1: 3 of doc 2
import datasets
datasets.disable_progress_bars()
valid_docs = load_corpus("sotu", "validation")
packed = pack_dataset(valid_docs, tok, 568)
streamed = pack_dataset(valid_docs.to_iterable_dataset(), tok, 568)
test_eq(next(iter(streamed))["input_ids"], packed[0]["input_ids"])   # same rows when streamed
test_eq(len(packed), sum(map(len, encode_batch(tok, valid_docs["text"]))) // 568)
print(f"{len(packed)} validation rows of {len(packed[0]['input_ids'])} raw tokens")

# %%
#| hide
tagged = pack_dataset(valid_docs, tok, 568, documents=True)  # each row tagged with the document it mostly comes from
test_eq(tagged["input_ids"], packed["input_ids"])
test_eq([r["document"] for r in pack_dataset(valid_docs.to_iterable_dataset(), tok, 568, documents=True)], tagged["document"])
test_eq(tagged["document"], sorted(tagged["document"]))
test_eq(set(tagged["document"]), set(range(len(valid_docs))))  # every speech is longer than a row

# %% [markdown]
# ## Going faster
#
# *Lesson 02 built the objective, and packing, above, gives it rows. What follows is engineering: a reader who
# only needs the collator can skip to "The collator" below (the cell just before it checks the fast version
# equal to `corrupt_example` on the same masks).*
#
# **Is the readable version too slow?** Not for a GPU. Per example, it takes a fraction of a millisecond:

# %%
import timeit
row = np.random.default_rng(0).integers(3, DEMO_VOCAB_SIZE, 568)
rng = np.random.default_rng(0)
secs = min(timeit.repeat(lambda: corrupt_example(row, example_noise_mask(568, 0.15, 3.0, rng), len(tok) - 1),
                         number=200, repeat=3)) / 200
print(f"corrupt_example: {1 / secs:,.0f} examples/s = {568 / secs / 1e6:.1f}M raw tokens/s on one core")


# %% [markdown]
# T5-Base pre-training at 50% MFU (model FLOPs utilisation: the share of the chip's peak arithmetic that goes
# into the model's own matmuls) on an H200 consumes about 0.66M raw tokens/s: lesson 06 prints that rate, from the
# FLOPs of one step (`flops_per_step`, lesson 07) and half of the H200's 989 dense bf16 TFLOP/s. The Python loop
# above does 2.8M raw tokens/s on one core, so even it keeps up. Tokenizing is the larger cost: in lesson 06, one
# process tokenized 340,376 raw tokens/s and tokenized, packed and corrupted 296,796. So why bother? Two cases in
# this project where masking speed could matter (neither is measured here):
#
# - **Tiny models on a CPU** (the demo): the model and the data pipeline share the same few cores, so every
#   millisecond spent corrupting is a millisecond not spent training.
# - **Many GPUs per host** with few cores each: eight GPUs need eight times that rate from one machine,
#   tokenization included; the cheaper the corruption, the more cores are left for the tokenizer.
#
# The idea: all rows of a batch have the same length, hence the same numbers of noise tokens and spans, so
# the whole batch can be drawn and corrupted with a few tensor ops instead of a Python loop per row. Both
# halves need a little thought to be *fast* in torch, where each op costs microseconds of overhead and
# sorting is slow.
#
# **Drawing the segmentations.** Splitting `n` items into `s` non-empty parts uniformly at random is picking
# `s − 1` distinct cut points out of the `n − 1` slots between items, uniformly. The obvious batch version
# (the `topk` of uniform random numbers over all slots) touches every slot with random numbers and a
# partial sort. Cheaper: draw slots **with replacement** and keep the first `s − 1` *distinct* ones. That is
# still exactly uniform — the procedure treats every slot alike, so every set of `s − 1` slots is equally
# likely — and it needs only a small multiple of `s` random numbers per row. In a batch:
#
# 1. draw a few more slots than needed (enough that a row almost never runs short; if one does, we draw
#    again, so the result never depends on luck);
# 2. a `scatter_reduce(amin)` records, for each slot, the first draw that hit it, so a draw is *new* if it is
#    that first draw; a `cumsum` of new draws picks the first `s − 1` of them;
# 3. a scatter marks their slots in a row of zeros, and `nonzero` lists the marked slots in sorted order.
#
# The noise spans and the gaps are two such segmentations; `random_cuts` draws both in one pass.

# %%
#| export
def _draws_per_round(size: int, count: int) -> int:
    "Draws that contain `count` distinct values of range(size) almost surely: coupon-collector mean + 6 sd"
    mean = sum(size / (size - i) for i in range(count))
    sd = math.sqrt(sum(i * size / (size - i) ** 2 for i in range(count)))
    return math.ceil(mean + 6 * sd) + 1


def _draw_numbers(n_draws: int, ranges: int) -> torch.Tensor:
    "0..n_draws-1 for each range, in the smallest integer type that holds them (less memory to touch)"
    dtype = torch.int8 if n_draws < 2**7 else torch.int16 if n_draws < 2**15 else torch.int32
    return torch.arange(n_draws, dtype=dtype).repeat(ranges)


@functools.lru_cache(maxsize=64)
def _cut_layout(sizes: tuple[int, ...], count: int):
    "Draws per round, offset of each range in the shared table, and the draw numbers of one round"
    per_round = max(_draws_per_round(n, count) for n in sizes)
    offsets = [sum(sizes[:i]) for i in range(len(sizes))]
    return per_round, offsets, torch.tensor(offsets).view(-1, 1), _draw_numbers(per_round, len(sizes))


def random_cuts(batch: int,  # rows
                sizes: Sequence[int],  # draw from range(n) for each n
                count: int,  # distinct values per row and size
                generator: torch.Generator | None = None) -> torch.Tensor:
    "[batch, len(sizes), count]: `count` distinct values of each range(n), sorted, every set equally likely"
    sizes = tuple(sizes)
    if count == 0 or batch == 0:
        return torch.zeros(batch, len(sizes), count, dtype=torch.long)
    per_round, offsets, offset_column, draw_no = _cut_layout(sizes, count)
    S, width, draws = len(sizes), sum(sizes), None
    while True:  # one round unless a row is ~6 sd unlucky
        more = torch.stack([torch.randint(o, o + n, (batch, per_round), generator=generator)
                            for o, n in zip(offsets, sizes)], 1)
        draws = more if draws is None else torch.cat([draws, more], 2)
        n_draws, flat = draws.shape[2], draws.view(batch, -1)
        if n_draws > per_round:
            draw_no = _draw_numbers(n_draws, S)
        first_hit = torch.full((batch, width), n_draws, dtype=draw_no.dtype).scatter_reduce_(
            1, flat, draw_no.expand(batch, -1), "amin")                              # first draw of each value
        is_new = (first_hit.gather(1, flat) == draw_no).view(batch, S, n_draws)
        distinct = is_new.cumsum(2, dtype=draw_no.dtype)
        if distinct[:, :, -1].min() >= count:   # every row has `count` distinct values of each range
            break
    taken = (is_new & (distinct <= count)).view(batch, -1).to(torch.uint8)   # the first `count` new draws
    kept = torch.zeros(batch, width, dtype=torch.uint8).scatter_add_(1, flat, taken)
    return kept.nonzero()[:, 1].view(batch, S, count) - offset_column


# %% [markdown]
# The obvious draft, for comparison: the `topk` of uniform random numbers over all slots is a uniform random
# subset too, but it draws a random number for every slot and partially sorts them. Same kind of output;
# the time of each on a T5-Base batch (128 rows of 568 raw tokens with 28 spans of 85 noise tokens in all, the
# rest kept, so 27 cuts among the 482 slots between kept tokens and 27 among the 84 between noise tokens):

# %%
def topk_cuts(batch, sizes, count, generator=None):
    "Draft: `count` distinct sorted values of each range(n) from the topk of uniform random keys"
    return torch.stack([torch.rand(batch, n, generator=generator).topk(count, dim=1).indices.sort(dim=1).values
                        for n in sizes], 1)

import timeit
gen = torch.Generator().manual_seed(0)
draft_cuts = topk_cuts(128, [482, 84], 27, gen)
test_eq(draft_cuts.shape, random_cuts(128, [482, 84], 27, gen).shape)
test_eq(bool((draft_cuts.diff(dim=2) > 0).all()), True)
for name, fn in [("topk draft", topk_cuts), ("random_cuts", random_cuts)]:
    print(f"{name:12} {min(timeit.repeat(lambda: fn(128, [482, 84], 27, gen), number=50, repeat=3)) / 50 * 1e6:6.0f} µs per batch")


# %% [markdown]
# The check that `random_cuts` draws every possible set equally often, within sampling noise (on cases small enough
# to count every possible set), is in the appendix: it tests the sampler, and nothing below needs it.

# %% [markdown]
# From the cuts, the span lengths and the mask follow as in HF's reference code: interleave gap and span lengths,
# `cumsum` gives the span starts, a scatter marks them and `cumsum % 2` fills the spans.

# %%
#| export
def _random_span_cuts(rows: int, length: int, num_noise: int, num_spans: int, generator) -> torch.Tensor:
    "[rows, 2, spans - 1] cut slots: where gaps (in kept tokens) and spans (in noise tokens) are split"
    return random_cuts(rows, [length - num_noise - 1, num_noise - 1], num_spans - 1, generator)


def random_spans_noise_mask(length: int,  # tokens per row
                            noise_density: float = 0.15,
                            mean_noise_span_length: float = 3.0,
                            generator: torch.Generator | None = None,  # seeded for reproducible masks
                            batch: int | None = None,  # rows to draw at once; None: one row, shape [length]
                            ) -> torch.Tensor:
    "T5 noise mask(s): exactly T5's count of noise tokens in round(noise/mean_span) spans, gap first, span last"
    num_noise, num_spans = _checked_noise_counts(length, noise_density, mean_noise_span_length)
    rows = 1 if batch is None else batch
    cuts = _random_span_cuts(rows, length, num_noise, num_spans, generator)
    totals = torch.tensor([[length - num_noise], [num_noise]]).expand(rows, 2, 1)
    gaps, noise = torch.cat([cuts.new_zeros(rows, 2, 1), cuts + 1, totals], 2).diff(dim=2).unbind(1)
    starts = torch.stack([gaps, noise], dim=2).reshape(rows, 2 * num_spans).cumsum(dim=1)[:, :-1]
    indicator = torch.zeros(rows, length, dtype=torch.long).scatter_(1, starts, 1)
    mask = indicator.cumsum(dim=1) % 2 == 1
    return mask[0] if batch is None else mask


# %%
g = torch.Generator().manual_seed(0)
masks = random_spans_noise_mask(568, 0.15, 3.0, generator=g, batch=256)
starts = masks & ~torch.nn.functional.pad(masks, (1, 0))[:, :-1]
test_eq(masks.shape, (256, 568))
test_eq(masks.sum(1).unique().tolist(), [85])                  # exactly 85 noise tokens per row
test_eq(starts.sum(1).unique().tolist(), [28])                 # in exactly 28 spans
test_eq((masks[:, 0].any().item(), masks[:, -1].all().item()), (False, True))
test_eq(random_spans_noise_mask(568, generator=torch.Generator().manual_seed(0), batch=256), masks)  # reproducible

# %% [markdown]
# Are the spans distributed like the readable version's? Span lengths over many draws, both implementations:

# %%
rng = np.random.default_rng(0)
ref_lengths = span_lengths(example_noise_mask(568, 0.15, 3.0, rng) for _ in range(256))
vec_lengths = span_lengths(masks.numpy())
test_close(ref_lengths.mean(), vec_lengths.mean(), eps=1e-9)  # 85/28 in both, by construction
for k in (1, 2, 3, 5):   # the share of spans of length k agrees within sampling noise
    test_close((ref_lengths == k).mean(), (vec_lengths == k).mean(), eps=0.03)
fig, ax = plt.subplots(figsize=(6, 2.5))
ax.hist([ref_lengths, vec_lengths], bins=np.arange(0.5, 13.5), label=["example_noise_mask (numpy)", "random_spans_noise_mask (torch)"])
ax.set_xlabel("span length (tokens)"); ax.legend(); plt.show()


# %% [markdown]
# **Corrupting by gathering.** HF's reference (lesson 02's `hf_style_corrupt` draft) builds each output by
# deleting tokens, which in a batch is a boolean index over every token. Instead we compute, for every output
# position, *which raw token it copies* and fetch them all with `gather`. Within a run of kept tokens (in the input) or of hidden tokens (in the
# labels) that source index grows by 1 per position; it only jumps after a sentinel — over span `k` in the
# input, over gap `k` in the labels. So the source index is the `cumsum` of a row of ones with those jumps
# scattered in, and the jumps are differences of the sentinel positions, which the cut points give directly
# (in the input, sentinel `k` sits after the kept tokens of gaps 0…k and the `k` sentinels before it; in the
# labels, after the hidden tokens of spans 0…k−1 and `k` sentinels). A final scatter writes the sentinels over their positions, EOS ends
# both outputs, and `decoder_input_ids` is the labels shifted right.

# %%
#| export
class _SpanCorruptor:
    "Corrupts rows of `raw_length` tokens given their span cut points: T5 inputs, labels, decoder inputs"

    def __init__(self, raw_length: int, num_noise: int, num_spans: int, first_sentinel: int, eos_id: int, pad_id: int):
        K, I, T = num_spans, raw_length - num_noise + num_spans + 1, num_noise + num_spans + 1
        self.num_spans, self.inputs_length, self.eos_id, self.pad_id = K, I, eos_id, pad_id
        # source increments over [inputs | one slot to restart at raw token 0 | labels]: 1 inside runs
        self.increments = torch.ones(I + 1 + T, dtype=torch.long)
        self.increments[0], self.increments[I], self.increments[-1] = 0, 1 - raw_length, 0
        k = torch.arange(K)
        # sentinel k of the inputs sits after k + 1 gaps: at gap cut k + k; in the labels at noise cut k + k,
        # where the last gap ends at the kept-token total and the first span starts at noise token 0;
        # a 0 in front and the labels' last noise position behind make the jumps plain differences
        self.gap_end, self.noise_start = torch.full((1, 1), raw_length - num_noise - 1), torch.full((1, 1), -1)
        self.bounds = torch.tensor([[0, T - 2]])
        self.column_offsets = torch.cat([torch.zeros(1, dtype=torch.long), k + 1, k + 1, torch.zeros(1, dtype=torch.long)])
        self.sentinels = (first_sentinel - k).view(1, K)

    def __call__(self, ids: torch.Tensor, cuts: torch.Tensor) -> dict[str, torch.Tensor]:
        B, K, I = ids.shape[0], self.num_spans, self.inputs_length
        columns = torch.cat([self.bounds[:, :1].expand(B, 1), cuts[:, 0], self.gap_end.expand(B, 1),
                             self.noise_start.expand(B, 1), cuts[:, 1], self.bounds[:, 1:].expand(B, 1)], 1) + self.column_offsets
        input_sentinels, label_sentinels = columns[:, 1:K + 1], columns[:, K + 1:2 * K + 1]
        jumps = columns.diff(dim=1) - 1          # [gap k − 1 … | (unused) | span k − 1 …], the ends adjusted
        source = self.increments.expand(B, -1).clone()
        source.scatter_(1, input_sentinels + 1, jumps[:, K + 1:])           # after input sentinel k: skip span k
        source.scatter_(1, label_sentinels + (I + 2), jumps[:, :K])         # after label sentinel k: skip gap k
        source.cumsum_(1)
        sentinels = self.sentinels.expand(B, K)
        inputs = ids.gather(1, source[:, :I]).scatter_(1, input_sentinels, sentinels)
        labels = ids.gather(1, source[:, I + 1:]).scatter_(1, label_sentinels, sentinels)
        inputs[:, -1] = labels[:, -1] = self.eos_id
        decoder_input_ids = torch.cat([labels.new_full((B, 1), self.pad_id), labels[:, :-1]], 1)
        return {"input_ids": inputs, "labels": labels, "decoder_input_ids": decoder_input_ids}


def _mask_to_cuts(mask: torch.Tensor) -> torch.Tensor:
    "Cut slots [B, 2, spans - 1] of T5-layout noise masks (the inverse of `random_spans_noise_mask`)"
    B = mask.shape[0]
    starts = mask & ~torch.nn.functional.pad(mask, (1, 0))[:, :-1]
    ends = mask & ~torch.nn.functional.pad(mask, (0, 1))[:, 1:]
    spans, noise = starts.sum(1), mask.sum(1)
    if mask[:, 0].any() or not mask[:, -1].all() or (spans != spans[0]).any() or (noise != noise[0]).any():
        raise SpanCorruptionError("corrupt_spans takes T5 noise masks: each row starts with kept tokens, ends "
                                  "inside a span and has the same numbers of noise tokens and spans; draw them "
                                  "with random_spans_noise_mask.")
    K = int(spans[0])
    span_start = starts.nonzero()[:, 1].view(B, K)
    span_length = ends.nonzero()[:, 1].view(B, K) + 1 - span_start
    noise_through = span_length.cumsum(1)                    # noise tokens up to the end of span k
    gaps_through = span_start - (noise_through - span_length)  # kept tokens before span k
    return torch.stack([gaps_through[:, :-1], noise_through[:, :-1]], 1) - 1


def corrupt_spans(ids: torch.Tensor,  # [B, raw_length] token ids
                  mask: torch.Tensor,  # [B, raw_length] T5 noise masks, as drawn by random_spans_noise_mask
                  first_sentinel: int,  # id of <extra_id_0>: len(tokenizer) - 1
                  eos_id: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    "(inputs, targets) of T5 span corruption for a batch of rows and their noise masks"
    cuts = _mask_to_cuts(mask)
    num_noise = int(mask[0].sum())
    corrupt = _SpanCorruptor(ids.shape[1], num_noise, cuts.shape[2] + 1, first_sentinel, eos_id, 0)
    out = corrupt(ids, cuts)
    return out["input_ids"], out["labels"]


# %% [markdown]
# Given the **same masks**, it must equal the readable `corrupt_example` row for row, and `uncorrupt` must
# rebuild every row:

# %%
raw_ids = torch.randint(3, DEMO_VOCAB_SIZE, (256, 568), generator=g)
inputs, targets = corrupt_spans(raw_ids, masks, len(tok) - 1, tok.eos_token_id)
test_eq((inputs.shape, targets.shape), ((256, 512), (256, 114)))
for row in range(256):
    ref_in, ref_tgt = corrupt_example(raw_ids[row].tolist(), masks[row].numpy(), len(tok) - 1, tok.eos_token_id)
    test_eq(inputs[row].tolist(), ref_in); test_eq(targets[row].tolist(), ref_tgt)
    test_eq(uncorrupt(inputs[row].tolist(), targets[row].tolist(), len(tok) - 1), raw_ids[row].tolist())
test_fail(lambda: corrupt_spans(raw_ids[:2], ~masks[:2], len(tok) - 1), contains="takes T5 noise masks")


# %% [markdown]
# ## The collator
#
# `SpanCorruptionCollator` is what a `DataLoader` calls on a list of packed rows. It draws the span cuts with
# its own seeded `torch.Generator` (whose state a checkpoint can save and restore) — the very masks
# `random_spans_noise_mask` would draw from the same generator state — corrupts them with `gather`, and
# returns fixed-shape tensors: no padding, no attention mask, and `decoder_input_ids` = labels shifted right
# with the decoder start token (= pad = 0) in front.

# %%
#| export
class SpanCorruptionCollator:
    "Batch of packed rows → T5 span-corruption tensors `input_ids`, `labels`, `decoder_input_ids`"

    def __init__(self, tokenizer, inputs_length: int = 512, noise_density: float = 0.15,
                 mean_noise_span_length: float = 3.0, seed: int = 0):
        self.inputs_length, self.noise_density, self.mean_noise_span_length = inputs_length, noise_density, mean_noise_span_length
        self.raw_length, self.targets_length = compute_input_and_target_lengths(inputs_length, noise_density,
                                                                                mean_noise_span_length)
        self.num_noise, self.num_spans = _checked_noise_counts(self.raw_length, noise_density, mean_noise_span_length)
        num_spans = self.num_spans
        if num_spans > NUM_SENTINELS:
            raise SpanCorruptionError(f"inputs_length={inputs_length} makes {num_spans} spans per row but T5 has "
                                      f"{NUM_SENTINELS} sentinels: raise mean_noise_span_length or shorten inputs.")
        try:
            self.sentinels = sentinel_ids(tokenizer, num_spans)
        except TokenizerError as e:
            raise SpanCorruptionError(f"Span corruption with {num_spans} spans per row: {e}") from None
        self.first_sentinel, self.eos_id, self.pad_id = self.sentinels[0], tokenizer.eos_token_id, tokenizer.pad_token_id
        self._corrupt = _SpanCorruptor(self.raw_length, self.num_noise, num_spans, self.first_sentinel, self.eos_id,
                                       self.pad_id)
        self.generator = torch.Generator().manual_seed(seed)

    def _as_tensor(self, rows) -> torch.Tensor:
        if isinstance(rows, torch.Tensor):
            ids = rows
        else:
            rows = [r["input_ids"] if isinstance(r, dict) else r for r in rows]
            lengths = {len(r) for r in rows}
            if len(lengths) > 1:
                raise SpanCorruptionError(f"Rows of different lengths {sorted(lengths)}: pack rows of exactly "
                                          f"{self.raw_length} tokens (pack_dataset(ds, tok, {self.raw_length})).")
            ids = torch.as_tensor(rows, dtype=torch.long)
        if ids.ndim != 2 or ids.shape[1] != self.raw_length:
            raise SpanCorruptionError(f"Chunks of shape {tuple(ids.shape)}: inputs_length={self.inputs_length} needs "
                                      f"rows of exactly {self.raw_length} raw tokens; pack with "
                                      f"pack_dataset(ds, tok, {self.raw_length}).")
        if ids.numel() and int(torch.amax(ids)) > self.first_sentinel - NUM_SENTINELS:
            raise SpanCorruptionError(f"Raw rows already contain sentinel ids (max id {int(torch.amax(ids))}): "
                                      "pack plain text, not corrupted rows.")
        return ids.long()

    def __call__(self, rows) -> dict[str, torch.Tensor]:
        ids = self._as_tensor(rows)
        cuts = _random_span_cuts(ids.shape[0], self.raw_length, self.num_noise, self.num_spans, self.generator)
        return self._corrupt(ids, cuts)

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict):
        self.generator.set_state(state["generator"])


# %% [markdown]
# One batch of 8 rows at `inputs_length=128` (141 raw tokens in, 128 encoder tokens and 29 target tokens out),
# and what the first row looks like decoded — the encoder input with its sentinels, then the target that fills
# them:

# %%
collate = SpanCorruptionCollator(tok, inputs_length=128, seed=0)
rows128 = pack_dataset(valid_docs, tok, collate.raw_length)
batch = collate([rows128[i] for i in range(8)])
print({k: tuple(v.shape) for k, v in batch.items()})
print("input: ", tok.decode(batch["input_ids"][0][:40]), "…")
print("target:", tok.decode(batch["labels"][0][:20]), "…")
test_eq({k: tuple(v.shape) for k, v in batch.items()},
        {"input_ids": (8, 128), "labels": (8, 29), "decoder_input_ids": (8, 29)})

# %% [markdown]
# The claim of this lesson, checked on real rows: from the same generator state, the collator's batch equals the
# fast steps (`random_spans_noise_mask` + `corrupt_spans`) and, row by row, the readable `corrupt_example` of
# lesson 02 on the same masks; and `uncorrupt` rebuilds the raw row from the collator's input and target.

# %%
state = collate.state_dict(); b1 = collate(torch.tensor(rows128[:4]["input_ids"]))
same_masks = random_spans_noise_mask(141, generator=torch.Generator().set_state(state["generator"]), batch=4)
fast = corrupt_spans(torch.tensor(rows128[:4]["input_ids"]), same_masks, collate.first_sentinel)
readable = [corrupt_example(rows128[r]["input_ids"], same_masks[r].numpy(), collate.first_sentinel) for r in range(4)]
test_eq(list(fast), [b1["input_ids"], b1["labels"]])                                    # collator = fast steps
test_eq(readable, [(b1["input_ids"][r].tolist(), b1["labels"][r].tolist()) for r in range(4)])  # = readable
test_eq(uncorrupt(b1["input_ids"][3].tolist(), b1["labels"][3].tolist(), collate.first_sentinel), rows128[3]["input_ids"])
print("4 rows: collator == corrupt_spans == corrupt_example, and row 3 round-trips through uncorrupt")

# %%
#| hide
test_eq((collate.raw_length, collate.targets_length), (141, 29))
test_eq(batch["decoder_input_ids"][:, 0].tolist(), [0] * 8)
test_eq(batch["decoder_input_ids"][:, 1:], batch["labels"][:, :-1])
test_eq(collate(torch.zeros(0, 141, dtype=torch.long))["labels"].shape, (0, 29))   # an empty batch stays empty
test_eq(uncorrupt(batch["input_ids"][3].tolist(), batch["labels"][3].tolist(), collate.first_sentinel), rows128[3]["input_ids"])
collate.load_state_dict(state); b2 = collate(torch.tensor(rows128[:4]["input_ids"]))
test_eq({k: v.tolist() for k, v in b2.items()}, {k: v.tolist() for k, v in b1.items()})  # resumable

# %% [markdown]
# A plain `DataLoader` does the rest:

# %%
loader = torch.utils.data.DataLoader(rows128, batch_size=16, shuffle=True, collate_fn=collate,
                                     generator=torch.Generator().manual_seed(0))
test_eq(next(iter(loader))["input_ids"].shape, (16, 128))

# %% [markdown]
# That closes the loop: the collator draws exactly the masks `random_spans_noise_mask` draws, and corrupts
# them exactly as `corrupt_example` does (the hypothesis tests in `tests/test_spans.py` check the same over
# random lengths, densities and span lengths).

# %% [markdown]
# ## What you learned
#
# - Packing concatenates documents (EOS after each) and cuts fixed-length rows, dropping each group's
#   remainder, for a list or a stream: no padding, and `documents=True` tags each row with the document most of
#   it comes from.
# - The batch version is for CPUs shared with the model (the demo) or with the tokenizer (many GPUs per host); how
#   much faster it is than a per-example loop is measured in `benchmarks/spans.py` (README's Speed table).
# - `random_cuts` draws a batch of uniform random cut sets by drawing with replacement and keeping the first
#   distinct draws: exactly uniform, a small multiple of `s` random numbers per row, no sort.
# - `corrupt_spans` builds both outputs with `gather` from one `cumsum`-built source index; given the same
#   masks it equals `corrupt_example` row for row, and `uncorrupt` rebuilds every row.
# - `SpanCorruptionCollator` draws exactly the masks `random_spans_noise_mask` draws from the same generator
#   state and returns fixed-shape `input_ids`, `labels` and `decoder_input_ids` (the labels shifted right behind
#   0); its seeded generator, saved and restored with `state_dict`, lets a resumed run draw the same masks (with the data stream's own position, saved apart).
#
# ## Questions
#
# 1. Packing never pads, but a row can start in the middle of one speech and end in the next. What does the
#    model see at the boundary, and why is that acceptable in pre-training?
# 2. **Predict, then run** the packing cell with `pack_dataset(valid_docs, tok, 568, group_size=10)`: more
#    rows than the default's 460, fewer, or the same? Why?
# 3. `random_cuts` draws slots with replacement and keeps the *first* `s − 1` distinct ones. Why is that
#    exactly uniform? Would keeping the `s − 1` *smallest* distinct draws out of all draws also be uniform?
# 4. A row that is still short of distinct values after its draws draws again. Why does that not bias the
#    result, and why size the first round at the coupon-collector mean + 6 standard deviations?
# 5. **Predict, then run** the timing cell after the `topk` draft: which is faster per T5-Base batch, and
#    which part of the work does `random_cuts` avoid?
# 6. `corrupt_example` accepts any mask, but `corrupt_spans` refuses one that starts with a hidden token or
#    whose rows differ in their numbers of noise tokens or spans. Why does the fast version need T5's layout?
# 7. **Predict, then run**: `SpanCorruptionCollator(tok, inputs_length=256)`'s `raw_length` and
#    `targets_length`. Which function of lesson 02 gives them?
# 8. The collator owns a seeded `torch.Generator` and has `state_dict`/`load_state_dict`. What would a run
#    that resumes from a checkpoint get wrong without them?
# 9. `decoder_input_ids` starts with 0 and is the labels shifted right. Why shifted, and why 0?
# 10. The collator refuses raw rows that already contain a sentinel id. What would go wrong without that
#     check?
#
# ## Try it
#
# 1. **Why vectorise** (a minute). Time `SpanCorruptionCollator(tok, 512)` on 128 random rows of 568 tokens
#    against a Python loop of `corrupt_example(row, example_noise_mask(568, 0.15, 3.0, rng), len(tok) - 1)`
#    over the same rows. Look at the ratio; then run `torch.set_num_threads(1)` (torch's threads no longer share the
#    cores) and time again: does the ratio change?
# 2. **A resumed collator** (seconds). Draw three batches of 4 rows from `SpanCorruptionCollator(tok, 128,
#    seed=0)`, saving `state_dict()` after the first. Make a second collator with `seed=7`, load the saved state
#    and draw two batches of the same rows. Look for: the second and third batches again, token for token; and
#    without `load_state_dict`, different masks.
# 3. **Longer inputs** (seconds). Try `SpanCorruptionCollator(tok, inputs_length=2048)`. Read the message, then
#    make it work by raising `mean_noise_span_length`. Look for: the smallest mean span length that fits in T5's
#    100 sentinels, and the raw and target lengths it gives.

# %% [markdown]
# ## Appendix: is `random_cuts` exactly uniform?
#
# `random_cuts` is built in "Going faster"; this checks that its cut sets are uniform, within sampling noise (the
# argument for *exactly* uniform is the symmetry one given there).

# %% [markdown]
# Exactly uniform? On cases small enough to enumerate — 2 values out of 6 or out of 9, every pair one possible
# set — every set turns up equally often, within sampling noise:

# %%
from itertools import combinations
small = random_cuts(60_000, [6, 9], 2, torch.Generator().manual_seed(0))
for size, picks in ((6, small[:, 0]), (9, small[:, 1])):
    sets = list(combinations(range(size), 2))
    counts = torch.tensor([((picks[:, 0] == a) & (picks[:, 1] == b)).sum().item() for a, b in sets])
    test_eq(counts.sum().item(), 60_000)                          # always two distinct sorted values
    expected = 60_000 / len(sets)
    assert (counts - expected).abs().max() < 5 * math.sqrt(expected), counts   # all sets equally likely

# %% [markdown]
# ## Appendix: bad input
#
# Settings that cannot work, tokenizers without sentinels and rows of the wrong length each fail with a
# sentence that names the fix, for example:

# %%
try: SpanCorruptionCollator(tok, inputs_length=128)(torch.zeros(2, 140, dtype=torch.long))
except SpanCorruptionError as e: print(e)

# %%
#| hide
test_fail(lambda: SpanCorruptionCollator(tok, inputs_length=4096), contains="sentinels")
from transformers import PreTrainedTokenizerFast
from tokenizers import Tokenizer, models, pre_tokenizers
def word_level(vocab):
    wl = Tokenizer(models.WordLevel(vocab, unk_token="<unk>")); wl.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=wl, unk_token="<unk>")
test_fail(lambda: SpanCorruptionCollator(word_level({"<unk>": 0, "a": 1}), 128), contains="has 0 of the 7 sentinels")
five = word_level({"<unk>": 0, "a": 1, **{f"<extra_id_{i}>": 6 - i for i in range(5)}})
test_fail(lambda: SpanCorruptionCollator(five, 128), contains="has 5 of the 7 sentinels")
test_fail(lambda: random_spans_noise_mask(128, 0.95, 3.0), contains="use a lower noise_density")
test_fail(lambda: collate(torch.zeros(2, 140, dtype=torch.long)), contains="exactly 141 raw tokens")
test_fail(lambda: collate([[5] * 141, [5] * 140]), contains="Rows of different lengths")
test_fail(lambda: collate(batch["input_ids"]), contains="exactly 141")

# %%
#| hide
import nbdev; nbdev.nbdev_export()
