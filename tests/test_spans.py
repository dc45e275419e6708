"Property tests of T5 span corruption (hypothesis): exact counts, exact lengths, lossless, no sentinel collisions"
import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

from nanot5_edu.spans import corrupt_spans, random_spans_noise_mask
from nanot5_edu.noise import (SpanCorruptionError, compute_input_and_target_lengths, corrupt_example,
                              example_noise_mask, noise_counts, uncorrupt)

FIRST_SENTINEL = 1099            # a 1,100-id vocabulary: real tokens 0..999, sentinels 1000..1099
densities = st.floats(0.02, 0.9)
spans = st.floats(1.0, 12.0)


def draw(length, density, mean_span, seed, batch=3):
    try:
        return random_spans_noise_mask(length, density, mean_span, torch.Generator().manual_seed(seed), batch=batch)
    except SpanCorruptionError:
        assume(False)


@settings(max_examples=200, deadline=None)
@given(length=st.integers(2, 700), density=densities, mean_span=spans, seed=st.integers(0, 2**31))
def test_mask_counts_are_exact(length, density, mean_span, seed):
    mask = draw(length, density, mean_span, seed)
    noise, n_spans = noise_counts(length, density, mean_span)
    starts = mask & ~torch.nn.functional.pad(mask, (1, 0))[:, :-1]
    assert mask.sum(1).tolist() == [noise] * 3
    assert starts.sum(1).tolist() == [n_spans] * 3
    assert not mask[:, 0].any() and mask[:, -1].all()          # gap first, span last


@settings(max_examples=200, deadline=None)
@given(length=st.integers(2, 700), density=densities, mean_span=spans, seed=st.integers(0, 2**31))
def test_corruption_is_lossless_and_sentinels_never_collide(length, density, mean_span, seed):
    mask = draw(length, density, mean_span, seed)
    n_spans = noise_counts(length, density, mean_span)[1]
    assume(n_spans <= 100)
    ids = torch.randint(2, 1000, (3, length), generator=torch.Generator().manual_seed(seed))
    inputs, targets = corrupt_spans(ids, mask, FIRST_SENTINEL, eos_id=1)
    for row in range(3):
        assert uncorrupt(inputs[row].tolist(), targets[row].tolist(), FIRST_SENTINEL) == ids[row].tolist()
        sentinels = [t for t in inputs[row].tolist() if t >= 1000]
        assert sentinels == list(range(FIRST_SENTINEL, FIRST_SENTINEL - n_spans, -1))
        assert [t for t in targets[row].tolist() if t >= 1000] == sentinels


@settings(max_examples=150, deadline=None)
@given(inputs_length=st.integers(4, 1200), density=densities, mean_span=spans, seed=st.integers(0, 2**31))
def test_output_lengths_match_the_formula(inputs_length, density, mean_span, seed):
    try:
        raw, targets_length = compute_input_and_target_lengths(inputs_length, density, mean_span)
    except SpanCorruptionError:
        assume(False)
    mask = draw(raw, density, mean_span, seed)
    ids = torch.randint(2, 1000, (3, raw))
    inputs, targets = corrupt_spans(ids, mask, FIRST_SENTINEL)
    assert inputs.shape == (3, inputs_length) and targets.shape == (3, targets_length)


@pytest.mark.parametrize("inputs_length,expected", [(512, (568, 114)), (128, (141, 29)), (256, (284, 58)),
                                                    (1024, (1137, 229))])
def test_nanot5_lengths(inputs_length, expected):
    assert compute_input_and_target_lengths(inputs_length, 0.15, 3.0) == expected


def word_level_tokenizer(n_words=1000):
    "A tiny fast tokenizer with pad 0, eos 1 and T5's 100 sentinels on top: <extra_id_0> = len - 1"
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2, **{f"w{i}": i for i in range(3, n_words)},
             **{f"<extra_id_{i}>": n_words + 99 - i for i in range(100)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


TOKENIZER = word_level_tokenizer()


@settings(max_examples=60, deadline=None)
@given(inputs_length=st.integers(4, 700), density=st.floats(0.05, 0.6), mean_span=st.floats(1.0, 8.0),
       seed=st.integers(0, 2**31))
def test_collator_is_mask_then_corrupt(inputs_length, density, mean_span, seed):
    "The fast collator draws exactly random_spans_noise_mask's masks and corrupts them like corrupt_spans"
    from nanot5_edu.spans import SpanCorruptionCollator
    try:
        collate = SpanCorruptionCollator(TOKENIZER, inputs_length, density, mean_span, seed=seed)
    except SpanCorruptionError:
        assume(False)
    ids = torch.randint(3, 1000, (4, collate.raw_length), generator=torch.Generator().manual_seed(seed))
    state = collate.state_dict()["generator"]
    batch = collate(ids)
    mask = random_spans_noise_mask(collate.raw_length, density, mean_span,
                                   torch.Generator().set_state(state), batch=4)
    inputs, targets = corrupt_spans(ids, mask, collate.first_sentinel)
    assert torch.equal(batch["input_ids"], inputs) and torch.equal(batch["labels"], targets)
    assert batch["decoder_input_ids"][:, 0].eq(0).all() and torch.equal(batch["decoder_input_ids"][:, 1:], targets[:, :-1])
    assert all(t.is_contiguous() and t.dtype == torch.long for t in batch.values())
    assert batch["input_ids"].shape == (4, inputs_length) and batch["labels"].shape == (4, collate.targets_length)


def test_random_cuts_stays_exact_over_extra_rounds(monkeypatch):
    "Rows short of distinct values draw again; forced here with rounds of only `count` draws"
    import nanot5_edu.spans as spans
    monkeypatch.setattr(spans, "_draws_per_round", lambda size, count: count)
    spans._cut_layout.cache_clear()
    try:
        cuts = spans.random_cuts(30_000, [6, 200], 3, torch.Generator().manual_seed(0))
    finally:
        spans._cut_layout.cache_clear()
    assert cuts.shape == (30_000, 2, 3) and (cuts.diff(dim=2) > 0).all()
    assert cuts[:, 0].min() >= 0 and cuts[:, 0].max() < 6 and cuts[:, 1].max() < 200
    subsets = (cuts[:, 0] * torch.tensor([36, 6, 1])).sum(1).unique(return_counts=True)[1]
    assert len(subsets) == 20 and (subsets - 1500).abs().max() < 5 * 1500 ** 0.5   # all 20 sets equally likely


@settings(max_examples=150, deadline=None)
@given(length=st.integers(2, 700), density=densities, mean_span=spans, seed=st.integers(0, 2**31))
def test_readable_version_equals_the_fast_one(length, density, mean_span, seed):
    "corrupt_example (one row, a loop) = corrupt_spans (a batch, gathers) on the same masks; example_noise_mask is T5-exact"
    mask = draw(length, density, mean_span, seed)
    assume(noise_counts(length, density, mean_span)[1] <= 100)
    ids = torch.randint(2, 1000, (3, length), generator=torch.Generator().manual_seed(seed))
    inputs, targets = corrupt_spans(ids, mask, FIRST_SENTINEL, eos_id=1)
    for row in range(3):
        assert corrupt_example(ids[row].tolist(), mask[row].numpy(), FIRST_SENTINEL, 1) == \
            (inputs[row].tolist(), targets[row].tolist())
    one = example_noise_mask(length, density, mean_span, np.random.default_rng(seed))
    noise, n_spans = noise_counts(length, density, mean_span)
    assert one.shape == (length,) and one.sum() == noise and not one[0] and one[-1]
    assert (one & ~np.r_[False, one[:-1]]).sum() == n_spans
