"""Reference solutions and banks of known-wrong solutions for the exercises of `nanot5_edu.exercises`.

Kept outside the installed package on purpose: a student who `pip install`s the course gets the checks, not these
answers. `tests/test_exercises.py` proves with them that every check passes the reference, reports a stub as
"not implemented yet", and fails each known mistake with a message that points at it.

REFERENCES: name -> a correct solution, written as a student would (not calling the package's implementation).
WRONG: name -> [(wrong solution, a phrase its failure message must contain)], the mistakes students make.
"""
from __future__ import annotations

import collections
import hashlib
import json
import math
import os
import re
import shutil
import string

import torch
import torch.nn.functional as F

REFERENCES, WRONG = {}, collections.defaultdict(list)


def reference(fn):
    REFERENCES[fn.__name__] = fn
    return fn


def wrong(name: str, expect: str):
    "Register a known-wrong solution of exercise `name` whose failure message must contain `expect`"
    def register(fn):
        WRONG[name].append((fn, expect))
        return fn
    return register


# --- 01 tokenizer -------------------------------------------------------------------------------------------------
@reference
def sentinel_ids(tokenizer, n):
    return [len(tokenizer) - 1 - k for k in range(n)]


@wrong("sentinel_ids", "count down")
def sentinels_upwards(tokenizer, n):
    return [len(tokenizer) - n + k for k in range(n)]


@wrong("sentinel_ids", "last id")
def sentinels_off_by_one(tokenizer, n):
    return [len(tokenizer) - k for k in range(n)]


@reference
def encode_with_eos(tokenizer, texts):
    return [tokenizer(t, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for t in texts]


@wrong("encode_with_eos", "appends EOS")
def encode_without_eos(tokenizer, texts):
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


@wrong("encode_with_eos", "adds no BOS")
def encode_with_bos(tokenizer, texts):
    return [[tokenizer.pad_token_id] + ids for ids in tokenizer(texts)["input_ids"]]


@wrong("encode_with_eos", "no padding")
def encode_padded(tokenizer, texts):
    return tokenizer(texts, padding=True)["input_ids"]


# --- 02 span corruption -------------------------------------------------------------------------------------------
def _segments(n, s, generator):
    "n items in s non-empty parts, every split equally likely: s - 1 distinct cut points among n - 1 places"
    cuts = torch.randperm(n - 1, generator=generator)[:s - 1].sort().values + 1
    return torch.cat([torch.tensor([0]), cuts, torch.tensor([n])]).diff()


def _counts(length, density, mean_span, rounding=round, clamp=True):
    num_noise = rounding(length * density)
    if clamp:
        num_noise = min(max(num_noise, 1), length - 1)
    return num_noise, max(round(num_noise / mean_span), 1)


@reference
def noise_span_lengths(length, noise_density, mean_noise_span_length, generator):
    num_noise, num_spans = _counts(length, noise_density, mean_noise_span_length)
    return _segments(num_noise, num_spans, generator), _segments(length - num_noise, num_spans, generator)


@wrong("noise_span_lengths", "round(length * noise_density)")
def span_lengths_floor(length, noise_density, mean_noise_span_length, generator):
    num_noise, num_spans = _counts(length, noise_density, mean_noise_span_length, rounding=int)
    return _segments(num_noise, num_spans, generator), _segments(length - num_noise, num_spans, generator)


@wrong("noise_span_lengths", "clamped to [1, length - 1]")
def span_lengths_no_clamp(length, noise_density, mean_noise_span_length, generator):
    num_noise, num_spans = _counts(length, noise_density, mean_noise_span_length, clamp=False)
    return _segments(num_noise, num_spans, generator), _segments(length - num_noise, num_spans, generator)


@wrong("noise_span_lengths", "half to even")
def span_lengths_round_half_up(length, noise_density, mean_noise_span_length, generator):
    num_noise = min(max(math.floor(length * noise_density + 0.5), 1), length - 1)  # 2.5 -> 3, not Python's 2
    num_spans = max(math.floor(num_noise / mean_noise_span_length + 0.5), 1)
    return _segments(num_noise, num_spans, generator), _segments(length - num_noise, num_spans, generator)


@wrong("noise_span_lengths", "at least one token")
def span_lengths_with_replacement(length, noise_density, mean_noise_span_length, generator):
    def parts(n, s):  # cut points drawn with replacement: empty spans
        cuts = torch.randint(0, n + 1, (s - 1,), generator=generator).sort().values
        return torch.cat([torch.tensor([0]), cuts, torch.tensor([n])]).diff()
    num_noise, num_spans = _counts(length, noise_density, mean_noise_span_length)
    return parts(num_noise, num_spans), parts(length - num_noise, num_spans)


@wrong("noise_span_lengths", "`generator`")
def span_lengths_equal(length, noise_density, mean_noise_span_length, generator):
    num_noise, num_spans = _counts(length, noise_density, mean_noise_span_length)
    split = lambda n: torch.tensor([n // num_spans + (i < n % num_spans) for i in range(num_spans)])
    return split(num_noise), split(length - num_noise)


@wrong("noise_span_lengths", "equally likely")
def span_lengths_multinomial(length, noise_density, mean_noise_span_length, generator):
    def parts(n, s):  # one token per part, the rest thrown at random: not uniform over splits
        return 1 + torch.bincount(torch.randint(0, s, (n - s,), generator=generator), minlength=s)
    num_noise, num_spans = _counts(length, noise_density, mean_noise_span_length)
    return parts(num_noise, num_spans), parts(length - num_noise, num_spans)


@wrong("noise_span_lengths", "the last included")
def span_lengths_last_never_one(length, noise_density, mean_noise_span_length, generator):
    def parts(n, s):  # an off-by-one: cut points among the first n - 2 places, so the last part holds 2 or more
        places = n - 2 if n - 2 >= s - 1 else n - 1  # (where that leaves too few places, the right count)
        cuts = torch.randperm(places, generator=generator)[:s - 1].sort().values + 1
        return torch.cat([torch.tensor([0]), cuts, torch.tensor([n])]).diff()
    num_noise, num_spans = _counts(length, noise_density, mean_noise_span_length)
    return parts(num_noise, num_spans), parts(length - num_noise, num_spans)


def _interleave(gaps, spans):
    return torch.cat([torch.tensor([False] * int(g) + [True] * int(s)) for g, s in zip(gaps, spans)])


@reference
def noise_mask(length, noise_density, mean_noise_span_length, generator):
    spans, gaps = noise_span_lengths(length, noise_density, mean_noise_span_length, generator)
    return _interleave(gaps, spans)


@wrong("noise_mask", "kept tokens first")
def noise_mask_span_first(length, noise_density, mean_noise_span_length, generator):
    spans, gaps = noise_span_lengths(length, noise_density, mean_noise_span_length, generator)
    return torch.cat([torch.tensor([True] * int(s) + [False] * int(g)) for g, s in zip(gaps, spans)])


@wrong("noise_mask", "seeded alike")
def noise_mask_global_rng(length, noise_density, mean_noise_span_length, generator):
    spans, gaps = noise_span_lengths(length, noise_density, mean_noise_span_length, None)  # torch's global generator
    return _interleave(gaps, spans)


@wrong("noise_mask", "contiguous noise spans")
def noise_mask_random_tokens(length, noise_density, mean_noise_span_length, generator):
    num_noise, _ = _counts(length, noise_density, mean_noise_span_length)
    mask = torch.zeros(length, dtype=torch.bool)
    mask[torch.randperm(length, generator=generator)[:num_noise]] = True
    return mask


@wrong("noise_mask", "placed at random")
def noise_mask_evenly_spaced(length, noise_density, mean_noise_span_length, generator):
    num_noise, num_spans = _counts(length, noise_density, mean_noise_span_length)
    split = lambda n: [n // num_spans + (i < n % num_spans) for i in range(num_spans)]
    return _interleave(split(length - num_noise), split(num_noise))


def _replace_runs(ids, hide, first_sentinel, step=-1, per_token=False):
    out, k = [], 0
    for i, token in enumerate(ids):
        if not hide[i]:
            out.append(token)
        elif per_token or i == 0 or not hide[i - 1]:
            out.append(first_sentinel + step * k)
            k += 1
    return out


@reference
def corrupt_example(ids, mask, first_sentinel, eos_id):
    kept = [not m for m in mask]
    return _replace_runs(ids, mask, first_sentinel) + [eos_id], _replace_runs(ids, kept, first_sentinel) + [eos_id]


@wrong("corrupt_example", "count DOWN")
def corrupt_upwards(ids, mask, first_sentinel, eos_id):
    kept = [not m for m in mask]
    return (_replace_runs(ids, mask, first_sentinel, step=1) + [eos_id],
            _replace_runs(ids, kept, first_sentinel, step=1) + [eos_id])


@wrong("corrupt_example", "ONE sentinel")
def corrupt_per_token(ids, mask, first_sentinel, eos_id):
    kept = [not m for m in mask]
    return (_replace_runs(ids, mask, first_sentinel, per_token=True) + [eos_id],
            _replace_runs(ids, kept, first_sentinel, per_token=True) + [eos_id])


@wrong("corrupt_example", "EOS")
def corrupt_without_eos(ids, mask, first_sentinel, eos_id):
    return _replace_runs(ids, mask, first_sentinel), _replace_runs(ids, [not m for m in mask], first_sentinel)


# --- 02b span batches ---------------------------------------------------------------------------------------------
def _pack(token_lists, raw_length, eos_id, eos=True, keep_rest=False, exact_off_by_one=False, per_document=False,
          skip_empty=False):
    docs = [list(d) + ([eos_id] if eos else []) for d in token_lists if d or not skip_empty]
    groups = docs if per_document else [[t for d in docs for t in d]]
    rows = []
    for flat in groups:
        end = len(flat) - raw_length + (0 if exact_off_by_one else 1)
        rows += [flat[i:i + raw_length] for i in range(0, max(end, 0), raw_length)]
        if keep_rest and len(flat) % raw_length:
            rows.append(flat[len(flat) // raw_length * raw_length:] + [0] * (raw_length - len(flat) % raw_length))
    return rows


@reference
def pack_documents(token_lists, raw_length, eos_id):
    return _pack(token_lists, raw_length, eos_id)


@wrong("pack_documents", "append eos_id after EVERY document")
def pack_without_eos(token_lists, raw_length, eos_id):
    return _pack(token_lists, raw_length, eos_id, eos=False)


@wrong("pack_documents", "no padding")
def pack_padding_the_rest(token_lists, raw_length, eos_id):
    return _pack(token_lists, raw_length, eos_id, keep_rest=True)


@wrong("pack_documents", "the last row is kept")
def pack_off_by_one(token_lists, raw_length, eos_id):
    return _pack(token_lists, raw_length, eos_id, exact_off_by_one=True)


@wrong("pack_documents", "rows cross document boundaries")
def pack_per_document(token_lists, raw_length, eos_id):
    return _pack(token_lists, raw_length, eos_id, per_document=True)


@wrong("pack_documents", "an empty document still ends with eos_id")
def pack_skipping_empty_documents(token_lists, raw_length, eos_id):
    return _pack(token_lists, raw_length, eos_id, skip_empty=True)


@wrong("pack_documents", "eos_id is an argument")
def pack_with_eos_1(token_lists, raw_length, eos_id):
    return _pack(token_lists, raw_length, 1)


@wrong("pack_documents", "no rows, []")
def pack_with_torch(token_lists, raw_length, eos_id):  # torch.tensor([]) is float, and .view(0, n) of it fails
    flat = torch.tensor([t for d in token_lists for t in list(d) + [eos_id]])
    n = len(flat) // raw_length
    if n == 0:
        return [flat.tolist()]  # the mistake: a short row instead of none
    return flat[:n * raw_length].view(n, raw_length).tolist()


# --- 03 T5 layers -------------------------------------------------------------------------------------------------
def _buckets(rel, bidirectional, num_buckets, max_distance, halve=True, sign=1, unidirectional_abs=False,
             rounding="trunc", cap=True, early_max_exact=False, int_ratio=False):
    buckets = torch.zeros_like(rel)
    early = num_buckets // 2
    if bidirectional:
        if halve:
            num_buckets //= 2
        buckets = buckets + (sign * rel > 0).long() * num_buckets
        distance = rel.abs()
    else:
        distance = rel.abs() if unidirectional_abs else (-rel).clamp(min=0)
    max_exact = early if early_max_exact else num_buckets // 2
    ratio = max_distance // max_exact if int_ratio else max_distance / max_exact
    scaled = torch.log(distance.float() / max_exact) / math.log(ratio) * (num_buckets - max_exact)
    log_bucket = max_exact + (scaled.round() if rounding == "round" else scaled).long()
    if cap:
        log_bucket = log_bucket.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, log_bucket)


@reference
def relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance):
    return _buckets(relative_position, bidirectional, num_buckets, max_distance)


@wrong("relative_position_bucket", "num_buckets //= 2")
def bucket_no_halving(relative_position, bidirectional, num_buckets, max_distance):
    return _buckets(relative_position, bidirectional, num_buckets, max_distance, halve=False)


@wrong("relative_position_bucket", "upper half")
def bucket_sign_swapped(relative_position, bidirectional, num_buckets, max_distance):
    return _buckets(relative_position, bidirectional, num_buckets, max_distance, sign=-1)


@wrong("relative_position_bucket", "max(-offset, 0)")
def bucket_abs_in_decoder(relative_position, bidirectional, num_buckets, max_distance):
    return _buckets(relative_position, bidirectional, num_buckets, max_distance, unidirectional_abs=True)


@wrong("relative_position_bucket", "AFTER halving")
def bucket_max_exact_before_halving(relative_position, bidirectional, num_buckets, max_distance):
    "max_exact taken from the full bucket count: the encoder's exact region comes out twice too long"
    return _buckets(relative_position, bidirectional, num_buckets, max_distance, early_max_exact=True)


@wrong("relative_position_bucket", "not rounded")
def bucket_rounded(relative_position, bidirectional, num_buckets, max_distance):
    return _buckets(relative_position, bidirectional, num_buckets, max_distance, rounding="round")


@wrong("relative_position_bucket", "cap at")
def bucket_no_cap(relative_position, bidirectional, num_buckets, max_distance):
    return _buckets(relative_position, bidirectional, num_buckets, max_distance, cap=False)


@wrong("relative_position_bucket", "never with //")
def bucket_integer_ratio(relative_position, bidirectional, num_buckets, max_distance):
    return _buckets(relative_position, bidirectional, num_buckets, max_distance, int_ratio=True)


@reference
def rms_norm(x, weight, eps):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    normed = x.float() * torch.rsqrt(variance + eps)
    if weight.dtype in (torch.float16, torch.bfloat16):
        normed = normed.to(weight.dtype)
    return weight * normed


@wrong("rms_norm", "no mean subtraction")
def layer_norm_instead(x, weight, eps):
    return weight * F.layer_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype)


@wrong("rms_norm", "INSIDE the square root")
def rms_eps_outside_sqrt(x, weight, eps):
    rms = x.float().pow(2).mean(-1, keepdim=True).sqrt()
    return weight * (x.float() / (rms + eps)).to(weight.dtype)


@wrong("rms_norm", "multiply the normalized x by weight")
def rms_without_weight(x, weight, eps):
    return (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


@wrong("rms_norm", "overflows past 65,504")
def rms_norm_no_upcast(x, weight, eps):  # right in fp32 and within bf16's tolerance, zeros in fp16
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).to(weight.dtype)


@wrong("rms_norm", "LAST dimension")
def rms_over_all_dims(x, weight, eps):
    return weight * (x.float() * torch.rsqrt(x.float().pow(2).mean() + eps)).to(weight.dtype)


@wrong("rms_norm", "bf16 output")
def rms_float32_output(x, weight, eps):
    return weight.float() * x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)


@reference
def gated_gelu_ff(x, wi_0, wi_1, wo):
    return (F.gelu(x @ wi_0.T, approximate="tanh") * (x @ wi_1.T)) @ wo.T


@wrong("gated_gelu_ff", "GELU goes on wi_0")
def ff_gate_swapped(x, wi_0, wi_1, wo):
    return ((x @ wi_0.T) * F.gelu(x @ wi_1.T, approximate="tanh")) @ wo.T


@wrong("gated_gelu_ff", "not a ReLU")
def ff_relu(x, wi_0, wi_1, wo):
    return (F.relu(x @ wi_0.T) * (x @ wi_1.T)) @ wo.T


@wrong("gated_gelu_ff", "tanh approximation")
def ff_exact_gelu(x, wi_0, wi_1, wo):
    return (F.gelu(x @ wi_0.T) * (x @ wi_1.T)) @ wo.T


@reference
def attention(q, k, v, position_bias, mask):
    scores = q @ k.transpose(-1, -2) + position_bias
    scores = scores.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
    return scores.float().softmax(-1).to(q.dtype) @ v


@wrong("attention", "NOT scale")
def attention_scaled(q, k, v, position_bias, mask):
    return attention(q / q.shape[-1] ** 0.5, k, v, position_bias, mask)


@wrong("attention", "add position_bias")
def attention_without_bias(q, k, v, position_bias, mask):
    return attention(q, k, v, torch.zeros_like(position_bias), mask)


@wrong("attention", "1 = attend")
def attention_mask_inverted(q, k, v, position_bias, mask):
    scores = (q @ k.transpose(-1, -2) + position_bias).masked_fill(mask[:, None, None, :] == 1, -1e9)
    return scores.softmax(-1) @ v


@wrong("attention", "BEFORE the softmax")
def attention_mask_after_softmax(q, k, v, position_bias, mask):
    weights = (q @ k.transpose(-1, -2) + position_bias).softmax(-1) * mask[:, None, None, :]
    return weights @ v


# --- 03b T5 model -------------------------------------------------------------------------------------------------
@reference
def shift_right(labels, start_token_id, pad_token_id):
    shifted = torch.cat([labels.new_full((labels.shape[0], 1), start_token_id), labels[:, :-1]], dim=1)
    return shifted.masked_fill(shifted == -100, pad_token_id)


@wrong("shift_right", "shift RIGHT")
def shift_left(labels, start_token_id, pad_token_id):
    shifted = torch.cat([labels[:, 1:], labels.new_full((labels.shape[0], 1), start_token_id)], dim=1)
    return shifted.masked_fill(shifted == -100, pad_token_id)


@wrong("shift_right", "start_token_id, the argument")
def shift_with_pad_as_start(labels, start_token_id, pad_token_id):
    return shift_right(labels, pad_token_id, pad_token_id)


@wrong("shift_right", "-100 labels become pad_token_id")
def shift_keeping_minus_100(labels, start_token_id, pad_token_id):
    return torch.cat([labels.new_full((labels.shape[0], 1), start_token_id), labels[:, :-1]], dim=1)


@wrong("shift_right", "not start_token_id, not 0")
def shift_minus_100_to_zero(labels, start_token_id, pad_token_id):
    return shift_right(labels, start_token_id, 0)


@wrong("shift_right", "changed `labels` in place")
def shift_in_place(labels, start_token_id, pad_token_id):
    labels[labels == -100] = pad_token_id
    return shift_right(labels, start_token_id, pad_token_id)


@wrong("shift_right", "keep the labels' dtype")
def shift_int64(labels, start_token_id, pad_token_id):
    start = torch.full((labels.shape[0], 1), start_token_id)  # int64 whatever the labels' dtype
    shifted = torch.cat([start, labels[:, :-1]], dim=1)
    return shifted.masked_fill(shifted == -100, pad_token_id)


def _kv_step(x, wq, wk, wv, wo, past_k, past_v, position_bias, scale=False, attend_new=True, prepend=False,
             return_past=False, bias=True):
    H = past_k.shape[1]
    heads = lambda w: (x @ w.T).unflatten(-1, (H, -1)).transpose(1, 2)
    q, k_new, v_new = heads(wq), heads(wk), heads(wv)
    pair = lambda past, new: torch.cat([new, past] if prepend else [past, new], dim=2)
    k, v = pair(past_k, k_new), pair(past_v, v_new)
    keys, values = (k, v) if attend_new else (past_k, past_v)
    scores = q @ keys.transpose(-1, -2)
    if scale:
        scores = scores / q.shape[-1] ** 0.5
    if bias:
        scores = scores + position_bias[..., :keys.shape[2]]
    out = (scores.softmax(-1) @ values).transpose(1, 2).flatten(2) @ wo.T
    return (out, past_k, past_v) if return_past else (out, k, v)


@reference
def kv_cache_step(x, wq, wk, wv, wo, past_k, past_v, position_bias):
    return _kv_step(x, wq, wk, wv, wo, past_k, past_v, position_bias)


@wrong("kv_cache_step", "NOT scale")
def kv_step_scaled(x, wq, wk, wv, wo, past_k, past_v, position_bias):
    return _kv_step(x, wq, wk, wv, wo, past_k, past_v, position_bias, scale=True)


@wrong("kv_cache_step", "attends to itself")
def kv_step_past_only(x, wq, wk, wv, wo, past_k, past_v, position_bias):
    return _kv_step(x, wq, wk, wv, wo, past_k, past_v, position_bias, attend_new=False)


@wrong("kv_cache_step", "at the END of the position axis")
def kv_step_prepended(x, wq, wk, wv, wo, past_k, past_v, position_bias):
    return _kv_step(x, wq, wk, wv, wo, past_k, past_v, position_bias, prepend=True)


@wrong("kv_cache_step", "grows by the new position")
def kv_step_cache_not_grown(x, wq, wk, wv, wo, past_k, past_v, position_bias):
    return _kv_step(x, wq, wk, wv, wo, past_k, past_v, position_bias, return_past=True)


@wrong("kv_cache_step", "add position_bias")
def kv_step_without_bias(x, wq, wk, wv, wo, past_k, past_v, position_bias):
    return _kv_step(x, wq, wk, wv, wo, past_k, past_v, position_bias, bias=False)


def _mask_bias(bias, attention_mask, causal, dtype, value="half", offset=True, upper=False, invert=False, rows=False,
               cast=True):
    q_len, k_len = bias.shape[-2:]
    keep = torch.ones(q_len, k_len, dtype=torch.bool)
    if causal:
        diagonal = k_len - q_len if offset else 0
        keep = keep.triu(diagonal) if upper else keep.tril(diagonal)
    if attention_mask is not None:
        padding = attention_mask == (1 if invert else 0)
        keep = keep & ~(padding[:, None, :, None] if rows else padding[:, None, None, :])
    fill = {"half": torch.finfo(dtype).min / 2, "min": torch.finfo(dtype).min, "-inf": float("-inf"),
            "fp32": torch.finfo(torch.float32).min / 2}[value]
    out = bias.masked_fill(~keep, fill)
    return out.to(dtype) if cast else out


@reference
def mask_position_bias(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype)


@wrong("mask_position_bias", "must stay finite")
def mask_bias_minus_inf(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype, value="-inf")


@wrong("mask_position_bias", "use half of it")
def mask_bias_finfo_min(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype, value="min")


@wrong("mask_position_bias", "float32's, cast to fp16, becomes -inf")
def mask_bias_float32_value(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype, value="fp32")


@wrong("mask_position_bias", "query i sees keys 0 … i")
def mask_bias_upper_triangle(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype, upper=True)


@wrong("mask_position_bias", "k_len - q_len + i")
def mask_bias_causal_without_offset(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype, offset=False)


@wrong("mask_position_bias", "(1 = attend)")
def mask_bias_padding_inverted(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype, invert=True)


@wrong("mask_position_bias", "padding hides KEYS")
def mask_bias_padded_queries(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype, rows=True)


@wrong("mask_position_bias", "return the result in `dtype`")
def mask_bias_not_cast(bias, attention_mask, causal, dtype):
    return _mask_bias(bias, attention_mask, causal, dtype, cast=False)


# --- 04 optimizers ------------------------------------------------------------------------------------------------
def _adamwscale(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay, bias_correction=True,
                floor=1e-3, eps_inside=False, decay="after", l2=False):
    b1, b2 = betas
    if l2:
        grad = grad + weight_decay * param
    rms = param.pow(2).mean().sqrt().clamp(min=floor)
    if decay == "before":
        param.mul_(1 - lr * weight_decay)
    exp_avg.mul_(b1).add_(grad, alpha=1 - b1)
    exp_avg_sq.mul_(b2).addcmul_(grad, grad, value=1 - b2)
    step_size = lr * (math.sqrt(1 - b2 ** step) / (1 - b1 ** step) if bias_correction else 1.0) * rms
    denom = (exp_avg_sq + eps).sqrt() if eps_inside else exp_avg_sq.sqrt() + eps
    param.sub_(step_size * exp_avg / denom)
    if decay == "after" and not l2:
        param.mul_(1 - lr * weight_decay)


@reference
def adamwscale_step(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    _adamwscale(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)


@wrong("adamwscale_step", "bias correction")
def adamwscale_no_bias_correction(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    _adamwscale(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay, bias_correction=False)


@wrong("adamwscale_step", "RMS floor")
def adamwscale_no_floor(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    _adamwscale(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay, floor=0.0)


@wrong("adamwscale_step", "OUTSIDE the square root")
def adamwscale_eps_inside_sqrt(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    _adamwscale(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay, eps_inside=True)


@wrong("adamwscale_step", "AFTER the Adam update")
def adamwscale_decay_first(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    _adamwscale(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay, decay="before")


@wrong("adamwscale_step", "never touches grad")
def adamwscale_l2(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    _adamwscale(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay, l2=True)


@wrong("adamwscale_step", "in place")
def adamwscale_not_in_place(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    param, exp_avg, exp_avg_sq = param.clone(), exp_avg.clone(), exp_avg_sq.clone()  # updates copies only
    _adamwscale(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)


@reference
def cosine_lr(step, lr, total_steps, warmup_steps, final_lr):
    if step < warmup_steps:
        return lr * (0.5 + 0.5 * step / warmup_steps)
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return final_lr + (lr - final_lr) * (1 + math.cos(math.pi * progress)) / 2


@wrong("cosine_lr", "0.5 * lr")
def cosine_warmup_from_zero(step, lr, total_steps, warmup_steps, final_lr):
    return lr * step / warmup_steps if step < warmup_steps else cosine_lr(step, lr, total_steps, warmup_steps, final_lr)


@wrong("cosine_lr", "final_lr + (lr - final_lr)")
def cosine_to_zero(step, lr, total_steps, warmup_steps, final_lr):
    return cosine_lr(step, lr, total_steps, warmup_steps, 0.0)


@wrong("cosine_lr", "capped at 1")
def cosine_uncapped(step, lr, total_steps, warmup_steps, final_lr):
    if step < warmup_steps:
        return lr * (0.5 + 0.5 * step / warmup_steps)
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return final_lr + (lr - final_lr) * (1 + math.cos(math.pi * progress)) / 2


# --- 05 training --------------------------------------------------------------------------------------------------
def _mean_target_loss(model, input_ids, labels):
    logits = model(input_ids, labels=labels).logits
    return F.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)


@reference
def span_gain(model, input_ids, other_input_ids, labels):
    with torch.no_grad():
        return (_mean_target_loss(model, other_input_ids, labels) - _mean_target_loss(model, input_ids, labels)).item()


@wrong("span_gain", "positive when the real input helps")
def span_gain_sign_swapped(model, input_ids, other_input_ids, labels):
    return -span_gain(model, input_ids, other_input_ids, labels)


@wrong("span_gain", "not over per-row means")
def span_gain_row_means(model, input_ids, other_input_ids, labels):
    def loss(ids):
        logits = model(ids, labels=labels).logits
        per_token = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")
        return (per_token.sum(1) / (labels != -100).sum(1)).mean()
    return (loss(other_input_ids) - loss(input_ids)).item()


@wrong("span_gain", "-100 labels are ignored")
def span_gain_counts_padding(model, input_ids, other_input_ids, labels):
    labels = labels.clamp(min=0)  # -100 turned into pad tokens, which are then scored
    return span_gain(model, input_ids, other_input_ids, labels)


@wrong("span_gain", "Python number")
def span_gain_tensor(model, input_ids, other_input_ids, labels):
    return _mean_target_loss(model, other_input_ids, labels) - _mean_target_loss(model, input_ids, labels)


def _train_step(model, optimizer, micro_batches, scale=True, zero_between=False, zero_after=True, last_loss=False):
    losses = []
    for b in micro_batches:
        if zero_between:
            optimizer.zero_grad()
        loss = model(b["input_ids"], labels=b["labels"]).loss
        (loss / len(micro_batches) if scale else loss).backward()
        losses.append(loss.item())
    optimizer.step()
    if zero_after:
        optimizer.zero_grad()
    return losses[-1] if last_loss else sum(losses) / len(losses)


@reference
def train_step(model, optimizer, micro_batches):
    return _train_step(model, optimizer, micro_batches)


@wrong("train_step", "scaled by 1/len(micro_batches)")
def train_step_unscaled(model, optimizer, micro_batches):
    return _train_step(model, optimizer, micro_batches, scale=False)


@wrong("train_step", "without zeroing the gradients between micro-batches")
def train_step_zero_between(model, optimizer, micro_batches):
    return _train_step(model, optimizer, micro_batches, zero_between=True)


@wrong("train_step", "zero the gradients after optimizer.step()")
def train_step_no_zero_grad(model, optimizer, micro_batches):
    return _train_step(model, optimizer, micro_batches, zero_after=False)


@wrong("train_step", "mean of the unscaled losses")
def train_step_last_loss(model, optimizer, micro_batches):
    return _train_step(model, optimizer, micro_batches, last_loss=True)


@wrong("train_step", "concatenating the micro-batches")
def train_step_concatenated(model, optimizer, micro_batches):
    whole = {k: torch.cat([b[k] for b in micro_batches]) for k in micro_batches[0]}  # one mean over every token
    loss = model(whole["input_ids"], labels=whole["labels"]).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


# --- 06 streams ---------------------------------------------------------------------------------------------------
def _next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, position, epoch_seed=True, wrap_when=">",
               short=False, local_step=False, strided=False):
    step = micro_batch * world_size
    end = position >= num_rows if short else (position + step >= num_rows if wrap_when == ">=" else
                                              position + step > num_rows)
    if end:
        epoch, position = epoch + 1, 0
    g = torch.Generator().manual_seed(seed + epoch if epoch_seed else seed)
    order = torch.randperm(num_rows, generator=g).tolist()
    if strided:
        mine = order[position + rank:position + step:world_size]
    else:
        mine = order[position + rank * micro_batch:position + (rank + 1) * micro_batch]
    return mine, epoch, position + (micro_batch if local_step else step)


@reference
def next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    return _next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, position)


@wrong("next_rows", "seeded with seed + epoch")
def next_rows_same_order_every_epoch(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    return _next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, position, epoch_seed=False)


@wrong("next_rows", "not returned as a short batch")
def next_rows_short_last_batch(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    return _next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, position, short=True)


@wrong("next_rows", "still taken")
def next_rows_moves_on_too_early(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    return _next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, position, wrap_when=">=")


@wrong("next_rows", "advances by the whole global micro-batch")
def next_rows_local_position(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    return _next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, position, local_step=True)


@wrong("next_rows", "rank·micro_batch")
def next_rows_strided_ranks(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    return _next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, position, strided=True)


@wrong("next_rows", "order[position : position + micro_batch]")
def next_rows_from_the_start(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    "The resumed state's position ignored: every call takes the epoch's first rows"
    rows, epoch, _ = _next_rows(num_rows, micro_batch, seed, rank, world_size, epoch, 0)
    return rows, epoch, position + micro_batch * world_size


# --- 07 FLOPs and memory ------------------------------------------------------------------------------------------
def _flops(config, B, L_in, L_t, fma=2, passes=3, inner_is_d_model=False, decoder_depth=None, cross_kv_on_targets=False,
           head=True, products=True):
    d, ff, V = config.d_model, config.d_ff, config.vocab_size
    inner = d if inner_is_d_model else config.num_heads * config.d_kv
    n_dec = decoder_depth or config.num_decoder_layers
    enc_tok, dec_tok = B * L_in, B * L_t
    prod = lambda q, k: 2 * B * q * k * inner if products else 0  # q kᵀ and weights · v
    enc = config.num_layers * (enc_tok * (4 * d * inner + 3 * d * ff) + prod(L_in, L_in))
    dec = n_dec * (dec_tok * (4 * d * inner + 2 * d * inner + 3 * d * ff)
                   + (dec_tok if cross_kv_on_targets else enc_tok) * 2 * d * inner
                   + prod(L_t, L_t) + prod(L_t, L_in))
    return float(passes * fma * (enc + dec + (dec_tok * d * V if head else 0)))


@reference
def flops_per_step(config, batch_size, inputs_length, targets_length):
    return _flops(config, batch_size, inputs_length, targets_length)


@wrong("flops_per_step", "the forward pass only")
def flops_forward_only(config, batch_size, inputs_length, targets_length):
    return _flops(config, batch_size, inputs_length, targets_length, passes=1)


@wrong("flops_per_step", "multiply-adds, not FLOPs")
def flops_multiply_adds(config, batch_size, inputs_length, targets_length):
    return _flops(config, batch_size, inputs_length, targets_length, fma=1)


@wrong("flops_per_step", "the LM head")
def flops_without_head(config, batch_size, inputs_length, targets_length):
    return _flops(config, batch_size, inputs_length, targets_length, head=False)


@wrong("flops_per_step", "attention products")
def flops_without_attention_products(config, batch_size, inputs_length, targets_length):
    return _flops(config, batch_size, inputs_length, targets_length, products=False)


@wrong("flops_per_step", "inner = num_heads · d_kv")
def flops_inner_as_d_model(config, batch_size, inputs_length, targets_length):
    return _flops(config, batch_size, inputs_length, targets_length, inner_is_d_model=True)


@wrong("flops_per_step", "num_decoder_layers layers")
def flops_decoder_depth_from_encoder(config, batch_size, inputs_length, targets_length):
    return _flops(config, batch_size, inputs_length, targets_length, decoder_depth=config.num_layers)


@wrong("flops_per_step", "encoder's B·L_in tokens")
def flops_cross_kv_on_decoder_tokens(config, batch_size, inputs_length, targets_length):
    return _flops(config, batch_size, inputs_length, targets_length, cross_kv_on_targets=True)


def _state_bytes(config, optimizer, precision, weight_bytes=4, moments=None, copies="matmul", norms=True,
                 decoder_depth=None, wo_under_fp16=False):
    d, inner, f, V = config.d_model, config.num_heads * config.d_kv, config.d_ff, config.vocab_size
    n_enc, n_dec = config.num_layers, decoder_depth or config.num_decoder_layers
    attention, ffn, n = 4 * d * inner, 3 * d * f, d if norms else 0
    matmul = n_enc * (attention + ffn) + n_dec * (2 * attention + ffn) + V * d  # + the LM head
    params = (matmul + V * d + n_enc * 2 * n + n_dec * 3 * n + 2 * n
              + (2 * config.relative_attention_num_buckets * config.num_heads if norms else 0))
    optim = moments if moments is not None else {"adafactor": 4}.get(optimizer, 8)
    if precision == "fp32" or copies is None:
        copied = 0
    elif copies == "all":
        copied = params
    else:
        copied = matmul - (0 if precision == "bf16" or wo_under_fp16 else (n_enc + n_dec) * d * f)
    weight = weight_bytes if precision != "fp32" else 4
    return params * (weight + 4 + optim) + 2 * copied


@reference
def training_state_bytes(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision)


@wrong("training_state_bytes", "two moments")
def state_bytes_one_moment(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision, moments=4)


@wrong("training_state_bytes", "the RMSNorm weights and both position-bias tables")
def state_bytes_matrices_only(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision, norms=False)


@wrong("training_state_bytes", "'adafactor': 4 bytes")
def state_bytes_adafactor_as_adam(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision, moments=8)


@wrong("training_state_bytes", "keeps the fp32 weights")
def state_bytes_16bit_weights(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision, weight_bytes=2, copies=None)


@wrong("training_state_bytes", "adds a 2-byte copy of each matmul weight")
def state_bytes_no_copies(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision, copies=None)


@wrong("training_state_bytes", "NOT the embedding")
def state_bytes_copy_of_everything(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision, copies="all")


@wrong("training_state_bytes", "no 16-bit copy of wo")
def state_bytes_wo_copied_under_fp16(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision, wo_under_fp16=True)


@wrong("training_state_bytes", "num_decoder_layers layers")
def state_bytes_decoder_depth_from_encoder(config, optimizer, precision):
    return _state_bytes(config, optimizer, precision, decoder_depth=config.num_layers)


# --- 07b checkpoints ----------------------------------------------------------------------------------------------
class _HashingFile:
    "Hashes what goes through it to the file (as lesson 07b's _Hashing)"
    def __init__(self, f):
        self.f, self.sha256, self.bytes = f, hashlib.sha256(), 0

    def write(self, data):
        self.sha256.update(data)
        self.bytes += len(data)
        return self.f.write(data)


@reference
def atomic_write(path, write):
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as raw:
            f = _HashingFile(raw)
            write(f)
            raw.flush()
            os.fsync(raw.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return {"bytes": f.bytes, "sha256": f.sha256.hexdigest()}


@wrong("atomic_write", "write under a temporary name")
def atomic_write_in_place(path, write):
    with open(path, "wb") as raw:
        f = _HashingFile(raw)
        write(f)
    return {"bytes": f.bytes, "sha256": f.sha256.hexdigest()}


@wrong("atomic_write", "remove the temporary file")
def atomic_write_leaves_tmp(path, write):
    tmp = path + ".tmp"
    with open(tmp, "wb") as raw:
        f = _HashingFile(raw)
        write(f)
    os.replace(tmp, path)
    return {"bytes": f.bytes, "sha256": f.sha256.hexdigest()}


@wrong("atomic_write", "re-raise the error")
def atomic_write_swallows_errors(path, write):
    try:
        return atomic_write(path, write)
    except OSError:
        return None  # the mistake: a failed write reported as nothing at all


@wrong("atomic_write", "did not os.replace")
def atomic_write_copies(path, write):
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as raw:
            f = _HashingFile(raw)
            write(f)
        shutil.copyfile(tmp, path)  # the mistake: copied into the old file, not renamed over it
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return {"bytes": f.bytes, "sha256": f.sha256.hexdigest()}


@wrong("atomic_write", "read the file back only after flushing it")
def atomic_write_hash_before_flush(path, write):
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            write(f)
            data = open(tmp, "rb").read()  # the mistake: read back while the writes still sit in f's buffer
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _checkpoint_problem(directory, sizes=True, hashes=True, catch_missing=True, catch_json=True, exists=True):
    try:
        with open(os.path.join(directory, "trainer_state.json")) as f:
            files = json.load(f)["files"]
    except (OSError, ValueError):
        if not catch_json:
            raise
        return "trainer_state.json cannot be read"
    for name, want in files.items():
        path = os.path.join(directory, name)
        if exists and catch_missing and not os.path.exists(path):
            return f"{name} is missing"
        if sizes and os.path.getsize(path) != want["bytes"]:
            return f"{name} has {os.path.getsize(path)} bytes, not {want['bytes']} (cut short?)"
        if hashes:
            with open(path, "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != want["sha256"]:
                    return f"{name} has changed since it was written"
    return None


@reference
def checkpoint_problem(directory):
    return _checkpoint_problem(directory)


@wrong("checkpoint_problem", "compare its sha256")
def checkpoint_sizes_only(directory):
    return _checkpoint_problem(directory, hashes=False)


@wrong("checkpoint_problem", "not a FileNotFoundError")
def checkpoint_missing_raises(directory):
    return _checkpoint_problem(directory, catch_missing=False)


@wrong("checkpoint_problem", "reported (a sentence naming trainer_state.json), not raised")
def checkpoint_json_raises(directory):
    return _checkpoint_problem(directory, catch_json=False)


@wrong("checkpoint_problem", "return None")
def checkpoint_always_a_problem(directory):
    return _checkpoint_problem(directory) or "checked"


@wrong("checkpoint_problem", "a missing trainer_state.json is reported")
def checkpoint_no_state_is_fine(directory):
    if not os.path.exists(os.path.join(directory, "trainer_state.json")):
        return None  # the mistake: an old checkpoint without a record taken for an intact one
    return _checkpoint_problem(directory)


# --- 08 the training loop -----------------------------------------------------------------------------------------
def _nan_step(losses, step, grad_acc, checked, first_offset=1, per_micro_batch=False, bad=math.isfinite, last=False,
              relative=False):
    per = 1 if per_micro_batch else grad_acc
    first_step = step - len(losses) // per + first_offset
    found = None
    for i in range(checked, len(losses)):
        if not bad(losses[i]):
            found = first_step + ((i - checked) if relative else i) // per
            if not last:
                return found
    return found


@reference
def nan_step(losses, step, grad_acc, checked):
    return _nan_step(losses, step, grad_acc, checked)


@wrong("nan_step", "the window ends at `step`")
def nan_step_off_by_one(losses, step, grad_acc, checked):
    return _nan_step(losses, step, grad_acc, checked, first_offset=0)


@wrong("nan_step", "count steps, not micro-batches")
def nan_step_in_micro_batches(losses, step, grad_acc, checked):
    return _nan_step(losses, step, grad_acc, checked, per_micro_batch=True)


@wrong("nan_step", "not isnan")
def nan_step_nan_only(losses, step, grad_acc, checked):
    return _nan_step(losses, step, grad_acc, checked, bad=lambda x: not math.isnan(x))


@wrong("nan_step", "the FIRST non-finite loss")
def nan_step_last(losses, step, grad_acc, checked):
    return _nan_step(losses, step, grad_acc, checked, last=True)


@wrong("nan_step", "not from the first unchecked loss")
def nan_step_relative_index(losses, step, grad_acc, checked):
    return _nan_step(losses, step, grad_acc, checked, relative=True)


# --- 09 fine-tuning metrics ---------------------------------------------------------------------------------------
def _words(text, lower=True):
    return re.sub(r"[^a-z0-9]+", " ", text.lower() if lower else text).split()


def _lcs(a, b):
    row = [0] * (len(b) + 1)
    for x in a:
        prev = 0
        for j, y in enumerate(b):
            prev, row[j + 1] = row[j + 1], prev + 1 if x == y else max(row[j + 1], row[j])
    return row[-1]


def _rouge(prediction, references, score="f", reduce=max, lower=True, common=_lcs, scale=100.0):
    out = []
    for ref in references:
        p, r = _words(prediction, lower), _words(ref, lower)
        n = common(p, r)
        if n == 0:
            out.append(0.0); continue
        prec, rec = n / len(p), n / len(r)
        out.append(scale * {"f": 2 * prec * rec / (prec + rec), "p": prec, "r": rec}[score])
    return reduce(out)


@reference
def rouge_l(prediction, references):
    return _rouge(prediction, references)


@wrong("rouge_l", "SUBSEQUENCE")
def rouge_bag_of_words(prediction, references):
    return _rouge(prediction, references, common=lambda a, b: sum((collections.Counter(a) & collections.Counter(b)).values()))


@wrong("rouge_l", "neither one alone")
def rouge_precision_only(prediction, references):
    return _rouge(prediction, references, score="p")


@wrong("rouge_l", "MAX over them")
def rouge_mean_over_references(prediction, references):
    return _rouge(prediction, references, reduce=lambda s: sum(s) / len(s))


@wrong("rouge_l", "lower-case")
def rouge_case_sensitive(prediction, references):
    return _rouge(prediction, references, lower=False)


@wrong("rouge_l", "× 100")
def rouge_fraction(prediction, references):
    return _rouge(prediction, references, scale=1.0)


def _rouge_words(prediction, references, words):
    out = []
    for ref in references:
        p, r = words(prediction), words(ref)
        n = _lcs(p, r)
        out.append(0.0 if n == 0 else 100 * 2 * (n / len(p)) * (n / len(r)) / (n / len(p) + n / len(r)))
    return max(out)


@wrong("rouge_l", "underscore")
def rouge_word_regex(prediction, references):  # \w+ keeps underscores and non-ASCII letters inside words
    return _rouge_words(prediction, references, lambda t: re.findall(r"\w+", t.lower()))


@wrong("rouge_l", "INSIDE a word")
def rouge_strip_punctuation_at_word_ends(prediction, references):
    return _rouge_words(prediction, references,
                        lambda t: [w for w in (w.strip(string.punctuation) for w in t.lower().split()) if w])


def _normalize(text, articles=True, lower=True, punctuation=True):
    text = text.lower() if lower else text
    if punctuation:
        text = "".join(c for c in text if c not in string.punctuation)
    if not articles:
        text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


@reference
def exact_match(prediction, references):
    return 100.0 if any(_normalize(prediction) == _normalize(r) for r in references) else 0.0


@wrong("exact_match", "lower-case")
def exact_match_case_sensitive(prediction, references):
    return 100.0 if any(_normalize(prediction, lower=False) == _normalize(r, lower=False) for r in references) else 0.0


@wrong("exact_match", "articles are KEPT")
def exact_match_squad(prediction, references):
    return 100.0 if any(_normalize(prediction, articles=False) == _normalize(r, articles=False) for r in references) else 0.0


@wrong("exact_match", "100.0 (not 1)")
def exact_match_fraction(prediction, references):
    return 1.0 if any(_normalize(prediction) == _normalize(r) for r in references) else 0.0


@wrong("exact_match", "not contain")
def exact_match_substring(prediction, references):
    return 100.0 if any(_normalize(r) in _normalize(prediction) for r in references) else 0.0


@wrong("exact_match", "REMOVED, not replaced")
def exact_match_punctuation_to_space(prediction, references):
    norm = lambda t: " ".join(re.sub(r"[^\w\s]", " ", t.lower()).split())
    return 100.0 if any(norm(prediction) == norm(r) for r in references) else 0.0


@wrong("exact_match", "not punctuation")
def exact_match_ascii_only(prediction, references):
    norm = lambda t: " ".join(re.sub(r"[^a-z0-9\s]", "", t.lower()).split())
    return 100.0 if any(norm(prediction) == norm(r) for r in references) else 0.0


@wrong("exact_match", "accents are kept")
def exact_match_strips_accents(prediction, references):
    import unicodedata
    fold = lambda t: "".join(c for c in unicodedata.normalize("NFKD", t) if not unicodedata.combining(c))
    return 100.0 if any(_normalize(fold(prediction)) == _normalize(fold(r)) for r in references) else 0.0


# --- 09c objectives ------------------------------------------------------------------------------------------------
@reference
def prefix_lm_mask(length, prefix_length):
    i = torch.arange(length)
    causal = i[None, :] <= i[:, None]
    both_in_prefix = (i[:, None] < prefix_length) & (i[None, :] < prefix_length)
    return causal | both_in_prefix


@wrong("prefix_lm_mask", "the diagonal is True")
def prefix_mask_strictly_causal(length, prefix_length):  # off by one: a position cannot see itself
    i = torch.arange(length)
    return (i[None, :] < i[:, None]) | ((i[:, None] < prefix_length) & (i[None, :] < prefix_length))


@wrong("prefix_lm_mask", "prefix positions see the whole prefix")
def prefix_mask_prefix_sees_all(length, prefix_length):  # the prefix rows see the targets too
    i = torch.arange(length)
    return (i[None, :] <= i[:, None]) | (i[None, :] < prefix_length) | (i[:, None] < prefix_length)


@wrong("prefix_lm_mask", "expected a bool tensor")
def prefix_mask_as_floats(length, prefix_length):  # 1.0/0.0: the wrong dtype for masked_fill(~keep, ...)
    return prefix_lm_mask(length, prefix_length).float()


@wrong("prefix_lm_mask", "query")
def prefix_mask_upper_triangle(length, prefix_length):  # rows and columns swapped: keys after the query
    return prefix_lm_mask(length, prefix_length).T


@reference
def ul2_example_lengths(raw_length, mean_span, rate):
    noise = min(max(round(raw_length * rate), 1), raw_length - 1)
    spans = max(round(noise / mean_span), 1)
    return 1 + raw_length - noise + spans + 1, noise + spans + 1


@wrong("ul2_example_lengths", "mode token")
def ul2_lengths_without_mode(raw_length, mean_span, rate):
    inputs, targets = ul2_example_lengths(raw_length, mean_span, rate)
    return inputs - 1, targets


@wrong("ul2_example_lengths", "clamps it up to 1 span")
def ul2_lengths_zero_spans(raw_length, mean_span, rate):  # no clamp: 0 spans for a long mean span on a short row
    noise = round(raw_length * rate)
    spans = round(noise / mean_span)
    return 1 + raw_length - noise + spans + 1, noise + spans + 1


@wrong("ul2_example_lengths", "use round, not int()")
def ul2_lengths_half_up(raw_length, mean_span, rate):  # round half up: 50.5 -> 51
    import math
    noise = min(max(math.floor(raw_length * rate + 0.5), 1), raw_length - 1)
    spans = max(math.floor(noise / mean_span + 0.5), 1)
    return 1 + raw_length - noise + spans + 1, noise + spans + 1


@wrong("ul2_example_lengths", "spans = round(noise / mean_span)")
def ul2_lengths_truncated(raw_length, mean_span, rate):  # int() truncates 5.55 to 5
    noise = max(int(raw_length * rate), 1)
    spans = max(int(noise / mean_span), 1)
    return 1 + raw_length - noise + spans + 1, noise + spans + 1


@wrong("ul2_example_lengths", "two Python ints")
def ul2_lengths_as_tensor(raw_length, mean_span, rate):
    return torch.tensor(ul2_example_lengths(raw_length, mean_span, rate))
