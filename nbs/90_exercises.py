# %% [markdown]
# # Exercises: checks against two oracles
# > `EXERCISES`: one check per exercise of lessons 01–09c; each compares a student's function with its references (mostly two independent ones: `transformers`, the package or a hand computation) and names the first case that differs

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# This is a reference page, not a lesson. The exercise notebooks in the repository's `exercises/` folder (one per
# lesson with exercises: 01–09, 02b, 03b, 07b and 09c) ask a student to write small functions; each has a check cell
#
# ```python
# from nanot5_edu.exercises import EXERCISES
# EXERCISES["rms_norm"].check(rms_norm)
# ```
#
# that returns quietly when the function is right and otherwise raises an `AssertionError` naming the first case
# that differs, the expected and the received value, and a hint about the rule that case tests. A function that
# still raises `NotImplementedError` gets "not implemented yet".
#
# **Two oracles.** Most expected values are computed twice, independently — by `transformers` (T5's bucket function,
# `T5LayerNorm`, `T5DenseGatedActDense`, `_shift_right`), by `torch` (SDPA, `LinearLR` + `CosineAnnealingLR`,
# `FlopCounterMode`), by `rouge_score` or `hashlib`, or by a hand computation (in float64 where it computes) — and,
# usually, by the package's own implementation from the lessons. The check first asserts that the two agree, then
# compares the student's answer, so it cannot silently drift from either reference. The exceptions say so in their
# sections: the random span and mask checks test properties, and the distributions against an exact one (spans) or
# Monte Carlo estimates from two package functions (masks), and
# `attention` compares with SDPA and a hand computation, `train_step` with the model's own backward and a hand sum.
#
# **Checks that can fail.** The cases of each check run from the core rule to its edge cases, so a mistake often
# fails at the case whose hint names it; where it fails earlier, the check's own sentence (in place, dtype, the
# cache's order) often names it, and otherwise the first case's hint lists the core rule's parts (for
# `adamwscale_step`, the RMS scale among them). The course's tests (`tests/test_exercises.py`)
# prove this for every exercise: the reference solution passes, the stub fails with "not implemented yet", and
# each function of a bank of known-wrong solutions (the mistakes students make) fails with a message that
# points at its mistake. Reference solutions and the wrong bank live in `tests/exercise_bank.py`, outside the
# installed package; `pytest -m exercise_03 tests/test_exercises.py` runs these gates for one lesson's exercises.

# %%
#| default_exp exercises

# %%
#| export
from __future__ import annotations

import functools
import math
import random
import string
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Iterable

import torch
import torch.nn.functional as F

# %%
#| hide
from fastcore.test import test_eq, test_fail


# %% [markdown]
# ## How a check works
#
# An exercise is a name, the lesson it belongs to, the signature the student implements, the task in a few
# sentences, and a function that yields its cases. A case is a label (which inputs), a hint (which rule it tests)
# and a judge: it calls the student's function and returns `None` when the answer agrees with the oracles, or a
# sentence saying where it differs. `check` turns the first difference, a `NotImplementedError`, or any other
# exception into one `AssertionError` message.

# %%
#| export
@dataclass
class Case:
    "One checked call: `judge(fn)` returns None when `fn` agrees with the oracles, else where it differs"
    label: str  # which inputs, in words
    hint: str  # the rule this case tests
    judge: Callable[[Callable], str | None]


@dataclass
class Exercise:
    "A student exercise: `check(fn)` returns quietly when `fn` is right, else raises AssertionError with a hint"
    name: str
    lesson: str  # the lesson notebook it belongs to, e.g. '03_t5_layers'
    signature: str
    task: str
    cases: Callable[[], Iterable[Case]] = field(repr=False)
    hidden: Callable[[int], Iterable[Case]] | None = field(default=None, repr=False)  # seed -> cases students never saw

    @functools.cached_property
    def _cases(self) -> list[Case]:
        return list(self.cases())  # the oracles' answers are computed once per session

    def check(self, fn: Callable, seed: int | None = None) -> None:
        """Run every case against the two oracles; raise AssertionError at the first that differs. With `seed`, also
        the hidden cases drawn from it (a teacher's `tools/grade.py --seed N`), where the exercise has them"""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # tiny tensors: extra threads only wait on each other (10x slower on a busy CPU)
        try:
            self._check(fn, self._cases + (list(self.hidden(seed)) if seed is not None and self.hidden else []))
        finally:
            torch.set_num_threads(threads)

    def _check(self, fn: Callable, cases: list[Case] | None = None) -> None:
        for case in self._cases if cases is None else cases:
            try:
                problem = case.judge(fn)
            except NotImplementedError:
                raise AssertionError(f"{self.name}: not implemented yet — replace `raise NotImplementedError` with "
                                     f"your code.\nsignature: {self.signature}") from None
            except Exception as e:
                raise AssertionError(f"{self.name}, case '{case.label}': your function raised "
                                     f"{type(e).__name__}: {e}\nhint: {case.hint}") from e
            if problem:
                raise AssertionError(f"{self.name}, case '{case.label}': {problem}\nhint: {case.hint}")


EXERCISES: dict[str, Exercise] = {}


def exercise(name: str, lesson: str, signature: str, task: str):
    "Register the decorated case generator as exercise `name`"
    def register(cases):
        EXERCISES[name] = Exercise(name, lesson, signature, task, cases)
        return cases
    return register


class OracleDisagreement(RuntimeError):
    "The two references of a check disagree: a bug in the course (or a changed library), not in the student's code"


def _agree(name: str, a, b, atol: float = 0.0, rtol: float = 0.0):
    "Assert that two oracles give the same value before a student's answer is compared with them"
    problem = first_difference(a, b, atol, rtol)
    if problem:
        raise OracleDisagreement(f"The two references for {name} disagree ({problem}): please report this as a bug "
                                 "of the course, with your torch and transformers versions.")
    return a


# %% [markdown]
# `first_difference` is the comparison most judges use: shapes first (and the dtype, where the check asks for it:
# `rms_norm`, `shift_right`), then values, reporting the first element that differs (with what that element stands
# for, when the case says so).

# %%
#| export
def _fmt(x) -> str:
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, torch.Tensor):
        x = x.tolist() if x.numel() <= 12 else f"tensor of shape {tuple(x.shape)}"
    return repr(x)


def first_difference(expected, got, atol: float = 0.0, rtol: float = 0.0, where: Callable | None = None,
                     check_dtype: bool = False) -> str | None:
    "None if `got` matches `expected` (tensors, numbers, lists/tuples of them), else where and how it differs"
    if isinstance(expected, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {type(got).__name__}"
        if tuple(got.shape) != tuple(expected.shape):
            return f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        if check_dtype and got.dtype != expected.dtype:
            return f"expected dtype {expected.dtype}, got {got.dtype}"
        if expected.dtype == torch.bool or not expected.is_floating_point():
            if got.is_floating_point():
                return f"expected an integer/bool tensor, got dtype {got.dtype}"
            bad = got.detach().long() != expected.long()
        else:
            e, g = expected.detach().double(), got.detach().double()
            bad = ~torch.isclose(g, e, rtol=rtol, atol=atol)
        if bad.any():
            idx = tuple(bad.nonzero()[0].tolist())
            at = where(idx) if where else f"index {idx}"
            return (f"at {at}: expected {_fmt(expected[idx].item())}, got {_fmt(got[idx].item())} "
                    f"({int(bad.sum())} of {bad.numel()} values differ)")
        return None
    if isinstance(expected, (list, tuple)):
        if not isinstance(got, (list, tuple)):
            return f"expected a {type(expected).__name__}, got {type(got).__name__}"
        if len(got) != len(expected):
            return f"expected {_fmt(list(expected))} (length {len(expected)}), got {_fmt(list(got))} (length {len(got)})"
        for i, (e, g) in enumerate(zip(expected, got)):
            problem = first_difference(e, g, atol, rtol, None, check_dtype)
            if problem:
                return (f"expected {_fmt(list(expected))}, got {_fmt(list(got))}" if len(expected) <= 40
                        else f"at position {i}: {problem}")
        return None
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        if isinstance(got, torch.Tensor) or not isinstance(got, (int, float)):
            return f"expected a Python number ({_fmt(expected)}), got {type(got).__name__} {_fmt(got)}"
        if isinstance(expected, int) and isinstance(got, int):
            return None if got == expected else f"expected {expected}, got {got}"
        return None if math.isclose(got, expected, rel_tol=rtol, abs_tol=atol) else f"expected {_fmt(float(expected))}, got {_fmt(float(got))}"
    return None if got == expected else f"expected {_fmt(expected)}, got {_fmt(got)}"


def _returns(expected, call: Callable, **kw) -> Callable:
    "A judge: the student's function, called by `call(fn)`, must return `expected`"
    return lambda fn: first_difference(expected, call(fn), **kw)


# %%
#| hide
test_eq(first_difference(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3])), None)
assert "index (1,): expected 2, got 5" in first_difference(torch.tensor([1, 2, 3]), torch.tensor([1, 5, 3]))
assert "expected shape" in first_difference(torch.zeros(3), torch.zeros(4))
assert "Python number" in first_difference(1.0, torch.tensor(1.0))
test_eq(first_difference([3, 2], [3, 2]), None)
assert "expected [3, 2], got [2, 3]" in first_difference([3, 2], [2, 3])

# %% [markdown]
# ## Lesson 01: the tokenizer
#
# The tokenizer checks train two tiny T5-style tokenizers (48 and 60 pieces, plus the 100 sentinels) with the
# package's `train_tokenizer` — a fraction of a second — so a hard-coded number passes neither.

# %%
#| export
_TEXTS = ([f"The quick brown fox jumps over the lazy dog, number {i}." for i in range(40)]
          + ["Mr. President, Members of Congress: the state of our Union is strong."] * 20)


@functools.lru_cache(maxsize=None)
def _tokenizer_dir(pieces: int) -> str:
    from nanot5_edu.tokenizer import train_tokenizer
    out_dir = tempfile.mkdtemp(prefix="nanot5_exercise_tok")
    train_tokenizer(_TEXTS, vocab_size=pieces, out_dir=out_dir)
    return out_dir


def _tokenizer(pieces: int):
    "A fresh copy for each use: a call like tokenizer(texts, padding=True) changes the tokenizer's state"
    from nanot5_edu.tokenizer import load_tokenizer
    return load_tokenizer(_tokenizer_dir(pieces))


@exercise("sentinel_ids", "01_tokenizer", "sentinel_ids(tokenizer, n: int) -> list[int]",
          "Return the ids of `<extra_id_0>` … `<extra_id_{n-1}>` of a T5 tokenizer, in that order, computed from "
          "`len(tokenizer)`: T5 stacks its 100 sentinels on top of the vocabulary, `<extra_id_0>` last.")
def _sentinel_cases():
    from nanot5_edu.tokenizer import sentinel_ids
    for pieces in (48, 60):
        tok = _tokenizer(pieces)
        for n, hint in [(1, "<extra_id_0> is the last id, len(tokenizer) - 1 (ids run from 0 to len(tokenizer) - 1)"),
                        (3, "the sentinel ids count down: <extra_id_k> is len(tokenizer) - 1 - k"),
                        (100, "all 100 sentinels, counting down from len(tokenizer) - 1")]:
            expected = _agree("sentinel_ids", sentinel_ids(tok, n),
                              tok.convert_tokens_to_ids([f"<extra_id_{k}>" for k in range(n)]))
            yield Case(f"{len(tok)}-token tokenizer, n={n}", hint,
                       _returns(expected, lambda fn, n=n, pieces=pieces: fn(_tokenizer(pieces), n)))


@exercise("encode_with_eos", "01_tokenizer", "encode_with_eos(tokenizer, texts: list[str]) -> list[list[int]]",
          "Encode each text into token ids the way T5 feeds them to the model: no BOS, EOS (id 1) at the end, one "
          "list per text with its own length (padding comes later, in the collator).")
def _encode_cases():
    from nanot5_edu.tokenizer import encode_batch
    tok = _tokenizer(60)
    for texts, hint in [(["Hello fox"], "T5 appends EOS (id 1) to every sequence and adds no BOS"),
                        (["The lazy dog.", "A state of the Union, number 7, is strong."],
                         "one list per text, each its own length: no padding (pad id 0) at this stage"),
                        ([""], "an empty text is just [EOS]")]:
        expected = _agree("encode_with_eos", encode_batch(tok, texts), tok(texts)["input_ids"])
        yield Case(f"texts={texts!r}", hint, _returns(expected, lambda fn, texts=texts: fn(_tokenizer(60), list(texts))))


# %% [markdown]
# Examples: sentinels numbered upwards pass the first case (one sentinel) and fail the second, whose hint says
# why; an encoding without EOS fails at once.

# %%
try:
    EXERCISES["sentinel_ids"].check(lambda tok, n: [len(tok) - n + k for k in range(n)])
except AssertionError as e:
    print(e)

# %%
try:
    EXERCISES["encode_with_eos"].check(lambda tok, texts: tok(texts, add_special_tokens=False)["input_ids"])
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 02: span corruption
#
# The span-length exercise is random, so it is checked by properties: T5's exact counts (the package's
# `noise_counts` and the formula by hand), lengths of at least one, sums, reproducibility from the generator, and
# the distribution over 4,000 draws against the exact one (every split of *m* tokens into *s* non-empty parts
# equally likely: the first part has length *k* with probability C(m−k−1, s−2) / C(m−1, s−1)).

# %%
#| export
def _hand_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    "T5's counts by hand: round (Python's, half to even) and clamp"
    num_noise = round(length * noise_density)
    num_noise = min(max(num_noise, 1), length - 1)
    return num_noise, max(round(num_noise / mean_noise_span_length), 1)


def _first_part_distribution(m: int, s: int) -> torch.Tensor:
    "P(first part = k), k = 0..m, when m items are split into s non-empty parts uniformly"
    p = torch.zeros(m + 1, dtype=torch.float64)
    for k in range(1, m - s + 2):
        p[k] = math.comb(m - k - 1, s - 2) / math.comb(m - 1, s - 1) if s > 1 else float(k == m)
    return p


def _as_long_1d(x, what: str) -> str | None:
    if not isinstance(x, torch.Tensor) or x.ndim != 1 or x.is_floating_point():
        return f"{what} must be a 1-D integer tensor, got {type(x).__name__} {getattr(x, 'shape', '')}"
    return None


def _judge_span_lengths(length, density, mean_span):
    from nanot5_edu.noise import noise_counts
    num_noise, num_spans = _agree("noise_span_lengths", noise_counts(length, density, mean_span),
                                  _hand_counts(length, density, mean_span))

    def judge(fn):
        noise, gaps = fn(length, density, mean_span, torch.Generator().manual_seed(0))
        for x, what in ((noise, "noise span lengths"), (gaps, "non-noise span lengths")):
            if problem := _as_long_1d(x, what):
                return problem
        if len(noise) != num_spans or len(gaps) != num_spans:
            return (f"expected {num_spans} noise spans and {num_spans} non-noise spans (num_noise={num_noise}), got "
                    f"{len(noise)} and {len(gaps)}")
        if int(noise.sum()) != num_noise:
            return f"expected the noise spans to hold {num_noise} tokens, got {int(noise.sum())} ({noise.tolist()})"
        if int(gaps.sum()) != length - num_noise:
            return f"expected the non-noise spans to hold {length - num_noise} tokens, got {int(gaps.sum())}"
        if (noise < 1).any() or (gaps < 1).any():
            return f"expected every span to hold at least one token, got {noise.tolist()} and {gaps.tolist()}"
    return judge


def _judge_draws(what: str) -> Callable:
    "A judge: the function draws all its randomness from its `generator` (same seed, same {what}; other seeds, others)"
    def outputs(fn, seed):
        out = fn(40, 0.3, 3.0, torch.Generator().manual_seed(seed))
        return [torch.as_tensor(x) for x in (out if isinstance(out, tuple) else (out,))]

    def judge(fn):
        torch.manual_seed(0)  # the global generator moves between the two calls: a function that uses it differs
        a = outputs(fn, 1)
        torch.manual_seed(1)
        if any(not torch.equal(x, y) for x, y in zip(a, outputs(fn, 1))):
            return f"two calls with generators seeded alike gave different {what}"
        draws = [outputs(fn, seed) for seed in range(2, 12)]
        if all(all(torch.equal(x, y) for x, y in zip(d, draws[0])) for d in draws):
            return f"ten different seeds all gave the same {what} ({[x.long().tolist() for x in draws[0]]})"
    return judge


def _judge_span_distribution(fn, draws: int = 4000):
    "Every span's length (not only the first's) against its exact distribution: each part of a uniform split has it"
    g = torch.Generator().manual_seed(123)
    parts = [fn(40, 0.3, 3.0, g) for _ in range(draws)]  # 12 noise tokens in 4 spans; 28 kept in 4
    for which, m, what in ((0, 12, "noise span"), (1, 28, "non-noise span")):
        lengths = torch.tensor([[int(v) for v in p[which]] for p in parts])
        if lengths.shape[1] != 4:
            return f"expected 4 {what}s, got {lengths.shape[1]}"
        exact = _first_part_distribution(m, 4)
        for col in range(4):
            seen = torch.bincount(lengths[:, col].clamp(0, m), minlength=m + 1).double() / draws
            tv = 0.5 * (seen - exact).abs().sum().item()
            if tv > 0.08:
                top = lambda p: ", ".join(f"{k}: {p[k]:.2f}" for k in range(1, 5))
                return (f"over {draws} draws the length of {what} {col + 1} of 4 is distributed as [{top(seen)}, ...], "
                        f"expected [{top(exact)}, ...] (total variation {tv:.2f} > 0.08); every span, the last "
                        "included, must be able to hold a single token")


@exercise("noise_span_lengths", "02_span_corruption",
          "noise_span_lengths(length: int, noise_density: float, mean_noise_span_length: float, "
          "generator: torch.Generator) -> tuple[LongTensor, LongTensor]",
          "T5's span lengths for one row of `length` tokens: num_noise = round(length * noise_density) clamped to "
          "[1, length - 1]; num_spans = max(round(num_noise / mean_noise_span_length), 1). Split the num_noise noise "
          "tokens into num_spans non-empty spans and the length - num_noise other tokens into num_spans non-empty "
          "spans, each split drawn uniformly at random with `generator`. Return (noise span lengths, non-noise span "
          "lengths).")
def _noise_span_cases():
    counts_hint = ("num_noise = round(length * noise_density) clamped to [1, length - 1]; num_spans = "
                   "max(round(num_noise / mean_noise_span_length), 1), with Python's round (half to even)")
    for length, density, mean_span in [(100, 0.15, 3.0), (568, 0.15, 3.0), (10, 0.15, 3.0), (5, 0.05, 3.0),
                                       (20, 0.5, 1.0), (30, 0.5, 2.0), (50, 0.05, 3.0), (30, 0.05, 3.0)]:
        yield Case(f"length={length}, noise_density={density}, mean_noise_span_length={mean_span}",
                   counts_hint + "; every span holds at least one token",
                   _judge_span_lengths(length, density, mean_span))
    yield Case("the same seed twice, then ten seeds", "draw all randomness from the `generator` argument",
               _judge_draws("lengths"))
    yield Case("4,000 draws of length=40, noise_density=0.3, mean_noise_span_length=3",
               "every split into non-empty spans must be equally likely: choose num_spans - 1 distinct cut points "
               "among the num_items - 1 places between items (e.g. torch.randperm(num_items - 1)[:num_spans - 1])",
               _judge_span_distribution)


# %% [markdown]
# The noise mask interleaves the two kinds of span, T5's way: kept tokens first, a noise span last. Its marginal
# distribution (how often each position is hidden) is compared with the package's two mask functions,
# `random_spans_noise_mask` (torch, batched) and `example_noise_mask` (numpy), which are asserted to agree first.

# %%
#| export
def _runs(mask: torch.Tensor) -> int:
    m = mask.long()
    return int(m[0]) + int((m[1:] > m[:-1]).sum())


def _judge_mask_layout(length, density, mean_span):
    num_noise, num_spans = _hand_counts(length, density, mean_span)

    def judge(fn):
        mask = fn(length, density, mean_span, torch.Generator().manual_seed(0))
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != (length,):
            return f"expected a bool tensor of shape ({length},), got {type(mask).__name__} {getattr(mask, 'dtype', '')} {tuple(getattr(mask, 'shape', ()))}"
        if int(mask.sum()) != num_noise:
            return f"expected {num_noise} noise tokens, got {int(mask.sum())}"
        if bool(mask[0]):
            return f"the mask starts with a noise token: {mask.long().tolist()}"
        if not bool(mask[-1]):
            return f"the mask ends with a kept token: {mask.long().tolist()}"
        if _runs(mask) != num_spans:
            return f"expected {num_spans} noise spans, got {_runs(mask)}: {mask.long().tolist()}"
    return judge


def _judge_mask_marginals(fn, draws: int = 2000):
    import numpy as np
    from nanot5_edu.spans import random_spans_noise_mask
    from nanot5_edu.noise import example_noise_mask
    ours = random_spans_noise_mask(40, 0.3, 3.0, torch.Generator().manual_seed(0), batch=20000).double().mean(0)
    rng = np.random.default_rng(0)
    numpy_ref = torch.tensor(np.stack([example_noise_mask(40, 0.3, 3.0, rng) for _ in range(4000)]).mean(0))
    _agree("noise_mask (position marginals)", ours, numpy_ref, atol=0.05)
    g = torch.Generator().manual_seed(7)
    seen = torch.stack([fn(40, 0.3, 3.0, g) for _ in range(draws)]).double().mean(0)
    return first_difference(ours, seen, atol=0.08, where=lambda i: f"position {i[0]} (how often it is noise, "
                                                                     f"over {draws} draws)")


@exercise("noise_mask", "02_span_corruption",
          "noise_mask(length: int, noise_density: float, mean_noise_span_length: float, "
          "generator: torch.Generator) -> BoolTensor",
          "T5's noise mask of one row (True = hidden): draw the span lengths as in `noise_span_lengths`, then lay "
          "them out as non-noise, noise, non-noise, noise, …, so the row starts with kept tokens and ends with a noise "
          "span.")
def _noise_mask_cases():
    for length, density, mean_span in [(20, 0.15, 3.0), (100, 0.15, 3.0), (40, 0.3, 3.0), (12, 0.5, 1.0)]:
        yield Case(f"length={length}, noise_density={density}, mean_noise_span_length={mean_span}",
                   "T5's layout: kept tokens first, then noise span, kept, noise, …, ending with a noise span; "
                   "num_spans contiguous noise spans holding num_noise tokens",
                   _judge_mask_layout(length, density, mean_span))
    yield Case("2,000 draws of length=40, noise_density=0.3, mean_noise_span_length=3",
               "the spans are placed at random: draw both sets of lengths with the generator (every split equally "
               "likely) and interleave them", _judge_mask_marginals)
    yield Case("the same seed twice, then ten seeds", "draw all randomness from the `generator` argument (not from "
               "torch's global generator or Python's random)", _judge_draws("masks"))


# %% [markdown]
# `corrupt_example` is checked on two hand-worked rows first, then on random T5 masks against the package's
# readable `corrupt_example` and its batched `corrupt_spans` (the collator's fast path).

# %%
#| export
@exercise("corrupt_example", "02_span_corruption",
          "corrupt_example(ids: list[int], mask: list[bool], first_sentinel: int, eos_id: int) -> tuple[list[int], list[int]]",
          "T5 span corruption of one row: in the encoder input each run of masked tokens becomes one sentinel; the "
          "target lists each sentinel followed by the tokens it hides (runs of kept tokens become sentinels there). "
          "The k-th sentinel is `first_sentinel - k`; both sequences end with `eos_id`.")
def _corrupt_cases():
    from nanot5_edu.spans import corrupt_spans, random_spans_noise_mask
    from nanot5_edu.noise import corrupt_example
    ids, first, eos = list(range(10, 18)), 99, 1
    one_span = [0, 0, 0, 0, 0, 1, 1, 1]
    expected = _agree("corrupt_example", corrupt_example(ids, one_span, first, eos),
                      ([10, 11, 12, 13, 14, 99, 1], [99, 15, 16, 17, 1]))
    yield Case("ids=[10..17], mask=[0,0,0,0,0,1,1,1], first_sentinel=99",
               "each run of masked tokens becomes ONE sentinel in the input; the target is the sentinel followed by "
               "the tokens it hides; both end with EOS",
               _returns(expected, lambda fn: tuple(fn(ids, [bool(m) for m in one_span], first, eos))))
    two_spans = [0, 1, 0, 0, 1, 1, 0, 1]
    expected = _agree("corrupt_example", corrupt_example(ids, two_spans, first, eos),
                      ([10, 99, 12, 13, 98, 16, 97, 1], [99, 11, 98, 14, 15, 97, 17, 1]))
    yield Case("ids=[10..17], mask=[0,1,0,0,1,1,0,1], first_sentinel=99",
               "sentinels count DOWN from first_sentinel: the k-th span (from 0) gets first_sentinel - k, in the "
               "input and in the target alike",
               _returns(expected, lambda fn: tuple(fn(ids, [bool(m) for m in two_spans], first, eos))))
    g = torch.Generator().manual_seed(0)
    rows = torch.randint(3, 90, (4, 30), generator=g)
    masks = random_spans_noise_mask(30, 0.3, 2.0, g, batch=4)
    fast_in, fast_out = corrupt_spans(rows, masks, first, eos)
    for r in range(4):
        row, m = rows[r].tolist(), masks[r].tolist()
        expected = _agree("corrupt_example", corrupt_example(row, m, first, eos), (fast_in[r].tolist(), fast_out[r].tolist()))
        yield Case(f"random 30-token row {r} with a T5 mask of {sum(m)} noise tokens", "the same rules on a longer row",
                   _returns(expected, lambda fn, row=row, m=m: tuple(fn(row, m, first, eos))))


# %% [markdown]
# Examples: a mask laid out span first, spans of equal length (no randomness), and sentinels numbered upwards.

# %%
def span_first_mask(length, density, mean_span, generator):
    from nanot5_edu.spans import random_spans_noise_mask
    return random_spans_noise_mask(length, density, mean_span, generator).flip(0)

try:
    EXERCISES["noise_mask"].check(span_first_mask)
except AssertionError as e:
    print(e)


# %%
def equal_spans(length, density, mean_span, generator):  # deterministic: every span the same length
    num_noise = min(max(round(length * density), 1), length - 1)
    num_spans = max(round(num_noise / mean_span), 1)
    split = lambda n: torch.tensor([n // num_spans + (i < n % num_spans) for i in range(num_spans)])
    return split(num_noise), split(length - num_noise)

try:
    EXERCISES["noise_span_lengths"].check(equal_spans)
except AssertionError as e:
    print(e)


# %%
def upward_sentinels(ids, mask, first_sentinel, eos_id):
    def replace_runs(hide):
        out, k = [], 0
        for i, token in enumerate(ids):
            if not hide[i]:
                out.append(token)
            elif i == 0 or not hide[i - 1]:
                out.append(first_sentinel + k)  # the mistake: counting up
                k += 1
        return out + [eos_id]
    return replace_runs(mask), replace_runs([not m for m in mask])

try:
    EXERCISES["corrupt_example"].check(upward_sentinels)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 02b: span batches
#
# Packing is checked against the package's `pack_token_rows` (documents with their EOS appended) and a second
# computation that cuts the concatenated tokens with a tensor `view`; the cases are small enough to read.

# %%
#| export
def _packed_by_view(token_lists: list[list[int]], raw_length: int, eos_id: int) -> list[list[int]]:
    "Oracle 2: every document + EOS in one tensor, the whole rows viewed as [rows, raw_length]"
    flat = torch.tensor([t for doc in token_lists for t in list(doc) + [eos_id]], dtype=torch.long)
    rows = len(flat) // raw_length
    return flat[:rows * raw_length].view(rows, raw_length).tolist()


def _pack_oracles(token_lists, raw_length, eos_id):
    from nanot5_edu.spans import pack_token_rows
    return _agree("pack_documents", pack_token_rows([list(d) + [eos_id] for d in token_lists], raw_length),
                  _packed_by_view(token_lists, raw_length, eos_id))


def _pack_case(label, hint, token_lists, raw_length, eos_id=1):
    expected = _pack_oracles(token_lists, raw_length, eos_id)
    return Case(label, hint, _returns(expected, lambda fn: fn([list(d) for d in token_lists], raw_length, eos_id)))


@exercise("pack_documents", "02b_span_batches",
          "pack_documents(token_lists: list[list[int]], raw_length: int, eos_id: int) -> list[list[int]]",
          "Pack tokenized documents into training rows the way nanoT5 does (lesson 02b's `pack_token_rows`): append "
          "`eos_id` to every document, concatenate the documents in order, and cut the result into rows of exactly "
          "`raw_length` tokens. The tokens left over after the last whole row are dropped: no padding, no short row. "
          "Return the rows as lists of ints ([] when there is not enough for one row).")
def _pack_cases():
    yield _pack_case("one document [5, 6, 7, 8], raw_length=2", "cut only whole rows of raw_length: the remainder "
                     "that does not fill a row is dropped (no padding, no short last row)", [[5, 6, 7, 8]], 2)
    yield _pack_case("documents [5, 6] and [7, 8, 9], raw_length=3", "append eos_id after EVERY document (the "
                     "last one too), then concatenate: [5, 6, EOS, 7, 8, 9, EOS]", [[5, 6], [7, 8, 9]], 3)
    yield _pack_case("documents of 3 and 5 tokens, raw_length=3", "rows cross document boundaries: concatenate "
                     "all documents first, then cut (a row may end one document and start the next)",
                     [[5, 6, 7], [8, 9, 10, 11, 12]], 3)
    yield _pack_case("8 tokens with their EOS, raw_length=4", "when the tokens fill whole rows exactly, the last "
                     "row is kept (range(0, len(tokens) - raw_length + 1, raw_length))", [[5, 6, 7], [8, 9, 10]], 4)
    yield _pack_case("documents [5, 6], [] and [7], raw_length=2", "an empty document still ends with eos_id: it "
                     "contributes one token, [eos_id]", [[5, 6], [], [7]], 2)
    yield _pack_case("no documents at all, raw_length=4", "no documents, or fewer tokens than one row: no rows, []",
                     [], 4)
    yield _pack_case("one document of 2 tokens, raw_length=8", "fewer tokens than one row: no rows, []", [[5, 6]], 8)
    g = torch.Generator().manual_seed(0)
    docs = [torch.randint(3, 500, (int(n),), generator=g).tolist() for n in torch.randint(0, 40, (25,), generator=g)]
    yield _pack_case("25 random documents of 0 to 39 tokens, raw_length=16, eos_id=2", "the same rules on more "
                     "documents; eos_id is an argument (not always 1)", docs, 16, eos_id=2)


# %% [markdown]
# Example: documents packed one by one, so that no row crosses a document boundary; the first two cases pass (one
# document; two where the first fills exactly one row, so no row crosses a boundary), the third does not.

# %%
def per_document_rows(token_lists, raw_length, eos_id):
    rows = []
    for doc in token_lists:
        ids = list(doc) + [eos_id]
        rows += [ids[i:i + raw_length] for i in range(0, len(ids) - raw_length + 1, raw_length)]
    return rows

try:
    EXERCISES["pack_documents"].check(per_document_rows)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 03: T5 layers
#
# Oracles: `transformers`' `T5Attention._relative_position_bucket`, `T5LayerNorm` and `T5DenseGatedActDense` on
# the same weights, and the package's `relative_position_bucket`, `RMSNorm`, `GatedFeedForward`; attention against
# `F.scaled_dot_product_attention` with the package's `additive_mask`, and a float64 hand computation.

# %%
#| export
def _hf_t5():
    from transformers.models.t5 import modeling_t5
    return modeling_t5


@exercise("relative_position_bucket", "03_t5_layers",
          "relative_position_bucket(relative_position: LongTensor, bidirectional: bool, num_buckets: int, "
          "max_distance: int) -> LongTensor",
          "T5's bucket of each relative position (key position − query position). Bidirectional (encoder): half the "
          "buckets per direction, keys after the query in the upper half. Unidirectional (decoder): keys after the "
          "query all get bucket 0. Distances below max_exact = num_buckets // 2 (of the halved count) are their own "
          "bucket; larger ones are log-spaced up to max_distance, truncated, and capped at the last bucket.")
def _bucket_cases():
    from nanot5_edu.layers import relative_position_bucket
    hf = _hf_t5().T5Attention._relative_position_bucket
    for lo, hi, bidirectional, nb, md, hint in [
            (-7, 7, True, 32, 128, "bidirectional: num_buckets //= 2 first; keys after the query (offset > 0) go to "
                                   "the upper half, bucket = num_buckets + distance"),
            (-100, 100, True, 32, 128, "max_exact = num_buckets // 2 AFTER halving for bidirectional (8 here, not "
                                       "16); beyond it: max_exact + log(distance / max_exact) / log(max_distance "
                                       "/ max_exact) * (num_buckets - max_exact), truncated toward zero (.long()), "
                                       "not rounded"),
            (-300, 300, True, 32, 128, "past max_distance every distance shares the last bucket: cap at "
                                       "num_buckets - 1 (of the halved count)"),
            (-20, 20, False, 32, 128, "unidirectional (decoder): distance = max(-offset, 0), so keys after the "
                                      "query (offset > 0) are all bucket 0"),
            (-300, 300, False, 32, 128, "unidirectional over the whole range, capped at num_buckets - 1"),
            (-300, 300, True, 8, 20, "other sizes: nothing may be hard-coded to 32 / 128"),
            (-300, 300, False, 64, 256, "other sizes: nothing may be hard-coded to 32 / 128"),
            (-300, 300, True, 32, 100, "max_distance / max_exact need not be a whole number (100 / 8 = 12.5): "
                                       "divide as floats inside the logarithm, never with //"),
            (-300, 300, False, 24, 50, "num_buckets and max_distance need not be powers of two (50 / 12): float "
                                       "division inside the logarithm")]:
        rel = torch.arange(lo, hi + 1)
        expected = _agree("relative_position_bucket", relative_position_bucket(rel, bidirectional, nb, md),
                          hf(rel, bidirectional=bidirectional, num_buckets=nb, max_distance=md))
        yield Case(f"offsets {lo}…{hi}, bidirectional={bidirectional}, num_buckets={nb}, max_distance={md}", hint,
                   _returns(expected, lambda fn, rel=rel, b=bidirectional, nb=nb, md=md: fn(rel.clone(), b, nb, md),
                            where=lambda i, lo=lo: f"relative_position={lo + i[0]}"))


def _rms_oracles(x, weight, eps):
    from nanot5_edu.layers import RMSNorm
    hf = _hf_t5().T5LayerNorm(weight.shape[0], eps=eps).to(weight.dtype)
    ours = RMSNorm(weight.shape[0], eps=eps).to(weight.dtype)
    with torch.no_grad():
        hf.weight.copy_(weight); ours.weight.copy_(weight)
        a, b = hf(x), ours(x)
    tol = dict(atol=1e-5, rtol=1e-5) if weight.dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
    _agree("rms_norm", a, b, **tol)
    return a, tol


@exercise("rms_norm", "03_t5_layers", "rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor",
          "T5's layer norm (T5LayerNorm, an RMSNorm) over the last dimension: x / sqrt(mean(x**2) + eps) * weight, with "
          "no mean subtraction and no bias; the mean of squares in float32; for bf16/fp16 weights, cast the "
          "normalized x to the weight's dtype before multiplying, so the output has the input's dtype.")
def _rms_cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 16, generator=g) + 2.0
    w = torch.randn(16, generator=g)
    for label, args, hint in [
            ("fp32 x with mean ≈ 2, weight = 1, eps=1e-6", (x, torch.ones(16), 1e-6),
             "divide by the root mean square over the LAST dimension, sqrt(mean(x**2) + eps): no mean subtraction "
             "(that would be LayerNorm) and no bias"),
            ("fp32, random weight", (x, w, 1e-6), "multiply the normalized x by weight (elementwise, last dimension)"),
            ("fp32 x of size ~1e-3, eps=1e-6", (x * 1e-3, w, 1e-6),
             "eps goes INSIDE the square root: x / sqrt(mean(x**2) + eps), not x / (sqrt(mean(x**2)) + eps)"),
            ("bf16 x and bf16 weight", (x.bfloat16(), w.bfloat16(), 1e-6),
             "compute mean(x**2) in float32, cast the normalized x to the weight's dtype, then multiply: a bf16 "
             "input gives a bf16 output"),
            ("fp16 x of size ~300 and fp16 weight", ((150 * x).half(), w.half(), 1e-6),
             "in fp16, x**2 overflows past 65,504 (|x| > 256): take the mean of squares in float32 (x.float()), "
             "then cast the normalized x back to fp16 before multiplying by the weight")]:
        expected, tol = _rms_oracles(*args)
        yield Case(label, hint, _returns(expected, lambda fn, args=args: fn(*(a.clone() if isinstance(a, torch.Tensor)
                                                                            else a for a in args)),
                                         check_dtype=True, **tol))


# %%
#| export
def _ff_oracles(x, wi_0, wi_1, wo):
    from nanot5_edu.layers import GatedFeedForward, ModelConfig
    d_ff, d_model = wi_0.shape
    cfg = ModelConfig(d_model=d_model, d_ff=d_ff, dropout_rate=0.0)
    hf, ours = _hf_t5().T5DenseGatedActDense(cfg.to_hf()).eval(), GatedFeedForward(cfg)
    with torch.no_grad():
        for m in (hf, ours):
            m.wi_0.weight.copy_(wi_0); m.wi_1.weight.copy_(wi_1); m.wo.weight.copy_(wo)
        return _agree("gated_gelu_ff", hf(x), ours(x), atol=1e-6, rtol=1e-5)


@exercise("gated_gelu_ff", "03_t5_layers", "gated_gelu_ff(x: Tensor, wi_0: Tensor, wi_1: Tensor, wo: Tensor) -> Tensor",
          "T5 v1.1's feed-forward without dropout: wo(gelu_tanh(wi_0 x) * wi_1 x), where wi_0, wi_1 are [d_ff, d_model] "
          "and wo is [d_model, d_ff] (nn.Linear weight layouts, no biases) and gelu_tanh is GELU's tanh "
          "approximation.")
def _ff_cases():
    g = torch.Generator().manual_seed(0)
    d, dff = 8, 16
    x = torch.rand(2, 3, d, generator=g) + 0.5
    wi_1, wo = torch.randn(dff, d, generator=g) / d ** 0.5, torch.randn(d, dff, generator=g) / dff ** 0.5
    big = torch.rand(dff, d, generator=g) * 3 + 3  # wi_0 x ≥ 6 everywhere: the GELU is the identity there
    mid = torch.randn(dff, d, generator=g) * 0.3
    for label, wi_0, tol, hint in [
            ("wi_0 x large and positive (GELU ≈ identity)", big, dict(atol=1e-4, rtol=1e-4),
             "the GELU goes on wi_0's output; wi_1's output is the linear gate: wo(gelu(wi_0 x) * wi_1 x)"),
            ("wi_0 x around 0 (loose tolerance)", mid, dict(atol=5e-3, rtol=0.0),
             "a GELU, not a ReLU: negative inputs give small negative outputs (gelu(-1) ≈ -0.159)"),
            ("wi_0 x around 0 (tight tolerance)", mid, dict(atol=1e-6, rtol=1e-5),
             "T5 v1.1 uses GELU's tanh approximation ('gelu_new'): F.gelu(h, approximate='tanh'), not the exact erf "
             "GELU")]:
        expected = _ff_oracles(x, wi_0, wi_1, wo)
        yield Case(label, hint, _returns(expected, lambda fn, wi_0=wi_0: fn(x.clone(), wi_0.clone(), wi_1.clone(), wo.clone()), **tol))


def _attention_oracles(q, k, v, bias, mask):
    from nanot5_edu.model import additive_mask
    sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=bias + additive_mask(mask, torch.float32), scale=1.0)
    scores = q.double() @ k.double().transpose(-1, -2) + bias.double()
    scores = scores.masked_fill(~mask.bool()[:, None, None, :], float("-inf"))
    hand = scores.softmax(-1) @ v.double()
    return _agree("attention", sdpa, hand.float(), atol=1e-5, rtol=1e-5)


@exercise("attention", "03_t5_layers",
          "attention(q: Tensor, k: Tensor, v: Tensor, position_bias: Tensor, mask: Tensor) -> Tensor",
          "T5's attention for q [B, H, Lq, D], k and v [B, H, Lk, D], position_bias [1, H, Lq, Lk] and a padding "
          "mask [B, Lk] (1 = attend, 0 = padding): softmax over the keys of q kᵀ + position_bias, with padded keys "
          "excluded, times v. T5 does not divide the scores by sqrt(D). Return [B, H, Lq, D].")
def _attention_cases():
    g = torch.Generator().manual_seed(0)
    B, H, Lq, Lk, D = 2, 3, 4, 5, 8
    q, k, v = (torch.randn(B, H, L, D, generator=g) for L in (Lq, Lk, Lk))
    bias = torch.randn(1, H, Lq, Lk, generator=g) * 3
    full, padded = torch.ones(B, Lk, dtype=torch.long), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    for label, b, m, hint in [
            ("no position bias, no padding", torch.zeros_like(bias), full,
             "T5 does NOT scale the scores by 1/sqrt(d_kv) (its init absorbs it): softmax(q @ k^T, over the keys) @ v "
             "(the mask is all ones here: 1 = attend, every key)"),
            ("with a position bias, no padding", bias, full, "add position_bias to the scores before the softmax"),
            ("with a position bias and padded keys in row 1", bias, padded,
             "mask: 1 = attend, 0 = padding; padded keys get -inf (or the dtype's min) added BEFORE the softmax, so "
             "the weights of the other keys still sum to 1")]:
        expected = _attention_oracles(q, k, v, b, m)
        yield Case(label, hint, _returns(expected, lambda fn, b=b, m=m: fn(q.clone(), k.clone(), v.clone(), b.clone(), m.clone()),
                                         atol=1e-5, rtol=1e-4))


# %% [markdown]
# Examples: LayerNorm instead of RMSNorm, attention with the usual 1/√d scale, log buckets rounded instead of
# truncated, and the exact (erf) GELU in place of the tanh approximation.

# %%
try:
    EXERCISES["rms_norm"].check(lambda x, w, eps: F.layer_norm(x.float(), x.shape[-1:], eps=eps).to(x.dtype) * w)
except AssertionError as e:
    print(e)

# %%
try:
    EXERCISES["attention"].check(lambda q, k, v, b, m: F.scaled_dot_product_attention(
        q, k, v, attn_mask=b.masked_fill(~m.bool()[:, None, None, :], float("-inf"))))
except AssertionError as e:
    print(e)


# %%
def rounded_buckets(rel, bidirectional, num_buckets, max_distance):  # rounds the log bucket instead of truncating
    import math
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).long() * num_buckets
        distance = rel.abs()
    else:
        distance = (-rel).clamp(min=0)
    max_exact = num_buckets // 2
    log_bucket = max_exact + (torch.log(distance.float() / max_exact) / math.log(max_distance / max_exact)
                              * (num_buckets - max_exact)).round().long()
    return buckets + torch.where(distance < max_exact, distance, log_bucket.clamp(max=num_buckets - 1))

try:
    EXERCISES["relative_position_bucket"].check(rounded_buckets)
except AssertionError as e:
    print(e)

# %%
try:
    EXERCISES["gated_gelu_ff"].check(lambda x, wi_0, wi_1, wo: (F.gelu(x @ wi_0.T) * (x @ wi_1.T)) @ wo.T)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 03b: the T5 model
#
# `shift_right` is compared with the package's `shift_right` and `transformers`' `T5PreTrainedModel._shift_right`;
# the masked position bias, below, with the package's `Stack.position_bias` and a loop over its entries.
# The KV-cache step is compared with the package's `Attention` given the cache as `past`, and with a float64
# computation that has no cache at all: causal attention over the whole sequence, recomputed from the hidden states
# of every position, its last row taken.

# %%
#| export
def _shift_oracles(labels, start, pad):
    from types import SimpleNamespace
    from nanot5_edu.model import shift_right
    hf = _hf_t5().T5PreTrainedModel._shift_right(
        SimpleNamespace(config=SimpleNamespace(decoder_start_token_id=start, pad_token_id=pad)), labels.clone())
    return _agree("shift_right", shift_right(labels.clone(), start, pad), hf)


def _judge_shift(labels, start, pad):
    expected = _shift_oracles(labels, start, pad)

    def judge(fn):
        given = labels.clone()
        got = fn(given, start, pad)
        if not torch.equal(given, labels):
            return ("your function changed `labels` in place (they are still needed for the loss): build a new "
                    f"tensor. labels became {_fmt(given)}")
        return first_difference(expected, got, check_dtype=True)
    return judge


@exercise("shift_right", "03b_t5_model",
          "shift_right(labels: LongTensor, start_token_id: int, pad_token_id: int) -> LongTensor",
          "T5's decoder inputs from the labels [B, T] (teacher forcing): prepend `start_token_id` to every row and "
          "drop the last label, so decoder input t is label t - 1; labels of -100 (positions the loss leaves out) "
          "become `pad_token_id`. Return a new tensor of the labels' shape and dtype; leave `labels` unchanged.")
def _shift_cases():
    t = lambda rows, dtype=torch.long: torch.tensor(rows, dtype=dtype)
    for label, labels, start, pad, hint in [
            ("labels [[5, 6, 7]], start 0, pad 0", t([[5, 6, 7]]), 0, 0,
             "shift RIGHT by one: prepend start_token_id and drop the LAST label (decoder input t is label t - 1)"),
            ("two rows, start_token_id=3", t([[5, 6, 7], [8, 9, 10]]), 3, 0,
             "the first decoder input is start_token_id, the argument (T5's is 0, which is also its pad id)"),
            ("labels with -100, start 0, pad 0", t([[5, -100, 7], [8, 9, -100]]), 0, 0,
             "-100 labels become pad_token_id after the shift: the embedding has no row -100"),
            ("labels with -100, start 0, pad_token_id=2", t([[5, -100, -100, 7]]), 0, 2,
             "-100 becomes pad_token_id (not start_token_id, not 0)"),
            ("labels [[4, -100, 6]] (must stay unchanged)", t([[4, -100, 6]]), 0, 0,
             "return a new tensor: `labels` is still needed for the loss; do not change it in place"),
            ("int32 labels", t([[5, 6, -100]], torch.int32), 0, 0,
             "keep the labels' dtype: int32 in, int32 out (a start column made with torch.full is int64 unless "
             "told otherwise; labels.new_full keeps the dtype)"),
            ("one target position, [[-100], [9]]", t([[-100], [9]]), 0, 0,
             "with one position per row the decoder input is just the start token"),
            ("no rows: labels of shape (0, 4)", torch.zeros(0, 4, dtype=torch.long), 0, 0,
             "an empty batch gives an empty result of the same shape (0, 4)")]:
        yield Case(label, hint, _judge_shift(labels, start, pad))


# %%
#| export
def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.unflatten(-1, (heads, x.shape[-1] // heads)).transpose(1, 2)


def _kv_step_inputs(B, H, D, d, t, seed, bias_scale=1.0):
    "Hidden states of t + 1 positions, the weights, and the cached k/v of the first t positions"
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(B, t + 1, d, generator=g)
    wq, wk, wv = (torch.randn(H * D, d, generator=g) / d ** 0.5 for _ in range(3))
    wo = torch.randn(d, H * D, generator=g) / (H * D) ** 0.5
    full_bias = torch.randn(1, H, t + 1, t + 1, generator=g) * bias_scale
    return X, (wq, wk, wv, wo), full_bias


def _kv_step_oracles(X, weights, full_bias, H):
    "(output, k, v) of the new position: the package's Attention with `past`, and causal attention over all positions"
    from nanot5_edu.layers import Attention, KV, ModelConfig
    wq, wk, wv, wo = weights
    t, d, D = X.shape[1] - 1, X.shape[2], wq.shape[0] // H
    past_k, past_v = _split_heads(X[:, :t] @ wk.T, H), _split_heads(X[:, :t] @ wv.T, H)
    bias = full_bias[:, :, t:, :].contiguous()
    att = Attention(ModelConfig(d_model=d, d_kv=D, num_heads=H, dropout_rate=0.0))
    with torch.no_grad():
        for lin, w in zip((att.q, att.k, att.v, att.o), weights):
            lin.weight.copy_(w)
        out, kv = att(X[:, t:], bias, past=KV(past_k, past_v))
    Xd = X.double()  # oracle 2: no cache, every position recomputed, float64
    q, k, v = (_split_heads(Xd @ w.double().T, H) for w in (wq, wk, wv))
    scores = q @ k.transpose(-1, -2) + full_bias.double()
    scores = scores.masked_fill(torch.ones(t + 1, t + 1, dtype=torch.bool).triu(1), float("-inf"))
    full = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2) @ wo.double().T
    tol = dict(atol=1e-5, rtol=1e-5)
    expected = (_agree("kv_cache_step", out, full[:, t:].float(), **tol), _agree("kv_cache_step", kv.k, k.float(), **tol),
                _agree("kv_cache_step", kv.v, v.float(), **tol))
    return expected, (X[:, t:], *weights, past_k, past_v, bias)


def _judge_kv_step(B, H, D, d, t, seed, bias_scale):
    expected, args = _kv_step_oracles(*_kv_step_inputs(B, H, D, d, t, seed, bias_scale)[:3], H)

    def judge(fn):
        got = fn(*(a.clone() for a in args))
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            return f"expected a tuple (output, k, v), got {type(got).__name__}"
        for name, e, g in (("k", expected[1], got[1]), ("v", expected[2], got[2])):
            if problem := first_difference(e, g, atol=1e-5, rtol=1e-4):
                return (f"the returned cache {name} differs ({problem}): it grows by the new position, appended at "
                        f"the END of the position axis (dim 2: the t cached positions, then the new one)")
        if problem := first_difference(expected[0], got[0], atol=1e-5, rtol=1e-4):
            return f"the output differs: {problem}"
    return judge


@exercise("kv_cache_step", "03b_t5_model",
          "kv_cache_step(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor, wo: Tensor, past_k: Tensor, past_v: Tensor, "
          "position_bias: Tensor) -> tuple[Tensor, Tensor, Tensor]",
          "One decoding step of T5's self-attention with a KV cache. `x` [B, 1, d_model] is the new position's hidden "
          "state; wq, wk, wv [H·D, d_model] and wo [d_model, H·D] are nn.Linear weights (no biases); past_k, past_v "
          "[B, H, t, D] are the keys and values of the t positions decoded so far (t may be 0; H = past_k.shape[1]); "
          "position_bias [1, H, 1, t + 1] is the new query's bias over all t + 1 keys. Project x to q, k and v, split "
          "each into H heads of D, append the new k and v to the cache, attend (T5: softmax over the keys of "
          "q kᵀ + position_bias, no 1/√D scale) and project the merged heads with wo. Return (output [B, 1, "
          "d_model], k [B, H, t + 1, D], v [B, H, t + 1, D]).")
def _kv_step_cases():
    for label, t, bias_scale, hint in [
            ("an empty cache (t = 0)", 0, 1.0,
             "the new position attends to itself: append its k and v to the cache BEFORE attending (with an empty "
             "cache its one key is itself, and the output is wo applied to its merged v)"),
            ("3 cached positions, zero position bias", 3, 0.0,
             "T5 does NOT scale the scores by 1/sqrt(D): softmax(q kᵀ) over the t + 1 keys"),
            ("3 cached positions with a position bias", 3, 2.0,
             "add position_bias to the scores before the softmax; its last column belongs to the new key (position "
             "t), so the new k and v go at the end of the cache"),
            ("7 cached positions, 3 rows, 4 heads", 7, 2.0, "the same step with more heads and a longer cache")]:
        B, H = (3, 4) if t == 7 else (2, 2)
        yield Case(label, hint, _judge_kv_step(B, H, 4, 6, t, seed=t, bias_scale=bias_scale))


# %% [markdown]
# The mask every block of a stack adds to its scores is compared with the package's `Stack.position_bias` (the
# stack's own bias table, masked) and with a loop over every entry, asking of each whether its key is padding or
# after the query; in fp32, bf16 and fp16.

# %%
#| export
def _mask_bias_oracles(q_len, k_len, mask, causal, dtype, seed):
    "(the unmasked bias [1, H, q_len, k_len] in fp32, the masked one in dtype) by the package's Stack and by a loop"
    from nanot5_edu.layers import ModelConfig
    from nanot5_edu.model import Stack
    torch.manual_seed(seed)
    stack = Stack(ModelConfig(vocab_size=8, d_model=8, d_kv=4, num_heads=2, relative_attention_num_buckets=8,
                              relative_attention_max_distance=16), torch.nn.Embedding(8, 8), is_decoder=causal)
    torch.nn.init.normal_(stack.relative_bias.weight, std=2.0)
    offset = k_len - q_len  # the queries are the last q_len positions (a decoder continuing from a cache)
    with torch.no_grad():
        bias = stack.relative_bias(q_len, k_len, offset)
        package = stack.position_bias(q_len, k_len, mask, offset, dtype)
    value, B = torch.finfo(dtype).min / 2, 1 if mask is None else mask.shape[0]
    loop = torch.empty(B, bias.shape[1], q_len, k_len, dtype=torch.float64)
    for b in range(B):
        for h in range(bias.shape[1]):
            for i in range(q_len):
                for j in range(k_len):
                    hidden = (mask is not None and mask[b, j] == 0) or (causal and j > offset + i)
                    loop[b, h, i, j] = value if hidden else float(bias[0, h, i, j])
    return bias, _agree("mask_position_bias", package, loop.to(dtype))


def _judge_mask_bias(q_len, k_len, mask, causal, dtype, seed=0):
    bias, expected = _mask_bias_oracles(q_len, k_len, mask, causal, dtype, seed)
    value = torch.finfo(dtype).min / 2

    def judge(fn):
        got = fn(bias.clone(), None if mask is None else mask.clone(), causal, dtype)
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor, got {type(got).__name__}"
        if tuple(got.shape) != tuple(expected.shape):
            return f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
        if got.dtype != dtype:
            return f"expected dtype {dtype}, got {got.dtype}: return the result in `dtype`"
        e, g = expected.double(), got.detach().double()
        masked = e == value
        where = lambda idx: f"batch row {idx[0]}, head {idx[1]}, query {idx[2]}, key {idx[3]}"
        if (bad := masked & (g != e)).any():
            idx = tuple(bad.nonzero()[0].tolist())
            v = g[idx].item()
            if v == float("-inf"):
                return (f"at {where(idx)} (masked) got -inf: a masked entry must stay finite, "
                        f"torch.finfo(dtype).min / 2 = {value:.6g} in {dtype}")
            if v == torch.finfo(dtype).min:
                return f"at {where(idx)} (masked) got torch.finfo(dtype).min: use half of it, {value:.6g}"
            if v == float(bias[0, idx[1], idx[2], idx[3]].to(dtype)):
                return f"at {where(idx)}: this entry should be masked, but it holds the bias {v:.6g}"
            return f"at {where(idx)} (masked): expected {value:.6g}, got {v:.6g}"
        if (bad := ~masked & (g != e)).any():
            idx = tuple(bad.nonzero()[0].tolist())
            return (f"at {where(idx)}: this entry is not masked (expected the bias, {e[idx].item():.6g}), got "
                    f"{g[idx].item():.6g}")
    return judge


@exercise("mask_position_bias", "03b_t5_model",
          "mask_position_bias(bias: Tensor, attention_mask: Tensor | None, causal: bool, dtype: torch.dtype) -> Tensor",
          "What every block of a T5 stack adds to its attention scores (lesson 03b's `Stack.position_bias`): the "
          "position bias `bias` [1, H, q_len, k_len] (fp32), masked. `attention_mask` [B, k_len] marks the keys "
          "(1 = attend, 0 = padding) or is None; `causal` (the decoder's self-attention) hides from each query the "
          "keys after it, where the queries are the LAST q_len of the k_len positions (query i sits at position "
          "k_len - q_len + i). Every masked entry gets half the most negative value of `dtype`, torch.finfo(dtype)"
          ".min / 2 (finite: a score added to it stays finite); return the result in `dtype`, of shape [B, H, q_len, "
          "k_len] with a padding mask, else [1, H, q_len, k_len].")
def _mask_bias_cases():
    padded = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    for label, q_len, k_len, mask, causal, dtype, hint in [
            ("causal, 4 queries and 4 keys, fp32", 4, 4, None, True, torch.float32,
             "causal: query i sees keys 0 … i (a lower triangle, diagonal included); the keys after it get "
             "torch.finfo(dtype).min / 2, finite: not -inf, and not finfo.min itself"),
            ("causal, the last 3 of 6 positions (a cache of 3), fp32", 3, 6, None, True, torch.float32,
             "the queries are the last q_len positions: query i sits at position k_len - q_len + i and sees keys "
             "0 … k_len - q_len + i (torch.ones(q_len, k_len).tril(k_len - q_len))"),
            ("padding mask [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], not causal, fp32", 5, 5, padded, False, torch.float32,
             "padding hides KEYS: column j of every query of row b when attention_mask[b, j] == 0 (1 = attend); the "
             "result has the batch's rows, [B, H, q_len, k_len]"),
            ("causal and padded, fp32", 5, 5, padded, True, torch.float32,
             "both masks at once: an entry is masked when its key is padding OR after its query"),
            ("causal and padded, fp16", 5, 5, padded, True, torch.float16,
             "the mask value is the dtype's own: torch.finfo(torch.float16).min / 2 = -32752 (float32's, cast to "
             "fp16, becomes -inf); the result in fp16"),
            ("causal and padded, bf16", 5, 5, padded, True, torch.bfloat16,
             "in bf16: torch.finfo(torch.bfloat16).min / 2, and the result in bf16"),
            ("no mask at all, fp16", 3, 4, None, False, torch.float16,
             "nothing to mask: the bias itself, in dtype, of shape [1, H, q_len, k_len]"),
            ("a row whose keys are all padding, fp32", 3, 3, torch.tensor([[0, 0, 0], [1, 1, 0]]), False,
             torch.float32, "a row of padding only is masked everywhere, and stays finite")]:
        yield Case(label, hint, _judge_mask_bias(q_len, k_len, mask, causal, dtype))


# %% [markdown]
# Examples: `shift_right` that forgets the -100 labels, a cache step with the usual 1/√D scale, and a mask of
# -inf.

# %%
try:
    EXERCISES["shift_right"].check(lambda labels, start, pad: torch.cat([labels.new_full((len(labels), 1), start),
                                                                        labels[:, :-1]], 1))
except AssertionError as e:
    print(e)


# %%
def scaled_kv_step(x, wq, wk, wv, wo, past_k, past_v, position_bias):
    H = past_k.shape[1]
    heads = lambda w: x.matmul(w.T).unflatten(-1, (H, -1)).transpose(1, 2)
    k, v = torch.cat([past_k, heads(wk)], 2), torch.cat([past_v, heads(wv)], 2)
    q = heads(wq)
    weights = (q @ k.transpose(-1, -2) / q.shape[-1] ** 0.5 + position_bias).softmax(-1)
    return (weights @ v).transpose(1, 2).flatten(2) @ wo.T, k, v

try:
    EXERCISES["kv_cache_step"].check(scaled_kv_step)
except AssertionError as e:
    print(e)


# %%
def minus_inf_mask(bias, attention_mask, causal, dtype):
    q_len, k_len = bias.shape[-2:]
    keep = torch.ones(q_len, k_len, dtype=torch.bool)
    keep = keep.tril(k_len - q_len) if causal else keep
    if attention_mask is not None:
        keep = keep & attention_mask[:, None, None, :].bool()
    return bias.masked_fill(~keep, float("-inf")).to(dtype)

try:
    EXERCISES["mask_position_bias"].check(minus_inf_mask)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 04: optimizers
#
# `adamwscale_step` is compared, tensor by tensor, with the package's `AdamWScale` (both its per-tensor loop and its
# `foreach` path, from the same state) and with the formula by hand, in float64.

# %%
#| export
def _adamwscale_by_hand(p, g, m, v, step, lr, betas, eps, wd):
    b1, b2 = betas
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    rms = (p.pow(2).mean().sqrt()).clamp(min=1e-3)
    p = p - lr * math.sqrt(1 - b2 ** step) / (1 - b1 ** step) * rms * m / (v.sqrt() + eps)
    return p * (1 - lr * wd), g, m, v


def _adamwscale_package(p, g, m, v, step, lr, betas, eps, wd, foreach):
    from nanot5_edu.optim import AdamWScale
    param = torch.nn.Parameter(p.clone())
    param.grad = g.clone()
    opt = AdamWScale([param], lr=lr, betas=betas, eps=eps, weight_decay=wd, foreach=foreach)
    opt.state[param].update(step=step - 1, exp_avg=m.clone(), exp_avg_sq=v.clone())
    opt.step()
    s = opt.state[param]
    return param.detach(), g, s["exp_avg"], s["exp_avg_sq"]


def _judge_adamwscale(p, g, m, v, step, lr, betas, eps, wd):
    tol = dict(atol=1e-12, rtol=1e-9)
    expected = _adamwscale_by_hand(p, g, m, v, step, lr, betas, eps, wd)
    for foreach in (False, True):
        for a, b in zip(expected, _adamwscale_package(p, g, m, v, step, lr, betas, eps, wd, foreach)):
            _agree("adamwscale_step", a, b, **tol)

    def judge(fn):
        args = [t.clone() for t in (p, g, m, v)]
        fn(*args, step, lr, betas, eps, wd)
        for name, before, e, got in zip(("exp_avg", "exp_avg_sq", "param"), (m, v, p), expected[2:] + expected[:1],
                                        args[2:] + args[:1]):
            if torch.equal(got, before) and not torch.equal(e, before):
                zero_step = " or its step was zero (an all-zero param has RMS 0: the 1e-3 floor)" if name == "param" else ""
                return f"{name} still holds its old values: it was not updated in place{zero_step}"
            if problem := first_difference(e, got, **tol):
                return f"{name} differs {problem}"
    return judge


@exercise("adamwscale_step", "04_optimizers",
          "adamwscale_step(param: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, step: int, lr: float, "
          "betas: tuple[float, float], eps: float, weight_decay: float) -> None",
          "One AdamWScale update, in place, of param, exp_avg and exp_avg_sq (as nanoT5 does it; `step` counts "
          "updates from 1): Adam's moments; step size lr * sqrt(1 - beta2**step) / (1 - beta1**step) scaled by "
          "max(1e-3, RMS(param)) of the param before the update; param -= step_size * exp_avg / (sqrt(exp_avg_sq) + "
          "eps); then decoupled weight decay param -= lr * weight_decay * param.")
def _adamwscale_cases():
    gen = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    z = lambda: torch.zeros(4, 6, dtype=torch.float64)
    p, big = r(4, 6), r(4, 6) * 10
    m, v = r(4, 6) * 0.1, r(4, 6).pow(2) * 0.01
    yield Case("step 1 from zero moments, eps=0, weight_decay=0",
               "moments: exp_avg = beta1*exp_avg + (1-beta1)*grad, exp_avg_sq = beta2*exp_avg_sq + (1-beta2)*grad**2; "
               "bias correction: step_size = lr * sqrt(1 - beta2**step) / (1 - beta1**step), step counting from 1; "
               "then scaled by max(1e-3, RMS(param)) of the param before the update (AdamWScale's one change)",
               _judge_adamwscale(p, big, z(), z(), 1, 1e-2, (0.9, 0.999), 0.0, 0.0))
    yield Case("a zero-initialised weight, step 1, eps=0",
               "RMS floor: the step is scaled by max(1e-3, RMS(param)), so a zero-initialised weight still moves",
               _judge_adamwscale(z(), big, z(), z(), 1, 1e-2, (0.9, 0.999), 0.0, 0.0))
    yield Case("step 3, gradients of size ~1e-6, eps=1e-6",
               "eps is added OUTSIDE the square root: exp_avg / (sqrt(exp_avg_sq) + eps)",
               _judge_adamwscale(p, big * 1e-7, m * 1e-6, v * 1e-12, 3, 1e-2, (0.9, 0.999), 1e-6, 0.0))
    yield Case("step 5, lr=0.1, weight_decay=0.5",
               "decoupled weight decay, AFTER the Adam update: param -= lr * weight_decay * param (the updated "
               "param); it never touches grad or the moments",
               _judge_adamwscale(p, big, m, v, 5, 0.1, (0.9, 0.999), 1e-8, 0.5))
    yield Case("step 1000, betas=(0.8, 0.99), all terms on", "the whole update, as in the task",
               _judge_adamwscale(p * 0.05, big, m, v, 1000, 2e-2, (0.8, 0.99), 1e-6, 0.01))


# %%
#| export
def _torch_cosine(step: int, lr: float, total_steps: int, warmup_steps: int, final_lr: float) -> float:
    "nanoT5's schedule as torch builds it: LinearLR(0.5 → 1) for the warmup, then CosineAnnealingLR to final_lr"
    from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    s1 = LinearLR(opt, start_factor=0.5, end_factor=1.0, total_iters=warmup_steps)
    s2 = CosineAnnealingLR(opt, T_max=total_steps - warmup_steps, eta_min=final_lr)
    sched = SequentialLR(opt, [s1, s2], milestones=[warmup_steps])
    for _ in range(step):
        opt.step(); sched.step()
    return opt.param_groups[0]["lr"]


@exercise("cosine_lr", "04_optimizers",
          "cosine_lr(step: int, lr: float, total_steps: int, warmup_steps: int, final_lr: float) -> float",
          "nanoT5's learning rate at optimizer step `step` (from 0): a linear warmup from 0.5 * lr at step 0 to lr at "
          "warmup_steps, then a cosine from lr down to final_lr at total_steps, and final_lr after that.")
def _cosine_cases():
    import warnings
    from nanot5_edu.optim import cosine_lr
    lr, total, warm, final = 2e-2, 40, 8, 1e-5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about SequentialLR internals
        reference = [_torch_cosine(s, lr, total, warm, final) for s in range(total + 1)]
    for lo, hi, hint in [(0, warm, "warmup rises linearly from 0.5 * lr at step 0 to lr at warmup_steps "
                                   "(nanoT5: LinearLR(start_factor=0.5))"),
                         (warm, total + 1, "after warmup: final_lr + (lr - final_lr) * (1 + cos(pi * progress)) / 2, "
                                           "progress = (step - warmup_steps) / (total_steps - warmup_steps)")]:
        steps = list(range(lo, hi))
        expected = _agree("cosine_lr", [cosine_lr(s, lr, total, warm, final) for s in steps],
                          [reference[s] for s in steps], rtol=1e-6, atol=1e-12)
        yield Case(f"steps {lo}…{hi - 1} of lr={lr}, total_steps={total}, warmup_steps={warm}, final_lr={final}", hint,
                   _returns(expected, lambda fn, steps=steps: [fn(s, lr, total, warm, final) for s in steps], rtol=1e-6, atol=1e-12))
    steps = [total + 1, total + 7, 2 * total]
    expected = _agree("cosine_lr", [cosine_lr(s, lr, total, warm, final) for s in steps], [final] * 3, rtol=1e-9)
    yield Case(f"steps {steps} past total_steps={total}", "after total_steps the rate stays at final_lr "
               "(progress is capped at 1; a cosine left running would climb back up)",
               _returns(expected, lambda fn: [fn(s, lr, total, warm, final) for s in steps], rtol=1e-6, atol=1e-12))


# %% [markdown]
# Examples: the bias correction left out, and a warmup that starts from 0.

# %%
def no_bias_correction(param, grad, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    exp_avg.mul_(betas[0]).add_(grad, alpha=1 - betas[0])
    exp_avg_sq.mul_(betas[1]).addcmul_(grad, grad, value=1 - betas[1])
    rms = param.pow(2).mean().sqrt().clamp(min=1e-3)
    param.sub_(lr * rms * exp_avg / (exp_avg_sq.sqrt() + eps))
    param.mul_(1 - lr * weight_decay)

try:
    EXERCISES["adamwscale_step"].check(no_bias_correction)
except AssertionError as e:
    print(e)


# %%
def warmup_from_zero(step, lr, total_steps, warmup_steps, final_lr):
    if step < warmup_steps:
        return lr * step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return final_lr + (lr - final_lr) * (1 + math.cos(math.pi * progress)) / 2

try:
    EXERCISES["cosine_lr"].check(warmup_from_zero)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 05: pre-training
#
# Both checks run the package's `T5` at a tiny size (2 + 2 blocks of width 32, a vocabulary of 64 ids). `span_gain`'s two
# oracles are the model's own loss and a float64 hand computation from its logits; `train_step`'s are the model's
# own backward of the micro-batch losses averaged in one graph (for equal micro-batches, the whole batch at once) and
# the per-micro-batch gradients summed by hand, each followed by the same SGD step.

# %%
#| export
def _tiny_t5(seed: int = 0):
    from nanot5_edu.model import T5
    from nanot5_edu.layers import ModelConfig
    torch.manual_seed(seed)
    return T5(ModelConfig(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                          relative_attention_num_buckets=8, relative_attention_max_distance=16)).eval()


def _hand_mean_loss(model, input_ids, labels) -> float:
    logits = model(input_ids, labels=labels).logits.double()
    keep = labels != -100
    logp = logits.log_softmax(-1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    return float(-(logp * keep).sum() / keep.sum())


@exercise("span_gain", "05_pretraining",
          "span_gain(model, input_ids: LongTensor, other_input_ids: LongTensor, labels: LongTensor) -> float",
          "How much the encoder's input helps the decoder: the mean target loss (cross-entropy per target token, -100 "
          "labels ignored, averaged over all target tokens of the batch) with `other_input_ids` as the encoder input, "
          "minus the same with `input_ids`. Return a Python float (nats per target token).")
def _span_gain_cases():
    g = torch.Generator().manual_seed(0)
    model = _tiny_t5()
    ids, other = torch.randint(2, 64, (3, 12), generator=g), torch.randint(2, 64, (3, 12), generator=g)
    labels = torch.randint(2, 64, (3, 6), generator=g)
    ragged = labels.clone()
    ragged[0, 2:] = -100; ragged[1, 5:] = -100
    with torch.no_grad():
        for lab, label, hint in [
                (labels, "3 rows of 6 target tokens, no -100",
                 "span_gain = loss(other_input_ids) - loss(input_ids): positive when the real input helps"),
                (ragged, "rows with 2, 5 and 6 target tokens (the rest -100)",
                 "-100 labels are ignored, and the mean runs over ALL remaining target tokens of the batch "
                 "(token-weighted), not over per-row means")]:
            expected = _agree("span_gain", model(other, labels=lab).loss.item() - model(ids, labels=lab).loss.item(),
                              _hand_mean_loss(model, other, lab) - _hand_mean_loss(model, ids, lab), atol=1e-5)
            yield Case(label, hint, _returns(expected, lambda fn, lab=lab: fn(model, ids.clone(), other.clone(), lab.clone()),
                                             atol=1e-5))


# %%
#| export
def _micro_batches(n: int, rows: int = 2, seed: int = 0, unequal: bool = False) -> list[dict]:
    "n micro-batches; `unequal`: 1, 2, 3, ... rows, and some labels -100 (unequal token counts, as padding makes)"
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        r = i + 1 if unequal else rows
        labels = torch.randint(2, 64, (r, 5), generator=g)
        if unequal:
            labels[:, 5 - (i % 3) - 1:] = -100  # 4, 3, 2, ... counted target tokens a row
        out.append({"input_ids": torch.randint(2, 64, (r, 10), generator=g), "labels": labels})
    return out


def _grads(model, batch, scale: float = 1.0) -> list[torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss = model(batch["input_ids"], labels=batch["labels"]).loss
    (loss * scale).backward()
    return [p.grad.clone() for p in model.parameters()], loss.item()


def _mean_of_micro_losses_grads(model, batches) -> list[torch.Tensor]:
    "One graph: the mean of the micro-batch losses, back-propagated once"
    model.zero_grad(set_to_none=True)
    (sum(model(b["input_ids"], labels=b["labels"]).loss for b in batches) / len(batches)).backward()
    return [p.grad.clone() for p in model.parameters()], None


def _judge_train_step(n: int, calls: int, unequal: bool = False):
    lr = 0.5
    model = _tiny_t5()
    start = [p.detach().clone() for p in model.parameters()]
    steps = [_micro_batches(n, seed=c, unequal=unequal) for c in range(calls)]
    full, by_hand, losses = _tiny_t5(), _tiny_t5(), []
    for batches in steps:  # oracle 1: one graph (equal micro-batches: the whole batch at once, concatenated); oracle 2:
        if unequal:        # micro-batch gradients summed by hand
            g_full, _ = _mean_of_micro_losses_grads(full, batches)
        else:
            g_full, _ = _grads(full, {k: torch.cat([b[k] for b in batches]) for k in batches[0]})
        parts = [_grads(by_hand, b) for b in batches]
        g_hand = [sum(gs) / n for gs in zip(*[p[0] for p in parts])]
        losses.append(sum(p[1] for p in parts) / n)
        with torch.no_grad():
            for p, gf in zip(full.parameters(), g_full):
                p -= lr * gf
            for p, gh in zip(by_hand.parameters(), g_hand):
                p -= lr * gh
    expected = [p.detach() for p in full.parameters()]
    _agree("train_step", expected, [p.detach() for p in by_hand.parameters()], atol=1e-6, rtol=1e-4)
    names = [name for name, _ in model.named_parameters()]

    def judge(fn):
        student, got_losses = _tiny_t5(), []
        opt = torch.optim.SGD(student.parameters(), lr=lr)
        student.train()
        for batches in steps:
            got_losses.append(fn(student, opt, [{k: v.clone() for k, v in b.items()} for b in batches]))
        for name, e, got, s in zip(names, expected, student.parameters(), start):
            if problem := first_difference(e, got.detach(), atol=1e-6, rtol=1e-4):
                ratio = ((got.detach() - s).norm() / (e - s).norm()).item() if calls == 1 else float("nan")
                seen = f" (your update is {ratio:.2f}× the right one)" if math.isfinite(ratio) else ""
                return f"after {calls} step(s) parameter {name} differs{seen}: {problem}"
        return first_difference(losses, got_losses, atol=1e-5, rtol=1e-5)
    return judge


@exercise("train_step", "05_pretraining",
          "train_step(model, optimizer, micro_batches: list[dict]) -> float",
          "One optimizer step with gradient accumulation: for each micro-batch (a dict with `input_ids` and "
          "`labels`) compute model(input_ids, labels=labels).loss and back-propagate it scaled by 1 / "
          "len(micro_batches); then optimizer.step() and optimizer.zero_grad(). Return the mean of the micro-batch "
          "losses (unscaled) as a Python float.")
def _train_step_cases():
    yield Case("one micro-batch, one step", "loss.backward(), then optimizer.step(); return loss.item()",
               _judge_train_step(1, 1))
    yield Case("four micro-batches, one step",
               "accumulate: back-propagate every micro-batch's loss scaled by 1/len(micro_batches) (so the summed "
               "gradient is the whole batch's mean), without zeroing the gradients between micro-batches; return "
               "the mean of the unscaled losses", _judge_train_step(4, 1))
    yield Case("two micro-batches, two steps in a row",
               "zero the gradients after optimizer.step() (optimizer.zero_grad()): otherwise the next step adds this "
               "step's gradients again", _judge_train_step(2, 2))
    yield Case("three micro-batches of 1, 2 and 3 rows with -100 labels (unequal token counts)",
               "scale each micro-batch's own loss by 1/len(micro_batches) and back-propagate it separately: "
               "concatenating the micro-batches (or weighting them by rows or tokens) gives another step when their "
               "sizes differ", _judge_train_step(3, 1, unequal=True))


# %% [markdown]
# Examples: the loss averaged per row, and accumulation without the 1/grad_acc scale (the update comes out 4×).

# %%
def row_mean_gain(model, input_ids, other_input_ids, labels):
    def loss(ids):
        logits = model(ids, labels=labels).logits
        per_token = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=-100, reduction="none")
        return (per_token.sum(1) / (labels != -100).sum(1)).mean()
    return (loss(other_input_ids) - loss(input_ids)).item()

try:
    EXERCISES["span_gain"].check(row_mean_gain)
except AssertionError as e:
    print(e)


# %%
def unscaled_accumulation(model, optimizer, micro_batches):
    losses = []
    for b in micro_batches:
        loss = model(b["input_ids"], labels=b["labels"]).loss
        loss.backward()
        losses.append(loss.item())
    optimizer.step(); optimizer.zero_grad()
    return sum(losses) / len(losses)

try:
    EXERCISES["train_step"].check(unscaled_accumulation)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 06: streams
#
# Which rows come next is a function of the stream's state alone. Oracles: the package's `BatchStream` (with a
# collator that returns the rows it is given, over rows numbered 0…n−1), moved to the state and asked for one
# micro-batch; and a hand computation that lists every whole global micro-batch of the epoch's order and picks one.

# %%
#| export
class _RowsAsTheyCome:
    "A collator that returns the rows it is given (their numbers, since the rows are 0…n-1)"
    def __call__(self, rows):
        return rows

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _rows_by_stream(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    from nanot5_edu.stream import BatchStream
    stream = BatchStream(torch.arange(num_rows), _RowsAsTheyCome(), micro_batch, seed, rank, world_size)
    stream.load_state_dict({"epoch": epoch, "position": position, "collator": {}})
    rows = next(stream).tolist()
    return rows, stream.epoch, stream.position


def _rows_by_hand(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    step = micro_batch * world_size
    if position + step > num_rows:  # too few left for a global micro-batch: the next epoch
        epoch, position = epoch + 1, 0
    order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    global_batches = [order[i:i + step] for i in range(0, num_rows - step + 1, step)]
    mine = global_batches[position // step][rank * micro_batch:(rank + 1) * micro_batch]
    return mine, epoch, position + step


def _next_rows_case(label, hint, *state):
    expected = _agree("next_rows", list(_rows_by_stream(*state)), list(_rows_by_hand(*state)))
    return Case(label, hint, _returns(expected, lambda fn: list(fn(*state))))


@exercise("next_rows", "06_streams",
          "next_rows(num_rows: int, micro_batch: int, seed: int, rank: int, world_size: int, epoch: int, "
          "position: int) -> tuple[list[int], int, int]",
          "Which rows lesson 06's `BatchStream` gives process `rank` next, from its state (epoch, position) alone. "
          "Epoch e visits the num_rows rows in the order torch.randperm(num_rows, generator=torch.Generator()"
          ".manual_seed(seed + e)); `position` counts the rows of that order all processes have consumed. A global "
          "micro-batch is the next micro_batch × world_size entries of the order, and process `rank` takes the "
          "rank-th micro_batch of them. When fewer than a global micro-batch remain, the stream first moves to the "
          "next epoch at position 0 (the leftover rows are skipped). Return (the row numbers this process takes, "
          "the epoch, the position after this micro-batch).")
def _next_rows_cases():
    # state: num_rows, micro_batch, seed, rank, world_size, epoch, position
    yield _next_rows_case("a fresh stream: 10 rows, micro_batch=3, seed=0", "epoch 0's order is torch.randperm("
                          "num_rows, generator=torch.Generator().manual_seed(seed + epoch)); take its first "
                          "micro_batch entries; position counts the rows consumed (0 → 3)", 10, 3, 0, 0, 1, 0, 0)
    yield _next_rows_case("resumed at epoch 0, position 6", "a resumed stream goes on in the same order: the next "
                          "rows are order[position : position + micro_batch]", 10, 3, 0, 0, 1, 0, 6)
    yield _next_rows_case("resumed at epoch 2, position 3, seed=5", "every epoch has its own order, seeded with "
                          "seed + epoch", 10, 3, 5, 0, 1, 2, 3)
    yield _next_rows_case("epoch 0, position 9 of 10 rows", "when fewer than a global micro-batch remain, move to "
                          "the next epoch (position 0, its order seeded with seed + epoch + 1) BEFORE taking rows: "
                          "the leftover row is skipped, not returned as a short batch", 10, 3, 0, 0, 1, 0, 9)
    yield _next_rows_case("epoch 0, position 6 of 9 rows (the last whole micro-batch)", "a micro-batch that ends "
                          "exactly at the last row is still taken: move on only when position + micro_batch × "
                          "world_size > num_rows", 9, 3, 0, 0, 1, 0, 6)
    yield _next_rows_case("rank 0 of 2 processes, micro_batch=1, position 4", "position counts the rows of ALL "
                          "processes: it advances by the whole global micro-batch, micro_batch × world_size",
                          11, 1, 0, 0, 2, 0, 4)
    yield _next_rows_case("rank 1 of 2 processes, micro_batch=2, position 4", "with world_size processes a global "
                          "micro-batch is micro_batch × world_size rows: process rank takes order[position + "
                          "rank·micro_batch : position + (rank + 1)·micro_batch]", 11, 2, 0, 1, 2, 0, 4)
    yield _next_rows_case("rank 1 of 2 processes, position 8 of 11 rows", "the epoch ends when fewer than a GLOBAL "
                          "micro-batch (micro_batch × world_size rows) remain", 11, 2, 3, 1, 2, 0, 8)


# %% [markdown]
# ## Lesson 07: FLOPs and memory
#
# `flops_per_step` is compared with the package's `flops_per_step` and with PyTorch's own count: `FlopCounterMode`
# records every matmul and attention kernel of a forward pass of the package's `T5` on the `meta` device (shapes
# only, no data: even T5-Base costs nothing), × 3 for forward plus backward. The two agree exactly, so the check asks for agreement to a relative 1e-9.
# `training_state_bytes` is compared with the package's `estimate_memory` and with a count over the parameters and
# the `nn.Linear` modules of the model itself, built on the `meta` device.

# %%
#| export
def _model_config(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=None, num_heads=4,
                  buckets=8, max_distance=16):
    from nanot5_edu.layers import ModelConfig
    return ModelConfig(vocab_size=vocab_size, d_model=d_model, d_kv=d_kv, d_ff=d_ff, num_layers=num_layers,
                       num_decoder_layers=num_decoder_layers, num_heads=num_heads,
                       relative_attention_num_buckets=buckets, relative_attention_max_distance=max_distance)


def _meta_t5(config):
    from nanot5_edu.model import T5
    with torch.device("meta"):
        return T5(config)


def _counted_flops(config, batch_size, inputs_length, targets_length) -> float:
    "Oracle 2: FlopCounterMode over one forward pass of the model (shapes only, on `meta`), × 3 for the backward"
    from torch.utils.flop_counter import FlopCounterMode
    model = _meta_t5(config)
    with torch.device("meta"):
        ids = torch.zeros(batch_size, inputs_length, dtype=torch.long)
        labels = torch.zeros(batch_size, targets_length, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(ids, labels=labels)
    return 3.0 * counter.get_total_flops()


def _judge_flops(config, shape):
    from dataclasses import replace
    from nanot5_edu.config import flops_per_step
    expected = _agree("flops_per_step", float(flops_per_step(config, *shape)), _counted_flops(config, *shape),
                      rtol=1e-12)

    def judge(fn):
        got = fn(replace(config), *shape)
        if problem := first_difference(expected, got, rtol=1e-9):
            ratio = got / expected if isinstance(got, (int, float)) else float("nan")
            notes = {1 / 3: " (exactly 1/3: the forward pass only?)", 1 / 2: " (exactly 1/2: multiply-adds, not FLOPs?)",
                     1 / 6: " (exactly 1/6: multiply-adds of the forward pass only?)"}
            note = next((n for r, n in notes.items() if math.isclose(ratio, r, rel_tol=1e-9)), "")
            return f"{problem}: {ratio:.4g}× the count{note}"
    return judge


@exercise("flops_per_step", "07_config",
          "flops_per_step(config, batch_size: int, inputs_length: int, targets_length: int) -> float",
          "Training FLOPs of one step of T5 span corruption, counted as lesson 07 counts them (`config` is a "
          "ModelConfig). Every matmul costs 2 FLOPs per multiply-add, and a step is 3 × the forward pass (backward ≈ "
          "2 × forward). With inner = num_heads · d_kv: each of the num_layers encoder layers runs q, k, v, o (d_model "
          "× inner each) and the gated feed-forward (wi_0, wi_1, wo: d_model × d_ff each) over the B·L_in encoder "
          "tokens, and the attention products q kᵀ and weights · v (B · L_in² · inner multiply-adds each). Each of the "
          "num_decoder_layers decoder layers runs self-attention (products B · L_t² · inner each) and the "
          "feed-forward over the B·L_t decoder tokens, and cross-attention: q and o over the decoder tokens, k and v "
          "over the encoder tokens, products B · L_t · L_in · inner each. Then the LM head, d_model × vocab_size over "
          "the decoder tokens. Nothing else (embeddings, norms, softmax) counts.")
def _flops_cases():
    yield Case("2 + 2 layers, num_heads · d_kv = d_model, 12 → 12 tokens", "count every matmul of the task — the q, "
               "k, v, o projections, the feed-forward, the attention products q kᵀ and weights · v, and the LM head "
               "— at 2 FLOPs per multiply-add, × 3 for forward + backward",
               _judge_flops(_model_config(), (2, 12, 12)))
    yield Case("num_heads · d_kv = 48 ≠ d_model = 24", "attention's projections are d_model × inner with inner = "
               "num_heads · d_kv (48 here), not d_model × d_model; the products run over inner too",
               _judge_flops(_model_config(vocab_size=100, d_model=24, d_kv=16, d_ff=40, num_heads=3), (2, 12, 12)))
    yield Case("1 encoder layer, 3 decoder layers", "the decoder has num_decoder_layers layers, not num_layers",
               _judge_flops(_model_config(num_layers=1, num_decoder_layers=3), (2, 12, 12)))
    yield Case("20 encoder tokens → 7 decoder tokens", "cross-attention's k and v project the encoder output: "
               "over the encoder's B·L_in tokens, not the decoder's; its products are L_t × L_in per row",
               _judge_flops(_model_config(vocab_size=100, d_model=24, d_kv=16, d_ff=40, num_layers=1,
                                          num_decoder_layers=3, num_heads=3), (3, 20, 7)))
    yield Case("nanoT5's step: T5-Base, batch 128, 512 → 114 tokens", "lesson 07's anchor: 54.5 TFLOP",
               _judge_flops(_model_config(32128, 768, 64, 2048, 12, None, 12, 32, 128), (128, 512, 114)))


# %%
#| export
def _state_bytes_estimate(config, optimizer: str, precision: str) -> int:
    from nanot5_edu.config import Config, OptimConfig, TrainConfig, estimate_memory
    m = estimate_memory(Config(model=config, optim=OptimConfig(name=optimizer), train=TrainConfig(precision=precision)))
    return m["weights"] + m["gradients"] + m["optimizer_state"] + m["weight_copies_16bit"]


def _state_bytes_by_module(config, optimizer: str, precision: str) -> int:
    "Oracle 2: the model's own parameters and nn.Linear weights, counted on the meta device"
    model = _meta_t5(config)
    params = sum(p.numel() for p in model.parameters())
    copies = 0 if precision == "fp32" else sum(
        mod.weight.numel() for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and not (precision == "fp16" and name.endswith(".wo")))
    return params * (4 + 4 + {"adamw": 8, "adamwscale": 8, "adafactor": 4}[optimizer]) + 2 * copies


def _state_bytes_case(label, hint, config, optimizer, precision):
    from dataclasses import replace
    expected = _agree("training_state_bytes", _state_bytes_estimate(config, optimizer, precision),
                      _state_bytes_by_module(config, optimizer, precision))

    def judge(fn):
        got = fn(replace(config), optimizer, precision)
        if problem := first_difference(expected, got):
            diff = f" ({got - expected:+,} bytes)" if isinstance(got, (int, float)) else ""
            return f"{problem}{diff}"
    return Case(label, hint, judge)


@exercise("training_state_bytes", "07_config",
          "training_state_bytes(config, optimizer: str, precision: str) -> int",
          "The bytes a training step holds for the model's state, before any activation, as lesson 07's "
          "`estimate_memory` counts them, for the T5 v1.1 (untied head) that `config` (a ModelConfig) describes. Its "
          "parameters: the shared embedding and the LM head (vocab_size × d_model each); per encoder layer an "
          "attention (q, k, v, o: d_model × inner each, inner = num_heads · d_kv), a feed-forward (wi_0, wi_1, wo: "
          "d_model × d_ff each) and 2 RMSNorms (d_model each); per decoder layer two attentions (self and cross), a "
          "feed-forward and 3 RMSNorms; a final RMSNorm and a position-bias table (relative_attention_num_buckets × "
          "num_heads) per stack. Every parameter has an fp32 weight (4 bytes) and gradient (4); `optimizer` 'adamw' "
          "or 'adamwscale' keeps two fp32 moments (8), 'adafactor' at most 4. Under `precision` 'bf16' or 'fp16' "
          "autocast adds a 2-byte copy of every matmul weight (attention, feed-forward, LM head: not the embedding, "
          "norms or bias tables), except under 'fp16' the feed-forward's wo, which runs in fp32; 'fp32' adds none. "
          "Return the total as an int.")
def _state_bytes_cases():
    small = _model_config()
    yield _state_bytes_case("fp32, adamw, 2 + 2 layers", "fp32 with AdamW: 4 (weight) + 4 (gradient) + 8 (two "
                            "moments) = 16 bytes per parameter, and every parameter counted: embedding, LM head, "
                            "attentions, feed-forwards, the RMSNorm weights and both position-bias tables",
                            small, "adamw", "fp32")
    yield _state_bytes_case("fp32, adafactor", "'adafactor': 4 bytes of optimizer state per parameter (the lesson's "
                            "bound), so 12 in all", small, "adafactor", "fp32")
    yield _state_bytes_case("bf16, adamwscale", "bf16 autocast keeps the fp32 weights (and fp32 gradients and "
                            "moments) and adds a 2-byte copy of each matmul weight: attention q, k, v, o, the "
                            "feed-forward and the LM head — NOT the embedding (looked up, not multiplied)",
                            small, "adamwscale", "bf16")
    yield _state_bytes_case("fp16, adamwscale", "under fp16 the feed-forward's wo runs in fp32: no 16-bit copy of "
                            "wo (the other matmul weights have one, as under bf16)", small, "adamwscale", "fp16")
    yield _state_bytes_case("bf16, 1 encoder and 3 decoder layers, inner ≠ d_model", "the decoder has "
                            "num_decoder_layers layers, each with two attentions (self and cross), a feed-forward "
                            "and three RMSNorms; attention weights are d_model × num_heads · d_kv",
                            _model_config(100, 24, 16, 40, 1, 3, 3), "adamw", "bf16")
    yield _state_bytes_case("T5-Base, bf16, adamwscale", "T5-Base has 247,577,856 parameters",
                            _model_config(32128, 768, 64, 2048, 12, None, 12, 32, 128), "adamwscale", "bf16")


# %% [markdown]
# Examples: a step that moves to the next epoch only once the order has run out (a short last batch), and the
# bytes of a bf16 run counted as if its weights were 16-bit.

# %%
def short_last_batch(num_rows, micro_batch, seed, rank, world_size, epoch, position):
    if position >= num_rows:
        epoch, position = epoch + 1, 0
    order = torch.randperm(num_rows, generator=torch.Generator().manual_seed(seed + epoch)).tolist()
    start = position + rank * micro_batch
    return order[start:start + micro_batch], epoch, position + micro_batch * world_size

try:
    EXERCISES["next_rows"].check(short_last_batch)
except AssertionError as e:
    print(e)


# %%
def bf16_weights(config, optimizer, precision):
    d, inner, f, V = config.d_model, config.num_heads * config.d_kv, config.d_ff, config.vocab_size
    params = (2 * V * d + config.num_layers * (4 * d * inner + 3 * d * f + 2 * d)
              + config.num_decoder_layers * (8 * d * inner + 3 * d * f + 3 * d)
              + 2 * d + 2 * config.relative_attention_num_buckets * config.num_heads)
    weight = 4 if precision == "fp32" else 2  # the mistake: mixed precision keeps fp32 master weights
    return params * (weight + 4 + (4 if optimizer == "adafactor" else 8))

try:
    EXERCISES["training_state_bytes"].check(bf16_weights)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 07b: checkpoints
#
# `atomic_write` is given a writer object to call with the open file, as lesson 07b's `_write_file` is. The writer
# writes known chunks, or fails after a few of them (as a full disk does: `OSError` ENOSPC), or arms a crash just
# before the rename (`os.replace` and `os.rename` raise once, in the process where the writer runs: the student's).
# The check then looks at the directory: what sits under the final name, whether a temporary file was left, and
# whether a reader that had the old file open still reads it whole (a file written in place, or copied over,
# changes under its readers; a file renamed over it does not). The record's oracles are `hashlib` on the bytes the
# writer wrote and the package's `_write_file` on a file of its own. `checkpoint_problem` is compared with the
# package's `checkpoint_problem` and with a check by hand (`hashlib`), on checkpoint directories the check writes
# and damages.

# %%
#| export
class _Writer:
    """What `atomic_write` is given: called with the open file, it writes `chunks`; `fail_after`: raise OSError
    (ENOSPC) after that many chunks; `crash_at_rename`: arm a crash of the next os.replace / os.rename"""

    def __init__(self, chunks: list[bytes], fail_after: int | None = None, crash_at_rename: bool = False):
        self.chunks, self.fail_after, self.crash_at_rename = chunks, fail_after, crash_at_rename
        self._saved = None

    def __call__(self, f):
        import errno, os
        for i, chunk in enumerate(self.chunks):
            if i == self.fail_after:
                raise OSError(errno.ENOSPC, "No space left on device (a simulated full disk)")
            f.write(chunk)
        if self.crash_at_rename:
            self._saved = (os.replace, os.rename)
            os.replace = os.rename = self._crash

    def _crash(self, *args, **kwargs):
        self.disarm()
        raise OSError("simulated crash between the write and the rename (the machine died here)")

    def disarm(self):
        import os
        if self._saved is not None:
            os.replace, os.rename = self._saved
            self._saved = None


def _write_record(chunks: list[bytes]) -> dict:
    "The record of these bytes, twice: hashlib by hand, and the package's `_write_file` on a scratch file"
    import hashlib
    from pathlib import Path
    from nanot5_edu.checkpoint import _write_file
    data = b"".join(chunks)
    with tempfile.TemporaryDirectory() as scratch:
        package = _write_file(Path(scratch) / "f", _Writer(chunks))
    return _agree("atomic_write", {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}, package)


def _judge_atomic(chunks, old: bytes | None = None, fail_after=None, crash_at_rename=False):
    import hashlib, os, shutil
    expected = _write_record(chunks)
    fails = fail_after is not None or crash_at_rename

    def judge(fn):
        root = tempfile.mkdtemp(prefix="nanot5_exercise_ckpt")
        path, reader, writer = os.path.join(root, "model.safetensors"), None, _Writer(chunks, fail_after, crash_at_rename)
        try:
            if old is not None:
                with open(path, "wb") as f:
                    f.write(old)
                reader = open(path, "rb")  # a reader of the old checkpoint, open across the write
            try:
                got, raised = fn(path, writer), None
            except NotImplementedError:
                raise
            except Exception as e:  # noqa: BLE001 (a failed write must raise: which exception is the writer's)
                got, raised = None, e
            finally:
                writer.disarm()  # the crash, if armed and never reached, disarmed (here: the check's own process)
            now = open(path, "rb").read() if os.path.exists(path) else None
            left = sorted(set(os.listdir(root)) - {"model.safetensors"})
            before = "nothing" if old is None else "the old file"
            if fails:
                if raised is None and crash_at_rename:
                    return (f"a crash was armed for the rename, but your function returned {_fmt(got)} without it "
                            "coming: it did not os.replace (or os.rename) a temporary file onto the path")
                if raised is None:
                    return (f"the write failed (a full disk) but your function returned {_fmt(got)}: re-raise the "
                            "error, do not report success")
                if now != old:
                    holds = "nothing" if now is None else f"{len(now)} bytes"
                    return (f"after a failed write, the path holds {holds} instead of {before}: write under a "
                            "temporary name, and os.replace it onto the path only once it is complete")
            elif raised is not None:
                raise raised
            if left:
                return f"files left in the directory besides the checkpoint: {left} (remove the temporary file)"
            if fails:
                return None
            if now is None or hashlib.sha256(now).hexdigest() != expected["sha256"]:
                return f"the file at the path does not hold the bytes `write` wrote ({0 if now is None else len(now)} bytes)"
            if reader is not None and reader.read() != old:
                return ("a reader that had the old file open no longer reads it whole: the new file was written into "
                        "the old one (in place, or copied over it); write a new file and os.replace it onto the path")
            if not isinstance(got, dict) or set(got) != {"bytes", "sha256"}:
                return f"expected a dict with keys 'bytes' and 'sha256', got {_fmt(got)}"
            return first_difference([expected["bytes"], expected["sha256"]], [got["bytes"], got["sha256"]])
        finally:
            if reader is not None:
                reader.close()
            shutil.rmtree(root, ignore_errors=True)
    return judge


@exercise("atomic_write", "07b_checkpoints", "atomic_write(path: str, write) -> dict",
          "Write one checkpoint file so that a crash never leaves part of it under its name (lesson 07b): open a "
          "temporary file in the same directory (e.g. path + '.tmp') for binary writing, call `write(f)` with it, "
          "flush it and os.fsync it, then os.replace it onto `path` (atomic: `path` then holds the old file or the "
          "complete new one, never part of either). If anything fails before the rename is done, remove the "
          "temporary file and re-raise: `path` keeps what it held. Return the record lesson 07b keeps in "
          "trainer_state.json: {'bytes': the number of bytes written, 'sha256': their sha256 hex digest}.")
def _atomic_cases():
    g = torch.Generator().manual_seed(0)
    blob = lambda n: bytes(torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8).tolist())
    new, old = [blob(3000), blob(5000), blob(10)], blob(4000)
    yield Case("a new file, three chunks", "return {'bytes': n, 'sha256': hexdigest} of the bytes written (hash "
               "them as they are written, or read the file back only after flushing it), and leave them at path",
               _judge_atomic(new))
    yield Case("a full disk after the first chunk, no earlier file", "a write that fails leaves nothing under path: "
               "write to a temporary name, remove it when anything fails, and re-raise the error",
               _judge_atomic(new, fail_after=1))
    yield Case("a crash just before the rename, an earlier checkpoint at path", "the rename is the commit: until "
               "os.replace(temporary, path) succeeds, path holds the old file (no copying into it); on failure "
               "remove the temporary file and re-raise", _judge_atomic(new, old=old, crash_at_rename=True))
    yield Case("a full disk after two chunks, an earlier checkpoint at path", "the old checkpoint survives a failed "
               "write untouched", _judge_atomic(new, old=old, fail_after=2))
    yield Case("a new checkpoint over an earlier one, which a reader has open", "replace the file, do not write "
               "into it: a reader of the old checkpoint still reads all of it", _judge_atomic(new, old=old))
    yield Case("an empty write (0 bytes)", "writing nothing still makes a file: {'bytes': 0, 'sha256': "
               "sha256(b'').hexdigest()}", _judge_atomic([], old=old))


# %%
#| export
def _checkpoint_dir(files: dict[str, bytes], damage: str | None = None, target: str | None = None) -> str:
    "A checkpoint directory with trainer_state.json's record of `files`; then `damage` done to file `target`"
    import hashlib, json, os
    root = tempfile.mkdtemp(prefix="nanot5_exercise_ckpt")
    for name, data in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(data)
    record = {name: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()} for name, d in files.items()}
    state = json.dumps({"step": 100, "world_size": 1, "files": record}, indent=1)
    with open(os.path.join(root, "trainer_state.json"), "w") as f:
        f.write(state[:len(state) // 2] if damage == "bad_json" else state)
    path = os.path.join(root, target or "")
    if damage == "missing":
        os.remove(path)
    elif damage == "short":
        with open(path, "r+b") as f:
            f.truncate(len(files[target]) // 2)
    elif damage == "changed":
        data = bytearray(files[target])
        data[len(data) // 2] ^= 0xFF
        with open(path, "wb") as f:
            f.write(bytes(data))
    elif damage == "no_state":
        os.remove(os.path.join(root, "trainer_state.json"))
    return root


def _problem_by_hand(root: str) -> str | None:
    "Oracle 2: the name of the first damaged file (or trainer_state.json), or None"
    import hashlib, json, os
    try:
        with open(os.path.join(root, "trainer_state.json")) as f:
            files = json.load(f).get("files", {})
    except (OSError, ValueError):
        return "trainer_state.json"
    for name, want in files.items():
        path = os.path.join(root, name)
        if (not os.path.exists(path) or os.path.getsize(path) != want["bytes"]
                or hashlib.sha256(open(path, "rb").read()).hexdigest() != want["sha256"]):
            return name
    return None


def _judge_checkpoint(files, damage=None, target=None):
    import shutil
    from pathlib import Path
    from nanot5_edu.checkpoint import checkpoint_problem
    root = _checkpoint_dir(files, damage, target)
    try:
        package = checkpoint_problem(Path(root))
        named = None if package is None else next((n for n in [*files, "trainer_state.json"] if n in package), "?")
        expected = _agree("checkpoint_problem", named, _problem_by_hand(root))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def judge(fn):
        root = _checkpoint_dir(files, damage, target)
        try:
            got = fn(root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        if expected is None:
            return None if got is None else f"expected None (the checkpoint is intact), got {_fmt(got)}"
        if not isinstance(got, str) or expected not in got:
            return f"expected a sentence naming {expected!r}, got {_fmt(got)}"
    return judge


@exercise("checkpoint_problem", "07b_checkpoints", "checkpoint_problem(directory: str) -> str | None",
          "Check a checkpoint directory against the record in its trainer_state.json (lesson 07b), a JSON object "
          "whose 'files' maps each file's name to {'bytes': its size, 'sha256': its sha256 hex digest}. Return None "
          "when every listed file exists with that size and that sha256; otherwise a sentence about the first file "
          "that is missing, of another size (cut short) or changed (another sha256), containing its name. A "
          "trainer_state.json that is missing or not valid JSON is a problem too: return a sentence naming "
          "trainer_state.json. Never raise for a damaged checkpoint: it is reported, so a run can fall back to the "
          "one before.")
def _checkpoint_cases():
    g = torch.Generator().manual_seed(1)
    blob = lambda n: bytes(torch.randint(0, 256, (n,), generator=g, dtype=torch.uint8).tolist())
    files = {"model.safetensors": blob(6000), "state.pt": blob(3000), "process_0.pt": blob(500)}
    for label, damage, target, hint in [
            ("an intact checkpoint", None, None, "every file as recorded: return None"),
            ("state.pt deleted", "missing", "state.pt", "a file in the record that is not there is a problem to "
             "report (a sentence naming it), not a FileNotFoundError"),
            ("model.safetensors cut to half its size", "short", "model.safetensors", "compare each file's size with "
             "its record's 'bytes' (a copy cut off halfway)"),
            ("one byte of process_0.pt changed (same size)", "changed", "process_0.pt", "a file of the right size can "
             "still be changed: compare its sha256 with the record's too"),
            ("trainer_state.json cut off halfway (not valid JSON)", "bad_json", None, "an unreadable "
             "trainer_state.json is reported (a sentence naming trainer_state.json), not raised"),
            ("no trainer_state.json", "no_state", None, "a missing trainer_state.json is reported too")]:
        yield Case(label, hint, _judge_checkpoint(files, damage, target))
    yield Case("a record that lists no files", "nothing listed, nothing to check: None", _judge_checkpoint({}))


# %% [markdown]
# Example: a checkpoint written straight under its name, which a full disk leaves half-written.

# %%
def in_place(path, write):
    import hashlib
    with open(path, "wb") as f:
        write(f)
    data = open(path, "rb").read()
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

try:
    EXERCISES["atomic_write"].check(in_place)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 08: the training loop
#
# The NaN guard's step is compared with the package's `LogWindow.stop_on_nan` (the step its `TrainingError`
# names) and with a hand count that walks the window's micro-batch losses step by step.

# %%
#| export
def _nan_step_by_window(losses, step, grad_acc, checked):
    import re
    from nanot5_edu.config import TrainingError
    from nanot5_edu.train import LogWindow
    window = LogWindow()
    window.losses, window.checked = [torch.tensor(float(x)) for x in losses], checked
    with tempfile.TemporaryDirectory() as run_dir:
        try:
            window.stop_on_nan(step, grad_acc, run_dir)
        except TrainingError as e:
            return int(re.search(r"at step (\d+)", str(e)).group(1))
    return None


def _nan_step_by_hand(losses, step, grad_acc, checked):
    first_step = step - len(losses) // grad_acc + 1  # the window's first optimizer step
    for i in range(checked, len(losses)):
        if not math.isfinite(losses[i]):
            return first_step + i // grad_acc
    return None


def _nan_case(label, hint, losses, step, grad_acc, checked=0):
    expected = _agree("nan_step", _nan_step_by_window(losses, step, grad_acc, checked),
                      _nan_step_by_hand(losses, step, grad_acc, checked))
    return Case(label, hint, _returns(expected, lambda fn: fn(list(losses), step, grad_acc, checked)))


@exercise("nan_step", "08_real_runs", "nan_step(losses: list[float], step: int, grad_acc: int, checked: int) -> int | None",
          "The NaN guard of lesson 08's logging window: `losses` are the window's micro-batch losses in order, "
          "`grad_acc` per optimizer step, the last `grad_acc` of them from optimizer step `step` (steps count from "
          "1; the window holds whole steps). The first `checked` were checked before. Return the optimizer step that "
          "produced the first non-finite loss (nan, inf or -inf) among the unchecked ones, or None when they are all "
          "finite.")
def _nan_cases():
    nan, inf = float("nan"), float("inf")
    yield _nan_case("grad_acc=1, step 10, a window of 4 losses, nan third", "the window's first loss is from step "
                    "step - len(losses) / grad_acc + 1 (here 7): the window ends at `step`, it does not start "
                    "there", [2.1, 2.0, nan, 1.9], 10, 1)
    yield _nan_case("grad_acc=4, step 6, 12 losses, nan sixth", "grad_acc losses per optimizer step: loss i is "
                    "from step first_step + i // grad_acc (count steps, not micro-batches)",
                    [2.0] * 5 + [nan] + [2.0] * 6, 6, 4)
    yield _nan_case("grad_acc=2, step 3, an inf loss", "inf and -inf stop the run too: test with math.isfinite "
                    "(or torch.isfinite), not isnan", [2.0, 2.0, inf, 2.0, 2.0, 2.0], 3, 2)
    yield _nan_case("grad_acc=2, step 3, a -inf loss", "-inf is not finite either", [2.0, -inf, 2.0, 2.0, 2.0, 2.0],
                    3, 2)
    yield _nan_case("grad_acc=1, step 5, nan at losses 2 and 4", "report the FIRST non-finite loss (the step that "
                    "first went wrong)", [2.0, nan, 2.0, nan, 2.0], 5, 1)
    yield _nan_case("grad_acc=4, step 9, 12 losses of which 8 checked, nan at loss 10", "`checked` only says where "
                    "to start looking: loss i of the window is still from step first_step + i // grad_acc, i counted "
                    "from the window's start, not from the first unchecked loss",
                    [2.0] * 9 + [nan] + [2.0] * 2, 9, 4, checked=8)
    yield _nan_case("grad_acc=2, step 4, all finite", "every loss finite: None", [2.0, 1.5, 1.7, 1.2], 4, 2)
    yield _nan_case("one unchecked loss, nan", "a window of one step, its last loss unchecked",
                    [2.0, 2.0, nan], 8, 3, checked=2)


# %% [markdown]
# Example: the guard counted in micro-batches, not in optimizer steps.

# %%
def micro_batch_steps(losses, step, grad_acc, checked):
    for i in range(checked, len(losses)):
        if not math.isfinite(losses[i]):
            return step - len(losses) + 1 + i
    return None

try:
    EXERCISES["nan_step"].check(micro_batch_steps)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 09: fine-tuning metrics
#
# Rouge-L is checked against the `rouge_score` package (stemming off) and the package's `rouge_l` (stemming on:
# the cases use no two words that share a stem, so both must agree), and the hand-computed values below; exact
# match against the package's `exact_match` and hand-written answers.

# %%
#| export
def _rouge_score_l(prediction: str, references: list[str]) -> float:
    from rouge_score import rouge_scorer
    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    return 100 * max(scorer.score(ref, prediction)["rougeL"].fmeasure for ref in references)


@exercise("rouge_l", "09_finetuning", "rouge_l(prediction: str, references: list[str]) -> float",
          "Rouge-L F-measure × 100 of a prediction, the best over the references: lower-case both texts and split them "
          "into words at anything that is not a-z or 0-9 (ASCII, as the rouge_score package does); with L the length of their longest common "
          "subsequence (words in order, gaps allowed), P = L / len(prediction words), R = L / len(reference words), "
          "F = 2PR / (P + R) (0 when L = 0).")
def _rouge_cases():
    from nanot5_edu.finetune import rouge_l
    for pred, refs, hand, hint in [
            ("the cat sat on the mat", ["the cat sat on the mat"], 100.0, "identical texts score 100 (× 100, not 1)"),
            ("the cat sat on the mat", ["the cat is on the mat"], 500 / 6,
             "LCS = 5 words ('the cat on the mat'); P = R = 5/6; F = 2PR/(P+R) × 100"),
            ("the cat sat", ["the cat sat on the mat"], 200 / 3,
             "P = 3/3 and R = 3/6 differ: the score is their F-measure, 2PR/(P+R), neither one alone"),
            ("mat the on sat cat the", ["the cat sat on the mat"], 50.0,
             "a SUBSEQUENCE keeps the order of the words: these shuffled words share an LCS of 3 ('the on the'), "
             "not all 6 as a bag-of-words overlap would count"),
            ("The CAT, sat.", ["the cat sat"], 100.0,
             "lower-case, and split into words at anything that is not a letter or a digit (punctuation goes)"),
            ("the cat sat", ["a dog ran", "the cat sat down"], 2 * 0.75 / 1.75 * 100,
             "with several references the score is the MAX over them, not the mean"),
            ("state-of-the-art results", ["state of the art results"], 100.0,
             "punctuation INSIDE a word splits it too: 'state-of-the-art' is 4 words"),
            ("U.S. policy", ["us policy"], 40.0,
             "'U.S.' is the words 'u' and 's' (dots split): LCS 1 ('policy'), P = 1/3, R = 1/2"),
            ("snake_case names", ["snake case names"], 100.0,
             "an underscore is not a letter or a digit: it splits words (regex \\w counts it as a letter)"),
            ("café au lait", ["caf au lait"], 100.0,
             "only a-z and 0-9 are word characters (as in the rouge_score package SNI is scored with): 'é' splits "
             "'café' into 'caf'"),
            ("", ["the cat"], 0.0, "an empty prediction scores 0")]:
        expected = _agree("rouge_l", _agree("rouge_l", rouge_l(pred, refs), _rouge_score_l(pred, refs), atol=1e-9),
                          hand, atol=1e-9)
        yield Case(f"prediction={pred!r}, references={refs!r}", hint,
                   _returns(expected, lambda fn, pred=pred, refs=refs: fn(pred, list(refs)), atol=1e-6))


@exercise("exact_match", "09_finetuning", "exact_match(prediction: str, references: list[str]) -> float",
          "100.0 if the normalized prediction equals any normalized reference, else 0.0, where normalizing (the "
          "Tk-Instruct rule used for Super-NaturalInstructions) lower-cases, removes punctuation (string.punctuation) "
          "and squeezes white space; articles are kept.")
def _exact_match_cases():
    from nanot5_edu.finetune import exact_match
    for pred, refs, hand, hint in [
            ("yes", ["yes"], 100.0, "a match scores 100.0 (not 1), a miss 0.0"),
            ("Yes", ["yes"], 100.0, "lower-case both sides before comparing"),
            (" The  answer is (B).", ["the answer is b"], 100.0,
             "remove punctuation (string.punctuation) and squeeze white space (' '.join(text.split()))"),
            ("blue whale", ["blue"], 0.0, "the whole normalized text must be equal, not contain the reference"),
            ("a dog", ["dog"], 0.0, "articles are KEPT (Tk-Instruct's rule, unlike SQuAD's, which drops a/an/the)"),
            ("blue", ["red", "Blue!"], 100.0, "any reference may match"),
            ("U.S.", ["us"], 100.0, "punctuation is REMOVED, not replaced by a space: 'U.S.' becomes 'us'"),
            ("state-of-the-art", ["state of the art"], 0.0,
             "removing the hyphens joins the words ('stateoftheart'): it does not equal 'state of the art'"),
            ("don't_stop", ["dont stop"], 0.0,
             "the underscore is in string.punctuation too: removed, it joins 'dont' and 'stop' into one word"),
            ("snake_case", ["snakecase"], 100.0,
             "the underscore is in string.punctuation: removed ('snakecase'); a regex [^\\w\\s] keeps it"),
            ("Café", ["café"], 100.0, "non-ASCII letters are letters: lower-case them and keep them"),
            ("café", ["caf"], 0.0, "only string.punctuation is removed: 'é' is not punctuation"),
            ("café", ["cafe"], 0.0, "accents are kept: 'café' and 'cafe' differ (no Unicode normalisation)")]:
        expected = _agree("exact_match", exact_match(pred, refs), hand)
        yield Case(f"prediction={pred!r}, references={refs!r}", hint,
                   _returns(expected, lambda fn, pred=pred, refs=refs: fn(pred, list(refs))))


# %% [markdown]
# Examples: a bag-of-words overlap in place of the longest common subsequence, and SQuAD's normalization, which
# drops articles.

# %%
def bag_of_words_f(prediction, references):
    import collections, re
    words = lambda t: re.sub(r"[^a-z0-9]+", " ", t.lower()).split()
    best = 0.0
    for ref in references:
        p, r = words(prediction), words(ref)
        overlap = sum((collections.Counter(p) & collections.Counter(r)).values())
        best = max(best, 0.0 if not overlap else 200 * overlap / (len(p) + len(r)))
    return best

try:
    EXERCISES["rouge_l"].check(bag_of_words_f)
except AssertionError as e:
    print(e)


# %%
def squad_exact_match(prediction, references):
    import re
    norm = lambda t: " ".join(re.sub(r"\b(a|an|the)\b", " ", "".join(c for c in t.lower() if c not in string.punctuation)).split())
    return 100.0 * any(norm(prediction) == norm(r) for r in references)

try:
    EXERCISES["exact_match"].check(squad_exact_match)
except AssertionError as e:
    print(e)


# %% [markdown]
# ## Lesson 09c: architectures and objectives
#
# The prefix-LM mask is checked against the package's `prefix_lm_mask` and a loop over every (query, key) pair
# written from the rule in T5's figure; a UL2 denoiser's example lengths against the shapes `UL2Collator` really
# makes on a row and against T5's counting rule written out (both take the counts from the package's `noise_counts`,
# so only the length formula is checked independently).

# %%
#| export
def _prefix_mask_oracles(length: int, prefix: int) -> torch.Tensor:
    from nanot5_edu.objectives import prefix_lm_mask
    loops = torch.tensor([[j <= i or (i < prefix and j < prefix) for j in range(length)] for i in range(length)],
                         dtype=torch.bool).view(length, length)
    return _agree("prefix_lm_mask", prefix_lm_mask(length, prefix), loops)


def _judge_prefix_mask(length: int, prefix: int):
    expected = _prefix_mask_oracles(length, prefix)

    def judge(fn):
        got = fn(length, prefix)
        if isinstance(got, torch.Tensor) and got.dtype != torch.bool:
            return f"expected a bool tensor (True = may attend), got dtype {got.dtype}"
        return first_difference(expected, got, where=lambda idx: f"query {idx[0]}, key {idx[1]}")
    return judge


@exercise("prefix_lm_mask", "09c_objectives", "prefix_lm_mask(length: int, prefix_length: int) -> BoolTensor",
          "The attention mask of a prefix LM over a sequence of `length` positions whose first `prefix_length` are "
          "the inputs: `keep[i, j]` is True where query i may attend to key j. Every position sees itself and the "
          "positions before it (causal); the prefix positions also see each other both ways; no prefix position sees "
          "a target. prefix_length 0 is a plain causal LM. Return a bool tensor [length, length].")
def _prefix_mask_cases():
    for label, length, prefix, hint in [
            ("length 6, prefix 3", 6, 3, "prefix positions see the whole prefix; targets see the prefix and the "
                                         "targets up to THEMSELVES (j <= i: the diagonal is True)"),
            ("length 5, prefix 0 (causal LM)", 5, 0, "no prefix: a lower-triangular mask, diagonal included"),
            ("length 4, prefix 4 (all inputs)", 4, 4, "all positions in the prefix: every position sees every other"),
            ("length 7, prefix 1", 7, 1, "a one-token prefix: nothing changes but that token sees itself"),
            ("length 8, prefix 5", 8, 5, "a prefix position never sees a target (i < prefix_length needs j < prefix_length "
                                         "or j <= i)"),
            ("length 1, prefix 0", 1, 0, "one position: [[True]]")]:
        yield Case(label, hint, _judge_prefix_mask(length, prefix))


# %%
#| export
class _SentinelIds:
    "A stand-in tokenizer: T5's 100 sentinels counted down from the top of a 1,100-id vocabulary"
    eos_token_id, pad_token_id, unk_token_id = 1, 0, 2
    def __len__(self): return 1100
    def convert_tokens_to_ids(self, tokens): return [1099 - int(t[len("<extra_id_"):-1]) for t in tokens]


def _ul2_length_oracles(raw_length: int, mu: float, r: float) -> tuple[int, int]:
    from nanot5_edu.noise import noise_counts
    from nanot5_edu.objectives import UL2Collator
    noise, spans = noise_counts(raw_length, r, mu)
    by_rule = (1 + raw_length - noise + spans + 1, noise + spans + 1)  # mode token, kept, sentinels, EOS | spans, EOS
    collator = UL2Collator(_SentinelIds(), raw_length, denoisers=(("R", mu, r, 1.0),))
    out = collator(torch.randint(3, 900, (2, raw_length), generator=torch.Generator().manual_seed(0)))
    made = (out["input_ids"].shape[1], out["labels"].shape[1])
    return _agree("ul2_example_lengths", made, by_rule)


def _judge_ul2_lengths(raw_length: int, mu: float, r: float):
    expected = _ul2_length_oracles(raw_length, mu, r)

    def judge(fn):
        got = fn(raw_length, mu, r)
        if not isinstance(got, (tuple, list)) or len(got) != 2 or not all(isinstance(x, int) for x in got):
            return f"expected a tuple of two Python ints (inputs length, targets length), got {got!r}"
        return first_difference(list(expected), list(got))
    return judge


@exercise("ul2_example_lengths", "09c_objectives",
          "ul2_example_lengths(raw_length: int, mean_span: float, rate: float) -> tuple[int, int]",
          "The encoder and decoder lengths of one UL2 R- or X-denoiser example made from `raw_length` raw tokens: "
          "T5's span corruption with mean span length `mean_span` and corruption rate `rate` (lesson 02's counting: "
          "noise tokens = round(raw_length * rate), at least 1 and at most raw_length - 1; spans = round(noise / "
          "mean_span), at least 1), a mode token in front of the inputs and EOS at the end of both. Return "
          "(inputs length, targets length) as Python ints.")
def _ul2_length_cases():
    for label, raw, mu, r, hint in [
            ("R: 568 raw tokens, μ=3, r=0.15", 568, 3.0, 0.15, "inputs: the mode token + kept tokens + one sentinel per "
             "span + EOS; targets: one sentinel per span + the hidden tokens + EOS"),
            ("R: 568 raw tokens, μ=8, r=0.15", 568, 8.0, 0.15, "spans = round(noise / mean_span): 85 noise tokens "
             "in round(10.6) spans"),
            ("X: 142 raw tokens, μ=3, r=0.5", 142, 3.0, 0.5, "half the row hidden: the targets are as long as the "
             "inputs, less the mode token"),
            ("X: 142 raw tokens, μ=64, r=0.15", 142, 64.0, 0.15, "round(21 / 64) = 0 spans: T5 clamps it up to 1 span"),
            ("X: 101 raw tokens, μ=64, r=0.5", 101, 64.0, 0.5, "round(50.5) is 50 in Python (round half to even), as "
             "T5's counting does; use round, not int() or math.floor(x + 0.5)"),
            ("R: 37 raw tokens, μ=3, r=0.15", 37, 3.0, 0.15, "sizes that do not divide: round each count, in order "
             "(noise first, then spans from the rounded noise)")]:
        yield Case(label, hint, _judge_ul2_lengths(raw, mu, r))


# %% [markdown]
# ## Hidden cases for graded work
#
# Every case above is in the open: a student can read it, and a solution could be tuned to it. For marks, a teacher
# runs `python tools/grade.py FILE --seed N`, which adds to most of these exercises cases drawn from `N`: other sizes, other
# values, other texts, each answered by the same oracles as the open cases. The same seed gives the same cases (a grade can be
# redone); another seed gives others.

# %%
#| export
def hidden_cases(name: str):
    "Register the decorated `seed -> cases` generator as exercise `name`'s hidden cases"
    def register(cases):
        EXERCISES[name].hidden = cases
        return cases
    return register


@hidden_cases("relative_position_bucket")
def _hidden_bucket_cases(seed: int):
    from nanot5_edu.layers import relative_position_bucket
    hf = _hf_t5().T5Attention._relative_position_bucket
    rng = random.Random(seed)
    for _ in range(3):
        nb, md, bidirectional = rng.choice([12, 20, 24, 40, 48]), rng.choice([30, 60, 90, 150, 333]), rng.random() < 0.5
        rel = torch.tensor(sorted(rng.sample(range(-600, 601), 80)))
        expected = _agree("relative_position_bucket", relative_position_bucket(rel, bidirectional, nb, md),
                          hf(rel, bidirectional=bidirectional, num_buckets=nb, max_distance=md))
        yield Case(f"hidden: 80 offsets, bidirectional={bidirectional}, num_buckets={nb}, max_distance={md}",
                   "T5's buckets for these sizes", _returns(expected, lambda fn, rel=rel, b=bidirectional, nb=nb, md=md:
                                                            fn(rel.clone(), b, nb, md)))


@hidden_cases("rms_norm")
def _hidden_rms_cases(seed: int):
    g, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    for dtype, scale in ((torch.float32, 1.0), (torch.bfloat16, 50.0), (torch.float16, 200.0)):
        d = rng.choice([7, 12, 33, 64])
        x = (torch.randn(rng.randint(1, 4), d, generator=g) * scale + rng.uniform(-2, 2)).to(dtype)
        w = torch.randn(d, generator=g).to(dtype)
        eps = rng.choice([1e-6, 1e-5, 1e-3])
        expected, tol = _rms_oracles(x, w, eps)
        yield Case(f"hidden: {dtype} x of shape {tuple(x.shape)}, eps={eps}", "T5's RMSNorm at this dtype",
                   _returns(expected, lambda fn, x=x, w=w, eps=eps: fn(x.clone(), w.clone(), eps), check_dtype=True,
                            **tol))


@hidden_cases("gated_gelu_ff")
def _hidden_ff_cases(seed: int):
    g, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    for _ in range(2):
        d, dff = rng.choice([4, 8, 12]), rng.choice([6, 16, 20])
        x = torch.randn(rng.randint(1, 3), rng.randint(1, 5), d, generator=g)
        wi_0, wi_1, wo = torch.randn(dff, d, generator=g), torch.randn(dff, d, generator=g), torch.randn(d, dff, generator=g)
        expected = _ff_oracles(x, wi_0, wi_1, wo)
        yield Case(f"hidden: d_model={d}, d_ff={dff}, x of shape {tuple(x.shape)}", "wo(gelu_tanh(wi_0 x) * wi_1 x)",
                   _returns(expected, lambda fn, a=(x, wi_0, wi_1, wo): fn(*(t.clone() for t in a)), atol=1e-5, rtol=1e-4))


@hidden_cases("attention")
def _hidden_attention_cases(seed: int):
    g, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    for _ in range(2):
        B, H, Lq, Lk, D = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 6), rng.randint(2, 7), rng.choice([4, 8])
        q, k, v = (torch.randn(B, H, L, D, generator=g) for L in (Lq, Lk, Lk))
        bias = torch.randn(1, H, Lq, Lk, generator=g) * 2
        mask = torch.ones(B, Lk, dtype=torch.long)
        for row in range(B):
            mask[row, rng.randint(1, Lk):] = 0
        expected = _attention_oracles(q, k, v, bias, mask)
        yield Case(f"hidden: B={B}, H={H}, Lq={Lq}, Lk={Lk}, D={D}, padded rows", "T5's unscaled attention with bias "
                   "and padding mask", _returns(expected, lambda fn, a=(q, k, v, bias, mask): fn(*(t.clone() for t in a)),
                                                atol=1e-5, rtol=1e-4))


@hidden_cases("cosine_lr")
def _hidden_cosine_cases(seed: int):
    import warnings
    from nanot5_edu.optim import cosine_lr
    rng = random.Random(seed)
    lr, total = rng.choice([1e-3, 5e-3, 3e-2]), rng.randint(20, 60)
    warm, final = rng.randint(1, total // 3), rng.choice([0.0, 1e-6, 1e-4])
    steps = sorted(rng.sample(range(0, total + 10), 12))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_ref = [_torch_cosine(s, lr, total, warm, final) if s <= total else final for s in steps]
    expected = _agree("cosine_lr", [cosine_lr(s, lr, total, warm, final) for s in steps], torch_ref, rtol=1e-6, atol=1e-12)
    yield Case(f"hidden: steps {steps} of lr={lr}, total_steps={total}, warmup_steps={warm}, final_lr={final}",
               "warmup from 0.5 * lr, then a cosine to final_lr, then final_lr",
               _returns(expected, lambda fn: [fn(s, lr, total, warm, final) for s in steps], rtol=1e-6, atol=1e-12))


def _span_params(rng: random.Random, lengths: tuple[int, int], densities, means):
    "Random (length, density, mean span) whose spans fit: num_spans <= both token counts"
    while True:
        length, density, mean_span = rng.randint(*lengths), rng.choice(densities), rng.choice(means)
        num_noise, num_spans = _hand_counts(length, density, mean_span)
        if num_spans <= min(num_noise, length - num_noise):
            return length, density, mean_span


@hidden_cases("noise_span_lengths")
def _hidden_span_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(3):
        length, density, mean_span = _span_params(rng, (3, 600), [0.05, 0.15, 0.3, 0.5], [1.0, 2.0, 3.0, 8.0])
        yield Case(f"hidden: length={length}, noise_density={density}, mean_noise_span_length={mean_span}",
                   "T5's counts (round, clamp), every span non-empty", _judge_span_lengths(length, density, mean_span))


@hidden_cases("noise_mask")
def _hidden_mask_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(3):
        length, density, mean_span = _span_params(rng, (4, 300), [0.15, 0.3, 0.5], [1.0, 3.0, 5.0])
        yield Case(f"hidden: length={length}, noise_density={density}, mean_noise_span_length={mean_span}",
                   "T5's layout: kept first, noise last, num_spans noise spans", _judge_mask_layout(length, density, mean_span))


_WORDS = ["the", "cat", "state-of-the-art", "U.S.", "don't", "snake_case", "café", "mat", "A", "dog", "sat,", "42"]


@hidden_cases("rouge_l")
def _hidden_rouge_cases(seed: int):
    from nanot5_edu.finetune import rouge_l
    rng = random.Random(seed)
    for _ in range(4):
        pred = " ".join(rng.choices(_WORDS, k=rng.randint(1, 8)))
        refs = [" ".join(rng.choices(_WORDS, k=rng.randint(1, 8))) for _ in range(rng.randint(1, 3))]
        expected = _agree("rouge_l", rouge_l(pred, refs), _rouge_score_l(pred, refs), atol=1e-9)
        yield Case(f"hidden: prediction={pred!r}, references={refs!r}", "Rouge-L as in the task",
                   _returns(expected, lambda fn, pred=pred, refs=refs: fn(pred, list(refs)), atol=1e-6))


@hidden_cases("exact_match")
def _hidden_exact_match_cases(seed: int):
    from nanot5_edu.finetune import exact_match
    rng = random.Random(seed)
    by_hand = lambda t: " ".join("".join(c for c in t.lower() if c not in string.punctuation).split())
    spaced = lambda t: " ".join("".join(" " if c in string.punctuation else c for c in t).split())
    for i in range(4):
        words = rng.choices(_WORDS, k=rng.randint(1, 4))
        pred = " ".join(w.upper() if rng.random() < 0.3 else w for w in words) + rng.choice(["", ".", "!", " "])
        refs = [[by_hand(pred)], [spaced(" ".join(words))], [" ".join(rng.choices(_WORDS, k=2)), "a " + by_hand(pred)],
                [pred.strip(string.punctuation + " ")]][i]
        expected = _agree("exact_match", exact_match(pred, refs), 100.0 if any(by_hand(pred) == by_hand(r) for r in refs)
                          else 0.0)
        yield Case(f"hidden: prediction={pred!r}, references={refs!r}", "normalized equality, as in the task",
                   _returns(expected, lambda fn, pred=pred, refs=refs: fn(pred, list(refs))))



@hidden_cases("pack_documents")
def _hidden_pack_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(3):
        docs = [[rng.randint(3, 999) for _ in range(rng.choice([0, 1, 2, 5, 13, 40]))] for _ in range(rng.randint(0, 12))]
        raw_length, eos = rng.choice([1, 3, 7, 16, 50]), rng.choice([1, 2])
        yield _pack_case(f"hidden: {len(docs)} documents, raw_length={raw_length}, eos_id={eos}",
                         "EOS after every document, concatenate, whole rows only", docs, raw_length, eos)


@hidden_cases("shift_right")
def _hidden_shift_cases(seed: int):
    g, rng = torch.Generator().manual_seed(seed), random.Random(seed)
    for _ in range(3):
        B, T = rng.randint(1, 4), rng.randint(1, 9)
        labels = torch.randint(2, 300, (B, T), generator=g)
        for row in range(B):
            labels[row, rng.randint(1, T):] = -100
        start, pad = rng.choice([(0, 0), (0, 3), (5, 0), (2, 7)])
        labels = labels.to(rng.choice([torch.long, torch.int32]))
        yield Case(f"hidden: {B} rows of {T} labels ({labels.dtype}), start_token_id={start}, pad_token_id={pad}",
                   "prepend the start token, drop the last label, -100 → pad, same dtype",
                   _judge_shift(labels, start, pad))


@hidden_cases("kv_cache_step")
def _hidden_kv_step_cases(seed: int):
    rng = random.Random(seed)
    for i in range(2):
        B, H, D, d, t = rng.randint(1, 3), rng.choice([1, 2, 3]), rng.choice([2, 4, 8]), rng.choice([5, 8]), rng.randint(0, 9)
        yield Case(f"hidden: B={B}, H={H}, D={D}, d_model={d}, {t} cached positions", "one cached decoding step",
                   _judge_kv_step(B, H, D, d, t, seed=1000 * seed + i, bias_scale=2.0))


@hidden_cases("mask_position_bias")
def _hidden_mask_bias_cases(seed: int):
    rng = random.Random(seed)
    for i in range(3):
        k_len = rng.randint(1, 7)
        q_len, causal = rng.randint(1, k_len), rng.random() < 0.6
        dtype = rng.choice([torch.float32, torch.bfloat16, torch.float16])
        mask = None
        if rng.random() < 0.7:
            mask = torch.tensor([[int(rng.random() < 0.7) for _ in range(k_len)] for _ in range(rng.randint(1, 3))])
        rows = "no padding mask" if mask is None else f"a padding mask of {len(mask)} rows"
        yield Case(f"hidden: {q_len} queries, {k_len} keys, causal={causal}, {rows}, {dtype}",
                   "padding and causal masks, finfo(dtype).min / 2, in dtype",
                   _judge_mask_bias(q_len, k_len, mask, causal, dtype, seed=1000 * seed + i))


@hidden_cases("next_rows")
def _hidden_next_rows_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(4):
        world_size, micro_batch = rng.choice([1, 2, 3]), rng.randint(1, 5)
        num_rows = rng.randint(micro_batch * world_size, 40)
        step = micro_batch * world_size
        position = step * rng.randint(0, num_rows // step)  # the last one: the epoch's end
        state = (num_rows, micro_batch, rng.randint(0, 99), rng.randrange(world_size), world_size, rng.randint(0, 5),
                 position)
        yield _next_rows_case(f"hidden: num_rows={num_rows}, micro_batch={micro_batch}, rank={state[3]} of "
                              f"{world_size}, epoch {state[5]}, position {position}", "the next rows from the state",
                              *state)


@hidden_cases("flops_per_step")
def _hidden_flops_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(2):
        config = _model_config(rng.randint(30, 300), rng.choice([16, 24, 40]), rng.choice([4, 8, 12]),
                               rng.choice([20, 48, 64]), rng.randint(1, 3), rng.randint(1, 3), rng.choice([1, 2, 3]))
        shape = (rng.randint(1, 4), rng.randint(2, 40), rng.randint(1, 15))
        yield Case(f"hidden: {config.num_layers} + {config.num_decoder_layers} layers, d_model={config.d_model}, "
                   f"inner={config.num_heads * config.d_kv}, batch and lengths {shape}", "lesson 07's count",
                   _judge_flops(config, shape))


@hidden_cases("training_state_bytes")
def _hidden_state_bytes_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(3):
        config = _model_config(rng.randint(30, 300), rng.choice([16, 24, 40]), rng.choice([4, 8, 12]),
                               rng.choice([20, 48, 64]), rng.randint(1, 3), rng.randint(1, 3), rng.choice([1, 2, 3]),
                               rng.choice([4, 8, 32]))
        optimizer, precision = rng.choice(["adamw", "adamwscale", "adafactor"]), rng.choice(["fp32", "bf16", "fp16"])
        yield _state_bytes_case(f"hidden: {config.num_layers} + {config.num_decoder_layers} layers, d_model="
                                f"{config.d_model}, {optimizer}, {precision}", "weights, gradients, optimizer state, "
                                "16-bit copies", config, optimizer, precision)


@hidden_cases("atomic_write")
def _hidden_atomic_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(3):
        chunks = [rng.randbytes(rng.choice([0, 1, 100, 9000])) for _ in range(rng.randint(1, 4))]
        old = rng.choice([None, rng.randbytes(rng.randint(0, 5000))])
        kind = rng.choice(["ok", "full", "rename"])
        fail_after = rng.randrange(len(chunks)) if kind == "full" else None
        what = {"ok": "no failure", "full": f"a full disk before chunk {fail_after}", "rename": "a crash at the rename"}
        yield Case(f"hidden: {len(chunks)} chunks, {'no earlier file' if old is None else 'an earlier file'}, "
                   f"{what[kind]}",
                   "write aside, then os.replace; on failure remove the temporary file and re-raise",
                   _judge_atomic(chunks, old=old, fail_after=fail_after, crash_at_rename=kind == "rename"))


@hidden_cases("checkpoint_problem")
def _hidden_checkpoint_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(3):
        files = {f"file_{i}.bin": rng.randbytes(rng.randint(2, 3000)) for i in range(rng.randint(1, 4))}
        damage = rng.choice([None, "missing", "short", "changed", "bad_json"])
        target = rng.choice(sorted(files)) if damage in ("missing", "short", "changed") else None
        yield Case(f"hidden: {len(files)} files, damage: {damage} {target or ''}".strip(),
                   "None when intact, else a sentence naming the first damaged file",
                   _judge_checkpoint(files, damage, target))


@hidden_cases("nan_step")
def _hidden_nan_cases(seed: int):
    rng = random.Random(seed)
    for _ in range(4):
        grad_acc, steps = rng.randint(1, 4), rng.randint(1, 6)
        losses = [rng.uniform(0.5, 9.0) for _ in range(grad_acc * steps)]
        checked = rng.randrange(len(losses))
        for _ in range(rng.randint(0, 2)):
            losses[rng.randrange(checked, len(losses))] = rng.choice([float("nan"), float("inf"), -float("inf")])
        step = rng.randint(steps, 500)
        yield _nan_case(f"hidden: grad_acc={grad_acc}, {len(losses)} losses ({checked} checked), step {step}",
                        "the optimizer step of the first non-finite unchecked loss", losses, step, grad_acc, checked)


# %%
#| hide
for _name in ("rms_norm", "attention", "rouge_l", "next_rows", "atomic_write", "nan_step"):  # same seed, same cases
    _a, _b = [c.label for c in EXERCISES[_name].hidden(7)], [c.label for c in EXERCISES[_name].hidden(8)]
    test_eq(_a, [c.label for c in EXERCISES[_name].hidden(7)])
    assert _a != _b, _name


# %% [markdown]
# ## All exercises

# %%
#| export
def exercise_table() -> str:
    "The registered exercises, lesson by lesson, with their signatures"
    rows = [f"{e.lesson:<20} {e.signature}" for e in sorted(EXERCISES.values(), key=lambda e: e.lesson)]
    return "\n".join(rows)


# %%
print(f"{len(EXERCISES)} exercises\n" + exercise_table())

# %%
#| hide
assert len(EXERCISES) >= 14
for name in ("relative_position_bucket", "rms_norm", "noise_span_lengths", "adamwscale_step", "span_gain",
             "pack_documents", "kv_cache_step", "next_rows", "flops_per_step", "atomic_write", "nan_step"):
    assert name in EXERCISES, name
for e in EXERCISES.values():  # a stub is reported as "not implemented yet", never as a crash
    def stub(*args, **kwargs):
        raise NotImplementedError
    test_fail(lambda: e.check(stub), contains="not implemented yet")
