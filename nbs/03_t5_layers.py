# %% [markdown]
# # T5 layers: a from-scratch T5 v1.1
# > RMSNorm, relative position buckets, bias-added SDPA attention, gated-GELU, encoder/decoder stacks, T5 init, KV-cache generation — each checked against `transformers`' T5

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# This notebook builds T5 v1.1 from `torch.nn` pieces, one layer at a time, and checks each piece against
# its twin in `transformers.models.t5.modeling_t5` **on the same weights and inputs**. The module and
# parameter names mirror Hugging Face's (`encoder.block.0.layer.0.SelfAttention.q`, …), so a checkpoint
# moves between the two by copying the state dict. What is different is inside: attention goes through
# `torch.nn.functional.scaled_dot_product_attention` (SDPA: PyTorch's fused attention kernel), the position bias and the masks are built once per
# stack, and the LM head gets a sane init ([nanoT5 issue #25](https://github.com/PiotrNawrot/nanoT5/issues/25)). The model needs only torch; `transformers` is the
# reference and the export format.
#
# **What you will build**: `ModelConfig` and its presets, `RMSNorm`, `relative_position_bucket` and
# `RelativePositionBias`, `Attention` (through SDPA), `GatedFeedForward`, the blocks and stacks, `init_weights`
# with the LM-head fix, and `T5` itself: forward with the loss, conversion to and from `transformers`, and
# greedy or top-k generation with a KV cache. You will end by measuring why the head's init matters.

# %%
#| default_exp model

# %%
#| export
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from fastcore.basics import patch
from torch import nn

# %%
#| hide
from fastcore.test import test_eq, test_ne, test_fail, test_close
import tempfile, random, warnings
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
# Before building anything, follow one training batch from [02_span_corruption](02_span_corruption.ipynb)
# through `T5.forward` for T5-Base (`d_model` 768, 12 heads of `d_kv` 64, `d_ff` 2048, 12 + 12 blocks,
# 32,128 vocabulary rows). The collator gives `input_ids` `[B, 512]` and `labels` `[B, 114]`, no padding:
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
# The encoder does the heavy lifting (512 positions), the decoder sees only 114: span corruption makes the
# expensive half of an encoder-decoder cheap. A cell in the appendix runs this batch through the finished `T5` on
# the `meta` device (shapes, no compute) and checks the table's shapes.
#
# ## What T5 v1.1 changed
#
# nanoT5 (and this notebook) build **T5 v1.1** (`google/t5-v1_1-base`), not the T5 of the paper (v1.0,
# `t5-base`): a gated-GELU feed-forward instead of ReLU, an untied LM head, no dropout in pre-training, and
# C4 only as pre-training data; RMSNorm and the absence of biases are unchanged. The full comparison is a
# table in the appendix.

# %% [markdown]
# ## The configuration
#
# One dataclass holds what defines the architecture, with the T5 v1.1 defaults. It converts to and from
# `transformers.T5Config`. Presets: `tiny` (the CPU demo: 13.6M parameters), `t5-v1_1-small` and
# `t5-v1_1-base` (nanoT5's model: 247,577,856 parameters). Vocabulary sizes are padded to a multiple of 128
# (32,100 ids → 32,128 rows) for fast matmuls, as Google did.
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

    def __post_init__(self):
        if self.num_decoder_layers is None:
            self.num_decoder_layers = self.num_layers

    def to_hf(self) -> "transformers.T5Config":
        "The equivalent `transformers.T5Config` (gated-gelu, v1.1)"
        from transformers import T5Config
        kw = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lm_head_init_fix"}
        cfg = T5Config(feed_forward_proj="gated-gelu", is_encoder_decoder=True, **kw)
        cfg.tie_word_embeddings = self.tie_word_embeddings  # transformers 5 overrides it in the constructor
        return cfg

    @classmethod
    def from_hf(cls, cfg) -> "ModelConfig":
        "From a `transformers.T5Config` (gated-gelu only: T5 v1.1 and later)"
        if not getattr(cfg, "is_gated_act", False) or cfg.dense_act_fn not in ("gelu_new", "gelu_pytorch_tanh"):
            raise ValueError(f"Only gated-GELU T5 (v1.1, flan-t5) is supported, got feed_forward_proj="
                             f"{cfg.feed_forward_proj!r}: use a t5-v1_1 / flan-t5 checkpoint.")
        return cls(**{f.name: getattr(cfg, f.name) for f in fields(cls) if hasattr(cfg, f.name)})


PRESETS = {
    "tiny": ModelConfig(vocab_size=8192, d_model=256, d_kv=32, d_ff=1024, num_layers=4, num_heads=8),
    "t5-v1_1-small": ModelConfig(vocab_size=32128, d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=6),
    "t5-v1_1-base": ModelConfig(),
}


def get_config(name: str, **overrides) -> ModelConfig:
    "A preset by name, with field overrides"
    if name not in PRESETS:
        raise ValueError(f"Unknown model preset {name!r}: choose one of {sorted(PRESETS)}.")
    return replace(PRESETS[name], **overrides)


# %%
test_eq(ModelConfig.from_hf(get_config("t5-v1_1-base").to_hf()), get_config("t5-v1_1-base"))
test_eq(get_config("tiny").to_hf().tie_word_embeddings, False)
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
# with the mean taken in fp32 even under bf16. `F.rms_norm` is exactly this formula in one op; we give it
# `x` in fp32. With half-precision weights (a model cast to bf16), HF rounds the normalised `x` to the
# weight's dtype *before* scaling, so then we scale after the op. (And a small helper: dropout with `p = 0`
# — nanoT5's pre-training setting — becomes `nn.Identity`, so training does not multiply by an all-ones mask.)

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
# T5 has no absolute positions. Each attention score gets a learned scalar per head that depends on the
# key-query distance, bucketed: small distances exactly, larger ones logarithmically up to `max_distance`
# (128), beyond that one bucket. The encoder is bidirectional (half the buckets for keys after the query);
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
# (exact), 8 to 127 share 8 log-spaced buckets, and everything from `max_distance` = 128 on is clipped into
# the last one (which the log formula, truncated to an integer, already reaches at 91); keys after the query use
# a second set of 16 (buckets 16–31; offset 0 is bucket 0, so bucket 16 itself is never used). The
# decoder only looks back, so it spends all 32 buckets on the past: 16 exact, 16 log-spaced. Its keys
# after the query are masked out by the causal mask (the function maps them to bucket 0, never used).

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
# The bias is one embedding of `num_buckets × num_heads`, owned by the **first** layer of each stack and
# reused by all its layers. We compute it once per forward pass, add the padding (or causal) mask to it, and
# hand the sum to every layer as one additive attention mask.

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
# T5 attention has two quirks: no `1/√d_kv` scaling (it is folded into the init of `q`), and an additive
# bias (relative positions + mask). `scaled_dot_product_attention` takes both: `scale=1.0` and the bias as a
# float `attn_mask`: one fused op instead of HF's matmul → add → softmax → matmul chain (which kernel
# runs is in the appendix).
#
# The module keeps HF's parameter names (`q`, `k`, `v`, `o`, `relative_attention_bias`). For generation it
# returns its keys and values as a small named pair, `KV`, and can take cached ones back; a decoder block
# keeps one `KV` per attention layer in a `BlockCache`.

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
        if bias is not None:
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.wo(self.dropout(F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x)))


# %%
ff, ref_ff = GatedFeedForward(cfg), hf_t5.T5DenseGatedActDense(cfg.to_hf())
ref_ff.load_state_dict(ff.state_dict())
test_close(ff(x), ref_ff(x), eps=1e-6)


# %% [markdown]
# ## Blocks and stacks
#
# Every sublayer is pre-norm with a residual: `h + dropout(sublayer(norm(h)))`. An encoder block is
# self-attention then feed-forward; a decoder block adds cross-attention to the encoder's output in
# between. The module tree (`block.i.layer.j.SelfAttention` …) is HF's, so the state dicts line up.

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
        self.layer = nn.ModuleList(layers + [FeedForwardLayer(config)])

    def forward(self, h, bias, encoder_out=None, encoder_mask=None, past: BlockCache | None = None):
        "Returns (h, BlockCache): the keys/values to pass back as `past` at the next decoding step"
        h, self_kv = self.layer[0](h, bias, past=None if past is None else past.self_attn)
        cross_kv = None
        if self.is_decoder:
            h, cross_kv = self.layer[1](h, encoder_out, encoder_mask, past=None if past is None else past.cross_attn)
        return self.layer[-1](h), BlockCache(self_kv, cross_kv)


# %%
h = torch.randn(2, 7, cfg.d_model)
enc_out, enc_cache = Block(cfg, is_decoder=False, has_bias=True)(h, None)
dec_out, dec_cache = Block(cfg, is_decoder=True, has_bias=True)(h[:, :3], None, encoder_out=h)
test_eq((enc_out.shape, dec_out.shape), ((2, 7, cfg.d_model), (2, 3, cfg.d_model)))
test_eq((enc_cache.cross_attn, dec_cache.cross_attn.k.shape), (None, (2, cfg.num_heads, 7, cfg.d_kv)))


# %% [markdown]
# A stack embeds, runs its blocks with the position bias of block 0 (+ mask), and ends with a final norm.
# The additive mask uses the dtype's most negative value, as HF does; the decoder's mask is causal.

# %%
#| export
def additive_mask(attention_mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    "[B, k_len] 1/0 mask -> [B, 1, 1, k_len] 0/-inf-ish additive mask"
    if attention_mask is None:
        return None
    return (1.0 - attention_mask[:, None, None, :].to(dtype)) * torch.finfo(dtype).min


class Stack(nn.Module):
    "Encoder or decoder stack: embeddings → blocks → final RMSNorm"

    def __init__(self, config: ModelConfig, embed_tokens: nn.Embedding, is_decoder: bool):
        super().__init__()
        self.is_decoder, self.embed_tokens = is_decoder, embed_tokens
        n = config.num_decoder_layers if is_decoder else config.num_layers
        self.block = nn.ModuleList([Block(config, is_decoder, has_bias=i == 0) for i in range(n)])
        self.final_layer_norm = RMSNorm(config.d_model, config.layer_norm_epsilon)
        self.dropout = dropout(config.dropout_rate)

    def position_bias(self, q_len: int, k_len: int, mask: torch.Tensor | None, q_offset: int = 0) -> torch.Tensor:
        "Relative position bias of block 0, plus the padding or causal mask, shared by all blocks"
        bias = self.block[0].layer[0].SelfAttention.relative_attention_bias(q_len, k_len, q_offset)
        if self.is_decoder and q_len > 1:
            causal = torch.ones(q_len, k_len, dtype=torch.bool, device=bias.device).tril(k_len - q_len)
            bias = bias.masked_fill(~causal, torch.finfo(bias.dtype).min)
        return bias if mask is None else bias + mask

    def forward(self, input_ids, attention_mask=None, encoder_out=None, encoder_mask=None,
                past: list[BlockCache] | None = None) -> tuple[torch.Tensor, list[BlockCache]]:
        "Hidden states [B, len, d_model] and one BlockCache per block (the `past` of the next decoding step)"
        h = self.dropout(self.embed_tokens(input_ids))
        offset = 0 if past is None else past[0].length   # positions decoded so far
        mask = additive_mask(attention_mask, torch.float32)
        bias = self.position_bias(input_ids.shape[1], offset + input_ids.shape[1], mask, offset)
        enc_mask = additive_mask(encoder_mask, torch.float32)
        caches = []
        for i, block in enumerate(self.block):
            h, cache = block(h, bias, encoder_out, enc_mask, None if past is None else past[i])
            caches.append(cache)
        return self.dropout(self.final_layer_norm(h)), caches


# %% [markdown]
# What every layer of a stack receives, for a padded batch of two rows (12 encoder tokens, the second row
# padded after 8; 6 decoder tokens): the position bias of head 0 plus the mask, where masked entries
# (−3.4·10³⁸, so the softmax gives them weight 0) are drawn black. Cross-attention has no position bias,
# only the encoder's padding mask. The bias table here is random, as at init.

# %%
cfg = ModelConfig(d_model=32, d_kv=8, num_heads=4, relative_attention_num_buckets=16, relative_attention_max_distance=20)
enc, dec = Stack(cfg, nn.Embedding(64, 32), is_decoder=False), Stack(cfg, nn.Embedding(64, 32), is_decoder=True)
for stack in (enc, dec):
    nn.init.normal_(stack.block[0].layer[0].SelfAttention.relative_attention_bias.weight)
enc_attention_mask = torch.ones(2, 12, dtype=torch.long); enc_attention_mask[1, 8:] = 0
with torch.no_grad():
    enc_bias = enc.position_bias(12, 12, additive_mask(enc_attention_mask, torch.float32))   # [2, heads, 12, 12]
    dec_bias = dec.position_bias(6, 6, None)                                                 # [1, heads, 6, 6]
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
# T5 folds the attention scaling into the init: `q` gets std `(d_model·d_kv)^-½`, `k`, `v` and
# `wi_*` std `d_model^-½`, `o` std `(num_heads·d_kv)^-½` (its input width; equal to `d_model` in Base), `wo` std
# `d_ff^-½`, norms 1, embeddings 1 (HF's choice). HF (and so nanoT5) also give the
# **untied LM head std 1**, so the initial logits have std ≈ √d_model and the first loss is ~10× ln V for
# Base, ~7× for `tiny` (nanoT5#25; measured at the end of the lesson). Mesh TF used `d_model^-½`. We default to that (`lm_head_init_fix=True`) and keep HF's as an
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
# (`init_weights` runs when a `T5` is built, below; after the parameter counts, a check measures these stds.)

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
                decoder_input_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None) -> Seq2SeqOutput:
        self._check(input_ids, attention_mask, decoder_input_ids, labels)
        if decoder_input_ids is None:
            if labels is None:
                raise ValueError("Pass decoder_input_ids or labels (decoder inputs are made from labels).")
            decoder_input_ids = shift_right(labels, self.config.decoder_start_token_id, self.config.pad_token_id)
        encoder_out = self.encode(input_ids, attention_mask)
        h, _ = self.decoder(decoder_input_ids, encoder_out=encoder_out, encoder_mask=attention_mask)
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
# Parameter counts of the presets; T5-Base must be exactly nanoT5's 247,577,856:

# %%
with torch.device("meta"):
    counts = {name: T5(get_config(name)).num_parameters() for name in PRESETS}
test_eq(counts["t5-v1_1-base"], 247_577_856)
test_eq(counts["tiny"], 13_637_632)  # 2·8192·256 + 4 encoder + 4 decoder blocks
counts

# %% [markdown]
# And the init stds of `init_weights`, measured on a freshly built `tiny` model (`d_model` 256, `d_kv` 32,
# `d_ff` 1024):

# %%
torch.manual_seed(0)
t = T5(get_config("tiny"))
att, ff = t.encoder.block[0].layer[0].SelfAttention, t.encoder.block[0].layer[1].DenseReluDense
stds = {"q": (att.q.weight, (256 * 32) ** -0.5), "k": (att.k.weight, 256 ** -0.5), "o": (att.o.weight, 256 ** -0.5),
        "wi_0": (ff.wi_0.weight, 256 ** -0.5), "wo": (ff.wo.weight, 1024 ** -0.5), "shared": (t.shared.weight, 1.0),
        "lm_head": (t.lm_head.weight, 256 ** -0.5)}
for name, (w, expected) in stds.items():
    test_close(w.std().item() / expected, 1.0, eps=0.03)
{name: round(w.std().item(), 4) for name, (w, _) in stds.items()}

# %% [markdown]
# The walk-through at the top of the notebook, measured with forward hooks on a T5-Base batch on the `meta`
# device, moved to the appendix: it checks the table's shapes, and nothing below needs it.

# %% [markdown]
# ## Moving weights between HF and us
#
# Our state dict *is* HF's (minus the duplicated `encoder/decoder.embed_tokens` entries HF keeps for its
# tied input embeddings). So `T5.from_hf` and `model.to_hf()` are state-dict copies with a strict key check,
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
# untied heads. HF → ours: logits within 1e-4 in fp32 with padded inputs, and gradients of the loss within 1e-4.

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
print("logits and gradients equal HF on", len(test_configs), "configs")

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
# batch of 4 (start token 0, then 12 generated ids). The all-zero one is the config with a tied head: at init the
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
# sample repeatable:

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
# tiny, 27.7 for Base), the softmax is nearly one-hot on a random token, and the loss on the right token is
# many times `ln V` — and more so the wider the model: about 7× for tiny and 10× for Base. Rows of std `d_model^-½` give logits of std ≈ 1 and a loss just above `ln V`. The head is
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
ratio = {n: measured[n]["HF std 1"][1] for n in measured}
assert 5 < ratio["tiny"] < 8 and 9 < ratio["t5-v1_1-base"] < 13                 # grows like √d_model
assert all(1 <= measured[n]["fixed, d_model^-½"][1] < 1.1 for n in measured)     # just above ln V

# %% [markdown]
# So with HF's init (and nanoT5's) the first steps of training are spent shrinking the head, not learning
# language (nanoT5#25).

# %% [markdown]
# ## What you learned
#
# - T5 v1.1 is a pre-norm encoder-decoder: every sublayer is `h + f(RMSNorm(h))`, each stack ends with an
#   RMSNorm, the feed-forward is gated-GELU, and no dense layer has a bias.
# - Positions enter only as a learned per-head bias of the bucketed key-query distance (exact up to 8, or 16
#   in the causal decoder, log-spaced up to 128, one bucket beyond), computed once per stack and shared by
#   all its blocks together with the mask.
# - Attention is unscaled (the `1/√d_kv` lives in `q`'s init) and goes through one fused SDPA call with the
#   bias as an additive mask.
# - With the same weights and inputs, our layers and whole models give HF's logits and gradients within
#   1e-4, the state dicts convert both ways, and greedy generation with our KV cache gives HF's tokens.
# - The init sets every std from the layer's fan-in; HF's std-1 untied LM head starts the loss at ≈ 7× ln V
#   for `tiny` and ≈ 10× for Base, while `d_model^-½` starts it just above ln V.
# - T5-Base has exactly nanoT5's 247,577,856 parameters; `tiny` has 13.6M, of which the embedding and the
#   head are about a third.
#
# ## Questions
#
# 1. T5 has no absolute position embeddings. How does a token know *where* another token is, and why can
#    the model still handle inputs longer than any it was trained on?
# 2. **Predict, then run** the bucket plot cell: do offsets −100 and −200 get different buckets in the
#    encoder? Why does the decoder spend all 32 buckets on the past while the encoder splits them 16 + 16?
# 3. Why is the position bias computed once, by block 0, and reused by every block of the stack? What would
#    it cost to compute it per block, and would the model be more expressive?
# 4. T5's attention has no `1/√d_kv`. Where did the scaling go, and what would happen to a T5 checkpoint
#    loaded into an attention that used SDPA's default scale?
# 5. RMSNorm drops two things a LayerNorm has. Which, and why is the mean of `x²` taken in fp32 even when
#    the model runs in bf16?
# 6. Why does the decoder's self-attention need a causal mask but the cross-attention does not? Which mask
#    does the cross-attention get?
# 7. **Predict, then run** the parameter-count cell: what share of `tiny`'s 13.6M parameters sits in the
#    embedding and the LM head? What does that say about the demo's vocabulary size (01)?
# 8. **Predict, then run** the first cell of "The LM-head fix, measured": the initial loss with HF's std-1
#    head and with the fixed head, next to ln V. Why is the first so far above ln V, and why does the gap
#    grow with `d_model`?
# 9. In the generation cell, one config generates only token 0. Why does a tied head at init keep choosing
#    the token it was given?
# 10. What does the KV cache store per decoder block, and why do the cross-attention keys and values never
#     grow while decoding? What would greedy decoding of T tokens cost without a cache?
# 11. Why compare with `transformers` on three small, odd configs (unequal depths, a tied head, few buckets)
#     rather than on T5-Base alone?
# 12. `T5.from_hf` builds the model on the `meta` device and loads with `assign=True`. What does that avoid?
# 13. `shift_right` turns `-100` into the pad id. Where does `-100` come from, and what would the embedding do
#     with it otherwise?
#
# ## Try it
#
# 1. **Head init sweep** (seconds). Build `T5(get_config("tiny"))`, set `lm_head.weight` to normal noise of std
#    1, 0.25, `256**-0.5` and 0 in turn, and compute the loss on `tiny_ids`/`tiny_labels` as in the LM-head
#    cell. Predict the loss at std 0 before you run it; look at how close to ln V = 9.01 each std gets (can a
#    random head start below it?).
# 2. **Longer reach** (seconds). Call `relative_position_bucket` on offsets −7, −8, −16, −64, −128, −300, −500
#    with the defaults, then with `num_buckets=64, max_distance=512`. Look for where the exact range ends and
#    from which distance every offset shares one bucket.
# 3. **What the cache buys** (a minute). For an untrained `tiny` model and a batch of 4 random 128-token
#    inputs, time `model.generate(x, 32)` against a loop that appends the argmax of
#    `model(x, decoder_input_ids=out).logits[:, -1]` 32 times. Check that the tokens are equal, then compare
#    the times at 32 and 128 new tokens.

# %% [markdown]
# ## Appendix: notes
#
# **T5 v1.0 and v1.1 side by side.** Each difference shows up in the code of this lesson:
#
# | | T5 v1.0 (the paper's model, released as `t5-base`) | T5 v1.1 (`google/t5-v1_1-base`, nanoT5) |
# |---|---|---|
# | feed-forward | `wo(relu(wi x))` | gated-GELU `wo(gelu(wi_0 x) ⊙ wi_1 x)` |
# | dropout in pre-training | 0.1 | 0 (nanoT5; HF's config default is still 0.1) |
# | LM head | tied to the input embedding, logits × `d_model^-½` | untied: its own `lm_head` matrix |
# | biases | none in dense layers | none (unchanged) |
# | layer norm | RMSNorm (scale only, no mean, no bias) | RMSNorm (unchanged) |
# | pre-training data | C4 (the released `t5-base` checkpoint: C4 mixed with supervised tasks) | C4 only |
# | shapes | Base: `d_model` 768, `d_ff` 3072 | larger `d_model`, fewer heads, smaller `d_ff` in the big sizes; Base keeps 768, `d_ff` 2048 |
#
# The two rows marked unchanged are listed because both are often thought to be v1.1 changes.
#
# **Which attention kernel runs.** FlashAttention kernels cannot take an arbitrary additive bias (let alone give it a
# gradient), so with a bias PyTorch dispatches to the *memory-efficient* kernel on GPU (which supports an
# additive mask, and its gradient) or the fused math/flash-CPU path on CPU — still one fused op instead of
# HF's matmul → add → softmax(fp32) → dropout → matmul chain, and no fp32 copy of the score tensor under bf16.
#
# **What `T5` checks.** Dtypes and shapes of its inputs always; the id-range scan only for CPU tensors outside
# `torch.compile`, since on a GPU it would cost a device sync every step — the training loop checks the
# tokenizer against `vocab_size` once, before it starts.
#
# **The position bias after training.** The learned relative-position bias per head is only worth plotting
# after training (at init it is noise of std `d_model^-½`); export a checkpoint from the CPU demo
# (`nanot5-edu pretrain`, [05_pretraining](05_pretraining.ipynb)) and read its
# `encoder.block.0.layer.0.SelfAttention.relative_attention_bias` to see which distances each head favours.

# %% [markdown]
# ## Appendix: two more views
#
# Two cells moved out of the reading path: the bucket of every (query, key) pair as a picture, and what the KV
# cache holds while generating.

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
# Moved out of the reading path: the shape walk-through of the first section, measured (from "The model"), and
# the HF round trip with `save_pretrained` (from "Moving weights between HF and us").

# %% [markdown]
# Now the walk-through from the top of the notebook, measured: a T5-Base batch of `B = 4` rows on the `meta`
# device (tensors with shapes and no data, so nothing is computed), with a forward hook on each module the
# table names:

# %%
with torch.device("meta"):
    base = T5(get_config("t5-v1_1-base"))
    input_ids, labels = torch.zeros(4, 512, dtype=torch.long), torch.zeros(4, 114, dtype=torch.long)
enc_block, dec_block = base.encoder.block[0], base.decoder.block[0]
watch = {"2 encoder embedding": base.shared, "4 q (before the head split)": enc_block.layer[0].SelfAttention.q,
         "5 self-attention output": enc_block.layer[0].SelfAttention.o, "6 wi_0": enc_block.layer[1].DenseReluDense.wi_0,
         "6 wo": enc_block.layer[1].DenseReluDense.wo, "7 encoder output": base.encoder.final_layer_norm,
         "9 cross-attention k": dec_block.layer[1].EncDecAttention.k, "10 decoder output": base.decoder.final_layer_norm,
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
seen["3 encoder position bias"] = tuple(base.encoder.position_bias(512, 512, None).shape)
seen["8 decoder position bias"] = tuple(base.decoder.position_bias(114, 114, None).shape)
seen["12 loss"] = tuple(out.loss.shape)
for name in sorted(seen, key=lambda n: int(n.split()[0])): print(f"{name:32} {seen[name]}")
test_eq(seen["2 encoder embedding"], (4, 512, 768)); test_eq(seen["4 q (before the head split)"], (4, 512, 768))
test_eq(seen["6 wi_0"], (4, 512, 2048)); test_eq(seen["7 encoder output"], (4, 512, 768))
test_eq(seen["3 encoder position bias"], (1, 12, 512, 512)); test_eq(seen["8 decoder position bias"], (1, 12, 114, 114))
test_eq(seen["9 cross-attention k"], (4, 512, 768)); test_eq(seen["10 decoder output"], (4, 114, 768))
test_eq(seen["11 logits"], (4, 114, 32128)); test_eq(seen["12 loss"], ())

# %% [markdown]
# The round trip HF → ours → HF leaves every tensor equal, and a checkpoint saved by us loads in plain
# `transformers` with the same logits:

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
