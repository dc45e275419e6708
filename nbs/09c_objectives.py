# %% [markdown]
# # Why an encoder? Architectures and objectives at equal compute
# > T5's encoder-decoder with span corruption beside a decoder-only language model, a prefix LM, an encoder-decoder LM and UL2's mixture of denoisers: built from the same layers, trained on the same corpus for the same FLOPs, scored on the same held-out rows

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %%
#| default_exp objectives

# %% [markdown]
# Every lesson so far took T5's two design choices for granted: an **encoder-decoder** and **span corruption**. The
# question every student asks is why: GPT-style models are one stack of decoder blocks trained to predict the next
# token, and they work. This lesson puts the alternatives side by side, on your machine.
#
# What the papers found, in summary:
#
# - **T5** (Raffel et al., arXiv 1910.10683, Section 3.2 and Table 2) compared an encoder-decoder, an encoder-decoder
#   with shared parameters, one with half the layers, a decoder-only language model and a prefix LM, each with a denoising objective and a
#   language-modelling objective, matched in parameters or in FLOPs. The encoder-decoder with denoising was best on
#   every task they report, and in their summary denoising beat language modelling for every architecture (on
#   average over the tasks, not on each one).
# - **UL2** (Tay et al., arXiv 2205.05131, Section 3) argued that the architecture and the objective are separate
#   choices and mixed denoisers: **R** (regular span corruption, short spans), **S** (sequential: a prefix LM) and
#   **X** (extreme: long spans or a high corruption rate), each announced to the model by a **mode token** put in
#   front of the input (the paper writes `[R]`, `[S]`, `[X]`; the released UL2 checkpoint uses `[NLU]`, `[S2S]`,
#   `[NLG]`), the same token later telling a fine-tuned model which mode to be in.
# - **Wang et al.** (arXiv 2204.05832) found that a causal decoder-only model trained as a language model generalised
#   best zero-shot after unsupervised pre-training alone, while models that see their input both ways, trained by
#   masked-span denoising, did best after multitask fine-tuning.
#
# Those are runs of billions of tokens. Here five setups (the title's) run at the scale of the CPU demo, at **equal
# training FLOPs**, and are scored three ways: two on held-out rows of the corpus (the same rows for every setup), one after fine-tuning on
# the same instructions. What that scale can and cannot decide is
# part of the lesson.

# %%
#| export
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nanot5_edu.config import Config, flops_per_step
from nanot5_edu.layers import ModelConfig
from nanot5_edu.model import HF_ALIAS_KEYS, Seq2SeqOutput, Stack, T5, compute_dtype, init_weights, mask_value, shift_right
from nanot5_edu.noise import SpanCorruptionError, compute_input_and_target_lengths
from nanot5_edu.pretrain import document_partners
from nanot5_edu.noise import _checked_noise_counts
from nanot5_edu.spans import _SpanCorruptor, _random_span_cuts
from nanot5_edu.tokenizer import NUM_SENTINELS, sentinel_ids

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close


# %% [markdown]
# ## One stack: the decoder-only model and its two masks
#
# A decoder-only model reads one sequence: the inputs (if the objective has any), then the targets. Built from
# T5's layers it is one `Stack` of self-attention + feed-forward blocks, the embedding and the LM head, and nothing
# else: no cross-attention, because there is no encoder to attend to. What makes it a **language model** or a
# **prefix LM** is only which positions may see which, and which positions the loss scores:
#
# - every target position sees the positions before it (causal), as in T5's decoder;
# - the input positions (the *prefix*) also see each other both ways, as in T5's encoder: that is the prefix LM of
#   T5's Figure 3 (attention mask patterns, right). With no inputs (`causal_lm`) the mask is plain causal.
#
# `prefix_lm_mask` is that picture as a boolean matrix, `keep[i, j]` = position `i` may attend to `j`:

# %%
#| export
def prefix_lm_mask(length: int, prefix_length: int, device=None) -> torch.Tensor:
    "[length, length] bool: True where query i may attend to key j: j <= i (causal), or both in the prefix"
    i = torch.arange(length, device=device)
    return (i[None, :] <= i[:, None]) | ((i[None, :] < prefix_length) & (i[:, None] < prefix_length))


# %%
print(prefix_lm_mask(6, 3).int())

# %% [markdown]
# Rows are queries, columns keys. The first three rows (the prefix) see all three prefix positions and nothing after;
# rows 3–5 (the targets) see the whole prefix and the targets up to themselves. The same picture by hand, for a
# check that does not use the function:

# %%
by_hand = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 0, 0, 0],
                        [1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
test_eq(prefix_lm_mask(6, 3), by_hand)
test_eq(prefix_lm_mask(6, 0), torch.ones(6, 6, dtype=torch.bool).tril())  # no prefix: causal


# %% [markdown]
# The model takes the same batches as `T5` (`input_ids`, `labels`, optional masks), so the training loop of lessons
# 05–08 works unchanged (evaluation and loading need the small additions below): it concatenates the inputs with the decoder inputs
# (the labels shifted right behind the start token), runs the stack once, and applies the head to the target
# positions only. One difference remains: padded inputs leave a gap of pad positions between the prefix and the
# targets, which changes their relative distances (masked keys, but not positions, are skipped); pre-training here has
# no padding, and fine-tuning pads each prompt to the longest in its batch, so in (c) many rows have the gap. Positions use T5's bidirectional relative-position buckets (the encoder's), since prefix positions
# look both ways; in the causal part the future buckets are simply never used.

# %%
#| export
class DecoderOnly(nn.Module):
    "T5's layers in one stack over inputs + targets: a prefix LM over the inputs, causal over the targets"

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.decoder = Stack(config, self.shared, is_decoder=False)  # num_layers blocks, self-attention + FF (the name: HF_ALIAS_KEYS)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        init_weights(self, config)

    head, _check, num_parameters = T5.head, T5._check, T5.num_parameters

    def hidden(self, ids: torch.Tensor, prefix_length: int, key_mask: torch.Tensor | None = None) -> torch.Tensor:
        "Final hidden states [B, L, d_model] of the sequence `ids`, its first `prefix_length` positions a prefix"
        s, L = self.decoder, ids.shape[1]
        h = s.dropout(s.embed_tokens(ids))
        dtype = compute_dtype(h)
        keep = prefix_lm_mask(L, prefix_length, ids.device)[None, None]
        if key_mask is not None:  # [B, L] 1/0: padded keys are never attended to
            keep = keep & key_mask[:, None, None, :].bool()
        bias = s.relative_bias(L, L).masked_fill(~keep, mask_value(dtype)).to(dtype)
        for block in s.block:
            h, _ = block(h, bias)
        return s.dropout(s.final_layer_norm(h))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                decoder_attention_mask: torch.Tensor | None = None) -> Seq2SeqOutput:
        "Logits of the target positions [B, targets, vocab] (and the loss, given labels), as `T5.forward`"
        self._check(input_ids, attention_mask, decoder_input_ids, labels)
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("Pass decoder_input_ids or labels (decoder inputs are made from labels).")
            decoder_input_ids = shift_right(labels, self.config.decoder_start_token_id, self.config.pad_token_id)
        P = input_ids.shape[1]
        key_mask = None
        if attention_mask is not None or decoder_attention_mask is not None:
            ones = lambda t: torch.ones_like(t, dtype=torch.long)
            key_mask = torch.cat([ones(input_ids) if attention_mask is None else attention_mask,
                                  ones(decoder_input_ids) if decoder_attention_mask is None else decoder_attention_mask], 1)
        h = self.hidden(torch.cat([input_ids, decoder_input_ids], 1), P, key_mask)
        logits = self.head(h[:, P:])
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return Seq2SeqOutput(logits=logits, loss=loss)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 32, attention_mask: torch.Tensor | None = None,
                 top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        "Greedy decoding (no KV cache: the whole sequence again each step), rows padded after EOS, as `T5.generate`"
        if top_k:
            raise NotImplementedError("DecoderOnly.generate is greedy only: call it with top_k=None.")
        cfg = self.config
        out = input_ids.new_full((input_ids.shape[0], 1), cfg.decoder_start_token_id)
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        for _ in range(max_new_tokens):
            next_token = self(input_ids, attention_mask, decoder_input_ids=out).logits[:, -1].argmax(-1)
            next_token = next_token.masked_fill(done, cfg.pad_token_id)
            out = torch.cat([out, next_token[:, None]], dim=1)
            done |= next_token == cfg.eos_token_id
            if done.all():
                break
        return out

    def save_pretrained(self, save_dir):
        raise NotImplementedError("A decoder-only model has no Hugging Face T5 export (T5ForConditionalGeneration is "
                                  "an encoder-decoder): keep its checkpoint (checkpoints/step_<8-digit step>/) and load "
                                  "it with load_run_model(run_dir, config), which allows for the weight the checkpoint "
                                  "leaves out (decoder.embed_tokens.weight, an alias of shared.weight).")


# %% [markdown]
# The check: the prefix really is bidirectional and the targets really are causal. Changing a *target* token may
# not change any earlier logit. Changing the *last prefix* token must change the hidden state of the *first* prefix
# position, which only a bidirectional prefix allows: the same sequence with no prefix (`prefix_length=0`, plain
# causal) must leave it unchanged. And with the inputs empty, the model is a plain causal LM: its logits equal a
# hand-run of its blocks under a lower-triangular mask.

# %%
torch.manual_seed(0)
tiny = ModelConfig(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, architecture="decoder-only")
lm = DecoderOnly(tiny).eval()
x, y = torch.randint(3, 60, (2, 5)), torch.randint(3, 60, (2, 6))
base = lm(x, labels=y).logits
y2 = y.clone(); y2[:, 3] = 7          # a later target changes (it is the decoder input at position 4)
test_close(lm(x, labels=y2).logits[:, :4], base[:, :4], eps=1e-6)   # targets 0-3 see only up to their own position
x2 = x.clone(); x2[:, -1] = 7         # the last prefix token changes
seq, seq2, P = torch.cat([x, shift_right(y)], 1), torch.cat([x2, shift_right(y)], 1), x.shape[1]
first = lambda ids, prefix: lm.hidden(ids, prefix)[:, 0]   # the hidden state of position 0
print("largest change of position 0's hidden state when the last prefix token changes:",
      f"prefix LM {(first(seq2, P) - first(seq, P)).abs().max():.3f}, causal {(first(seq2, 0) - first(seq, 0)).abs().max():.3f}")
assert (first(seq2, P) - first(seq, P)).abs().max() > 1e-3       # the prefix sees forwards
test_close(first(seq2, 0), first(seq, 0), eps=1e-6)             # a causal mask does not

# %%
empty = x[:, :0]
seq = shift_right(y)
h = lm.decoder.dropout(lm.shared(seq))
bias = lm.decoder.relative_bias(6, 6).masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), torch.finfo(torch.float32).min / 2)
for block in lm.decoder.block:
    h, _ = block(h, bias)
test_close(lm(empty, labels=y).logits, lm.head(lm.decoder.final_layer_norm(h)), eps=1e-5)


# %% [markdown]
# ## The objectives
#
# All four objectives read the **same packed rows** of raw text (lesson 02b), so every setup sees the same tokens
# per example: `raw_length` tokens, the length T5's span corruption needs for `data.inputs_length` (lesson 02). What
# differs is how a row becomes inputs and targets:
#
# | objective | inputs | targets |
# |---|---|---|
# | `span_corruption` (T5) | the row with 15% of its tokens, in spans of mean 3, each replaced by a sentinel; EOS | the sentinels, each followed by its span; EOS |
# | `prefix_lm` | the row up to a random split point; EOS | the rest; EOS |
# | `causal_lm` | none | the whole row; EOS |
# | `ul2` | a mode token, then one of seven denoisers' inputs | that denoiser's targets |
#
# The split point of `prefix_lm` (T5's "prefix language modeling", Section 3.3.1) is drawn uniformly, one per call
# of the collator: every row of a micro-batch shares it, so a batch has one shape and no padding. The expected
# FLOPs of a step are then an average over the split points (`expected_flops_per_step`, below).

# %%
#| export
class _Objective:
    "What the objective collators share: rows of `raw_length` tokens in, a seeded generator, its state for resuming"

    def __init__(self, tokenizer, raw_length: int, seed: int = 0):
        self.raw_length, self.eos_id, self.pad_id = raw_length, tokenizer.eos_token_id, tokenizer.pad_token_id
        self.sentinels = sentinel_ids(tokenizer, NUM_SENTINELS)
        self.generator = torch.Generator().manual_seed(seed)

    def rows(self, rows) -> torch.Tensor:
        ids = rows if isinstance(rows, torch.Tensor) else torch.as_tensor(
            [r["input_ids"] if isinstance(r, dict) else r for r in rows], dtype=torch.long)
        if ids.ndim != 2 or ids.shape[1] != self.raw_length:
            raise SpanCorruptionError(f"Rows of shape {tuple(ids.shape)}: this objective reads rows of exactly "
                                      f"{self.raw_length} raw tokens; pack with pack_dataset(ds, tok, {self.raw_length}).")
        return ids.long()

    def example(self, inputs: torch.Tensor, targets: torch.Tensor, mode: int | None = None,
                eos_on_inputs: bool = True) -> dict[str, torch.Tensor]:
        "Inputs (a mode token in front, EOS behind) and targets (EOS behind), with the decoder inputs"
        B = targets.shape[0]
        eos = targets.new_full((B, 1), self.eos_id)
        parts = ([targets.new_full((B, 1), mode)] if mode is not None else []) + [inputs] + ([eos] if eos_on_inputs else [])
        labels = torch.cat([targets, eos], 1)
        return {"input_ids": torch.cat(parts, 1), "labels": labels,
                "decoder_input_ids": torch.cat([labels.new_full((B, 1), self.pad_id), labels[:, :-1]], 1)}

    def state_dict(self) -> dict:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict):
        self.generator.set_state(state["generator"])


class PrefixLMCollator(_Objective):
    "T5's prefix LM: each row split at one random point (shared by the call's rows): inputs before it, targets after"

    def __init__(self, tokenizer, raw_length: int, seed: int = 0, mode: int | None = None):
        super().__init__(tokenizer, raw_length, seed)
        self.mode = mode

    def __call__(self, rows) -> dict[str, torch.Tensor]:
        ids = self.rows(rows)
        split = int(torch.randint(1, self.raw_length, (1,), generator=self.generator))  # 1 … raw_length - 1 inputs
        return self.example(ids[:, :split], ids[:, split:], self.mode)

    def shapes(self) -> list[tuple[float, int, int]]:
        "(probability, inputs length, targets length) of every batch shape this collator makes"
        m, R = self.mode is not None, self.raw_length
        return [(1 / (R - 1), m + s + 1, R - s + 1) for s in range(1, R)]


class CausalLMCollator(_Objective):
    "A language model's examples: no inputs, the whole row (and EOS) as targets"

    def __call__(self, rows) -> dict[str, torch.Tensor]:
        ids = self.rows(rows)
        return self.example(ids[:, :0], ids, eos_on_inputs=False)

    def shapes(self) -> list[tuple[float, int, int]]:
        return [(1.0, 0, self.raw_length + 1)]


# %% [markdown]
# What a prefix-LM and a causal-LM example look like, on ten tokens with ids 10…19 (EOS is 1; the decoder reads the
# start token 0, then the targets):

# %%
class _Ids:  # the three ids these collators ask a tokenizer for, and T5's 100 sentinels above a vocabulary of 200
    eos_token_id, pad_token_id = 1, 0
    def convert_tokens_to_ids(self, tokens): return [299 - int(t[len("<extra_id_"):-1]) for t in tokens]
    def __len__(self): return 300
    unk_token_id = 2

row = torch.arange(10, 20)[None]
print(PrefixLMCollator(_Ids(), 10, seed=0)(row))
print(CausalLMCollator(_Ids(), 10)(row))

# %%
#| hide
ex = PrefixLMCollator(_Ids(), 10, seed=0)(row)
split = ex["input_ids"].shape[1] - 1
test_eq(torch.cat([ex["input_ids"][0, :-1], ex["labels"][0, :-1]]), row[0])   # nothing lost, nothing added but EOS
test_eq(ex["input_ids"][0, -1], 1); test_eq(ex["labels"][0, -1], 1)
test_close(sum(p for p, _, _ in PrefixLMCollator(_Ids(), 10).shapes()), 1.0, eps=1e-12)
splits = {PrefixLMCollator(_Ids(), 10, seed=s)(row)["input_ids"].shape[1] - 1 for s in range(200)}
test_eq(splits, set(range(1, 10)))  # every split point 1 … 9 is drawn, and no other
test_fail(lambda: PrefixLMCollator(_Ids(), 12)(row), contains="exactly 12 raw tokens")

# %% [markdown]
# ### UL2's mixture of denoisers
#
# UL2's R- and X-denoisers are T5's span corruption with other settings: a mean span length μ and a corruption rate
# r (lesson 02's two knobs); its S-denoiser is the prefix LM. The seven denoisers and how often each is drawn follow
# the public UL2 implementation of FAT5 (`catie-aq/flashT5`, `train_flash_t5.py`): R with (μ, r) = (3, 0.15) and
# (8, 0.15), 16.5% each; S, 34%; X with (3, 0.5), (8, 0.5), (64, 0.15) and (64, 0.5), 8.25% each (that file lists
# the second X-denoiser as (8, 0.15); UL2's paper pairs μ = 8 with r = 0.5 for X, which we follow). FAT5 fixes S's
# split at a quarter of the row; we draw it as in `prefix_lm`. The mode tokens (the paper's `[R]`, `[X]`, `[S]`)
# take the last three sentinels' ids, so every setup keeps the same vocabulary and embedding table:
# `<extra_id_99>` is R, `<extra_id_98>` is X, `<extra_id_97>` is S. They never clash with a span's sentinel as long
# as a row has at most 97 spans (the collator checks; the demo's rows have at most 23, printed below).
#
# One denoiser is drawn per call, so a micro-batch has one shape (FAT5 draws one per example and packs them; whether
# the coarser draw widens UL2's seed spread is not measured here). At the demo's rows of 141 raw tokens UL2's long
# denoisers are short: the spans each one makes per row (from `noise_counts`, lesson 02), far from the paper's
# 512-token inputs:

# %%
#| export
UL2_DENOISERS = (  # (mode, mean span length μ, corruption rate r, share); S is a prefix LM
    ("R", 3.0, 0.15, 0.165), ("R", 8.0, 0.15, 0.165), ("S", None, None, 0.34),
    ("X", 3.0, 0.5, 0.0825), ("X", 8.0, 0.5, 0.0825), ("X", 64.0, 0.15, 0.0825), ("X", 64.0, 0.5, 0.0825))
UL2_MODE_TOKENS = {"R": "<extra_id_99>", "X": "<extra_id_98>", "S": "<extra_id_97>"}  # the paper's [R], [X], [S]


class UL2Collator(_Objective):
    "UL2's mixture: per call one denoiser drawn by its share; span corruption (R, X) or a prefix LM (S), mode token first"

    def __init__(self, tokenizer, raw_length: int, seed: int = 0, denoisers=UL2_DENOISERS):
        super().__init__(tokenizer, raw_length, seed)
        self.denoisers, self.share = denoisers, torch.tensor([d[3] for d in denoisers], dtype=torch.float64)
        self.modes = {m: self.sentinels[99 - i] for i, m in enumerate(("R", "X", "S"))}
        self.parts = []
        for mode, mu, r, _ in denoisers:
            if mode == "S":
                self.parts.append(PrefixLMCollator(tokenizer, raw_length, mode=self.modes["S"]))
                continue
            noise, spans = _checked_noise_counts(raw_length, r, mu)
            if spans > NUM_SENTINELS - len(self.modes):
                raise SpanCorruptionError(f"UL2 denoiser (μ={mu}, r={r}) makes {spans} spans in {raw_length} tokens, "
                                          f"more than the {NUM_SENTINELS - 3} sentinels the mode tokens leave: shorten "
                                          "the rows (data.inputs_length).")
            self.parts.append((noise, spans, _SpanCorruptor(raw_length, noise, spans, self.sentinels[0], self.eos_id,
                                                            self.pad_id)))

    def __call__(self, rows) -> dict[str, torch.Tensor]:
        ids = self.rows(rows)
        k = int(torch.multinomial(self.share, 1, generator=self.generator))
        part, mode = self.parts[k], self.modes[self.denoisers[k][0]]
        if isinstance(part, PrefixLMCollator):
            part.generator = self.generator  # one generator: resuming restores every draw
            return part(ids)
        noise, spans, corrupt = part
        out = corrupt(ids, _random_span_cuts(len(ids), self.raw_length, noise, spans, self.generator))
        out["input_ids"] = torch.cat([out["input_ids"].new_full((len(ids), 1), mode), out["input_ids"]], 1)
        return out

    def shapes(self) -> list[tuple[float, int, int]]:
        out = []
        for (mode, *_, share), part in zip(self.denoisers, self.parts):
            if isinstance(part, PrefixLMCollator):
                out += [(share * p, i, t) for p, i, t in part.shapes()]
            else:
                noise, spans, _ = part
                out.append((share, 1 + self.raw_length - noise + spans + 1, noise + spans + 1))
        return out


# %%
for (mode, mu, r, share), part in zip(UL2_DENOISERS, UL2Collator(_Ids(), 141).parts):
    if mode != "S":
        print(f"{mode}(mean span {mu:g}, rate {r}): {part[1]} span(s), {part[0]} noise tokens of 141")

# %% [markdown]
# One draw of each kind on a row of 40 tokens (ids 10…49; the sentinels here count down from 299, the mode tokens
# are 200, 201 and 202):

# %%
ul2 = UL2Collator(_Ids(), 40, seed=3)
row40 = torch.arange(10, 50)[None]
seen = {}
for _ in range(60):
    ex = ul2(row40)
    seen.setdefault(int(ex["input_ids"][0, 0]), ex)
for mode, ex in sorted(seen.items()):
    print(f"mode token {mode}: inputs {ex['input_ids'][0].tolist()}\n               targets {ex['labels'][0].tolist()}")

# %%
#| hide
draws = torch.tensor([int(torch.multinomial(ul2.share, 1, generator=torch.Generator().manual_seed(s))) for s in range(4000)])
share = torch.bincount(draws, minlength=7).double() / len(draws)
test_close(share, ul2.share, eps=0.03)  # each denoiser drawn at its share
test_eq(set(seen), {200, 201, 202})


# %% [markdown]
# ## Equal compute
#
# T5's architecture table matched models in parameters or in FLOPs. Here every setup trains for the **same training
# FLOPs** ("compute" below means these counted FLOPs; a CPU does not run every setup's FLOPs equally fast, and
# `benchmarks/objectives.py` times their steps side by side: `benchmarks/results/cpu_2026-12-05/objectives.log`),
# counted by lesson 07's `flops_per_step`, which now knows a decoder-only model: one stack over inputs +
# targets, the head on the targets. A decoder-only model with as many blocks as the encoder and decoder together
# has about their parameters (less the cross-attention) but runs every block over the whole sequence, inputs and
# targets, so its blocks cost more than the encoder-decoder's per example: about twice, if both read sequences of the
# same length with no cross-attention; less here, because T5's inputs plus targets are longer than the raw row (its
# sentinels and EOS appear on both sides) and T5's decoder also pays for cross-attention. The LM head adds a
# cost that grows with the number of *target* positions, so the objective moves the ratio too (a causal LM scores
# every token, T5 a few spans). The cell that sets the budget below prints, for each setup, the FLOPs of a step and
# of its blocks alone, beside T5's. T5 (Section 3.2.2)
# describes this equal-parameter pairing; the decoder-only rows its Table 2 trains are the other one, a model of
# half the layers at the encoder-decoder's cost per example.

# %%
#| export
def objective_collator(cfg: Config, tokenizer, seed: int):
    "The collator of `cfg.data.objective` (not span corruption: that is lesson 02b's), on T5's raw rows for inputs_length"
    d = cfg.data
    raw_length = compute_input_and_target_lengths(d.inputs_length, d.noise_density, d.mean_noise_span_length)[0]
    make = {"prefix_lm": PrefixLMCollator, "causal_lm": CausalLMCollator, "ul2": UL2Collator}[d.objective]
    return make(tokenizer, raw_length, seed)


def expected_flops_per_step(config: ModelConfig, batch_size: int, collator) -> float:
    "Training FLOPs of one step, averaged over the batch shapes the collator draws (fixed for span corruption)"
    if hasattr(collator, "shapes"):
        return sum(p * flops_per_step(config, batch_size, i, t) for p, i, t in collator.shapes())
    return flops_per_step(config, batch_size, collator.inputs_length, collator.targets_length)


# %% [markdown]
# ## Evaluation during training
#
# `train`'s periodic evaluation (lesson 08) scores a run on its own objective. For these collators, whose shape
# changes per call, the held-out rows are corrupted batch by batch, each row with the inputs of another passage of
# its document and of another document, as in lesson 05's `evaluation_batches`: so a run's log has `span_gain` and
# `document_gain` for every objective that has inputs. (The comparison below scores every setup on T5's corruption
# instead, the same rows for all.)

# %%
#| export
def objective_batches(rows: torch.Tensor, documents: torch.Tensor, collator, batch_size: int, num_batches: int,
                      seed: int = 1234) -> list[dict]:
    """As `evaluation_batches` (lesson 05), for collators whose shape changes per call: each batch's own rows and
    their two partners are corrupted in one call. No gain rows where the objective has no inputs (causal LM)"""
    n = batch_size * num_batches
    g = torch.Generator().manual_seed(seed)
    order = torch.cat([torch.randperm(len(rows), generator=g) for _ in range(-(-n // len(rows)))])[:n]
    same, other = document_partners(documents, order)
    gain_row = (same >= 0) & (other >= 0)
    same, other = torch.where(gain_row, same, order), torch.where(gain_row, other, order)
    document = torch.unique(torch.as_tensor(documents)[order], return_inverse=True)[1]
    batches = []
    for s in range(0, n, batch_size):
        j = slice(s, s + batch_size)
        k = len(order[j])
        out = collator(torch.cat([rows[order[j]], rows[same[j]], rows[other[j]]]))
        b = {key: v[:k] for key, v in out.items()}
        has_inputs = out["input_ids"].shape[1] > 0
        b.update(document=document[j], gain_row=gain_row[j] & has_inputs,
                 same_document_input_ids=out["input_ids"][k:2 * k], other_document_input_ids=out["input_ids"][2 * k:])
        batches.append(b)
    return batches


# %% [markdown]
# ## Scoring every setup the same way
#
# The three scores: (a) and (b) on the same held-out rows of the embedded corpus for every setup, (c) on the same
# held-out instructions:
#
# - **(a) span filling**, T5's task: the rows corrupted as T5 does (15%, mean span 3), scored by lesson 05's
#   `evaluate`: the held-out loss over every target token (sentinels, span tokens, EOS), with `span_gain` and
#   `document_gain`, for every setup. A decoder-only model reads the corrupted row as its prefix (the causal LM never
#   trained with a prefix that looks both ways, so it is read under a mask it has not seen); UL2 gets its R token in
#   front.
# - **(b) continuation**: a row's first `raw_length − 32` tokens → its last 32 tokens, scored by the loss on those
#   32 tokens only. Each setup gets the passage the way its objective showed text: a causal LM as the start of its
#   sequence; a prefix LM (either architecture) as its inputs; T5 as inputs ending in one sentinel whose span it
#   writes; UL2 with its S token in front.
# - **(c) fine-tuning** on sni-mini (lesson 09's data) from each checkpoint, with 09b's settings, scored by the
#   held-out loss on the answers after the last step. With 10 instances per task that is deep in the regime where 09b
#   saw every run overfit (and found no final-loss advantage of its pre-trained start), so (c) may rank how fast each
#   model overfits as much as what pre-training transferred. (Unlike 09b, (c) does find a final-loss advantage over
#   random init for every setup, T5 included. The two differ at least in the held-out set — every `seen` held-out
#   instance here, one batch of 32 in 09b —, in the checkpoint — 600 steps of pre-training here against the demo's
#   3,000 — and in the loop — this lesson's `sni_finetune_loss` against 09b's `finetune` —, and we have not separated
#   which of these makes the difference.)

# %%
#| export
def continuation_batch(rows: torch.Tensor, objective: str, first_sentinel: int, eos_id: int = 1,
                       mode: int | None = None, length: int = 32) -> dict[str, torch.Tensor]:
    "Rows → (passage, its last `length` tokens) as `objective` presents text; loss counted on those tokens only"
    passage, cont = rows[:, :-length], rows[:, -length:]
    B, eos = len(rows), rows.new_full((len(rows), 1), eos_id)
    if objective == "causal_lm":  # one sequence: the passage is the start of the targets, not scored
        seq = torch.cat([passage, cont], 1)
        labels = torch.cat([torch.full_like(passage, -100), cont], 1)
        return {"input_ids": rows[:, :0], "labels": labels, "decoder_input_ids": shift_right(seq)}
    if objective == "span_corruption":  # the continuation as the span of one sentinel at the end
        sentinel = rows.new_full((B, 1), first_sentinel)
        return {"input_ids": torch.cat([passage, sentinel, eos], 1),
                "labels": torch.cat([torch.full_like(sentinel, -100), cont], 1),
                "decoder_input_ids": shift_right(torch.cat([sentinel, cont], 1))}
    front = [] if mode is None else [rows.new_full((B, 1), mode)]  # ul2: [S2S]; prefix_lm: none
    return {"input_ids": torch.cat([*front, passage, eos], 1), "labels": cont, "decoder_input_ids": shift_right(cont)}


@torch.no_grad()
def target_loss(model, batches: list[dict], autocast) -> float:
    "Mean cross-entropy (nats) over the batches' scored target tokens (labels != -100)"
    total, count = 0.0, 0
    model.eval()
    for b in batches:
        with autocast():
            logits = model(b["input_ids"], attention_mask=b.get("attention_mask"),
                           decoder_input_ids=b.get("decoder_input_ids"), labels=b["labels"],
                           decoder_attention_mask=b.get("decoder_attention_mask")).logits
        loss = F.cross_entropy(logits.float().transpose(1, 2), b["labels"], ignore_index=-100, reduction="sum")
        total, count = total + float(loss), count + int((b["labels"] != -100).sum())
    return total / count


def with_mode(batches: list[dict], mode: int | None) -> list[dict]:
    "The batches with a mode token in front of every input (UL2's mode switching); unchanged for mode None"
    if mode is None:
        return batches
    front = lambda t: torch.cat([t.new_full((len(t), 1), mode), t], 1)
    out = []
    for b in batches:
        b = dict(b)
        for key in ("input_ids", "same_document_input_ids", "other_document_input_ids"):
            if key in b:
                b[key] = front(b[key])
        if "attention_mask" in b:
            b["attention_mask"] = front(b["attention_mask"]).clamp(max=1)
        out.append(b)
    return out


def unigram_loss(train_ids: list[list[int]] | torch.Tensor, scored_ids: list[list[int]] | torch.Tensor,
                 vocab_size: int) -> float:
    "The trivial baseline: cross-entropy of the scored tokens under the training tokens' add-one unigram frequencies"
    flat = lambda ids: torch.cat([torch.as_tensor(r).flatten() for r in ids])
    counts = torch.bincount(flat(train_ids), minlength=vocab_size).double() + 1
    return float(-(counts / counts.sum()).log()[flat(scored_ids)].mean())


def sni_finetune_loss(model, train_pairs: list, valid_pairs: list, autocast, mode: int | None = None,
                      steps: int = 200, batch_size: int = 8, lr: float = 1e-3, seed: int = 0) -> float:
    """Fine-tune `model` in place on (source ids, target ids) pairs, 09b's settings (AdamW, constant lr), and return
    its held-out loss on the answers. `mode`: a token put in front of every source (UL2's `[S2S]`)"""
    from nanot5_edu.finetune import PaddingCollator
    front = (lambda s: s) if mode is None else (lambda s: [mode, *s])
    train_pairs, valid_pairs = [(front(s), t) for s, t in train_pairs], [(front(s), t) for s, t in valid_pairs]
    collate, g = PaddingCollator(), torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for _ in range(steps):
        batch = collate([train_pairs[i] for i in torch.randint(len(train_pairs), (batch_size,), generator=g).tolist()])
        with autocast():
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return target_loss(model, [collate(valid_pairs[i:i + 32]) for i in range(0, len(valid_pairs), 32)], autocast)


def load_run_model(run_dir, cfg: Config):
    "The model of a finished run (its newest checkpoint), T5 or decoder-only as `cfg` says"
    from safetensors.torch import load_file
    from nanot5_edu.checkpoint import latest_checkpoint
    from nanot5_edu.train import make_model
    model = make_model(cfg)
    path = latest_checkpoint(run_dir) / "model.safetensors"
    missing, unexpected = model.load_state_dict(load_file(path), strict=False)  # checkpoints leave out the aliases
    if unexpected or set(missing) - set(HF_ALIAS_KEYS):
        raise ValueError(f"{path} does not fit the model of this config (missing {sorted(set(missing) - set(HF_ALIAS_KEYS))}, "
                         f"unexpected {unexpected}): pass the config the run was trained with (its config.yaml).")
    return model.eval()


# %% [markdown]
# ## The experiment
#
# Five setups, from the `cpu-demo` preset (a 1 + 1-layer encoder-decoder, lesson 07), each trained by `train`
# (lesson 08) as the command line would (`nanot5-edu pretrain cpu-demo model.architecture=... data.objective=...`):
#
# | setup | `model.architecture` | `data.objective` | blocks |
# |---|---|---|---|
# | T5 | encoder-decoder | span_corruption | 1 encoder + 1 decoder |
# | decoder-only LM (GPT-style) | decoder-only | causal_lm | 2 |
# | decoder-only prefix LM | decoder-only | prefix_lm | 2 |
# | encoder-decoder LM (T5's LM rows) | encoder-decoder | prefix_lm | 1 + 1 |
# | UL2 | encoder-decoder | ul2 | 1 + 1 |
#
# The budget is what T5 spends in `T5_STEPS` steps of 16 rows; every other setup gets the number of steps that spends
# the same FLOPs (rounded), with the preset's learning rate (chosen for T5 in lesson 07's appendix from short runs of
# the demo model, then checked by the demo's 3,000-step run; not tuned for the other setups, nor for 600 steps),
# warmup over the first sixth of each setup's steps (100 of T5's 600, the preset's warmup) and the cosine schedule to
# the end. Three seeds each. The slow cells below run it and write `results/objectives.json` (the runs' training
# time and the machine are in it, printed below); the cells after them read that file.

# %%
import json, shutil, time
from pathlib import Path

from nanot5_edu.config import make_config
from nanot5_edu.data import results_file
from nanot5_edu.finetune import load_sni, tokenize_sni
from nanot5_edu.pretrain import evaluate, evaluation_batches
from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.stream import packed_rows
from nanot5_edu.train import make_collator, make_model, prepare_tokenizer, train

SETUPS = {
    "T5": ["data.objective=span_corruption"],
    "decoder-only LM": ["model.architecture=decoder-only", "data.objective=causal_lm", "model.num_layers=2"],
    "decoder-only prefix LM": ["model.architecture=decoder-only", "data.objective=prefix_lm", "model.num_layers=2"],
    "encoder-decoder LM": ["data.objective=prefix_lm"],
    "UL2": ["data.objective=ul2"],
}
SEEDS, T5_STEPS, BATCH = (0, 1, 2), 600, 16
for name, overrides in SETUPS.items():
    cfg = make_config("cpu-demo", overrides)
    print(f"{name:24s} {make_model(cfg).num_parameters() / 1e6:.2f}M parameters")


# %% [markdown]
# Equal parameters, within the cross-attention the decoder-only models do not have. The steps each setup gets for
# T5's budget (from the collators' shapes, so no data is needed yet):

# %%
class _Vocab(_Ids):  # the demo tokenizer's ids (8,000 pieces + 100 sentinels), for the collators' sentinel ids
    def __len__(self): return 8000 + 100
    def convert_tokens_to_ids(self, tokens): return [8099 - int(t[len("<extra_id_"):-1]) for t in tokens]

def steps_for_budget(overrides, budget):
    cfg = make_config("cpu-demo", overrides)
    collator = SpanCorruptionCollator(_Vocab(), cfg.data.inputs_length) if cfg.data.objective == "span_corruption" \
        else objective_collator(cfg, _Vocab(), 0)
    per_step = expected_flops_per_step(cfg.model, BATCH, collator)
    return round(budget / per_step), per_step

BUDGET = T5_STEPS * steps_for_budget(SETUPS["T5"], 1)[1]
STEPS = {name: steps_for_budget(o, BUDGET)[0] for name, o in SETUPS.items()}
def blocks_only(overrides):  # the same step without the LM head (a one-row vocabulary)
    return steps_for_budget([*overrides, "model.vocab_size=1"], 1)[1]

T5_STEP, T5_BLOCKS = steps_for_budget(SETUPS["T5"], 1)[1], blocks_only(SETUPS["T5"])
for name, steps in STEPS.items():
    per_step = steps_for_budget(SETUPS[name], 1)[1]
    print(f"{name:24s} {steps:4d} steps, {per_step / 1e9:6.2f} GFLOP a step ({per_step / T5_STEP:.2f}x T5's), "
          f"blocks alone {blocks_only(SETUPS[name]) / T5_BLOCKS:.2f}x T5's, rows read {steps * BATCH:,}")
print(f"budget: {BUDGET / 1e12:.2f} TFLOP per run")

# %%
#| slow
ROOT = Path("../runs/objectives")  # a run that finished is scored again, not retrained (delete the folder to redo)
tokenizer = prepare_tokenizer(make_config("cpu-demo", [f"logging.run_dir={ROOT}"]), ROOT)  # the corpus's vocabulary, once
base = make_config("cpu-demo", [f"data.tokenizer={ROOT / 'tokenizer'}"])
t5_collator = SpanCorruptionCollator(tokenizer, base.data.inputs_length, seed=1234)
valid_rows, valid_docs = packed_rows(base, tokenizer, "validation", t5_collator.raw_length, documents=True)
train_rows = packed_rows(base, tokenizer, "train", t5_collator.raw_length)
fill = evaluation_batches(valid_rows, valid_docs, t5_collator, 64, 8, seed=1234)  # (a): 512 held-out rows
cont_rows = valid_rows[torch.randperm(len(valid_rows), generator=torch.Generator().manual_seed(5))[:256]]  # (b)
sni_train = tokenize_sni(load_sni(split="train", instances_per_task=10)[0], tokenizer, 256, 48)  # (c): 09b's sizes
sni_valid = tokenize_sni(load_sni(split="seen")[0], tokenizer, 256, 48)
modes = {m: tokenizer.convert_tokens_to_ids(t) for m, t in UL2_MODE_TOKENS.items()}
bf16 = lambda: torch.autocast("cpu", dtype=torch.bfloat16)
first_sentinel = t5_collator.first_sentinel
print(f"(a) {len(fill)} batches of 64 rows, (b) {len(cont_rows)} rows, (c) {len(sni_train)} training and "
      f"{len(sni_valid)} held-out SNI instances")


# %%
#| slow
def run_one(name, seed):
    run_dir = ROOT / f"{name.replace(' ', '_')}_seed{seed}"
    steps = STEPS[name]
    cfg = make_config("cpu-demo", [*SETUPS[name], f"data.tokenizer={ROOT / 'tokenizer'}", f"train.seed={seed}",
                                   f"train.total_steps={steps}", f"optim.warmup_steps={steps // 6}", f"eval.every_steps={steps}", "eval.batches=2",
                                   "eval.samples=0", f"checkpoint.every_steps={steps}", "checkpoint.keep_last=1",
                                   f"logging.run_dir={run_dir}", "logging.progress_bar=false"])
    done = run_dir / "summary.json"
    if not (done.exists() and json.loads(done.read_text())["steps"] == steps):
        shutil.rmtree(run_dir, ignore_errors=True)
        train(cfg)
    train_s = json.loads(done.read_text())["wall_s"]  # the run's own record: data, model, training, evaluations
    model = load_run_model(run_dir, cfg)
    objective = cfg.data.objective
    r_mode = modes["R"] if objective == "ul2" else None
    ev = evaluate(model, with_mode(fill, r_mode), bf16)
    mode = modes["S"] if objective == "ul2" else None
    cont = continuation_batch(cont_rows, objective, first_sentinel, tokenizer.eos_token_id, mode)
    cont_batches = [{k: v[i:i + 64] for k, v in cont.items()} for i in range(0, len(cont_rows), 64)]
    row = {"setup": name, "architecture": cfg.model.architecture, "objective": objective, "seed": seed,
           "steps": steps, "train_flops": steps * steps_for_budget(SETUPS[name], 1)[1],
           "parameters": model.num_parameters(), "train_s": round(train_s, 1),
           "span_filling_loss": ev["eval_loss"], "span_gain": ev["span_gain"], "document_gain": ev["document_gain"],
           "span_gain_ci95": ev["span_gain_ci95"], "document_gain_ci95": ev["document_gain_ci95"],
           "continuation_loss": target_loss(model, cont_batches, bf16)}
    row["sni_loss"] = sni_finetune_loss(model, sni_train, sni_valid, bf16, mode=mode, seed=seed)
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items() if "ci95" not in k})
    return row

t_start = time.time()
runs = [run_one(name, seed) for name in SETUPS for seed in SEEDS]

# %%
#| slow
controls = []  # (c)'s trivial baseline: the same fine-tuning from a random init, per architecture
for arch, overrides in (("encoder-decoder", SETUPS["T5"]), ("decoder-only", SETUPS["decoder-only LM"])):
    for seed in SEEDS:
        torch.manual_seed(seed)
        model = make_model(make_config("cpu-demo", overrides))
        controls.append({"architecture": arch, "seed": seed,
                         "sni_loss": sni_finetune_loss(model, sni_train, sni_valid, bf16, seed=seed)})
cont_scored = [r[-32:] for r in cont_rows.tolist()]
baselines = {
    "span_filling_unigram": unigram_loss(t5_collator(train_rows)["labels"], [b["labels"] for b in fill], len(tokenizer)),
    "continuation_unigram": unigram_loss(train_rows, cont_scored, len(tokenizer)),
    "sni_unigram": unigram_loss([t for _, t in sni_train], [t for _, t in sni_valid], len(tokenizer)),
    "sni_random_init": controls,
}
import os
record = {"runs": runs, "baselines": baselines, "budget_flops": BUDGET, "t5_steps": T5_STEPS, "batch_size": BATCH,
          "seeds": list(SEEDS), "wall_min": round((time.time() - t_start) / 60, 1),  # this session (finished runs only scored)
          "train_min": round(sum(r["train_s"] for r in runs) / 60, 1),  # the runs' own wall times, summed
          "machine": {"cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
                      "cores": os.cpu_count(), "load_average_after": os.getloadavg(), "torch": torch.__version__,
                      "date": time.strftime("%Y-%m-%d")}}
Path("results").mkdir(exist_ok=True)
Path("results/objectives.json").write_text(json.dumps(record, indent=1))
print(f"wrote results/objectives.json: {len(runs)} runs in {record['wall_min']} min")

# %% [markdown]
# ## What the runs show
#
# The saved results (the slow cells above wrote them; `results_file` finds them wherever the notebook runs):

# %%
import statistics
import matplotlib.pyplot as plt

RESULTS = results_file("objectives.json")
saved = json.loads(RESULTS.read_text()) if RESULTS.exists() else None
METRICS = ("span_filling_loss", "span_gain", "document_gain", "continuation_loss", "sni_loss")

def by_setup(saved):
    out = {}
    for r in saved["runs"]:
        out.setdefault(r["setup"], []).append(r)
    return out

def objectives_table(saved) -> str:
    "Mean ± spread (half the range) over seeds of every score, per setup, with the trivial baselines"
    fmt = lambda vs: f"{statistics.mean(vs):.3f} ± {(max(vs) - min(vs)) / 2:.3f}"
    lines = ["| setup | steps | " + " | ".join(METRICS) + " |", "|---" * (len(METRICS) + 2) + "|"]
    for name, rs in by_setup(saved).items():
        lines.append(f"| {name} | {rs[0]['steps']} | " + " | ".join(fmt([r[m] for r in rs]) for m in METRICS) + " |")
    b = saved["baselines"]
    rand = {a: [c["sni_loss"] for c in b["sni_random_init"] if c["architecture"] == a] for a in ("encoder-decoder", "decoder-only")}
    lines.append(f"| unigram baseline | — | {b['span_filling_unigram']:.3f} | — | — | {b['continuation_unigram']:.3f} | "
                 f"{b['sni_unigram']:.3f} |")
    lines.append("| random init, fine-tuned | — | — | — | — | — | " +
                 ", ".join(f"{a}: {fmt(v)}" for a, v in rand.items()) + " |")
    return "\n".join(lines)

if saved:
    from IPython.display import Markdown, display
    seed0_min = sum(r["train_s"] for r in saved["runs"] if r["seed"] == 0) / 60
    print(f"{len(saved['runs'])} runs, {saved['budget_flops'] / 1e12:.2f} TFLOP each; the runs' training took {saved['train_min']} "
          f"min on {saved['machine']['cores']} cores ({saved['machine']['cpu']}: the last session's machine; runs finished before it were trained earlier); the slow cells' last session (it trained "
          f"the runs not yet finished and scored all) took {saved['wall_min']} min\nthe Try-it 3000-step run with one seed: "
          f"about {5 * seed0_min:.0f} min of training (5 x the seed-0 runs here), plus the scoring")
    display(Markdown(objectives_table(saved)))
else:
    print(f"{RESULTS} is not there yet: run the slow cells above (about 40 minutes on 2 CPU cores).")

# %% [markdown]
# Lower is better for the three losses; the gains are in nats per target token (higher: the model uses its input
# more). Each score is the mean over 3 seeds ± half the range of the three. The picture puts every seed on the
# three tasks:

# %%
if saved:
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    groups = by_setup(saved)
    for ax, (metric, title, base) in zip(axes, (
            ("span_filling_loss", "(a) span filling: held-out loss", saved["baselines"]["span_filling_unigram"]),
            ("continuation_loss", "(b) continuation: loss on 32 tokens", saved["baselines"]["continuation_unigram"]),
            ("sni_loss", "(c) fine-tuned on sni-mini: held-out loss", saved["baselines"]["sni_unigram"]))):
        for i, (name, rs) in enumerate(groups.items()):
            ax.scatter([r[metric] for r in rs], [i] * len(rs), s=25)
        ax.axvline(base, color="grey", ls="--", lw=1, label="unigram baseline")
        ax.set_yticks(range(len(groups)), list(groups) if ax is axes[0] else [])
        ax.set_title(title, fontsize=10); ax.set_xlabel("nats per token")
    axes[0].legend(fontsize=8)
    plt.tight_layout(); plt.show()


# %% [markdown]
# Which differences can three seeds rank? For each score, the setups in order of their mean, and for each neighbour
# in that order whether the two sets of seeds are **separated** (every seed of one better than every seed of the
# other, `<`) or overlap (`<≈`); then every pair of setups that is separated, neighbours or not. Separation is a weak
# test: with no real difference at all, two sets of three seeds still separate by chance in 2 of the 20 possible
# orders, so among a score's 10 pairs about one separation is expected from noise alone (printed below).

# %%
def seed_gap(groups: dict, a: str, b: str, higher_is_better: bool) -> float:
    "How far every seed of `a` is better than every seed of `b` (> 0: separated; ≤ 0: the seeds overlap)"
    return min(groups[a]) - max(groups[b]) if higher_is_better else min(groups[b]) - max(groups[a])

def ranking(saved, metric: str, higher_is_better: bool = False) -> str:
    groups = {name: [r[metric] for r in rs] for name, rs in by_setup(saved).items()}
    order = sorted(groups, key=lambda n: statistics.mean(groups[n]), reverse=higher_is_better)
    parts = [f"{order[0]} ({statistics.mean(groups[order[0]]):.3f})"]
    for a, b in zip(order, order[1:]):
        apart = seed_gap(groups, a, b, higher_is_better) > 0
        parts.append(f"{'<' if not higher_is_better else '>'}{'' if apart else '≈'} {b} ({statistics.mean(groups[b]):.3f})")
    return f"{metric}: " + " ".join(parts)

def separated_pairs(saved, metric: str, higher_is_better: bool = False) -> list[str]:
    "Every pair of setups whose seeds do not overlap on `metric`, the better one first, with the gap between them"
    groups = {name: [r[metric] for r in rs] for name, rs in by_setup(saved).items()}
    sign = ">" if higher_is_better else "<"
    gap = lambda a, b: seed_gap(groups, a, b, higher_is_better)
    return [f"{a} {sign} {b} (gap {gap(a, b):.3f})" for a in groups for b in groups if a != b and gap(a, b) > 0]

if saved:
    import math
    pairs = math.comb(len(by_setup(saved)), 2)
    print(f"by chance alone: {2 / math.comb(6, 3):.0%} of pairs separate, about {pairs * 2 / math.comb(6, 3):.0f} of "
          f"{pairs} per score\n")
    for metric, higher in (("span_filling_loss", False), ("continuation_loss", False), ("sni_loss", False),
                           ("span_gain", True), ("document_gain", True)):
        print(ranking(saved, metric, higher))
        print(f"  separated pairs ({len(separated_pairs(saved, metric, higher))} of {pairs}):",
              "; ".join(separated_pairs(saved, metric, higher)) or "none")
    for gain in ("span_gain", "document_gain"):
        clear = sum(r[f"{gain}_ci95"][0] > 0 for r in saved["runs"])
        print(f"{gain}: its 95% interval is above zero in {clear} of {len(saved['runs'])} runs")
    control = {a: statistics.mean(c["sni_loss"] for c in saved["baselines"]["sni_random_init"] if c["architecture"] == a)
               for a in ("encoder-decoder", "decoder-only")}
    print("\n(c) against each architecture's own random-init control (its mean), what pre-training took off the loss:")
    for name, rs in by_setup(saved).items():
        drops = [control[r["architecture"]] - r["sni_loss"] for r in rs]
        print(f"  {name:24s} {min(drops):.3f} – {max(drops):.3f} nats (control {control[rs[0]['architecture']]:.3f})")

# %% [markdown]
# What the saved runs show, and only that (the table, the picture and the ranking above):
#
# - **(a) span filling** separates the setups by what they were trained on: the two that trained on span corruption
#   (T5, and UL2 through its R- and X-denoisers) are far below every other setup, whose losses sit above even the
#   unigram baseline (they never trained on sentinels, expected to be the tokens they miss most; this lesson does not
#   split the loss by kind of token). This is the task they were trained for, not evidence of a better
#   architecture.
# - **(b) continuation** turns the order around at its ends: the decoder-only LM is lowest, then the encoder-decoder LM; the
#   decoder-only prefix LM and UL2 overlap; T5, which never continued text past a single short span, is far behind
#   the others, though still below the unigram baseline.
# - **(c) fine-tuning on sni-mini**: every pre-trained setup ends below both random-init controls and the unigram
#   baseline. Among the pre-trained setups only the encoder-decoder LM is separated from others: from T5, and from the
#   decoder-only prefix LM by a small gap; from the decoder-only LM by a gap that rounds to zero, a tie. With about one
#   separation per score expected from noise alone, that is weak evidence, and three seeds at this scale do not rank
#   the rest. The random-init controls also differ by architecture (the table's last row), before any pre-training:
#   against its own architecture's control (the last lines above) pre-training took more off the decoder-only
#   setups' loss than off any encoder-decoder setup's, the seeds' ranges apart. So on (c) pre-training narrowed a gap
#   that the architectures show without it: the decoder-only setups gained more against their own control (from a
#   worse random-init start, so more room to fall: not a measure of which architecture benefits more), while
#   which architecture ends lower is a different question that three seeds barely answer.
# - **One architecture against the other at a fixed objective**: `prefix_lm` ran on both. The encoder-decoder LM is
#   separated from the decoder-only prefix LM on (b), (c) and `document_gain` (on (c), not once each is read against
#   its own control: above). At equal FLOPs it also took more steps and read more rows (the budget cell's output), so
#   what (b) and `document_gain` show is that the encoder-decoder did better for the same counted FLOPs here, not why:
#   more updates, more text, a learning rate tuned on this encoder-decoder's shape, and the encoder are not
#   separated.
# - `document_gain`'s interval is above zero in every run; `span_gain`'s in 9 of 15, and it stays small
#   for every setup (the decoder-only LM's, the largest, is measured under a mask it never trained with). At this
#   compute, on the span-filling score, no setup uses a passage's own context much (a score three of the setups
#   never trained on, so it says only that).
#
# What a CPU's scale cannot decide: T5's and UL2's findings are about downstream quality after billions of tokens;
# here each run had one FLOP budget (a couple of minutes of CPU each, in the results file), one model size, one corpus
# and a learning rate tuned for T5 only.
# (a)'s order and T5's last place on (b) follow the training task (the order among the LM-trained setups on (b) does
# not simply follow it); whether an encoder pays off downstream, which is the papers' question, is at most hinted at
# by (c), in a regime that overfits.

# %% [markdown]
# ## Try it
#
# - **A setup of your own** from the command line, e.g. a decoder-only prefix LM:
#   `nanot5-edu pretrain cpu-demo model.architecture=decoder-only model.num_layers=2 data.objective=prefix_lm`
#   (`--print-config` first shows what it will run). An encoder-decoder with `data.objective=causal_lm` stops at
#   once with the list of valid setups.
# - **Longer runs**: set `T5_STEPS = 3000` (the CPU demo's length) and re-run the slow cells with one seed
#   (`SEEDS = (0,)`; the summary above estimates its training time from these runs): does the order of the setups
#   on (a) and (b) hold when the encoder has had the demo's compute?
# - **Equal steps instead of equal FLOPs**: give every setup `T5_STEPS` steps. Which differences grow, and why is
#   that comparison unfair to the encoder-decoder?

# %% [markdown]
# ## What you learned
#
# - An encoder-decoder and a decoder-only model can be built from the same blocks; what separates a GPT-style
#   language model from a prefix LM is the attention mask (`prefix_lm_mask`) and which positions carry the loss.
# - An objective is a way of cutting the same text into inputs and targets: span corruption, prefix LM, causal LM,
#   and UL2's mixture of span corruptions and a prefix LM with a mode token in front.
# - A fair comparison fixes the training FLOPs: a decoder-only model with the encoder-decoder's blocks runs each of
#   them over inputs and targets, and the LM head's cost follows the number of scored positions, so at equal compute
#   it takes fewer steps (how many fewer depends on the objective).
# - Every setup must be scored on the same rows, by tasks it was and was not trained for, beside a trivial baseline,
#   with seeds; what three seeds at a CPU's scale separate is printed above, and what they do not separate is not a
#   finding.
#
# ## Questions
#
# 1. Why does the decoder-only model use T5's *bidirectional* relative-position buckets? What would change for the
#    causal LM if it used the decoder's unidirectional buckets, and what for the prefix LM?
# 2. `prefix_lm_mask(L, P)` lets a prefix position see the whole prefix. Why must it not see the targets, even
#    though the targets come from the same text?
# 3. The decoder-only LM reads the corrupted row of (a) as a prefix. Which tokens of the targets can it never have
#    learned to predict, and how does that show in its span-filling loss?
# 4. At equal FLOPs the decoder-only setups take fewer steps than T5. Compute the ratio from the step counts printed
#    above, and explain it from `flops_per_step` without running anything: how much comes from the blocks running
#    over the whole sequence, how much from the LM head over more target positions?
# 5. UL2 puts a mode token in front of every input. Which mode token does the lesson give UL2 for (a), (b) and
#    (c), and why those?
# 6. Which of the lesson's differences would you expect to change sign at T5-Base scale, and which experiment
#    (compute, model size, data) would you run first to find out?
#
# Exercises: `exercises/09c_objectives.ipynb` (`prefix_lm_mask`, `ul2_example_lengths`).
