"""Architectures and objectives (09c_objectives): the five setups train from the CLI entry point, resume exactly, and
the masks, span statistics, mode tokens and scored positions are exact"""
import json
import subprocess
import sys

import pytest
import torch

from nanot5_edu.config import ConfigError, SETUPS, flops_per_step, make_config, validate_config
from nanot5_edu.layers import ModelConfig
from nanot5_edu.model import T5
from nanot5_edu.noise import span_lengths
from nanot5_edu.objectives import (CausalLMCollator, DecoderOnly, PrefixLMCollator, UL2Collator, UL2_DENOISERS,
                                   continuation_batch, expected_flops_per_step, load_run_model, objective_batches,
                                   prefix_lm_mask)
from nanot5_edu.tokenizer import load_tokenizer

SMALL = ["model.num_layers=1", "model.d_model=64", "model.d_kv=16", "model.num_heads=4", "model.d_ff=128",
         "model.vocab_size=2048", "optim.batch_size=8", "optim.warmup_steps=2", "optim.lr=1e-2",
         "logging.every_steps=1", "eval.batches=1", "eval.batch_size=8", "eval.samples=1", "logging.progress_bar=false"]
FIVE = {  # the five combinations
    "t5": ["model.architecture=encoder-decoder", "data.objective=span_corruption"],
    "lm": ["model.architecture=decoder-only", "data.objective=causal_lm"],
    "prefix": ["model.architecture=decoder-only", "data.objective=prefix_lm"],
    "encdec-lm": ["model.architecture=encoder-decoder", "data.objective=prefix_lm"],
    "ul2": ["model.architecture=encoder-decoder", "data.objective=ul2"],
}


def cli(tmp_path, *overrides):
    return subprocess.run([sys.executable, "-m", "nanot5_edu", "pretrain", "cpu-demo", *overrides,
                           f"logging.run_dir={tmp_path}"], capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("name", list(FIVE))
def test_each_setup_trains_from_the_cli_and_resumes_exactly(tmp_path, small_data, name):
    args = [*SMALL, *small_data, *FIVE[name], "checkpoint.every_steps=3", "eval.every_steps=6"]
    first = cli(tmp_path / "a", *args, "train.total_steps=6")
    assert first.returncode == 0, first.stderr[-3000:]
    metrics = [json.loads(l) for l in (tmp_path / "a" / "metrics.jsonl").read_text().splitlines()]
    losses = [m["loss"] for m in metrics if "loss" in m]
    assert len(losses) == 6 and all(0 < l < 20 for l in losses)
    evals = [m for m in metrics if "eval_loss" in m]
    assert len(evals) == 2 and all(e["eval_loss"] > 0 for e in evals)
    if name != "lm":  # every objective with inputs measures span/document gains; a causal LM has no inputs to swap
        assert evals[-1]["span_gain"] is not None
    else:
        assert evals[-1]["span_gain"] is None
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    if "decoder-only" in FIVE[name][0]:
        assert summary["hf_export"].startswith("none: a decoder-only model has no Hugging Face T5 export")
    else:
        assert (tmp_path / "a" / "hf" / "config.json").exists()
    # the lesson's scoring loads the finished run strictly: every weight of the checkpoint, no key missing or extra
    loaded = load_run_model(tmp_path / "a", make_config("cpu-demo", args))
    assert isinstance(loaded, DecoderOnly if "decoder-only" in FIVE[name][0] else T5)
    with pytest.raises(ValueError, match="does not fit the model of this config"):  # a block the checkpoint lacks
        load_run_model(tmp_path / "a", make_config("cpu-demo", [*args, "model.num_layers=2"]))
    # resume: a run stopped at step 3 and continued gives the same losses as the straight run
    half = cli(tmp_path / "b", *args, "train.total_steps=6", "train.max_minutes=0.0000001")
    assert half.returncode != 0 or (tmp_path / "b" / "checkpoints").exists()
    again = cli(tmp_path / "b", *args, "train.total_steps=6")
    assert again.returncode == 0, again.stderr[-3000:]
    resumed = [json.loads(l)["loss"] for l in (tmp_path / "b" / "metrics.jsonl").read_text().splitlines()
               if "loss" in json.loads(l)]
    assert resumed[-3:] == losses[-3:]


def test_the_one_invalid_combination_fails_at_once_naming_the_valid_ones():
    with pytest.raises(ConfigError, match="causal_lm has none.*Valid: model.architecture=encoder-decoder "
                                          "data.objective=span_corruption"):
        validate_config(make_config("cpu-demo", ["data.objective=causal_lm"]))
    with pytest.raises(ConfigError, match="Valid:"):
        validate_config(make_config("cpu-demo", ["model.architecture=gpt"]))
    for arch, objective in SETUPS:
        validate_config(make_config("cpu-demo", [f"model.architecture={arch}", f"data.objective={objective}"]))
    assert len(SETUPS) == 7


def test_prefix_lm_mask_is_t5s_figure():
    keep = prefix_lm_mask(7, 3)
    for i in range(7):
        for j in range(7):
            assert bool(keep[i, j]) == (j <= i or (i < 3 and j < 3)), (i, j)


class Ids:
    eos_token_id, pad_token_id, unk_token_id = 1, 0, 2
    def __len__(self): return 1100
    def convert_tokens_to_ids(self, tokens): return [1099 - int(t[len("<extra_id_"):-1]) for t in tokens]


def test_prefix_and_causal_examples_lose_no_token_and_score_the_right_positions():
    rows = torch.randint(3, 900, (4, 50))
    for seed in range(20):
        ex = PrefixLMCollator(Ids(), 50, seed=seed)(rows)
        s = ex["input_ids"].shape[1] - 1
        assert 1 <= s <= 49
        assert torch.equal(torch.cat([ex["input_ids"][:, :-1], ex["labels"][:, :-1]], 1), rows)
        assert (ex["input_ids"][:, -1] == 1).all() and (ex["labels"][:, -1] == 1).all()
        assert torch.equal(ex["decoder_input_ids"][:, 1:], ex["labels"][:, :-1])
    ex = CausalLMCollator(Ids(), 50)(rows)
    assert ex["input_ids"].shape == (4, 0) and torch.equal(ex["labels"][:, :-1], rows)
    # continuation: the same 32 tokens scored for every objective, nothing else
    for objective in ("causal_lm", "prefix_lm", "span_corruption", "ul2"):
        b = continuation_batch(rows, objective, first_sentinel=1099, mode=1002 if objective == "ul2" else None)
        assert torch.equal(b["labels"][b["labels"] != -100].view(4, 32), rows[:, -32:]), objective
        assert b["decoder_input_ids"].shape == b["labels"].shape


def test_ul2_denoisers_statistics_and_mode_tokens():
    collator = UL2Collator(Ids(), 568, seed=0)
    modes = {"R": 1000, "X": 1001, "S": 1002}  # <extra_id_99>, 98, 97
    assert collator.modes == modes
    rows = torch.randint(3, 900, (64, 568))
    seen = {}
    for _ in range(300):
        ex = collator(rows)
        seen.setdefault(int(ex["input_ids"][0, 0]), []).append(ex)
        assert (ex["input_ids"][:, 0] == ex["input_ids"][0, 0]).all()  # the mode token first, on every row
        assert not torch.isin(ex["input_ids"][:, 1:], torch.tensor([1000, 1001, 1002])).any()
    assert set(seen) == {1000, 1001, 1002}
    # each span-corruption denoiser: density and mean span length as configured (tolerances for T5's rounding)
    for mode, mu, r, _ in UL2_DENOISERS:
        if mode == "S":
            continue
        g = torch.Generator().manual_seed(1)
        k = [d[1:3] for d in UL2_DENOISERS].index((mu, r))
        noise, spans, corrupt = collator.parts[k]
        assert noise / 568 == pytest.approx(r, abs=0.002)
        from nanot5_edu.spans import _random_span_cuts
        cuts = _random_span_cuts(64, 568, noise, spans, g)
        out = corrupt(rows, cuts)
        targets = out["labels"]
        sentinel = targets >= 1100 - 100
        assert int(sentinel[0].sum()) == spans
        assert (~sentinel[:, :-1]).sum().item() / 64 == noise  # the hidden tokens, every row
        assert noise / spans == pytest.approx(mu, rel=0.35 if mu == 64 else 0.05)


def test_flops_count_decoder_only_as_one_stack():
    enc_dec = ModelConfig(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4)
    dec = ModelConfig(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=4, num_heads=4,
                      architecture="decoder-only")
    f = flops_per_step(dec, 8, 100, 30)
    L, d, inner = 130, 64, 64
    by_hand = 3 * 2 * (4 * (8 * L * (4 * d * inner + 3 * d * 128) + 2 * 8 * L * L * inner) + 8 * 30 * d * 1000)
    assert f == by_hand
    assert 1.5 < f / flops_per_step(enc_dec, 8, 100, 30) < 2.5  # about twice the encoder-decoder's, at 2x the blocks
    # the expectation over prefix splits is the mean of the per-split counts
    collator = PrefixLMCollator(Ids(), 20)
    mean = sum(flops_per_step(dec, 8, s + 1, 20 - s + 1) for s in range(1, 20)) / 19
    assert expected_flops_per_step(dec, 8, collator) == pytest.approx(mean, rel=1e-12)


def test_decoder_only_memorises_a_batch_and_matches_its_causal_mask():
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4, architecture="decoder-only")
    model = DecoderOnly(cfg)
    x, y = torch.randint(3, 60, (4, 6)), torch.randint(3, 60, (4, 5))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(150):
        loss = model(x, labels=y).loss
        loss.backward(); opt.step(); opt.zero_grad()
    assert loss.item() < 0.05  # the positive control: a correct pipeline memorises 4 examples
    out = model.generate(x, max_new_tokens=5)
    assert torch.equal(out[:, 1:], y)
    # padding: a padded input position changes nothing once masked
    pad = torch.cat([x, torch.zeros(4, 2, dtype=torch.long)], 1)
    mask = torch.cat([torch.ones(4, 6), torch.zeros(4, 2)], 1).long()
    a = model(x, labels=y).logits
    b = model(pad, attention_mask=mask, labels=y).logits
    assert a.argmax(-1).equal(b.argmax(-1))  # relative positions move by the 2 pads: close, not equal
    with pytest.raises(NotImplementedError, match="no Hugging Face T5 export"):
        model.save_pretrained("x")


def test_objective_batches_pair_each_row_with_its_partners():
    rows = torch.randint(3, 900, (40, 30))
    documents = torch.arange(40) // 5
    batches = objective_batches(rows, documents, PrefixLMCollator(Ids(), 30, seed=0), 8, 3)
    for b in batches:
        assert b["same_document_input_ids"].shape == b["input_ids"].shape == b["other_document_input_ids"].shape
        assert b["gain_row"].all()
    causal = objective_batches(rows, documents, CausalLMCollator(Ids(), 30), 8, 2)
    assert not any(b["gain_row"].any() for b in causal)


def test_the_prefix_sees_forwards_and_a_causal_mask_does_not():
    "Model level: changing the last prefix token changes position 0's state with a prefix, never without one"
    torch.manual_seed(0)
    lm = DecoderOnly(ModelConfig(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                 architecture="decoder-only")).eval()
    seq = torch.randint(3, 60, (2, 9))
    changed = seq.clone(); changed[:, 4] = 7  # the last of 5 prefix positions
    with torch.no_grad():
        assert (lm.hidden(changed, 5)[:, 0] - lm.hidden(seq, 5)[:, 0]).abs().max() > 1e-3
        torch.testing.assert_close(lm.hidden(changed, 0)[:, :4], lm.hidden(seq, 0)[:, :4])   # causal: no look ahead
        # a target position never sees a later target
        later = changed.clone(); later[:, 8] = 9
        torch.testing.assert_close(lm.hidden(later, 5)[:, :8], lm.hidden(changed, 5)[:, :8])
