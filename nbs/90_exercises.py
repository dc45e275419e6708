# %% [markdown]
# # Exercises: checks against two oracles
# > `EXERCISES`: one check per exercise of lessons 01–05 and 09; each compares a student's function with two independent references (`transformers`, the package or a hand computation) and names the first case that differs

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# This is a reference page, not a lesson. The exercise notebooks in the repository's `exercises/` folder (one per
# lesson: 01–05 and 09) ask a student to write small functions; each has a check cell
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
# **Two oracles.** Every expected value is computed twice, independently — by `transformers` (T5's bucket function,
# `T5LayerNorm`, `T5DenseGatedActDense`), by `torch` (SDPA, `LinearLR` + `CosineAnnealingLR`), by `rouge_score`, or
# by a hand computation in float64 — and by the package's own implementation from the lessons. The check first
# asserts that the two agree, then compares the student's answer. A check therefore cannot silently drift from
# either reference.
#
# **Checks that can fail.** The cases of each check are ordered from the most specific rule to the broadest, so
# the first case a mistake trips is the one whose hint names it. The course's tests (`tests/test_exercises.py`)
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
# `first_difference` is the comparison every judge uses: shapes and dtypes first, then values, reporting the first
# element that differs (with what that element stands for, when the case says so).

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
# the distribution over 2,000 draws against the exact one (every split of *m* tokens into *s* non-empty parts
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
    yield Case("2,000 draws of length=40, noise_density=0.3, mean_noise_span_length=3",
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
                return f"{name} was not updated in place (it still holds its old values)"
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
               "bias correction: step_size = lr * sqrt(1 - beta2**step) / (1 - beta1**step), step counting from 1",
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
# Both checks run the package's `T5` at a tiny size (2 + 2 blocks of width 32, 64 tokens). `span_gain`'s two
# oracles are the model's own loss and a float64 hand computation from its logits; `train_step`'s are one backward
# pass over the whole batch and the per-micro-batch gradients summed by hand, each followed by the same SGD step.

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
# ## Hidden cases for graded work
#
# Every case above is in the open: a student can read it, and a solution could be tuned to it. For marks, a teacher
# runs `python tools/grade.py FILE --seed N`, which adds to these exercises cases drawn from `N`: other sizes, other
# values, other texts, each answered by the same two oracles. The same seed gives the same cases (a grade can be
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


# %%
#| hide
for _name in ("rms_norm", "attention", "rouge_l"):  # the same seed draws the same hidden cases; another seed others
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
for name in ("relative_position_bucket", "rms_norm", "noise_span_lengths", "adamwscale_step", "span_gain"):
    assert name in EXERCISES, name
for e in EXERCISES.values():  # a stub is reported as "not implemented yet", never as a crash
    def stub(*args, **kwargs):
        raise NotImplementedError
    test_fail(lambda: e.check(stub), contains="not implemented yet")
