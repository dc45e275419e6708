# %% [markdown]
# # The T5 model: blocks, init, weights from transformers, generation
# > Lesson 03's layers assembled into T5 v1.1: pre-norm blocks and stacks, the init with the LM-head fix, `T5` with its loss, weights to and from `transformers`, greedy or top-k generation with a KV cache — the weights, the loss and greedy generation checked against `transformers`' T5, the init against its formulas

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# Lesson [03](03_t5_layers.ipynb) built the layers of T5 v1.1 and checked each against `transformers`. This lesson
# assembles them: residual blocks, the encoder and decoder stacks with their shared position bias and masks, the
# init, and `T5` itself. Every parameter name is HF's (`encoder.block.0.layer.0.SelfAttention.q`, …), so a
# checkpoint moves between the two by copying the state dict, and the whole model is checked against
# `transformers.T5ForConditionalGeneration` on the same weights and inputs: logits, gradients, generated tokens.
# It ends with the payoff of the init: HF's (and nanoT5's) LM head starts the loss far above ln V, and one std
# fixes it ([nanoT5 issue #25](https://github.com/PiotrNawrot/nanoT5/issues/25)).
#
# It needs from 03 its layers, imported from `nanot5_edu.layers`: `ModelConfig` and its presets, `RMSNorm`,
# `RelativePositionBias`, `Attention` with its `KV` and `BlockCache`, `GatedFeedForward`, the `dropout` helper and
# `hf_reference` (HF's model with the same architecture, the reference); and 03's walk of one batch through the
# model, shape by shape, which this lesson's appendix measures. The check cells use `test_eq`, `test_ne`,
# `test_close`, `test_fail` from `fastcore.test`, imported in a hidden cell below with numpy as `np` and matplotlib as `plt`.
#
# **What you will build** (the module `nanot5_edu.model`; lesson 03's layers stay in `nanot5_edu.layers`): the blocks and `Stack` with `additive_mask`, `init_weights` with the LM-head fix, and `T5`
# (with `Seq2SeqOutput` and `shift_right`): forward with the loss, `from_hf`, `to_hf` and `save_pretrained`, and
# greedy or top-k generation with a KV cache. You will end by measuring why the head's init matters.

# %%
#| default_exp model

# %%
#| export
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from fastcore.basics import patch
from torch import nn

from nanot5_edu.layers import (Attention, BlockCache, dropout, GatedFeedForward, hf_reference, ModelConfig,
                               RelativePositionBias, RMSNorm)

# %%
#| hide
from fastcore.test import test_eq, test_ne, test_fail, test_close
import math, tempfile, random
from dataclasses import replace
import numpy as np
import matplotlib.pyplot as plt
import transformers
from transformers.utils import logging as hf_logging
from nanot5_edu.layers import MODEL_PRESETS, get_config

hf_logging.set_verbosity_error(); hf_logging.disable_progress_bar()
random.seed(0); np.random.seed(0); torch.manual_seed(0);


# %% [markdown]
# ## Blocks and stacks
#
# Every sublayer is pre-norm with a residual: `h + dropout(sublayer(norm(h)))`. An encoder block is
# self-attention then feed-forward; a decoder block adds cross-attention to the encoder's output in
# between. The module tree (`block.i.layer.j.SelfAttention` …) is HF's, so the state dicts line up; properties give
# its parts readable names (`block.self_attention`, `block.cross_attention`, `block.feed_forward`,
# `stack.relative_bias`) without changing a state-dict key.

# %%
#| export
class SelfAttentionLayer(nn.Module):
    def __init__(self, config: ModelConfig, has_bias: bool, bidirectional: bool):
        super().__init__()
        self.SelfAttention = Attention(config, has_bias, bidirectional)
        self.layer_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = dropout(config.dropout_rate)

    def forward(self, h, bias, past=None):
        out, kv = self.SelfAttention(self.layer_norm(h), bias, past=past)
        return h + self.dropout(out), kv


class CrossAttentionLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.EncDecAttention = Attention(config)
        self.layer_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = dropout(config.dropout_rate)

    def forward(self, h, encoder_out, mask, past=None):
        out, kv = self.EncDecAttention(self.layer_norm(h), mask, kv_input=encoder_out, past=past)
        return h + self.dropout(out), kv


class FeedForwardLayer(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.DenseReluDense = GatedFeedForward(config)  # HF's name (from v1.0's ReLU MLP), kept so state dicts match
        self.layer_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = dropout(config.dropout_rate)

    def forward(self, h):
        return h + self.dropout(self.DenseReluDense(self.layer_norm(h)))


class Block(nn.Module):
    "One encoder block (self-attn, FF) or decoder block (causal self-attn, cross-attn, FF)"

    def __init__(self, config: ModelConfig, is_decoder: bool, has_bias: bool):
        super().__init__()
        self.is_decoder = is_decoder
        layers = [SelfAttentionLayer(config, has_bias, bidirectional=not is_decoder)]
        if is_decoder:
            layers.append(CrossAttentionLayer(config))
        self.layer = nn.ModuleList(layers + [FeedForwardLayer(config)])  # HF's name and order: the state-dict keys

    @property
    def self_attention(self) -> Attention:
        return self.layer[0].SelfAttention

    @property
    def cross_attention(self) -> Attention | None:
        return self.layer[1].EncDecAttention if self.is_decoder else None

    @property
    def feed_forward(self) -> GatedFeedForward:
        return self.layer[-1].DenseReluDense

    def forward(self, h, bias, encoder_out=None, encoder_mask=None, past: BlockCache | None = None):
        "Returns (h, BlockCache): the keys/values to pass back as `past` at the next decoding step"
        h, self_kv = self.layer[0](h, bias, past=None if past is None else past.self_attn)
        cross_kv = None
        if self.is_decoder:
            h, cross_kv = self.layer[1](h, encoder_out, encoder_mask, past=None if past is None else past.cross_attn)
        return self.layer[-1](h), BlockCache(self_kv, cross_kv)


# %%
cfg = ModelConfig(d_model=32, d_kv=8, num_heads=4, relative_attention_num_buckets=16, relative_attention_max_distance=20)
h = torch.randn(2, 7, cfg.d_model)
enc_out, enc_cache = Block(cfg, is_decoder=False, has_bias=True)(h, None)
dec_out, dec_cache = Block(cfg, is_decoder=True, has_bias=True)(h[:, :3], None, encoder_out=h)
test_eq((enc_out.shape, dec_out.shape), ((2, 7, cfg.d_model), (2, 3, cfg.d_model)))
test_eq((enc_cache.cross_attn, dec_cache.cross_attn.k.shape), (None, (2, cfg.num_heads, 7, cfg.d_kv)))


# %% [markdown]
# A stack embeds, runs its blocks with the position bias of block 0 (+ mask), and ends with a final norm.
# The decoder's mask is causal; padding masks hide padded keys (the encoder's, and the decoder's own when fine-tuning
# pads its targets; with padding on the right the causal mask already hides those positions from every real one, so
# the decoder's mask changes no loss, and it makes the decoder's bias one [batch, heads, L, L] tensor instead of
# [1, heads, L, L]). Masked entries get **half the most negative value of the compute dtype**
# (`torch.finfo(dtype).min / 2`) and stay finite: float32's minimum becomes `-inf` once cast to 16 bits, fp16's own
# minimum (HF's choice) once a large enough negative score is added to it (in bf16 the sum rounds back to the
# minimum), and a row whose keys are all padding is then all
# `-inf`, whose textbook softmax is `nan`. torch's math attention path uses a "safe" softmax that returns zeros for such rows (`aten::_safe_softmax`,
# in lesson 03's profile), so this is a safeguard for any code that does not. The bias is cast to the compute
# dtype (autocast's, when it is on) **once per stack**: every block shares one tensor, instead of each keeping its
# own 16-bit copy for the backward pass (by construction; its memory saving is not measured here).

# %%
#| export
def compute_dtype(x: torch.Tensor) -> torch.dtype:
    "The dtype matmuls on `x` run in: autocast's when autocast is on for x's device, else x's own"
    device = x.device.type
    if device != "meta" and torch.is_autocast_enabled(device):  # ('meta' has no autocast)
        return torch.get_autocast_dtype(device)
    return x.dtype


def mask_value(dtype: torch.dtype) -> float:
    "What a masked attention entry gets: half the dtype's most negative value (a score added to it stays finite)"
    return torch.finfo(dtype).min / 2


def additive_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    "[B, k_len] 1/0 mask -> [B, 1, 1, k_len] additive mask: 0 where attended, `mask_value(dtype)` where padded"
    if attention_mask is None:
        return None
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * mask_value(dtype)


class Stack(nn.Module):
    "Encoder or decoder stack: embeddings → blocks → final RMSNorm"

    def __init__(self, config: ModelConfig, embed_tokens: nn.Embedding, is_decoder: bool):
        super().__init__()
        self.is_decoder, self.embed_tokens = is_decoder, embed_tokens
        n = config.num_decoder_layers if is_decoder else config.num_layers
        self.block = nn.ModuleList([Block(config, is_decoder, has_bias=i == 0) for i in range(n)])
        self.final_layer_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = dropout(config.dropout_rate)

    @property
    def relative_bias(self) -> RelativePositionBias:
        "The stack's one relative position bias table (HF keeps it in block 0's self-attention)"
        return self.block[0].self_attention.relative_attention_bias

    def position_bias(self, q_len: int, k_len: int, attention_mask: torch.Tensor | None = None, q_offset: int = 0,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
        "Block 0's relative position bias with the causal and padding ([B, k_len] 1/0) masks, in `dtype`, for every block"
        bias = self.relative_bias(q_len, k_len, q_offset)
        keep = None
        if self.is_decoder and q_len > 1:
            keep = torch.ones(q_len, k_len, dtype=torch.bool, device=bias.device).tril(k_len - q_len)
        if attention_mask is not None:
            keys = attention_mask[:, None, None, :].bool()
            keep = keys if keep is None else keep & keys
        if keep is not None:
            bias = bias.masked_fill(~keep, mask_value(dtype))
        return bias.to(dtype)

    def forward(self, input_ids, attention_mask=None, encoder_out=None, encoder_mask=None,
                past: list[BlockCache] | None = None) -> tuple[torch.Tensor, list[BlockCache]]:
        "Hidden states [B, len, d_model] and one BlockCache per block (the `past` of the next decoding step)"
        h = self.dropout(self.embed_tokens(input_ids))
        offset = 0 if past is None else past[0].length   # positions decoded so far
        dtype = compute_dtype(h)
        bias = self.position_bias(input_ids.shape[1], offset + input_ids.shape[1], attention_mask, offset, dtype)
        enc_mask = additive_mask(encoder_mask, dtype)
        caches = []
        for i, block in enumerate(self.block):
            h, cache = block(h, bias, encoder_out, enc_mask, None if past is None else past[i])
            caches.append(cache)
        return self.dropout(self.final_layer_norm(h)), caches


# %% [markdown]
# What every layer of a stack receives, for a padded batch of two rows (12 encoder tokens, the second row
# padded after 8; 6 decoder tokens): the position bias of head 0, its masked entries replaced by half of fp32's most
# negative value (the softmax gives them weight 0) and drawn black. Cross-attention has no position bias,
# only the encoder's padding mask. The bias table here is random (std 1, larger than at init, so the colours show).

# %%
cfg = ModelConfig(d_model=32, d_kv=8, num_heads=4, relative_attention_num_buckets=16, relative_attention_max_distance=20)
enc, dec = Stack(cfg, nn.Embedding(64, 32), is_decoder=False), Stack(cfg, nn.Embedding(64, 32), is_decoder=True)
for stack in (enc, dec):
    nn.init.normal_(stack.relative_bias.weight)
enc_attention_mask = torch.ones(2, 12, dtype=torch.long); enc_attention_mask[1, 8:] = 0
with torch.no_grad():
    enc_bias = enc.position_bias(12, 12, enc_attention_mask)                                 # [2, heads, 12, 12]
    dec_bias = dec.position_bias(6, 6)                                                       # [1, heads, 6, 6]
cross_mask = additive_mask(enc_attention_mask, torch.float32).expand(2, 1, 6, 12)             # [2, 1, 6, 12]
test_eq((enc_bias.shape, dec_bias.shape), ((2, 4, 12, 12), (1, 4, 6, 6)))
test_eq(bool((enc_bias[1, :, :, 8:] < -1e38).all()), True)                    # padded keys masked, every query
test_eq(bool((dec_bias[0, :, torch.ones(6, 6).triu(1).bool()] < -1e38).all()), True)   # the future masked

panels = [("encoder self-attention\nrow 0 (no padding)", enc_bias[0, 0]),
          ("encoder self-attention\nrow 1 (keys 8–11 are padding)", enc_bias[1, 0]),
          ("decoder self-attention\n(causal)", dec_bias[0, 0]),
          ("cross-attention, row 1\n(mask only, no position bias)", cross_mask[1, 0])]
cmap = plt.cm.coolwarm.copy(); cmap.set_bad("black")
fig, axs = plt.subplots(1, 4, figsize=(13, 3.6), constrained_layout=True, gridspec_kw={"width_ratios": [12, 12, 6, 12]})
for ax, (title, grid) in zip(axs, panels):
    masked = grid.numpy() < -1e30
    im = ax.imshow(np.ma.masked_array(np.where(masked, 0, grid.numpy()), mask=masked), cmap=cmap, vmin=-2.5, vmax=2.5)
    ax.set_title(title, fontsize=9); ax.set_xlabel("key"); ax.set_ylabel("query")
fig.colorbar(im, ax=axs, shrink=0.8, label="additive bias (black: masked)"); plt.show()


# %% [markdown]
# ## Initialization, and the LM-head fix
#
# T5 folds the attention scaling into the init: `q` gets std `(d_model·d_kv)^-½` (the `d_model^-½` of `k`, times
# the `1/√d_kv` that attention leaves out), `k`, `v` and
# `wi_*` std `d_model^-½`, `o` std `(num_heads·d_kv)^-½` (its input width; equal to `d_model` in Base), `wo` std
# `d_ff^-½`, the position-bias table `d_model^-½`, norms 1, embeddings 1 (HF's choice). HF (and so nanoT5) also give the
# **untied LM head std 1**, so the initial logits have std ≈ √d_model and the first loss is ~10× ln V for
# Base, ~7× for `tiny` (both measured at the end of the lesson; google-research/t5x#1477 reports a first loss of ~110 for HF's init and says nanoT5 shows the same). A community pull request to HF's code (transformers#26441, still open; HF keeps std 1) and that t5x issue argue that an untied head should get `d_model^-½`, as in Mesh TF's code. We default to that (`lm_head_init_fix=True`) and keep HF's as an
# option to reproduce nanoT5.

# %%
#| export
def init_weights(model: nn.Module, config: ModelConfig):
    "T5 init (std per parameter kind, factor `initializer_factor`), with the optional LM-head fix"
    f, d, dkv, h, dff = config.initializer_factor, config.d_model, config.d_kv, config.num_heads, config.d_ff
    for name, module in model.named_modules():
        if isinstance(module, RMSNorm):
            nn.init.constant_(module.weight, f)
        elif isinstance(module, Attention):
            nn.init.normal_(module.q.weight, std=f * (d * dkv) ** -0.5)
            for lin in (module.k, module.v):
                nn.init.normal_(lin.weight, std=f * d ** -0.5)
            nn.init.normal_(module.o.weight, std=f * (h * dkv) ** -0.5)
            if hasattr(module, "relative_attention_bias"):
                nn.init.normal_(module.relative_attention_bias.weight, std=f * d ** -0.5)
        elif isinstance(module, GatedFeedForward):
            nn.init.normal_(module.wi_0.weight, std=f * d ** -0.5)
            nn.init.normal_(module.wi_1.weight, std=f * d ** -0.5)
            nn.init.normal_(module.wo.weight, std=f * dff ** -0.5)
    nn.init.normal_(model.shared.weight, std=f * 1.0)
    if not config.tie_word_embeddings:
        nn.init.normal_(model.lm_head.weight, std=f * (d ** -0.5 if config.lm_head_init_fix else 1.0))


# %% [markdown]
# (`init_weights` runs when a `T5` is built, below; after the parameter counts, a check measures seven of these stds: `q`, `k`, `o`, `wi_0`, `wo`, the embeddings and the LM head; in `tiny`, `o`'s formula gives the same number as `k`'s, so that check cannot tell them apart.)

# %% [markdown]
# ## The model
#
# `T5` puts it together: a shared embedding, encoder, decoder, LM head (untied in v1.1; tied with the
# `d_model^-½` rescale in v1.0), cross-entropy over labels with `-100` ignored, and `decoder_input_ids`
# made from the labels by shifting right with the start token 0 (= pad). Inputs are checked first, so a
# wrong batch shows a sentence, not a shape error from deep inside (see the appendix).

# %%
#| export
@dataclass
class Seq2SeqOutput:
    "What `T5.forward` returns"
    logits: torch.Tensor
    loss: torch.Tensor | None = None
    encoder_last_hidden_state: torch.Tensor | None = None


def shift_right(labels: torch.Tensor, start_token_id: int = 0, pad_token_id: int = 0) -> torch.Tensor:
    "Decoder inputs from labels: prepend the start token, drop the last, -100 → pad"
    shifted = torch.cat([labels.new_full((labels.shape[0], 1), start_token_id), labels[:, :-1]], dim=1)
    return shifted.masked_fill(shifted == -100, pad_token_id)


class T5(nn.Module):
    "T5 v1.1 encoder-decoder (HF-compatible parameter names), SDPA attention, KV-cache greedy generation"

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.shared = nn.Embedding(config.vocab_size, config.d_model)
        self.encoder = Stack(config, self.shared, is_decoder=False)
        self.decoder = Stack(config, self.shared, is_decoder=True)
        if not config.tie_word_embeddings:
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        init_weights(self, config)

    def head(self, h: torch.Tensor) -> torch.Tensor:
        if self.config.tie_word_embeddings:
            return F.linear(h * self.config.d_model ** -0.5, self.shared.weight)
        return self.lm_head(h)

    def _check(self, input_ids, attention_mask, decoder_input_ids, labels):
        V = self.config.vocab_size
        for name, t in [("input_ids", input_ids), ("decoder_input_ids", decoder_input_ids), ("labels", labels)]:
            if t is None:
                continue
            if t.dtype not in (torch.int64, torch.int32):
                raise TypeError(f"{name} must be an integer tensor of token ids, got {t.dtype}: "
                                "pass tokenizer output as torch.long.")
            if t.ndim != 2:
                raise ValueError(f"{name} must be [batch, length], got shape {tuple(t.shape)}.")
            if t.shape[0] != input_ids.shape[0]:
                raise ValueError(f"Batch sizes differ: input_ids has {input_ids.shape[0]} rows, {name} has "
                                 f"{t.shape[0]}.")
            if t.device.type != "cpu" or torch.compiler.is_compiling():
                continue  # the value scan would sync the device / break the compiled graph on every step
            bad = (t < 0) | (t >= V)
            if name == "labels":
                bad &= t != -100
            if bad.any():
                raise ValueError(f"{name} holds ids outside [0, {V}) (e.g. {int(t[bad][0])}): the tokenizer and the "
                                 f"model's vocab_size ({V}) do not match" + (", or mask labels with -100" if name == "labels" else "") + ".")
        if attention_mask is not None and attention_mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask shape {tuple(attention_mask.shape)} differs from input_ids "
                             f"{tuple(input_ids.shape)}.")

    def encode(self, input_ids, attention_mask=None) -> torch.Tensor:
        return self.encoder(input_ids, attention_mask)[0]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                decoder_input_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                decoder_attention_mask: torch.Tensor | None = None) -> Seq2SeqOutput:
        "Logits (and the loss, given labels); `decoder_attention_mask` [B, target length] hides padded decoder positions"
        self._check(input_ids, attention_mask, decoder_input_ids, labels)
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("Pass decoder_input_ids or labels (decoder inputs are made from labels).")
            decoder_input_ids = shift_right(labels, self.config.decoder_start_token_id, self.config.pad_token_id)
        if decoder_attention_mask is not None and decoder_attention_mask.shape != decoder_input_ids.shape:
            raise ValueError(f"decoder_attention_mask shape {tuple(decoder_attention_mask.shape)} differs from the "
                             f"decoder inputs {tuple(decoder_input_ids.shape)} (one entry per target position).")
        encoder_out = self.encode(input_ids, attention_mask)
        h, _ = self.decoder(decoder_input_ids, decoder_attention_mask, encoder_out=encoder_out,
                            encoder_mask=attention_mask)
        logits = self.head(h)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=-100)
        return Seq2SeqOutput(logits=logits, loss=loss, encoder_last_hidden_state=encoder_out)

    @torch.no_grad()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int = 32, attention_mask: torch.Tensor | None = None,
                 top_k: int | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        "Greedy (or top-k sampled) decoding with a KV cache; rows start with the decoder start token and pad after EOS"
        self._check(input_ids, attention_mask, None, None)
        cfg = self.config
        encoder_out = self.encode(input_ids, attention_mask)
        out = input_ids.new_full((input_ids.shape[0], 1), cfg.decoder_start_token_id)
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        past = None
        for _ in range(max_new_tokens):
            h, past = self.decoder(out[:, -1:], encoder_out=encoder_out, encoder_mask=attention_mask, past=past)
            logits = self.head(h[:, -1]).float()
            if top_k:  # sample among the k most likely tokens, in proportion to their probabilities
                best, best_ids = logits.topk(top_k, dim=-1)
                pick = torch.multinomial(best.softmax(-1).cpu(), 1, generator=generator).to(best_ids.device)
                next_token = best_ids.gather(-1, pick)[:, 0]
            else:
                next_token = logits.argmax(-1)
            next_token = next_token.masked_fill(done, cfg.pad_token_id)
            out = torch.cat([out, next_token[:, None]], dim=1)
            done |= next_token == cfg.eos_token_id
            if done.all():
                break
        return out

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


# %% [markdown]
# Parameter counts of the presets, built on PyTorch's `meta` device (tensors with shapes and no data: nothing is
# allocated or initialised, so even Base costs no memory); T5-Base must come out at exactly 247,577,856, T5-v1.1-Base with
# its untied head as nanoT5 pre-trains it (nanoT5's README gives the count rounded to millions):

# %%
with torch.device("meta"):
    counts = {name: T5(get_config(name)).num_parameters() for name in MODEL_PRESETS}
test_eq(counts["t5-v1_1-base"], 247_577_856)
test_eq(counts["tiny"], 13_637_632)  # 2·8192·256 + 4 encoder + 4 decoder blocks + 2 bias tables + 2 final norms
counts

# %% [markdown]
# And the init stds of `init_weights`, measured on a freshly built `tiny` model (`d_model` 256, `d_kv` 32,
# `d_ff` 1024):

# %%
torch.manual_seed(0)
t = T5(get_config("tiny"))
att, ff = t.encoder.block[0].self_attention, t.encoder.block[0].feed_forward
stds = {"q": (att.q.weight, (256 * 32) ** -0.5), "k": (att.k.weight, 256 ** -0.5), "o": (att.o.weight, 256 ** -0.5),
        "wi_0": (ff.wi_0.weight, 256 ** -0.5), "wo": (ff.wo.weight, 1024 ** -0.5), "shared": (t.shared.weight, 1.0),
        "lm_head": (t.lm_head.weight, 256 ** -0.5)}
for name, (w, expected) in stds.items():
    test_close(w.std().item() / expected, 1.0, eps=0.03)
{name: round(w.std().item(), 4) for name, (w, _) in stds.items()}

# %% [markdown]
# The walk of one batch through the model at the top of lesson [03](03_t5_layers.ipynb), measured with forward
# hooks on a T5-Base batch on the `meta` device, is in the appendix: it checks most of the table's shapes, and nothing
# below needs it.

# %% [markdown]
# ## Moving weights between HF and us
#
# Our state dict has HF's keys, the `encoder/decoder.embed_tokens` aliases of the shared embedding included;
# `save_pretrained` leaves the aliases out of the file, as HF's files do. So `T5.from_hf` and `model.to_hf()` are state-dict copies with a strict key check,
# and `model.save_pretrained(dir)` writes HF's format: `config.json` + `model.safetensors`. They are methods
# of `T5`, added here with fastcore's `@patch` so that they can be read next to the format they convert.

# %%
#| export
HF_ALIAS_KEYS = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight")  # HF's names for `shared`, not saved


@patch(cls_method=True)
def from_hf(cls: T5, model_or_dir) -> T5:
    "Our T5 with the weights of a `T5ForConditionalGeneration` (instance, local directory or hub name)"
    if isinstance(model_or_dir, (str, Path)):
        from transformers import T5ForConditionalGeneration
        model_or_dir = T5ForConditionalGeneration.from_pretrained(model_or_dir)
    config = ModelConfig.from_hf(model_or_dir.config)
    config.tie_word_embeddings = model_or_dir.lm_head.weight is model_or_dir.shared.weight
    with torch.device("meta"):
        model = cls(config)
    state = dict(model_or_dir.state_dict())
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    model.load_state_dict(state, strict=True, assign=True)
    model.encoder.embed_tokens = model.decoder.embed_tokens = model.shared
    return model


@patch
def to_hf(self: T5):
    "The same weights in a `transformers.T5ForConditionalGeneration`"
    model = hf_reference(self.config)
    missing, unexpected = model.load_state_dict(self.state_dict(), strict=False)
    assert not unexpected and set(missing) <= set(HF_ALIAS_KEYS) | {"lm_head.weight"}, (missing, unexpected)
    return model


@patch
def save_pretrained(self: T5, save_dir: str | Path):
    "Write `config.json` + `model.safetensors` in HF's format (loadable by `T5ForConditionalGeneration.from_pretrained`)"
    from safetensors.torch import save_file
    save_dir = Path(save_dir)
    save_dir.mkdir(parents=True, exist_ok=True)
    config = self.config.to_hf()
    config.architectures = ["T5ForConditionalGeneration"]
    config.to_json_file(save_dir / "config.json")
    state = {k: v.detach().contiguous() for k, v in self.state_dict().items() if k not in HF_ALIAS_KEYS}
    save_file(state, save_dir / "model.safetensors", metadata={"format": "pt"})


# %% [markdown]
# ## Checks against `transformers` on whole models
#
# Three configs that vary depth (different encoder and decoder depths), heads, `d_kv`, buckets and tied vs
# untied heads. HF → ours: logits within 1e-4 in fp32 with padded inputs (and padded targets), and gradients of the
# loss within 1e-4.

# %%
test_configs = [
    ModelConfig(vocab_size=512, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=3, num_heads=4),
    ModelConfig(vocab_size=384, d_model=48, d_kv=8, d_ff=96, num_layers=3, num_decoder_layers=1, num_heads=6,
                relative_attention_num_buckets=16, relative_attention_max_distance=32),
    ModelConfig(vocab_size=256, d_model=32, d_kv=12, d_ff=64, num_layers=1, num_heads=2, tie_word_embeddings=True,
                relative_attention_num_buckets=8, relative_attention_max_distance=16),
]

def batch_for(cfg, B=3, S=11, T=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(2, cfg.vocab_size, (B, S), generator=g)
    attention_mask = torch.ones(B, S, dtype=torch.long)
    attention_mask[1, 7:] = 0; attention_mask[2, 4:] = 0                       # padded rows
    labels = torch.randint(2, cfg.vocab_size, (B, T), generator=g)
    labels[2, 5:] = -100
    return input_ids.masked_fill(attention_mask == 0, 0), attention_mask, labels

for cfg in test_configs:
    torch.manual_seed(0)
    hf = hf_reference(cfg).eval()
    ours = T5.from_hf(hf).eval()
    ids, am, labels = batch_for(cfg)
    hf_out, our_out = hf(input_ids=ids, attention_mask=am, labels=labels), ours(ids, am, labels=labels)
    test_close(our_out.logits, hf_out.logits, eps=1e-4)
    test_close(our_out.loss, hf_out.loss, eps=1e-5)
    hf_out.loss.backward(); our_out.loss.backward()
    hf_grads = dict(hf.named_parameters())
    for name, p in ours.named_parameters():
        test_close(p.grad, hf_grads[name].grad, eps=1e-4)
    # fine-tuning pads the targets: a decoder padding mask (1 on the start token and every target) gives HF's logits
    dec_mask = torch.cat([torch.ones_like(labels[:, :1]), (labels[:, :-1] != -100).long()], dim=1)
    with torch.no_grad():
        test_close(ours(ids, am, labels=labels, decoder_attention_mask=dec_mask).logits,
                   hf(input_ids=ids, attention_mask=am, labels=labels, decoder_attention_mask=dec_mask).logits, eps=1e-4)
print("logits and gradients equal HF on", len(test_configs), "configs (logits with a decoder padding mask too)")

# %% [markdown]
# The round trip HF → ours → HF and a `save_pretrained` checkpoint loaded by plain `transformers` are checked in
# the appendix: conversion plumbing, which nothing below needs.

# %% [markdown]
# ## Generation with a KV cache
#
# Greedy decoding runs the encoder once. In each step the decoder sees one new token: self-attention
# appends its key/value to a cache, cross-attention keys/values are computed from the encoder output at
# the first step and reused, and the position bias is computed for the one query at its offset. The tokens
# must be identical to HF's `generate(do_sample=False)` (HF's own cache crashes when the decoder is deeper
# than the encoder, so there we compare with `use_cache=False`). The models are untrained, so the ids are
# arbitrary: what matters is that ours and HF's agree token for token. Each printed tensor is one test config's
# batch of 4 (start token 0, then 12 generated ids). The all-zero one is the config with a tied head. Our reading, not measured here: at init the
# decoder's output still carries, through the residual stream, the embedding of its input token, and a head that
# *is* the embedding matrix scores that same token highest — the start token 0, again and again.

# %%
for cfg in test_configs:
    torch.manual_seed(1)
    ours = T5(replace(cfg, lm_head_init_fix=False)).eval()   # std-1 head: peaked logits, fewer ties
    hf = ours.to_hf().eval()
    ids, am, _ = batch_for(cfg, B=4, seed=3)
    use_cache = cfg.num_decoder_layers <= cfg.num_layers
    ref = hf.generate(input_ids=ids, attention_mask=am, max_new_tokens=12, do_sample=False, num_beams=1,
                      use_cache=use_cache, eos_token_id=cfg.eos_token_id, pad_token_id=cfg.pad_token_id)
    generated = ours.generate(ids, 12, attention_mask=am)
    test_eq(generated.tolist(), ref.tolist())
    if not cfg.tie_word_embeddings:    # a tied head at init keeps repeating the start token; untied ones vary
        test_eq(len(generated.unique()) > 10, True)
    print(generated)

# %% [markdown]
# `top_k=k` samples each token among the *k* most likely instead of taking the best one (more varied text,
# e.g. for filling blanks in [05b_what_it_learned](05b_what_it_learned.ipynb)). With `top_k=1` it is greedy decoding again, and a seeded generator makes a
# sample repeatable (checked below on the last model of the loop above, the tied-head one, whose greedy output is
# all one token: a narrow check of the first claim):

# %%
sampled = ours.generate(ids, 12, attention_mask=am, top_k=1, generator=torch.Generator().manual_seed(0))
test_eq(sampled.tolist(), generated.tolist())
draw = lambda seed: ours.generate(ids, 12, attention_mask=am, top_k=50, generator=torch.Generator().manual_seed(seed))
test_eq(draw(5).tolist(), draw(5).tolist())
test_ne(draw(5).tolist(), generated.tolist())

# %% [markdown]
# ## The LM-head fix, measured
#
# Initial loss of the `tiny` model on random tokens, with HF's std-1 head and with the fix. The uniform
# prediction would give `ln V` = 9.01:

# %%
tiny_ids = torch.randint(3, 8100, (8, 64), generator=torch.Generator().manual_seed(0))
tiny_labels = torch.randint(3, 8100, (8, 16), generator=torch.Generator().manual_seed(1))
initial = {}
for fix in (False, True):
    torch.manual_seed(0)
    initial[fix] = T5(get_config("tiny", lm_head_init_fix=fix))(tiny_ids, labels=tiny_labels).loss.item()
print(f"initial loss: std-1 head {initial[False]:.1f}, fixed head {initial[True]:.2f}, ln V = {math.log(8192):.2f}")
assert initial[True] < math.log(8192) + 1 < initial[False]


# %% [markdown]
# Why so far off? The decoder's last RMSNorm leaves hidden states of RMS ≈ 1, so a vector of norm ≈ √d_model.
# Each logit is its dot product with one head row; with std-1 rows the logits have std ≈ √d_model (16 for
# tiny, 27.7 for Base: printed with the figure), the softmax is nearly one-hot on a random token, and the loss on
# the right token is many times `ln V` — and more so the wider the model: about 7× for tiny and about 10× for Base. Rows of std `d_model^-½` give logits of std ≈ 1 and a loss just above `ln V`. The head is
# the only difference, so below one set of decoder outputs per model meets both heads:

# %%
def decoder_outputs(name, seed=0):
    "Final decoder states of an untrained preset on random tokens, and the labels they must predict"
    cfg = get_config(name)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, cfg.vocab_size - 100, (2, 64), generator=g)
    labels = torch.randint(3, cfg.vocab_size - 100, (2, 16), generator=g)
    torch.manual_seed(seed)
    model = T5(cfg).eval()
    with torch.no_grad():
        h, _ = model.decoder(shift_right(labels), encoder_out=model.encode(ids))
    return h, labels, cfg

head_std = {"HF std 1": lambda d: 1.0, "fixed, d_model^-½": lambda d: d ** -0.5}
measured = {}   # preset -> head -> (logits, initial loss / ln V)
for name in ("tiny", "t5-v1_1-base"):
    h, labels, cfg = decoder_outputs(name)
    head = torch.randn(cfg.vocab_size, cfg.d_model, generator=torch.Generator().manual_seed(0))
    measured[name] = {}
    for label, std in head_std.items():
        logits = h @ (head * std(cfg.d_model)).T
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten()).item()
        measured[name][label] = (logits, loss / math.log(cfg.vocab_size))

fig, axs = plt.subplots(1, 2, figsize=(11, 3.3), gridspec_kw={"width_ratios": [3, 2]})
for label, (logits, _) in measured["tiny"].items():
    axs[0].hist(logits.flatten().numpy(), bins=np.linspace(-80, 80, 161), alpha=0.7, density=True,
                label=f"{label}: std {logits.std():.1f}")
axs[0].set_yscale("log"); axs[0].set_xlabel("initial logit (tiny, d_model 256)"); axs[0].legend(fontsize=8)
axs[0].set_title("initial logits", fontsize=10)
x = np.arange(2)
for i, label in enumerate(head_std):
    ratios = [measured[n][label][1] for n in ("tiny", "t5-v1_1-base")]
    bars = axs[1].bar(x + (i - 0.5) * 0.38, ratios, 0.38, label=label)
    axs[1].bar_label(bars, fmt="%.1f×", fontsize=8)
axs[1].axhline(1, color="k", lw=0.8, ls="--"); axs[1].text(1.45, 1.3, "ln V", fontsize=8, ha="right")
axs[1].set_xticks(x, ["tiny (d 256)", "Base (d 768)"]); axs[1].set_ylabel("initial loss / ln V")
axs[1].legend(fontsize=8); axs[1].set_title("initial loss, in units of ln V", fontsize=10)
plt.tight_layout(); plt.show()
for n in measured:
    print(f"{n}:", "; ".join(f"{label} head: logits std {logits.std():.1f}, initial loss {r:.1f}× ln V"
                             for label, (logits, r) in measured[n].items()))
ratio = {n: measured[n]["HF std 1"][1] for n in measured}
assert 5 < ratio["tiny"] < 8 and 9 < ratio["t5-v1_1-base"] < 13                 # the loss grows like √d_model; in units of ln V a little less (V grows too)
assert all(1 <= measured[n]["fixed, d_model^-½"][1] < 1.1 for n in measured)     # just above ln V

# %% [markdown]
# So with HF's init (and nanoT5's) training starts from logits far too large and a loss many times `ln V`
# (nanoT5#25 reports the std-1 head); what that start costs later in training, this lesson does not measure.

# %% [markdown]
# ## What you learned
#
# - T5 v1.1 is a pre-norm encoder-decoder: every sublayer is `h + f(RMSNorm(h))`, an encoder block is
#   self-attention then feed-forward, a decoder block adds cross-attention in between, and each stack ends with an
#   RMSNorm.
# - A stack computes block 0's position bias once, replaces its masked entries (padding, or the causal future) with a
#   large negative value and hands the result to every block; cross-attention gets only the encoder's padding mask.
# - The init sets each weight matrix's std from its fan-in, except the embedding (1), the position-bias table (`d_model^-½`) and HF's untied head (1), and
#   puts attention's `1/√d_kv` into `q`. HF's std-1 untied LM
#   head starts the loss at ≈ 7× ln V for `tiny` and ≈ 10× for Base; `d_model^-½` starts it just above ln V.
# - With the same weights and inputs, our whole models give HF's logits and gradients within 1e-4, the state
#   dicts convert both ways (`from_hf`, `to_hf`, `save_pretrained`), and greedy generation with our KV cache gives
#   HF's tokens.
# - T5-Base (v1.1, untied head, as nanoT5 pre-trains it) has exactly 247,577,856 parameters; `tiny` has 13.6M.
#
# ## Questions
#
# 1. Why does the decoder's self-attention need a causal mask but the cross-attention does not? Which mask does
#    the cross-attention get?
# 2. **Predict, then run** the init-std cell: `o` gets std `(num_heads·d_kv)^-½` and `k` gets `d_model^-½`. Do
#    they differ in `tiny`? For which of the three presets do they differ?
# 3. **Predict, then run** the parameter-count cell: what share of `tiny`'s 13.6M parameters sits in the embedding
#    and the LM head? What does that say about the demo's vocabulary size (01)?
# 4. **Predict, then run** the first cell of "The LM-head fix, measured": the initial loss with HF's std-1 head and
#    with the fixed head, next to ln V. Why is the first so far above ln V, and why does the gap grow with
#    `d_model`?
# 5. In the generation cell, one config generates only token 0. Why might a tied head at init keep choosing the
#    token it was given, and how would you test it?
# 6. What does the KV cache store per decoder block, and why do the cross-attention keys and values never grow
#    while decoding? What would greedy decoding of T tokens cost without a cache?
# 7. Why compare with `transformers` on three small, odd configs (unequal depths, a tied head, few buckets) rather
#    than on T5-Base alone?
# 8. **Predict, then run:** in "Checks against `transformers` on whole models", tighten the logits check from
#    `eps=1e-4` to `eps=1e-7`. Will it pass? Why do two correct fp32 implementations not agree to the last bit?
# 9. `T5.from_hf` builds the model on the `meta` device and loads with `assign=True`. What does that avoid?
# 10. **Predict, then run:** `shift_right(torch.tensor([[5, -100, 7]]))`. Where does `-100` come from, and what
#     would the embedding do with it if `shift_right` left it in?
# 11. `T5` scans token ids for out-of-range values only on CPU tensors (the appendix). Why not on a GPU, and where
#     is a tokenizer that does not fit the model caught there?
#
# ## Try it
#
# 1. **Head init sweep** (seconds). Build `T5(get_config("tiny"))`, set `lm_head.weight` to normal noise of std `1`,
#    `0.25`, `256**-0.5` and `0` in turn, and compute the loss on `tiny_ids`/`tiny_labels` as in the LM-head cell.
#    Predict the loss at std 0 before you run it; look at how close to ln V = 9.01 each std gets (can a random
#    head start below it?).
# 2. **A tied head** (seconds). Compute the same initial loss for `T5(get_config("tiny", tie_word_embeddings=True))`,
#    the v1.0 way (the embedding as head, logits × `d_model^-½`). Look at where it starts next to the two untied
#    heads, and why the rescale in `T5.head` matters.
# 3. **What the cache buys** (a minute). For an untrained `tiny` model and a batch of 4 random 128-token inputs,
#    time `model.generate(x, 32)` against a loop that appends the argmax of
#    `model(x, decoder_input_ids=out).logits[:, -1]` 32 times. Check that the tokens are equal, then compare the
#    times at 32 and 128 new tokens. The loop without a cache also re-runs the encoder at every step, so its extra
#    time counts both the re-encoding and the decoder's recomputation; time one encoder pass on its own to split them.
#
# Next: lesson [04](04_optimizers.ipynb) chooses the optimizer that trains this model.

# %% [markdown]
# ## Appendix: notes
#
# **What `T5` checks.** Dtypes and shapes of its inputs always; the id-range scan only for CPU tensors outside
# `torch.compile`, since on a GPU it would cost a device sync every step — the training loop checks the
# tokenizer against `vocab_size` once, before it starts.

# %% [markdown]
# ## Appendix: one more view
#
# Moved out of the reading path: what the KV cache holds while generating.

# %% [markdown]
# **What the cache holds** ("Generation with a KV cache"). The cache is one `BlockCache` per decoder block. After three steps of a batch of 4, each holds
# self-attention keys/values for the 3 positions so far and cross-attention keys/values for the 11 encoder
# positions (which never grow):

# %%
small = T5(test_configs[0]).eval()
c_ids, c_mask, _ = batch_for(small.config, B=4)
with torch.no_grad():
    encoder_out, past, tokens = small.encode(c_ids, c_mask), None, torch.zeros(4, 1, dtype=torch.long)
    for step in range(3):
        h, past = small.decoder(tokens, encoder_out=encoder_out, encoder_mask=c_mask, past=past)
        tokens = small.head(h).argmax(-1)
c = small.config
test_eq(len(past), c.num_decoder_layers)
test_eq((past[0].length, tuple(past[0].self_attn.k.shape), tuple(past[0].cross_attn.v.shape)),
        (3, (4, c.num_heads, 3, c.d_kv), (4, c.num_heads, 11, c.d_kv)))
{name: tuple(kv.k.shape) for name, kv in past[0]._asdict().items()}

# %% [markdown]
# ## Appendix: two more checks
#
# Moved out of the reading path: the shape walk-through of lesson 03's first section, measured (from "The model"), and
# the HF round trip with `save_pretrained` (from "Moving weights between HF and us").

# %% [markdown]
# Now the walk-through from the top of lesson [03](03_t5_layers.ipynb), measured: a T5-Base batch of `B = 4` rows on the `meta`
# device (tensors with shapes and no data, so nothing is computed), with a forward hook on each module the
# table names. A hook sees a linear layer's output, so `q` and the cross-attention `k` show up before the split
# into heads: `[B, len, 768]` is the table's `[B, 12, len, 64]` with the 12 heads of 64 side by side.

# %%
with torch.device("meta"):
    base = T5(get_config("t5-v1_1-base"))
    input_ids, labels = torch.zeros(4, 512, dtype=torch.long), torch.zeros(4, 114, dtype=torch.long)
enc_block, dec_block = base.encoder.block[0], base.decoder.block[0]
watch = {"2 encoder embedding": base.shared, "4 q (before the head split)": enc_block.self_attention.q,
         "5 self-attention output": enc_block.self_attention.o, "6 wi_0": enc_block.feed_forward.wi_0,
         "6 wo": enc_block.feed_forward.wo, "7 encoder output": base.encoder.final_layer_norm,
         "9 cross-attention k (before the head split)": dec_block.cross_attention.k, "10 decoder output": base.decoder.final_layer_norm,
         "11 logits": base.lm_head}
seen, hooks = {}, []
def record(name):
    def hook(module, inputs, output):   # returns None: the output is left as it is
        seen.setdefault(name, tuple(output.shape))
    return hook
for name, module in watch.items():
    hooks.append(module.register_forward_hook(record(name)))
out = base(input_ids, labels=labels)
for h in hooks: h.remove()
seen["3 encoder position bias"] = tuple(base.encoder.position_bias(512, 512).shape)
seen["8 decoder position bias"] = tuple(base.decoder.position_bias(114, 114).shape)
seen["12 loss"] = tuple(out.loss.shape)
for name in sorted(seen, key=lambda n: int(n.split()[0])): print(f"{name:32} {seen[name]}")
test_eq(seen["2 encoder embedding"], (4, 512, 768)); test_eq(seen["4 q (before the head split)"], (4, 512, 768))
test_eq(seen["6 wi_0"], (4, 512, 2048)); test_eq(seen["7 encoder output"], (4, 512, 768))
test_eq(seen["3 encoder position bias"], (1, 12, 512, 512)); test_eq(seen["8 decoder position bias"], (1, 12, 114, 114))
test_eq(seen["9 cross-attention k (before the head split)"], (4, 512, 768)); test_eq(seen["10 decoder output"], (4, 114, 768))
test_eq(seen["11 logits"], (4, 114, 32128)); test_eq(seen["12 loss"], ())

# %% [markdown]
# The round trip HF → ours → HF leaves every tensor equal, and a checkpoint saved by us loads in plain
# `transformers` with logits equal within 1e-4:

# %%
tmp = Path(tempfile.mkdtemp())
for cfg in test_configs:
    hf = hf_reference(cfg).eval()
    back = T5.from_hf(hf).to_hf()
    test_eq(set(back.state_dict()), set(hf.state_dict()))
    for k, v in hf.state_dict().items():
        test_eq(torch.equal(back.state_dict()[k], v), True)
    ours = T5(cfg).eval()
    ours.save_pretrained(tmp / "ckpt")
    loaded = transformers.T5ForConditionalGeneration.from_pretrained(tmp / "ckpt").eval()
    ids, am, labels = batch_for(cfg)
    test_close(loaded(input_ids=ids, attention_mask=am, labels=labels).logits, ours(ids, am, labels=labels).logits, eps=1e-4)
sorted(p.name for p in (tmp / "ckpt").iterdir())

# %% [markdown]
# ## Appendix: bad input
#
# Wrong dtypes, mismatched batches and out-of-range ids fail with a sentence that names the problem, e.g.
# token ids from a tokenizer larger than the model's vocabulary:

# %%
m = T5(test_configs[0]).eval()
ids, am, labels = batch_for(test_configs[0])
try: m(ids + 600, labels=labels)
except ValueError as e: print(e)

# %%
#| hide
test_fail(lambda: m(ids.float(), labels=labels), contains="must be an integer tensor")
test_fail(lambda: m(ids, am, labels=labels[:2]), contains="Batch sizes differ")
test_fail(lambda: m(ids, am[:, :5], labels=labels), contains="attention_mask shape")
test_fail(lambda: m(ids, labels=labels.masked_fill(labels == labels[0, 0], 600)), contains="labels holds ids outside [0, 512)")
test_fail(lambda: m(ids + 600, labels=labels), contains="tokenizer and the model's vocab_size")
test_fail(lambda: m(ids), contains="Pass decoder_input_ids or labels")

# %%
#| hide
import nbdev; nbdev.nbdev_export()
