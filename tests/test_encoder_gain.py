"""The encoder gain and its two parts measure what they claim. Each held-out target is scored with (a) its row's own
encoder input, (b) another passage's of the same document, (c) another document's; span_gain = b - a,
document_gain = c - b, encoder_gain = c - a. ~0 when the decoder cannot see the encoder; span_gain large when the
target can only be read from the row itself; document_gain large (span_gain ~0) when it depends only on the document."""
import json

import pytest
import torch

from cli_runs import metrics, pretrain_ddp
from nanot5_edu.data import load_corpus
from nanot5_edu.model import T5
from nanot5_edu.layers import get_config
from nanot5_edu.optim import get_optimizer
from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.tokenizer import train_tokenizer
from nanot5_edu.train import validation_batches
from nanot5_edu.config import make_config
from nanot5_edu.pretrain import GAINS, TOKEN_KINDS, document_partners, evaluate, evaluation_batches, gain_by_token_kind

NO_AUTOCAST = lambda: torch.autocast("cpu", enabled=False)
CONFIG = dict(d_model=64, d_kv=16, num_heads=4, d_ff=128, num_layers=1, num_decoder_layers=1, vocab_size=2048)
SMALL = ["model.num_layers=1", "model.d_model=64", "model.d_kv=16", "model.num_heads=4", "model.d_ff=128",
         "model.vocab_size=2048"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return train_tokenizer(load_corpus("sotu", "validation")["text"][:40], 1900, tmp_path_factory.mktemp("tok"))


def repeated_token_rows(tokens: torch.Tensor, length: int) -> torch.Tensor:
    "Row i repeats tokens[i]: a masked span is the token seen everywhere else in its input"
    return (100 + tokens[:, None]).expand(len(tokens), length).clone()


def toy_batches(collator, per_document: str, documents: int = 16, rows_per_document: int = 4, seed: int = 0):
    """Tagged evaluation batches of `documents` x `rows_per_document` rows of one repeated token each, drawn from 50.
    per_document="row": every row its own token (copy task: only the row itself tells the target);
    per_document="document": all rows of a document share its token (the target depends only on the document)"""
    g = torch.Generator().manual_seed(seed)
    docs = torch.arange(documents).repeat_interleave(rows_per_document)
    if per_document == "row":
        tokens = torch.randint(0, 50, (len(docs),), generator=g)
        tokens[1:] += (tokens[1:] == tokens[:-1]).long()  # neighbouring passages never share the token
    else:
        tokens = torch.randperm(50, generator=g)[:documents][docs]  # documents never share one
    return evaluation_batches(repeated_token_rows(tokens, collator.raw_length), docs, collator, 16,
                              len(docs) // 16, seed=seed)


@pytest.fixture(scope="module")
def copy_model(tokenizer):
    "A tiny T5 trained 40 steps to copy the input's token into the spans: (before, after) training"
    torch.manual_seed(0)
    model = T5(get_config("tiny", **CONFIG))
    collator = SpanCorruptionCollator(tokenizer, 32, seed=0)
    untrained = T5(get_config("tiny", **CONFIG))
    untrained.load_state_dict(model.state_dict())
    opt = get_optimizer("adamw", model.named_parameters(), 3e-3)
    for step in range(40):
        g = torch.Generator().manual_seed(step)
        b = collator(repeated_token_rows(torch.randint(0, 50, (16,), generator=g), collator.raw_length))
        model(b["input_ids"], labels=b["labels"]).loss.backward()
        opt.step(); opt.zero_grad()
    return untrained, model


def test_partners_are_the_neighbouring_passage_and_another_document():
    docs = torch.tensor([0, 0, 0, 1, 2, 2])
    same, other = document_partners(docs, torch.tensor([0, 1, 2, 3, 4, 5]))
    assert same.tolist() == [1, 2, 1, -1, 5, 4]  # next passage; the previous one for a document's last; none for doc 1
    assert other.tolist() == [3, 3, 3, 4, 0, 0]  # the next row in the order from another document
    same, other = document_partners(torch.tensor([7, 7]), torch.tensor([0, 1]))
    assert other.tolist() == [-1, -1]  # one document: no other document


def test_validation_rows_cover_every_document_and_are_tagged(tokenizer):
    cfg = make_config("cpu-demo", SMALL)
    batches = validation_batches(cfg, tokenizer)
    docs = torch.cat([b["document"] for b in batches])
    assert len(docs) == cfg.eval.batches * cfg.eval.batch_size
    assert docs.unique().tolist() == list(range(len(load_corpus("sotu", "validation"))))  # all 24 speeches
    assert all(b["gain_row"].all() for b in batches)  # every speech is many rows long
    for b in batches:  # the partners' inputs are other rows' inputs, never the row's own
        assert not (b["same_document_input_ids"] == b["input_ids"]).all(1).any()
        assert not (b["other_document_input_ids"] == b["input_ids"]).all(1).any()
    # a streamed corpus: its first rows, and the evaluation says how many documents they cover
    streamed = validation_batches(make_config("cpu-demo", [*SMALL, "data.streaming=true"]), tokenizer)
    covered = torch.cat([b["document"] for b in streamed]).unique()
    ev = evaluate(T5(get_config("tiny", **CONFIG)), streamed[:1], NO_AUTOCAST,
                  num_documents=len(covered))
    assert 1 < len(covered) < 24 and ev["eval_documents"] == len(streamed[0]["document"].unique())


def test_gains_add_up_are_deterministic_and_skip_rows_without_a_partner(tokenizer, copy_model):
    _, model = copy_model
    collator = SpanCorruptionCollator(tokenizer, 32, seed=0)
    docs = torch.tensor([0, 0, 1, 2, 2, 2, 3, 3])  # document 1 is a single row: no (b), so no gains for it
    rows = repeated_token_rows(torch.arange(8), collator.raw_length)
    batches = evaluation_batches(rows, docs, collator, 4, 2)
    assert sum(int(b["gain_row"].sum()) for b in batches) == 7
    first, second = evaluate(model, batches, NO_AUTOCAST), evaluate(model, batches, NO_AUTOCAST)
    assert first == second and first["eval_gain_rows"] == 7 and first["eval_documents"] == 4
    assert first["encoder_gain"] == pytest.approx(first["span_gain"] + first["document_gain"], abs=1e-12)
    assert first["span_gain"] == pytest.approx(first["eval_loss_same_document"] - first["eval_loss_own"])
    assert first["eval_loss_shuffled_encoder"] == first["eval_loss_other_document"]  # the old name: (c)
    for g in GAINS:
        lo, hi = first[g + "_ci95"]
        assert lo <= first[g] <= hi
    kinds = gain_by_token_kind(model, tokenizer, batches, NO_AUTOCAST)
    assert sum(kinds[k]["share"] for k in TOKEN_KINDS[1:]) == pytest.approx(1)
    for g in GAINS:  # the split by token kind adds back up to the whole
        assert sum(kinds[k]["share"] * kinds[k][g] for k in TOKEN_KINDS[1:]) == pytest.approx(first[g], abs=1e-9)
    untagged = [{k: b[k] for k in ("input_ids", "labels")} for b in batches]
    ev = evaluate(model, untagged, NO_AUTOCAST)  # batches without documents: loss, no gains
    assert ev["eval_loss"] == pytest.approx(first["eval_loss"]) and ev["encoder_gain"] is None


def test_zero_cross_attention_output_gives_no_gain(tokenizer):
    torch.manual_seed(0)
    model = T5(get_config("tiny", **CONFIG))
    with torch.no_grad():
        for block in model.decoder.block:
            block.cross_attention.o.weight.zero_()  # the decoder can no longer read the encoder
    ev = evaluate(model, toy_batches(SpanCorruptionCollator(tokenizer, 32, seed=0), "row"), NO_AUTOCAST)
    assert all(abs(ev[g]) < 1e-5 for g in GAINS), ev


def test_copy_task_gives_span_gain_and_a_document_token_gives_document_gain(tokenizer, copy_model):
    untrained, model = copy_model
    collator = SpanCorruptionCollator(tokenizer, 32, seed=0)
    copy, by_document = toy_batches(collator, "row"), toy_batches(collator, "document")
    before = evaluate(untrained, copy, NO_AUTOCAST)
    assert all(abs(before[g]) < 0.2 for g in GAINS), before
    # copy task: the neighbouring passage's token is as wrong as another document's -> all of the gain is span_gain
    ev = evaluate(model, copy, NO_AUTOCAST)
    assert ev["span_gain"] > 1.0 and abs(ev["document_gain"]) < 0.2, ev  # ln(50) = 3.9 nats at most per token
    assert ev["span_gain_ci95"][0] > 0.5
    # the target is the document's token: any passage of the document tells it -> all of the gain is document_gain
    ev = evaluate(model, by_document, NO_AUTOCAST)
    assert ev["document_gain"] > 1.0 and abs(ev["span_gain"]) < 0.1, ev
    assert ev["document_gain_ci95"][0] > 0.5


def test_two_process_ddp_gives_the_same_gains(tmp_path, tokenizer):
    "Under DDP each process scores its share of the batches (here 2 and 1); the summed result equals one process's"
    from nanot5_edu.tokenizer import load_tokenizer
    tokenizer.save_pretrained(tmp_path / "tok")
    texts = load_corpus("sotu", "validation")["text"]  # a small local corpus: every 10th speech is held out
    (tmp_path / "speeches.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    args = [*SMALL, f"data.corpus={tmp_path / 'speeches.jsonl'}", f"data.tokenizer={tmp_path / 'tok'}",
            "optim.batch_size=8", "optim.warmup_steps=1",
            "train.total_steps=2", "eval.every_steps=2", "eval.batches=3", "eval.batch_size=8",
            "checkpoint.every_steps=2", "logging.every_steps=1", "logging.progress_bar=false", "eval.samples=0"]
    pretrain_ddp(tmp_path / "run", *args)
    logged = [m for m in metrics(tmp_path / "run") if "eval_loss" in m][-1]
    cfg = make_config("cpu-demo", args)  # bf16, as the run
    single = evaluate(T5.from_hf(tmp_path / "run" / "hf"), validation_batches(cfg, load_tokenizer(tmp_path / "run" / "hf")),
                      lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    for key in ("eval_loss", "eval_loss_same_document", "eval_loss_other_document", *GAINS):
        assert abs(logged[key] - single[key]) < 1e-4, (key, logged[key], single[key])
    for key in (g + "_ci95" for g in GAINS):
        assert logged[key] == pytest.approx(single[key], abs=1e-4), key
    assert logged["eval_gain_rows"] == single["eval_gain_rows"] == 24
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["final_span_gain"] == logged["span_gain"] and len(summary["final_span_gain_ci95"]) == 2
