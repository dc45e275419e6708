"""Reference solutions and banks of known-wrong solutions for the exercises of `nanot5_edu.exercises`.

Kept outside the installed package on purpose: a student who `pip install`s the course gets the checks, not these
answers. `tests/test_exercises.py` proves with them that every check passes the reference, reports a stub as
"not implemented yet", and fails each known mistake with a message that points at it.

REFERENCES: name -> a correct solution, written as a student would (not calling the package's implementation).
WRONG: name -> [(wrong solution, a phrase its failure message must contain)], the mistakes students make.
"""
from __future__ import annotations

import collections
import math
import re
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


# --- 06 fine-tuning metrics ---------------------------------------------------------------------------------------
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
