"""Our tokenizer code on Google's real T5 vocabulary (`spiece.model` of t5-base / t5-v1_1-*), read from ../shared:
the ids of `transformers`' own T5 tokenizer and of raw sentencepiece, T5's known ids, and the segmentation that
01_tokenizer's explorer describes. The notebook loads the same vocabulary from the hub (google/t5-v1_1-base) and
skips offline, as in CI; this file is where the comparison runs offline. Skips when ../shared is absent."""
from pathlib import Path

import pytest

T5_SPIECE = Path(__file__).resolve().parents[2] / "shared" / "data" / "t5-spiece"
pytestmark = pytest.mark.skipif(not (T5_SPIECE / "spiece.model").exists(),
                                reason=f"{T5_SPIECE} not found (the T5 vocabulary beside the project, for development)")
AWKWARD = ["Hello world", "  leading and   inner   spaces  ", "tab\tand\nnew\n\nlines", "Ünïcödé — “quotes” ½ 東京",
           "digits 1234567890 3.14159 1e-5", "emoji 🙂 and <extra_id_3> in text", "", "x" * 300]


@pytest.fixture(scope="module")
def t5():
    from nanot5_edu.tokenizer import load_tokenizer
    return load_tokenizer(T5_SPIECE)


def test_ids_equal_transformers_t5_tokenizer(t5):
    "Catches a loader that builds the tokenizer wrongly (e.g. T5TokenizerFast(vocab_file=...), which ignores the file)"
    from transformers import T5Tokenizer
    ref = T5Tokenizer.from_pretrained(T5_SPIECE)
    for text in AWKWARD:
        assert t5(text).input_ids == ref(text).input_ids, text
    assert t5("Hello world", add_special_tokens=False).input_ids == [8774, 296]
    assert t5.convert_tokens_to_ids([f"<extra_id_{i}>" for i in (0, 1, 99)]) == [32099, 32098, 32000]
    assert len(t5) == 32_100


def test_encode_batch_equals_raw_sentencepiece(t5):
    "Catches `encode_batch` adding or dropping tokens (special tokens, EOS) relative to the model file"
    import sentencepiece as spm
    from nanot5_edu.tokenizer import encode_batch
    sp = spm.SentencePieceProcessor(model_file=str(T5_SPIECE / "spiece.model"))
    assert encode_batch(t5, AWKWARD[:5], add_eos=False) == [sp.encode(t) for t in AWKWARD[:5]]
    assert 32096 in encode_batch(t5, AWKWARD[5:6])[0]  # "<extra_id_3>" in text is the sentinel, not characters
    assert encode_batch(t5, ["Hello world"]) == [[8774, 296, 1]]


def test_explorer_sentence_in_t5_vocabulary():
    "The claim in 01_tokenizer's segmentation explorer: 10 pieces, cybersecurity and broadband whole"
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor(model_file=str(T5_SPIECE / "spiece.model"))
    pieces = sp.encode("Our cybersecurity and broadband infrastructure are bipartisan priorities.", out_type=str)
    assert len(pieces) == 10 and "▁cybersecurity" in pieces and "▁broadband" in pieces, pieces
