# %% [markdown]
# # T5 layers: the pieces of T5 v1.1, from scratch
# > The configuration, RMSNorm, relative position buckets, bias-added SDPA attention and the gated-GELU feed-forward of T5 v1.1 — each checked against its twin in `transformers`' T5

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# This notebook builds the layers of T5 v1.1 from `torch.nn` pieces, one at a time, and checks each against its
# twin in `transformers.models.t5.modeling_t5` **on the same weights and inputs**. The module and parameter names
# mirror Hugging Face's (`q`, `k`, `v`, `o`, `wi_0`, …), so that in lesson [03b](03b_t5_model.ipynb), where the
# layers become the whole model, a checkpoint moves between the two by copying the state dict. What is different
# is inside: the code is written to be read one layer at a time, and attention is one call of
# `torch.nn.functional.scaled_dot_product_attention` (SDPA: PyTorch's attention function, fused where a kernel allows)
# with T5's relative position bias, combined with the mask once per stack, as an additive mask (HF's T5 also calls
# SDPA by default in the installed transformers 5 release; the Attention section says how the two compare). The layers need only torch;
# `transformers` is the reference.
#
# It needs from [02b_span_batches](02b_span_batches.ipynb) only the shapes of one training batch (the table
# below).
#
# **What you will build** (the module `nanot5_edu.layers`): `ModelConfig` and its presets, `RMSNorm`,
# `relative_position_bucket` and `RelativePositionBias`, `Attention` (through SDPA), and `GatedFeedForward`.
# Lesson [03b](03b_t5_model.ipynb) assembles them into blocks, stacks and `T5`.

# %%
#| default_exp layers

# %%
#| export
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import random
import numpy as np
import matplotlib.pyplot as plt
import transformers
from transformers.models.t5 import modeling_t5 as hf_t5
from transformers.utils import logging as hf_logging

hf_logging.set_verbosity_error(); hf_logging.disable_progress_bar()
random.seed(0); np.random.seed(0); torch.manual_seed(0);


# %% [markdown]
# ## One batch through the model, shape by shape
#
# Before building anything, follow one training batch from [02b_span_batches](02b_span_batches.ipynb)
# through the whole model for T5-Base (`d_model` 768, 12 heads of `d_kv` 64, `d_ff` 2048, 12 + 12 blocks, 32,128
# vocabulary rows); this lesson builds its layers, lesson [03b](03b_t5_model.ipynb) assembles them. The collator
# gives `input_ids` `[B, 512]` and `labels` `[B, 114]`, no padding:
#
# | step | what | shape |
# |---|---|---|
# | 1 | `decoder_input_ids` = labels shifted right, start token 0 in front | `[B, 114]` |
# | 2 | encoder: embed `input_ids` with the shared table | `[B, 512, 768]` |
# | 3 | relative position bias of encoder block 0, reused by all 12 blocks (adding a padding mask would make it `[B, 12, 512, 512]`) | `[1, 12, 512, 512]` |
# | 4 | each block, self-attention: `q`, `k`, `v` split into heads | `[B, 12, 512, 64]` |
# | 5 | scores `q·kᵀ + bias`, softmax, times `v` (all inside SDPA), heads joined, `o` | `[B, 512, 768]` |
# | 6 | each block, feed-forward: `gelu(wi_0 x) ⊙ wi_1 x`, then `wo` | `[B, 512, 2048]` → `[B, 512, 768]` |
# | 7 | encoder output, after the final RMSNorm | `[B, 512, 768]` |
# | 8 | decoder: embed `decoder_input_ids`; causal position bias | `[B, 114, 768]`; `[1, 12, 114, 114]` |
# | 9 | each block, cross-attention: queries from the decoder, keys/values from the encoder output | `q` `[B, 12, 114, 64]`, `k`,`v` `[B, 12, 512, 64]` |
# | 10 | decoder output, after the final RMSNorm | `[B, 114, 768]` |
# | 11 | `lm_head`: one score per vocabulary row | `[B, 114, 32128]` |
# | 12 | cross-entropy against `labels` | a scalar, the mean over `B·114` targets |
#
# The encoder does the heavy lifting (512 positions), the decoder sees only 114: a decoder block costs more per
# position than an encoder block (three sublayers instead of two), and span corruption's short targets keep that half cheaper (by how much, this lesson does not count) (the decoder's cross-attention still projects every encoder position). Lesson 03b's appendix runs this batch through the finished `T5` on
# the `meta` device (shapes, no compute) and checks most of the table's shapes.
#
# ## What T5 v1.1 changed
#
# nanoT5 (and this notebook) build **T5 v1.1** (`google/t5-v1_1-base`), not the T5 of the paper (v1.0,
# `t5-base`): a gated-GELU feed-forward instead of ReLU, an untied LM head, no dropout in pre-training, and
# C4 only as pre-training data (the list in Google's T5 repository, `released_checkpoints.md`, section t5.1.1); RMSNorm and the absence of biases are unchanged. The full comparison is a
# table in the appendix.

# %% [markdown]
# ## The configuration
#
# One dataclass holds what defines the architecture, with the T5 v1.1 defaults. It converts to and from
# `transformers.T5Config` (transformers 5's `T5Config` forces `tie_word_embeddings=True` and keeps the saved flag as
# `scale_decoder_outputs`, which is what `from_hf` reads). Presets: `tiny` (13.6M parameters; the CPU demo trains it cut to 1 + 1 layers), `t5-v1_1-small` and
# `t5-v1_1-base` (nanoT5's model: 247,577,856 parameters; both counts are checked in 03b). The presets' vocabulary sizes are multiples of 128 (chosen, not computed: nothing pads them)
# (32,100 ids → 32,128 rows), as in Google's checkpoints.
#
# (The check cells use `test_eq`, `test_close`, `test_fail` from `fastcore.test` and `hf_t5` =
# `transformers.models.t5.modeling_t5`; these imports, with numpy as `np` and matplotlib as `plt`, sit in a
# hidden cell at the top of the notebook.)

# %%
#| export
@dataclass
class ModelConfig:
    "Architecture of a T5 v1.1 model (names as in `transformers.T5Config`)"
    vocab_size: int = 32128
    d_model: int = 768
    d_kv: int = 64
    d_ff: int = 2048
    num_layers: int = 12
    num_decoder_layers: int | None = None  # None: same as num_layers
    num_heads: int = 12
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    dropout_rate: float = 0.0  # nanoT5 pre-trains without dropout; HF's v1.1 default is 0.1
    layer_norm_epsilon: float = 1e-6
    tie_word_embeddings: bool = False  # False: v1.1 (untied head); True: v1.0 (tied, logits * d_model**-0.5)
    initializer_factor: float = 1.0
    lm_head_init_fix: bool = True  # untied head init std d_model**-0.5 (Mesh TF), not HF/nanoT5's 1.0 (nanoT5#25)
    pad_token_id: int = 0
    eos_token_id: int = 1
    decoder_start_token_id: int = 0
    architecture: str = "encoder-decoder"  # or "decoder-only": one stack over inputs + targets (09c_objectives)

    def __post_init__(self):
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers

    def to_hf(self):
        "The equivalent `transformers.T5Config` (gated-gelu, v1.1)"
        from transformers import T5Config
        kw = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("lm_head_init_fix", "architecture")}
        cfg = T5Config(feed_forward_proj="gated-gelu", is_encoder_decoder=True, **kw)
        cfg.tie_word_embeddings = self.tie_word_embeddings  # transformers 5 overrides it in the constructor
        return cfg

    @classmethod
    def from_hf(cls, cfg) -> "ModelConfig":
        "From a `transformers.T5Config` (gated-gelu only: T5 v1.1 and later)"
        if not getattr(cfg, "is_gated_act", False) or cfg.dense_act_fn not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"Only gated-GELU T5 (v1.1, flan-t5) is supported, got feed_forward_proj="
                             f"{cfg.feed_forward_proj!r}: use a t5-v1_1 / flan-t5 checkpoint.")
        kw = {f.name: getattr(cfg, f.name) for f in fields(cls) if hasattr(cfg, f.name)}
        if hasattr(cfg, "scale_decoder_outputs"):  # transformers 5 forces tie_word_embeddings=True; this keeps the saved flag
            kw["tie_word_embeddings"] = cfg.scale_decoder_outputs
        return cls(**kw)


MODEL_PRESETS = {
    "tiny": ModelConfig(vocab_size=8192, d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_heads=8),
    "t5-v1_1-small": ModelConfig(vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=6),
    "t5-v1_1-base": ModelConfig(),
}


def get_config(name: str, **overrides) -> ModelConfig:
    "A preset by name, with field overrides"
    if name not in MODEL_PRESETS:
        raise ValueError(f"Unknown model preset {name!r}: choose one of {sorted(MODEL_PRESETS)}.")
    return replace(MODEL_PRESETS[name], **overrides)


# %%
test_eq(ModelConfig.from_hf(get_config("t5-v1_1-base").to_hf()), get_config("t5-v1_1-base"))
test_eq(get_config("tiny").to_hf().tie_word_embeddings, False)
from transformers import T5Config  # a v1.1 config.json as saved on the hub: untied, though transformers 5 sets the flag True
test_eq(ModelConfig.from_hf(T5Config.from_dict({"tie_word_embeddings": False, "feed_forward_proj": "gated-gelu"})).tie_word_embeddings, False)
test_eq(ModelConfig.from_hf(T5Config.from_dict({"tie_word_embeddings": True, "feed_forward_proj": "gated-gelu"})).tie_word_embeddings, True)
test_fail(lambda: get_config("t5-xxl"), contains="Unknown model preset")


# %% [markdown]
# A small helper builds the **reference**: HF's `T5ForConditionalGeneration` as a faithful v1.1. In
# transformers 5, `T5Config(tie_word_embeddings=False)` still ties the head to the embedding, and untying
# it afterwards un-shares the encoder's and decoder's input embeddings, so we re-point both at `shared`.

# %%
#| export
def hf_reference(config: ModelConfig):
    "A `transformers.T5ForConditionalGeneration` with exactly this architecture (v1.1 untied head if so configured)"
    from transformers import T5ForConditionalGeneration
    model = T5ForConditionalGeneration(config.to_hf())
    if not config.tie_word_embeddings:
        model.encoder.embed_tokens = model.shared
        model.decoder.embed_tokens = model.shared
    return model


# %%
hf_tiny = hf_reference(get_config("tiny"))
test_eq(hf_tiny.lm_head.weight is hf_tiny.shared.weight, False)                         # untied head, as in v1.1 …
test_eq(hf_tiny.encoder.embed_tokens is hf_tiny.shared is hf_tiny.decoder.embed_tokens, True)   # … one input embedding


# %% [markdown]
# ## RMSNorm
#
# T5's "layer norm" only rescales: no mean subtraction, no bias,
#
# $$y = w \odot \frac{x}{\sqrt{\operatorname{mean}(x^2) + \epsilon}},$$
#
# with the mean taken in fp32 even under bf16: in fp16, `x²` overflows once |x| reaches 256 (the largest fp16 is
# 65,504), and bf16 keeps only 8 bits of precision (7 stored) for the sum. `F.rms_norm` is exactly this formula in one op; we give it
# `x` in fp32. With half-precision weights (a model cast to bf16), HF rounds the normalised `x` to the
# weight's dtype *before* scaling, so then we scale after the op. (And a small helper: dropout with `p = 0`
# — nanoT5's pre-training setting — becomes `nn.Identity`, so a printed model shows no dropout where none acts;
# `nn.Dropout(0.0)` would return its input unchanged too.)

# %%
#| export
def dropout(p: float) -> nn.Module:
    "nn.Dropout(p), or nn.Identity when p == 0 (no mask multiply in training)"
    return nn.Dropout(p) if p > 0 else nn.Identity()


class RMSNorm(nn.Module):
    "T5LayerNorm: y = w * x / sqrt(mean(x^2) + eps), the mean in fp32"

    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight, self.variance_epsilon = nn.Parameter(torch.ones(d)), eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.weight.dtype in (torch.float16, torch.bfloat16):  # HF: round x / rms to the weight's dtype, then scale
            return self.weight * F.rms_norm(x.float(), self.weight.shape, eps=self.variance_epsilon).to(self.weight.dtype)
        return F.rms_norm(x.float(), self.weight.shape, self.weight, self.variance_epsilon)


# %%
x = torch.randn(2, 5, 16)
ours, ref = RMSNorm(16), hf_t5.T5LayerNorm(16)
with torch.no_grad(): ours.weight.normal_(); ref.weight.copy_(ours.weight)
test_close(ours(x), ref(x), eps=1e-6)
test_close(ours(x), ours.weight * x / (x.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt(), eps=1e-6)   # the formula above
for w_dtype, x_dtype in [(torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)]:
    o, r = RMSNorm(16).to(w_dtype), hf_t5.T5LayerNorm(16).to(w_dtype)
    with torch.no_grad(): o.weight.normal_(); r.weight.copy_(o.weight)
    test_eq(o(x.to(x_dtype)).dtype, r(x.to(x_dtype)).dtype)                   # same dtype rules as HF …
    test_close(o(x.to(x_dtype)).float(), r(x.to(x_dtype)).float(), eps=1e-2)  # … and the same values


# %% [markdown]
# ## Relative position buckets
#
# T5 has no absolute positions. Each self-attention score (cross-attention gets none) gets a learned scalar per head that depends on the
# key-query distance, bucketed: small distances exactly, larger ones logarithmically up to `max_distance`
# (128), beyond that one bucket (in practice the last bucket is reached earlier, at 91 in the encoder and 113 in the
# decoder, as the tests below show). The encoder is bidirectional (half the buckets for keys after the query);
# the decoder is causal, so only past distances count and all 32 buckets go to them.

# %%
#| export
def relative_position_bucket(relative_position: torch.Tensor,  # key position - query position
                             bidirectional: bool = True,
                             num_buckets: int = 32,
                             max_distance: int = 128) -> torch.Tensor:
    "T5's bucket of each relative position (exact for small distances, log-spaced up to max_distance)"
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        distance = relative_position.abs()
    else:
        distance = (-relative_position).clamp(min=0)
    max_exact = num_buckets // 2
    log_bucket = max_exact + (torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
                              * (num_buckets - max_exact)).long()
    log_bucket = log_bucket.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, log_bucket)


# %%
rel = torch.arange(-300, 300)[None, :]
for bidirectional in (True, False):
    test_eq(relative_position_bucket(rel, bidirectional),
            hf_t5.T5Attention._relative_position_bucket(rel, bidirectional, 32, 128))
# the bucket boundaries of T5's table: encoder |n| 8-11 -> 8 ... >= 91 -> 15
test_eq(relative_position_bucket(-torch.tensor([7, 8, 11, 12, 90, 91, 500])).tolist(), [7, 8, 8, 9, 14, 15, 15])
test_eq(relative_position_bucket(-torch.tensor([15, 16, 112, 113]), bidirectional=False).tolist(), [15, 16, 30, 31])

# %% [markdown]
# The bucket of every offset from −200 to 200. In the encoder, offsets closer than 8 get their own bucket
# (exact), offsets from 8 to just under `max_distance` = 128 share 8 log-spaced buckets, and everything from 128 on is clipped into
# the last one (which the log formula, truncated to an integer, already reaches at 91); keys after the query use
# a second set of 16 (buckets 16–31; offset 0 is bucket 0, so bucket 16 itself is never used). The
# decoder only looks back, so it spends all 32 buckets on the past: 16 exact, 16 log-spaced. Its keys
# after the query are masked out by the causal mask (the function maps them to bucket 0, the bucket of offset 0, but
# the mask means those entries are never used).

# %%
offsets = torch.arange(-200, 201)
fig, axs = plt.subplots(2, 1, figsize=(10, 5.5), sharex=True)
for ax, bidirectional, exact, name in [(axs[0], True, 8, "encoder (bidirectional, 16 + 16 buckets)"),
                                       (axs[1], False, 16, "decoder (causal, 32 buckets for the past)")]:
    buckets = relative_position_bucket(offsets, bidirectional).float()
    if not bidirectional:
        buckets[offsets > 0] = float("nan")
        ax.axvspan(0.5, 200, fc="white", hatch="//", ec="0.75", lw=0, label="future: masked")
    sides = (-1, 1) if bidirectional else (-1,)
    for i, side in enumerate(sides):
        lo, hi = sorted((side * exact, side * 0.5)); ax.axvspan(lo, hi, color="C2", alpha=0.25, lw=0, label="exact" if i == 0 else None)
        lo, hi = sorted((side * exact, side * 128)); ax.axvspan(lo, hi, color="C1", alpha=0.2, lw=0, label="log-spaced" if i == 0 else None)
        lo, hi = sorted((side * 128, side * 200)); ax.axvspan(lo, hi, color="C7", alpha=0.25, lw=0, label="clipped (≥ max_distance)" if i == 0 else None)
    ax.step(offsets, buckets, where="mid", color="k", lw=1.2)
    ax.set_ylabel("bucket"); ax.set_title(name, fontsize=10, loc="left")
    ax.legend(loc="upper left" if bidirectional else "center right", fontsize=8, ncol=4 if bidirectional else 1)
axs[1].set_xlabel("key position − query position"); plt.tight_layout(); plt.show()


# %% [markdown]
# The bias is one embedding of `num_buckets × num_heads`, owned by the **first** block of each stack and
# reused by all its blocks. The stack (built in 03b) computes it once per forward pass, replaces its masked entries
# (padding, or the causal future) with a large negative value, and hands the result to every block as one additive
# attention mask.

# %%
#| export
class RelativePositionBias(nn.Module):
    "Learned per-head bias of bucketed key-query distance: [1, heads, q_len, k_len]"

    def __init__(self, config: ModelConfig, bidirectional: bool):
        super().__init__()
        self.bidirectional, self.config = bidirectional, config
        self.weight = nn.Parameter(torch.zeros(config.relative_attention_num_buckets, config.num_heads))

    def forward(self, q_len: int, k_len: int, q_offset: int = 0) -> torch.Tensor:
        q = torch.arange(q_offset, q_offset + q_len, device=self.weight.device)[:, None]
        k = torch.arange(k_len, device=self.weight.device)[None, :]
        buckets = relative_position_bucket(k - q, self.bidirectional, self.config.relative_attention_num_buckets,
                                           self.config.relative_attention_max_distance)
        return F.embedding(buckets, self.weight).permute(2, 0, 1).unsqueeze(0)


# %%
rpb = RelativePositionBias(ModelConfig(num_heads=4), bidirectional=True)
nn.init.normal_(rpb.weight)
with torch.no_grad(): out = rpb(5, 7)
test_eq(out.shape, (1, 4, 5, 7))                                                 # [1, heads, queries, keys]
test_eq(out[0, :, 2, 6], rpb.weight.detach()[relative_position_bucket(torch.tensor(6 - 2))])  # one learned scalar per head and bucket


# %% [markdown]
# ## Attention
#
# T5 attention has two quirks: no `1/√d_kv` scaling (it is folded into the init of `q`, in 03b), and an additive
# bias (relative positions + mask). `scaled_dot_product_attention` takes both: `scale=1.0` and the bias as a
# float `attn_mask`: one call instead of a matmul → add → softmax → matmul chain (in the installed transformers 5 release
# HF's T5 runs through SDPA by default too, with the bias as its mask; older releases ran the eager chain; which kernel runs is in the appendix).
# The difference that remains: HF hands every layer's attention the position bias and the mask separately and adds
# them there, while ours combines them once per stack and every layer reuses the result.
#
# The module keeps HF's parameter names (`q`, `k`, `v`, `o`, `relative_attention_bias`). For generation it
# returns its keys and values as a small named pair, `KV`, and can take cached ones back; a decoder block
# keeps one `KV` per attention layer in a `BlockCache`. Both are used only by 03b's blocks and generation, where
# the cached path is checked against HF; this lesson runs attention without a cache.

# %%
#| export
class KV(NamedTuple):
    "Keys and values of one attention layer, each [batch, heads, positions, d_kv]"
    k: torch.Tensor
    v: torch.Tensor


class BlockCache(NamedTuple):
    "What a block keeps while generating: self-attention k/v (one position longer each step), cross-attention k/v (fixed)"
    self_attn: KV
    cross_attn: KV | None = None  # decoder blocks only: computed from the encoder output at the first step

    @property
    def length(self) -> int:
        "Positions already decoded"
        return self.self_attn.k.shape[2]


class Attention(nn.Module):
    "T5 multi-head attention (self or cross) through SDPA, unscaled, with an additive bias/mask"

    def __init__(self, config: ModelConfig, has_relative_attention_bias: bool = False, bidirectional: bool = True):
        super().__init__()
        self.n_heads, self.d_kv, inner = config.num_heads, config.d_kv, config.num_heads * config.d_kv
        self.q = nn.Linear(config.d_model, inner, bias=False)
        self.k = nn.Linear(config.d_model, inner, bias=False)
        self.v = nn.Linear(config.d_model, inner, bias=False)
        self.o = nn.Linear(inner, config.d_model, bias=False)
        self.dropout = config.dropout_rate
        if has_relative_attention_bias:
            self.relative_attention_bias = RelativePositionBias(config, bidirectional)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (self.n_heads, self.d_kv)).transpose(1, 2)

    def forward(self, x: torch.Tensor, bias: torch.Tensor | None, kv_input: torch.Tensor | None = None,
                past: KV | None = None) -> tuple[torch.Tensor, KV]:
        "Returns (output, KV); `past` holds cached k/v: self-attention appends to them, cross-attention reuses them"
        q = self.heads(self.q(x))
        if past is not None and kv_input is not None:  # cross-attention: encoder k/v computed once, then reused
            k, v = past
        else:
            src = x if kv_input is None else kv_input
            k, v = self.heads(self.k(src)), self.heads(self.v(src))
            if past is not None:  # self-attention while generating: append the new position's k/v
                k, v = torch.cat([past.k, k], dim=2), torch.cat([past.v, v], dim=2)
        if bias is not None and bias.dtype != q.dtype:  # the stack casts it once (03b); a bias made by hand may differ
            bias = bias.to(q.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0,
                                             dropout_p=self.dropout if self.training else 0.0)
        return self.o(out.transpose(1, 2).reshape(x.shape[0], -1, self.n_heads * self.d_kv)), KV(k, v)


# %% [markdown]
# A naive draft next to it, the textbook way (explicit scores and softmax) — the two must agree, and both
# must agree with HF's `T5Attention` given HF's own position bias:

# %%
def naive_attention(att, x, bias):
    q, k, v = att.heads(att.q(x)), att.heads(att.k(x)), att.heads(att.v(x))
    weights = torch.softmax(q @ k.transpose(-1, -2) + bias, dim=-1)
    return att.o((weights @ v).transpose(1, 2).flatten(2))

cfg = ModelConfig(d_model=32, d_kv=8, num_heads=4, relative_attention_num_buckets=16, relative_attention_max_distance=20)
ours = Attention(cfg, has_relative_attention_bias=True)
ref = hf_t5.T5Attention(cfg.to_hf(), has_relative_attention_bias=True)
for p in ours.parameters(): nn.init.normal_(p, std=0.3)
ref.load_state_dict(ours.state_dict())
x = torch.randn(2, 7, 32)
bias = ours.relative_attention_bias(7, 7)
test_close(ours(x, bias)[0], naive_attention(ours, x, bias), eps=1e-5)
test_close(ours(x, bias)[0], ref(x)[0], eps=1e-5)   # HF computes its own bias from the same weights


# %% [markdown]
# ## Gated-GELU feed-forward
#
# v1.1 replaced the ReLU MLP with a gated one: `wo(gelu(wi_0 x) ⊙ wi_1 x)`, GELU in its tanh form
# (`gelu_new`), no biases, dropout after the gate product.

# %%
#| export
class GatedFeedForward(nn.Module):
    "T5 v1.1 feed-forward: wo(dropout(gelu_tanh(wi_0 x) * wi_1 x))"

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.wi_0 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wi_1 = nn.Linear(config.d_model, config.d_ff, bias=False)
        self.wo = nn.Linear(config.d_ff, config.d_model, bias=False)
        self.dropout = dropout(config.dropout_rate)
        self.wo_in_fp32_under_fp16 = True  # see "fp16 and the feed-forward" below

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.dropout(F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x))
        device = x.device.type
        if (self.wo_in_fp32_under_fp16 and device != "meta" and torch.is_autocast_enabled(device)
                and torch.get_autocast_dtype(device) == torch.float16):
            with torch.autocast(device, enabled=False):  # wo's output may pass fp16's 65,504: compute it in fp32
                return self.wo(h.float())
        return self.wo(h)


# %%
ff, ref_ff = GatedFeedForward(cfg), hf_t5.T5DenseGatedActDense(cfg.to_hf())
ref_ff.load_state_dict(ff.state_dict())
test_close(ff(x), ref_ff(x), eps=1e-6)

# %% [markdown]
# ### fp16 and the feed-forward
#
# GPUs without bf16 (Colab's T4) train in fp16, whose largest number is 65,504. Under fp16 autocast every `nn.Linear`
# runs in fp16, and `wo` is the layer to watch: in lesson [07](07_config.ipynb)'s fp16 measurement of the demo model
# the larger of its peak |input| and |output| is the largest of any `Linear` (a simulated-fp16 run of a 1 + 1-layer model; the record does not say which of the two), and HF's T5 also singles it out (its weights stay fp32 when loaded in fp16; transformers issue 20287, an int8 problem with flan-t5-xxl whose fix, `_keep_in_fp32_modules`, also covers fp16 loading). Once one of its outputs grows past fp16's range
# it becomes `inf`, and the loss `nan`. HF's T5 guards the same place in its own ways, both only for half-precision weights (under autocast with fp32
# weights neither acts): it keeps `wo`'s weights in
# fp32 when a model is loaded in fp16 (not bf16: `_keep_in_fp32_modules = ["wo"]` in `modeling_t5.py`, added for
# flan-t5-xxl) and clamps the block's fp16 hidden states to fp16's range after each sublayer. Ours computes `wo` in fp32 under fp16 autocast (autocast
# off for that one matmul; its input, the gate product, is still formed in fp16 and is not guarded); its output joins the residual stream, which is fp32 already. bf16 has fp32's range and
# needs no guard. The price is `wo`'s matmuls (forward and backward) in fp32 and an fp32 copy of its input: on an H200, a T5-Base fp16 step (micro-batch 32) took 1.035 times as
# long with the guard as without it with TF32 on, as `fit` runs (one run, 3 interleaved rounds; their spread was not kept), and 1.30 times in an earlier run with TF32 off (torch's default then, not recorded in that file; the two runs differ in more than TF32, their unguarded steps too; `benchmarks/fp16_path.py`;
# its records `fp16_path_2.json` and `fp16_path.json` in `benchmarks/results/h200_2026-12-04/`); a T4 has no TF32. The check below
# scales `wo` until its outputs reach about 10⁵ and runs the layer three ways (CPU autocast supports fp16 too).

# %%
big = GatedFeedForward(cfg)
with torch.no_grad():
    big.wo.weight.mul_(1e5 / big(x).abs().max())   # outputs now reach ±1e5: beyond fp16's range
with torch.autocast("cpu", dtype=torch.float16):
    guarded = big(x)
    big.wo_in_fp32_under_fp16 = False
    unguarded = big(x)
    big.wo_in_fp32_under_fp16 = True
reference = big(x)   # fp32
print(f"largest |output| in fp32: {reference.abs().max():,.0f}; fp16 without the guard: "
      f"{unguarded.float().abs().max()}; with it: {guarded.abs().max():,.0f} ({guarded.dtype})")
test_eq(bool(torch.isinf(unguarded).any()), True)
test_close(guarded, reference, eps=reference.abs().max() * 1e-2)


# %% [markdown]
# ## What you learned
#
# - nanoT5 trains **T5 v1.1**, not the paper's v1.0: a gated-GELU feed-forward, an untied LM head, no dropout in
#   pre-training and C4 only; RMSNorm and dense layers without biases are unchanged. One `ModelConfig` holds the
#   architecture and converts to and from `transformers.T5Config`; the presets' vocabulary sizes are multiples of 128.
# - RMSNorm only rescales (no mean subtraction, no bias), with the mean of `x²` taken in fp32; it gives HF's values
#   and output dtypes for fp32 and bf16 weights and inputs.
# - Positions enter only as a learned per-head bias of the bucketed key − query distance: exact below 8 (below 16 in
#   the causal decoder), log-spaced after that, with the last bucket (reached at 91 in the encoder, 113 in the decoder) holding everything
#   beyond. One table of `num_buckets × num_heads` scalars serves
#   a whole stack.
# - Attention is unscaled (the `1/√d_kv` lives in the init of `q`, lesson 03b) and runs as one SDPA call (fused at CPU inference, and expected to be on GPU, not profiled here; the math path for self-attention's learned bias in CPU training) with
#   the bias as an additive mask; it equals the textbook `softmax(q·kᵀ + bias)·v` and HF's `T5Attention` within
#   1e-5.
# - The feed-forward is `wo(gelu_tanh(wi_0 x) ⊙ wi_1 x)` without biases, equal to HF's within 1e-6. Under fp16
#   autocast its `wo` runs in fp32 (HF keeps `wo`'s weights in fp32 when a model is loaded in fp16, and clamps fp16 hidden states; under autocast with fp32 weights neither acts): an output beyond 65,504 would otherwise become `inf`.
#
# ## Questions
#
# 1. T5 has no absolute position embeddings. How does a token know *where* another token is, and why can the
#    model still take inputs longer than any it was trained on?
# 2. **Predict, then run** the bucket plot cell: do offsets −100 and −200 get different buckets in the encoder?
#    Why does the decoder spend all 32 buckets on the past while the encoder splits them 16 + 16?
# 3. **Predict, then run:** `relative_position_bucket(torch.tensor([-5, 5, 1]))`, then the same with
#    `bidirectional=False`. Which buckets do keys *after* the query get in each case, and why is that harmless in
#    the decoder?
# 4. The bias table belongs to the first block of a stack, and its output is reused by every block. What would
#    computing it in every block cost, and would a table per block make the model more expressive?
# 5. **Predict, then run:** how many parameters does one stack's `RelativePositionBias` have for T5-Base
#    (`RelativePositionBias(get_config("t5-v1_1-base"), True).weight.numel()`)? Compare with one `q` matrix.
# 6. T5's attention has no `1/√d_kv`. Where did the scaling go, and what would happen to a T5 checkpoint run
#    through an attention that used SDPA's default scale?
# 7. **Predict, then run:** in the attention check cell, add 5 to every entry of `bias` before calling `ours`.
#    Does the output change? What does that tell you about softmax and a constant added to a whole row of scores?
# 8. RMSNorm drops two things a LayerNorm has. Which, and why is the mean of `x²` taken in fp32 even when the
#    model runs in bf16 or fp16?
# 9. **Predict, then run:** in the RMSNorm cell, compare `ours(10 * x)` with `ours(x)`, then `ours(1e-4 * x)` with
#    `ours(x)`. Which pair is equal, and what breaks the other?
# 10. The gated feed-forward has three matrices where v1.0's ReLU MLP had two, and T5-Base's `d_ff` went from 3,072
#     to 2,048. Count the parameters of one feed-forward in each: what did v1.1 keep constant?
# 11. Why pad a vocabulary of 32,100 ids to 32,128 rows? What happens, in training, to the rows no token ever
#     uses?
#
# ## Try it
#
# 1. **Longer reach** (seconds). Call `relative_position_bucket` on offsets −7, −8, −16, −64, −128, −300, −500
#    with the defaults, then with `num_buckets=64, max_distance=512`. Look for where the exact range ends and from
#    which distance every offset shares one bucket.
# 2. **Which GELU?** (seconds). In the feed-forward check cell, compute
#    `ff.wo(F.gelu(ff.wi_0(x)) * ff.wi_1(x))` (the exact GELU, not the tanh form) and compare it with `ref_ff(x)`,
#    for `x` of std 1 and of std 10. Look at the largest difference next to the check's 1e-6: would a checkpoint
#    trained with one GELU notice the other?
# 3. **RMSNorm by hand in fp16** (seconds). For `x = (300 * torch.randn(768)).half()`, compute
#    `x / torch.sqrt(x.pow(2).mean() + 1e-6)` in fp16, then `RMSNorm(768)(x)`. Look at `x.pow(2).mean()` and at the
#    two outputs: which one survives, and why?
#
# Next: lesson [03b](03b_t5_model.ipynb) assembles these layers into blocks, stacks and the whole `T5`.

# %% [markdown]
# ## Appendix: notes
#
# **T5 v1.0 and v1.1 side by side.** Each difference shows up in the code of this lesson or of [03b](03b_t5_model.ipynb):
#
# | | T5 v1.0 (the paper's model, released as `t5-base`) | T5 v1.1 (`google/t5-v1_1-base`, nanoT5) |
# |---|---|---|
# | feed-forward | `wo(relu(wi x))` | gated-GELU `wo(gelu(wi_0 x) ⊙ wi_1 x)` |
# | dropout in pre-training | 0.1 | 0 (nanoT5; HF's config default is still 0.1) |
# | LM head | tied to the input embedding, logits × `d_model^-½` | untied: its own `lm_head` matrix |
# | biases | none in dense layers | none (unchanged) |
# | layer norm | RMSNorm (scale only, no mean, no bias) | RMSNorm (unchanged) |
# | pre-training data | C4 (the released `t5-base` checkpoint: C4 mixed with supervised tasks) | C4 only |
# | shapes | Base: `d_model` 768, `d_ff` 3072 | "a bit different" in Google's words (larger `d_model`, smaller `num_heads` and `d_ff`; not in every size); Base keeps 768, `d_ff` 2048 |
#
# The two rows marked unchanged are listed to show what v1.1 kept. Sources: the T5 paper (arXiv 1910.10683, §3.1) for
# v1.0, and Google's list of what v1.1 changed (`released_checkpoints.md` in google-research/text-to-text-transfer-transformer,
# section t5.1.1).
#
# **Which attention kernel runs.** The CUDA FlashAttention kernels cannot take an arbitrary additive bias (let alone give
# it a gradient), so with a bias PyTorch is expected to dispatch to the *memory-efficient* kernel on GPU (which supports
# an additive mask, and its gradient; not profiled here, and the choice can change with the GPU and torch version). On CPU the flash-CPU kernel runs only where the mask needs no gradient (at inference under `torch.no_grad()`, and
# in cross-attention); in training the learned relative bias sends self-attention to the unfused
# *math* path (matmul → add → softmax → matmul; half inputs are upcast to fp32 there, torch's default), as the profile below shows for torch on
# CPU (the GPU dispatch is not profiled here: check it on your GPU by creating the tensors of `sdpa_kernels` below on `cuda`).
#
# **The position bias after training.** The learned relative-position bias per head is only worth plotting
# after training (at init it is noise of std `d_model^-½`); export a checkpoint from the CPU demo
# (`nanot5-edu pretrain`, [05_pretraining](05_pretraining.ipynb)) and read its
# `encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight` to see which distances each head favours.

# %%
def sdpa_kernels(bias_needs_grad: bool, training: bool) -> list[str]:
    "The attention ops the profiler records for one SDPA call with an additive bias (and its backward, in training)"
    q, k, v = (torch.randn(2, 4, 16, 8, requires_grad=training) for _ in range(3))
    bias = torch.randn(1, 4, 16, 16, requires_grad=bias_needs_grad)
    with torch.profiler.profile() as prof:
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)
        if training:
            out.sum().backward()
    return sorted({e.key for e in prof.key_averages() if "attention" in e.key or "softmax" in e.key})

print(torch.__version__)
for name, args in [("training, learned bias (self-attention)", (True, True)),
                   ("training, bias without gradient (cross-attention's mask)", (False, True)),
                   ("inference", (False, False))]:
    print(f"{name:58}", sdpa_kernels(*args))
test_eq("aten::_scaled_dot_product_attention_math" in sdpa_kernels(True, True), True)  # the prose above says so

# %% [markdown]
# ## Appendix: one more view
#
# Moved out of the reading path: the bucket of every (query, key) pair as a picture.

# %% [markdown]
# **Buckets of a whole sequence.** The buckets of the plot in "Relative position buckets", for every (query, key) pair of a 160-token sequence. In the encoder each diagonal is one
# bucket; in the decoder the upper triangle (the future) is masked, shown blank:

# %%
q_pos, k_pos = torch.arange(160)[:, None], torch.arange(160)[None, :]
fig, axs = plt.subplots(1, 2, figsize=(11, 4.6), constrained_layout=True)
for ax, bidirectional, name in [(axs[0], True, "encoder (bidirectional)"), (axs[1], False, "decoder (causal)")]:
    grid = relative_position_bucket(k_pos - q_pos, bidirectional).numpy()
    if not bidirectional:
        grid = np.ma.masked_where((k_pos > q_pos).numpy(), grid)
        ax.text(110, 40, "future:\nmasked", ha="center", va="center", color="0.4")
    im = ax.imshow(grid, cmap="viridis", vmin=0, vmax=31)
    ax.set_title(f"{name}\nbucket of each (query, key)", fontsize=10)
    ax.set_xlabel("key position"); ax.set_ylabel("query position")
fig.colorbar(im, ax=axs, shrink=0.8, label="bucket"); plt.show()

# %%
#| hide
import nbdev; nbdev.nbdev_export()
