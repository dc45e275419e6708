"Property tests of T5 span corruption (hypothesis): exact counts, exact lengths, lossless, no sentinel collisions"
import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings, strategies as st

from nanot5_edu.spans import (SpanCorruptionError, compute_input_and_target_lengths, corrupt_spans, noise_counts,
                              random_spans_noise_mask, uncorrupt)

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
