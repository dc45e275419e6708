# %% [markdown]
# # Span corruption: T5's pre-training objective
# > `corrupt_example`, the readable T5 recipe (noise mask → sentinels → input and target), its inverse `uncorrupt`, a picture of what the model sees, and what the two knobs do

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# T5 learns by repairing text. Take a chunk of tokens, hide ~15% of them in short spans, replace each span by
# one sentinel token, and train the model to output the hidden spans, each introduced by its sentinel.
# Cheap to make (no labels), and the targets are short (114 tokens for a 512-token input, below), which makes the
# decoder cheap.
#
# **What you will build**: `compute_input_and_target_lengths` (how long a raw chunk must be), T5's noise mask
# (`example_noise_mask`), `corrupt_example` and its inverse `uncorrupt`, checked against HF's formulation, a
# picture of what the model sees, and what the two knobs (noise density, mean span length) do to the spans and
# the lengths. They go into `nanot5_edu.noise`.
#
# This lesson builds T5's recipe (T5's `random_spans_noise_mask`, as in the version of HF's `run_t5_mlm_flax.py` that
# nanoT5 copies; today's HF script counts spans differently from density 0.5 on, for some row lengths) as readable functions on one example.
# It is exact at T5's settings for inputs of 10 tokens or more (T5 uses 512). Below, "T5's length helper" is that HF
# script's `compute_input_and_target_lengths`, which nanoT5 copies (T5's own code differs from it in the first case).
# The main edge cases where it and ours differ: when every noise token is its own span (for example at a mean span length
# of 1, or with few noise tokens at a mean span a little above 1) it returns a raw length whose corrupted input is one token too long,
# since its search starts at the input length and never steps down, and ours steps down; at a noise density of
# exactly 0.5, when the targets would come out longer than the inputs, it shortens the raw length and the target by
# one (a "minor hack" in its code) and ours does not; ours keeps at least one span, which it does not, so short
# inputs, or a mean span long next to the number of noise tokens (UL2's mean span 64, on short inputs), can differ; and ours rejects a
# mean span below 1, which it accepts. It uses the corpus of [00_data](00_data.ipynb)
# and the tokenizer of [01_tokenizer](01_tokenizer.ipynb). The next lesson, [02b](02b_span_batches.ipynb),
# packs documents into rows and corrupts whole batches fast, checked equal to what is built here.

# %%
#| default_exp noise

# %%
#| export
from __future__ import annotations

from typing import Sequence

import numpy as np

from nanot5_edu.tokenizer import NUM_SENTINELS

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import random, tempfile
from pathlib import Path
import matplotlib.pyplot as plt
from nanot5_edu.data import load_corpus
from nanot5_edu.tokenizer import train_tokenizer, DEMO_VOCAB_SIZE

random.seed(0); np.random.seed(0)

# %% [markdown]
# The corpus of [00](00_data.ipynb) and the demo tokenizer of [01](01_tokenizer.ipynb) (`DEMO_VOCAB_SIZE` pieces and
# 100 sentinels):

# %%
texts = list(load_corpus("sotu")["text"])
tok = train_tokenizer(texts, DEMO_VOCAB_SIZE, Path(tempfile.mkdtemp()) / "tok")
test_eq(tok.convert_tokens_to_ids("<extra_id_0>"), len(tok) - 1)


# %% [markdown]
# ## How long must a raw chunk be?
#
# The model's input has a fixed length (512 for T5-Base). Corruption *shortens* a chunk: a span of 3 noise
# tokens becomes 1 sentinel. So we cut raw chunks (fixed-length windows of the tokenized documents laid end
# to end, cut wherever the count falls: lesson 02b does the cutting) a little longer — for `T` raw tokens with
# `n = round(T·0.15)` noise tokens in `s = round(n/3)` spans, the input is `T − n + s + 1` long (+1 for EOS)
# and the target `n + s + 1`. We take the largest `T` whose input still fits. (`round` is Python's banker's
# rounding, as in T5's reference code; the clamps are those of the noise mask below.)

# %%
#| export
class SpanCorruptionError(ValueError):
    "Span-corruption settings or inputs that cannot work; the message names the problem and the fix."


def _check_noise(noise_density: float, mean_noise_span_length: float):
    if not 0 < noise_density < 1:
        raise SpanCorruptionError(f"noise_density={noise_density} must be in (0, 1): T5 uses 0.15.")
    if not mean_noise_span_length >= 1:
        raise SpanCorruptionError(f"mean_noise_span_length={mean_noise_span_length} must be at least 1 (a span holds "
                                  "at least one token): T5 uses 3.0.")


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
    while raw > 2 and lengths(raw)[0] > inputs_length:  # mean span 1, or extreme densities: step down
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
# ## The noise mask
#
# T5's span corruption (its paper's Section 3.3.4, the objective of the final T5 models and of nanoT5; the baseline
# of Section 3.1.4 drops tokens independently) fixes the **number** of noise tokens `n` and spans `s` (above),
# then splits the noise tokens into `s` non-empty spans and the other tokens into `s` non-empty gaps (possible only
# while the row has at least `s` kept tokens: a density high for its mean span length breaks it, at any row
# length beyond a few tokens, and `example_noise_mask` then refuses the setting), both
# uniformly at random, and interleaves them gap, span, gap, span… — so a row always starts with kept text
# and ends with a span. Splitting `m` items into `s` non-empty parts uniformly is choosing which `s − 1` of
# the `m − 1` places between items start a new part: shuffle a row of `s − 1` ones and `m − s` zeros.

# %%
#| export
def random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    "Lengths of `num_segments` non-empty parts of `num_items` items, every split equally likely"
    starts_new_part = np.arange(num_items - 1) < num_segments - 1   # s - 1 True among the m - 1 places
    rng.shuffle(starts_new_part)
    part_of_item = np.concatenate([[0], np.cumsum(starts_new_part)])
    return np.bincount(part_of_item, minlength=num_segments)


def _checked_noise_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    "`noise_counts` of a valid setting: one that leaves a kept token before each span (else SpanCorruptionError)"
    _check_noise(noise_density, mean_noise_span_length)
    num_noise, num_spans = noise_counts(length, noise_density, mean_noise_span_length)
    if length - num_noise < num_spans:  # no room for a gap before each span
        raise SpanCorruptionError(f"length={length} keeps {length - num_noise} tokens, too few for a gap before each of "
                                  f"its {num_spans} spans: use a lower noise_density or a mean_noise_span_length of about "
                                  f"{num_noise / max(length - num_noise, 1):.0f} or more.")
    return num_noise, num_spans


def example_noise_mask(length: int,  # tokens in the row
                       noise_density: float = 0.15,  # fraction of tokens hidden
                       mean_noise_span_length: float = 3.0,  # mean tokens per hidden span
                       rng: np.random.Generator | None = None) -> np.ndarray:
    "T5's noise mask for one row (True = hidden): gap, span, gap, span, …, with T5's exact counts"
    num_noise, num_spans = _checked_noise_counts(length, noise_density, mean_noise_span_length)
    rng = np.random.default_rng() if rng is None else rng
    span_lengths = random_segmentation(num_noise, num_spans, rng)
    gap_lengths = random_segmentation(length - num_noise, num_spans, rng)
    mask = []
    for gap, span in zip(gap_lengths, span_lengths):
        mask += [False] * gap + [True] * span
    return np.array(mask)


# %%
test_eq(random_segmentation(10, 4, np.random.default_rng(0)).sum(), 10)
m = example_noise_mask(40, 0.15, 3.0, np.random.default_rng(0))
print("".join("█" if x else "·" for x in m))
test_eq((len(m), m.sum(), m[0], m[-1]), (40, 6, False, True))    # 6 = round(40 · 0.15) noise tokens, gap first, span last
test_eq(int((m & ~np.r_[False, m[:-1]]).sum()), 2)               # in round(6 / 3) = 2 spans


# %% [markdown]
# ## Sentinels: from mask to input and target
#
# Now the corruption itself. Walk along the row: in the **encoder input**, a kept token stays, and the first
# token of each hidden span becomes a sentinel, the rest of the span disappears. Sentinels count **down**
# from `<extra_id_0>` (the last id of the vocabulary). The **decoder target** is the same walk with the mask
# inverted: each *kept* gap becomes a sentinel and the hidden tokens stay, so the target reads
# `<extra_id_0> span 0 <extra_id_1> span 1 …`. Both end with EOS.

# %%
#| export
def _replace_runs(ids: Sequence[int], hide: Sequence[bool], first_sentinel: int) -> list[int]:
    "Keep the tokens not hidden; each run of hidden tokens becomes one sentinel, counting down from `first_sentinel`"
    out, k = [], 0
    for i, token in enumerate(ids):
        if not hide[i]:
            out.append(int(token))
        elif i == 0 or not hide[i - 1]:   # the first token of a hidden run
            out.append(first_sentinel - k)
            k += 1
    return out


def corrupt_example(ids: Sequence[int],  # one row of raw token ids
                    mask: Sequence[bool],  # its noise mask (True = hidden), e.g. from `example_noise_mask`
                    first_sentinel: int,  # id of <extra_id_0>: len(tokenizer) - 1
                    eos_id: int = 1) -> tuple[list[int], list[int]]:
    "T5 span corruption of one row: (encoder input, decoder target), each span ↔ one sentinel, EOS at the end"
    mask = np.asarray(mask, dtype=bool)
    return (_replace_runs(ids, mask, first_sentinel) + [eos_id],
            _replace_runs(ids, ~mask, first_sentinel) + [eos_id])


# %%
ids = list(range(100, 140))
inp, tgt = corrupt_example(ids, m, len(tok) - 1, tok.eos_token_id)
print("input: ", inp); print("target:", tgt)
test_eq(len(inp), 40 - 6 + 2 + 1); test_eq(len(tgt), 6 + 2 + 1)   # T − n + s + 1 and n + s + 1
test_eq(tgt[0], len(tok) - 1)                                       # targets start with <extra_id_0>


# %% [markdown]
# Nothing is lost: putting each target span back in place of its sentinel rebuilds the original row.
# `uncorrupt` is that inverse; it also checks the fast version of [02b](02b_span_batches.ipynb).

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
test_eq(uncorrupt(inp, tgt, len(tok) - 1), ids)


# %% [markdown]
# HF's flax example (and so nanoT5) writes the same walk with numpy array tricks instead of a loop: mark
# span starts, number them with a `cumsum`, write sentinels at the starts, drop the continuations. A draft of
# that formulation here — it must give the same tokens as ours on many random rows:

# %%
def hf_style_corrupt(ids, mask, first_sentinel, eos_id):
    "Draft: HF run_t5_mlm_flax's create_sentinel_ids + filter_input_ids, for one row"
    def sentinelize(keep_mask):
        starts = keep_mask & ~np.pad(keep_mask, [[1, 0]])[:-1]
        sentinel = np.where(starts, first_sentinel + 1 - np.cumsum(starts), 0)
        out = np.where(starts, sentinel, ids)
        out = out[~(keep_mask & ~starts)]
        return np.concatenate([out, [eos_id]])
    return sentinelize(mask), sentinelize(~mask)

rng = np.random.default_rng(1)
for _ in range(200):
    row = rng.integers(3, DEMO_VOCAB_SIZE, 141)
    mask = example_noise_mask(141, rng.uniform(0.05, 0.5), rng.uniform(1, 8), rng)
    ours, hfs = corrupt_example(row, mask, len(tok) - 1, 1), hf_style_corrupt(row, mask, len(tok) - 1, 1)
    test_eq((ours[0], ours[1]), (hfs[0].tolist(), hfs[1].tolist()))
    test_eq(uncorrupt(*ours, len(tok) - 1), row.tolist())

# %% [markdown]
# ## The picture
#
# Here is what the model sees, on the first tokens of a real speech, drawn like Figure 2 of the T5 paper:
# the original text, the encoder input and the decoder target, one row each. Span `k` in the original and
# `<extra_id_k>` in both outputs share one colour; kept text is grey.

# %%
SPAN_COLOURS = [c for i, c in enumerate(plt.cm.tab10.colors) if i != 7]   # tab10 without its grey

def corruption_rows(ids, mask, tokenizer):
    "(label, [(piece, kind, span k)]) for the original, encoder input and decoder target of one row"
    first, eos = len(tokenizer) - 1, tokenizer.eos_token_id
    ids, mask = [int(t) for t in ids], np.asarray(mask, dtype=bool)
    inputs, targets = corrupt_example(ids, mask, first, eos)
    pieces = tokenizer.convert_ids_to_tokens
    span_no = np.cumsum(mask & ~np.r_[False, mask[:-1]]) - 1
    original = [(p, "span" if h else "kept", k) for p, h, k in zip(pieces(ids), mask, span_no)]
    def with_sentinels(seq, between):        # between sentinels: "kept" in the input, "span" in the target
        out, k = [], -1
        for t, p in zip(seq, pieces(seq)):
            if t > first - NUM_SENTINELS: k = first - t; out.append((p, "sentinel", k))
            elif t == eos: out.append((p, "eos", -1))
            else: out.append((p, between, k))
        return out
    return [(f"original\n{len(ids)} tokens", original),
            (f"encoder input\n{len(inputs)} tokens", with_sentinels(inputs, "kept")),
            (f"decoder target\n{len(targets)} tokens", with_sentinels(targets, "span"))]

def show_corruption(ids, mask, tokenizer, title=None, width=110, fig_width=12):
    "Draw the three rows as coloured token boxes (matplotlib), wrapping at `width` characters"
    label_w, line, placed, y = 15, 1.3, [], 0.0
    for label, toks in corruption_rows(ids, mask, tokenizer):
        placed.append(("label", label, label_w - 1, y, -1)); x = label_w
        for piece, kind, k in toks:
            text = piece if kind == "sentinel" else piece.replace("▁", "")
            gap = 0.7 if piece.startswith("▁") or kind in ("sentinel", "eos") else 0.2
            if x + gap + len(text) > width: x, y = label_w, y - line
            placed.append((kind, text, x + gap, y, k)); x += gap + max(len(text), 1)
        y -= 2 * line
    fs = fig_width * 72 / (width * 0.602)           # a monospace character is 0.6 em wide
    fig = plt.figure(figsize=(fig_width, -y / line * fs * 1.75 / 72 + 0.4))
    ax = fig.add_axes([0, 0, 1, 1]); ax.set_xlim(0, width); ax.set_ylim(y + 1.2, 0.6); ax.set_axis_off()
    for kind, text, x, yy, k in placed:
        if kind == "label":
            ax.text(x, yy, text, ha="right", va="top", fontsize=fs * 0.9, color="0.2"); continue
        colour = SPAN_COLOURS[k % len(SPAN_COLOURS)]
        fc, tc = {"kept": ("0.93", "0.3"), "span": ((*colour, 0.35), "black"),
                  "sentinel": (colour, "white"), "eos": ("0.45", "white")}[kind]
        ax.text(x, yy, text, family="monospace", fontsize=fs, color=tc, va="top",
                weight="bold" if kind == "sentinel" else "normal", bbox=dict(boxstyle="round,pad=0.12", fc=fc, ec="none"))
    if title: ax.text(0, 0.5, title, fontsize=fs * 1.05, va="bottom")
    return fig

passage = texts[200][:2000]
passage_ids = tok(passage, add_special_tokens=False).input_ids[:64]
mask = example_noise_mask(len(passage_ids), 0.15, 3.0, np.random.default_rng(0))
show_corruption(passage_ids, mask, tok, "noise density 0.15, mean span length 3: 64 tokens → 10 hidden in 3 spans")
plt.show()
rows = corruption_rows(passage_ids, mask, tok)
test_eq([len(r) for _, r in rows], [64, 64 - 10 + 3 + 1, 10 + 3 + 1])
test_eq([k for _, kind, k in rows[1][1] if kind == "sentinel"], [k for _, kind, k in rows[2][1] if kind == "sentinel"])

# %% [markdown]
# With a live kernel, the explorer redraws the same picture for any noise density, mean span length, seed
# and text (the figure above is the static version for readers without one):

# %%
import contextlib, io
import ipywidgets as widgets

def explore(text=passage[:400], noise_density=0.15, mean_span=3.0, seed=0):
    ids = tok(text, add_special_tokens=False).input_ids[:80]
    if len(ids) < 2:
        print("type at least two tokens of text"); return
    try:
        mask = example_noise_mask(len(ids), noise_density, mean_span, np.random.default_rng(seed))
    except SpanCorruptionError as e:
        print(e); return
    show_corruption(ids, mask, tok, f"noise density {noise_density}, mean span length {mean_span}, seed {seed}")
    plt.show()

with contextlib.redirect_stdout(io.StringIO()):   # outside Jupyter, the first draw's clear_output prints escape codes
    explorer = widgets.interactive(explore,
                                   text=widgets.Textarea(passage[:400], layout=widgets.Layout(width="90%", height="5em")),
                                   noise_density=widgets.FloatSlider(0.15, min=0.05, max=0.5, step=0.05),
                                   mean_span=widgets.FloatSlider(3.0, min=1.0, max=10.0, step=0.5),
                                   seed=widgets.IntSlider(0, min=0, max=20))
explorer


# %% [markdown]
# ## What the two knobs do
#
# "Mean span length 3" does not mean spans of 3 tokens. The split of the `n` noise tokens into `s` spans is
# uniform over all splits, which makes the length of one span roughly geometric: **1 is the most common
# length**, and long spans make up the mean. Over 2,000 rows of 568 tokens (85 noise tokens in 28 spans each):

# %%
#| export
def span_lengths(mask_rows) -> np.ndarray:  # an iterable of noise-mask rows (True = hidden)
    "Lengths of all hidden spans in some noise-mask rows, row after row"
    out = []
    for row in mask_rows:
        edges = np.flatnonzero(np.diff(np.concatenate([[0], np.asarray(row, dtype=np.int8), [0]])))
        out += (edges[1::2] - edges[::2]).tolist()
    return np.array(out)


# %%
rng = np.random.default_rng(0)
lengths = span_lengths(example_noise_mask(568, 0.15, 3.0, rng) for _ in range(2000))
counts = np.bincount(lengths)
fig, ax = plt.subplots(figsize=(7, 2.8))
ax.bar(np.arange(1, 16), counts[1:16] / len(lengths))
ax.axvline(lengths.mean(), color="C3", ls="--", label=f"mean {lengths.mean():.2f} = 85 / 28")
ax.set_xlabel("span length (tokens)"); ax.set_ylabel("share of spans"); ax.set_xticks(range(1, 16)); ax.legend()
ax.set_title("T5 spans at mean span length 3: the most common length is 1"); plt.show()
test_eq(int(np.argmax(counts)), 1)                              # the mode is 1
test_close(lengths.mean(), 85 / 28, eps=1e-9)                   # exactly n / s per row, by construction


# %% [markdown]
# The two knobs set the lengths of everything. For a raw chunk of `T` tokens, the encoder input is
# `T − n + s + 1` and the decoder target `n + s + 1` tokens. More noise moves tokens from the input to the
# target; longer spans mean fewer sentinels in both. For T5's 568-token chunks:

# %%
def corrupted_lengths(raw, noise_density, mean_span):
    n, s = noise_counts(raw, noise_density, mean_span)
    return raw - n + s + 1, n + s + 1

densities, spans_ = np.linspace(0.05, 0.5, 46), np.linspace(1, 10, 37)
fig, axs = plt.subplots(1, 2, figsize=(11, 3.2), sharey=True)
for ax, xs, f, xlabel in [(axs[0], densities, lambda d: corrupted_lengths(568, d, 3.0), "noise density (mean span 3)"),
                          (axs[1], spans_, lambda s: corrupted_lengths(568, 0.15, s), "mean span length (density 0.15)")]:
    inp_len, tgt_len = np.array([f(x) for x in xs]).T
    ax.plot(xs, inp_len, label="encoder input"); ax.plot(xs, tgt_len, label="decoder target")
    ax.axvline(0.15 if ax is axs[0] else 3.0, color="0.6", ls=":", label="T5's setting")
    ax.set_xlabel(xlabel)
axs[0].set_ylabel("tokens (568 raw)"); axs[0].legend(); plt.show()
test_eq(corrupted_lengths(568, 0.15, 3.0), (512, 114))

# %% [markdown]
# ## What you learned
#
# - Span corruption hides ≈ 15% of a row's tokens in short spans, replaces each span by one sentinel in the
#   encoder input, and asks the decoder for `<extra_id_0> span 0 <extra_id_1> span 1 … </s>`: no labels
#   needed, and the target is short (114 tokens for a 512-token input).
# - T5 fixes the *numbers* of noise tokens and spans per row, so every row corrupts to the same lengths: a raw
#   chunk of 568 tokens becomes exactly 512 + 114, with no padding.
# - Spans and gaps are uniform random segmentations, interleaved gap first and span last; a single span's
#   length is then roughly geometric, so "mean span length 3" makes length 1 the most common.
# - Sentinels count down from `<extra_id_0>`, the last id of the vocabulary; the target is the same walk as
#   the input with the mask inverted, and a re-implementation of HF's array formulation (in this lesson) gives the same tokens.
# - Corruption loses nothing: `uncorrupt` rebuilds the row, which is how every faster version is checked.
# - The two knobs set the lengths of everything: more noise moves tokens from the encoder input to the decoder
#   target, longer spans mean fewer sentinels in both.
#
# ## Questions
#
# 1. Why does T5 fix the number of noise tokens and spans per row instead of hiding each token independently
#    with probability 0.15? What would the batches look like otherwise?
# 2. How many raw tokens must be cut for a 512-token input, and how long is the target? Derive both from
#    `T − n + s + 1` and `n + s + 1`, then compare with the check under "How long must a raw chunk be?".
# 3. Why does the target put a sentinel before each span instead of just listing the hidden tokens? What
#    could the model not learn without them?
# 4. **Predict, then run** the drawing line of the cell under "The noise mask" with a row of 10 tokens instead
#    of 40 (`example_noise_mask(10, 0.15, 3.0, np.random.default_rng(0))`, in a new cell: that cell's checks
#    are for 40 tokens): how many noise tokens, in how many spans?
#    And for a row of 3 tokens? (Python's `round` rounds halves to the even neighbour.)
# 5. `uncorrupt` takes every id above `first_sentinel − 100` for a sentinel. What would it return if a raw
#    row already contained one of those ids?
# 6. The HF-style draft numbers the sentinels `first_sentinel + 1 − cumsum(starts)`. Why the `+ 1`?
# 7. **Predict, then run** the span-length histogram ("What the two knobs do"): with a mean span length of 3,
#    which length is the most common, and why is it not 3?
# 8. **Predict, then run** the input/target-length plot ("The two knobs set the lengths of everything"): at
#    noise density 0.5 (mean span 3), how do the encoder and decoder lengths compare? Why is T5's 0.15 cheap
#    for an encoder-decoder?
# 9. A noise mask always starts with kept tokens and ends inside a span. Why is that harmless for learning?
# 10. Why is choosing which `s − 1` of the `m − 1` gaps between items start a new part a *uniform* random
#     split of `m` items into `s` non-empty parts?
#
# ## Try it
#
# 1. **Other knobs** (seconds). Draw `show_corruption` for the same passage at noise density 0.3 and mean span
#    length 8, and call `compute_input_and_target_lengths(512, 0.3, 8.0)`. Look at how many sentinels remain,
#    how much context each hole keeps around it, and how long the target becomes.
# 2. **Span lengths at the extremes** (seconds). Rerun the histogram cell with a mean span length of 1 and of
#    10 (the 568-token rows stay). Predict first: at 1, how many spans per row and of which lengths? At 10, is
#    the most common length still 1?
# 3. **Independent masking** (seconds). Corrupt one row of 568 tokens with a thousand masks that hide each token
#    independently (`rng.random(568) < 0.15`) and collect the lengths of the inputs and targets and the number
#    of spans. Look at the spread of the lengths (how much padding would a batch need?), at the number of spans
#    against T5's 28, and at how often a mask starts with a hidden token.

# %% [markdown]
# ## Appendix: bad input
#
# Settings that cannot work fail with a sentence that names the fix, for example:

# %%
try: example_noise_mask(40, noise_density=1.5)
except SpanCorruptionError as e: print(e)

# %%
#| hide
test_fail(lambda: compute_input_and_target_lengths(512, 1.2), contains="must be in (0, 1)")
test_fail(lambda: compute_input_and_target_lengths(512, 0.0), contains="must be in (0, 1)")
test_fail(lambda: compute_input_and_target_lengths(512, 0.15, 0), contains="must be at least 1")
test_fail(lambda: compute_input_and_target_lengths(128, 0.15, 0.5), contains="must be at least 1")
test_fail(lambda: compute_input_and_target_lengths(2), contains="too short to hold one span")
test_fail(lambda: example_noise_mask(40, 0.15, -1.0), contains="must be at least 1")
test_fail(lambda: example_noise_mask(568, 0.9, 3.0), contains="too few for a gap")

# %%
#| hide
import nbdev; nbdev.nbdev_export()
