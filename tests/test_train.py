"""Integration tests of pre-training as a user runs it: the CLI in subprocesses, a real `kill -9` and exact resume,
a 2-process DDP run through `accelerate launch`, and errors reported before any compute."""
import json

import pytest

from cli_runs import assert_same_run, kill_after_checkpoint, metrics, pretrain, pretrain_ddp

SMALL = ["model.num_layers=1", "model.d_model=64", "model.d_kv=16", "model.num_heads=4", "model.d_ff=128",
         "model.vocab_size=2048", "optim.batch_size=8", "optim.warmup_steps=4", "optim.lr=1e-2",
         "logging.every_steps=1", "eval.batches=1", "eval.batch_size=8", "logging.progress_bar=false"]


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    "A local .jsonl corpus (24 speeches) and a 1,900-piece tokenizer trained on it"
    from nanot5_edu.data import load_corpus
    from nanot5_edu.tokenizer import train_tokenizer
    root = tmp_path_factory.mktemp("data")
    texts = list(load_corpus("sotu", "validation")["text"])
    (root / "speeches.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    train_tokenizer(texts, 1900, root / "tok")  # + 100 sentinels = 2,000 ids <= 2,048
    return [f"data.corpus={root / 'speeches.jsonl'}", f"data.tokenizer={root / 'tok'}"]


def test_kill_9_and_resume_gives_identical_losses(tmp_path, small_data):
    args = [*SMALL, *small_data, "train.total_steps=160", "checkpoint.every_steps=20", "eval.every_steps=40"]
    straight = pretrain(tmp_path / "straight", *args)
    assert straight.returncode == 0, straight.stderr
    final_eval = [m for m in metrics(tmp_path / "straight") if "eval_loss" in m][-1]
    assert f"encoder gain:    {final_eval['encoder_gain']:.3f} nats" in straight.stdout  # the run summary shows it
    assert "| encoder gain " in straight.stdout  # and so does each evaluation's log line

    kill_after_checkpoint(tmp_path / "killed", args, "step_00000020")
    done = sorted(p.name for p in (tmp_path / "killed" / "checkpoints").glob("step_*"))
    assert done and done[-1] < "step_00000160"

    resumed = pretrain(tmp_path / "killed", *args)
    assert resumed.returncode == 0, resumed.stderr
    assert "resumed from" in resumed.stdout
    assert_same_run(tmp_path / "killed", tmp_path / "straight")


def test_two_process_ddp_on_cpu(tmp_path, small_data):
    pretrain_ddp(tmp_path, *SMALL, *small_data, "train.total_steps=6", "checkpoint.every_steps=3", "eval.every_steps=6")
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "step_00000006").glob("process_*.pt")) == \
        ["process_0.pt", "process_1.pt"]
    # the evaluation logged under DDP equals a single-process evaluation of the final weights
    import torch
    from nanot5_edu.model import T5
    from nanot5_edu.tokenizer import load_tokenizer
    from nanot5_edu.train import evaluate, make_config, validation_batches
    cfg = make_config("cpu-demo", [*SMALL, *small_data])  # bf16, as the run
    logged = [m for m in metrics(tmp_path) if "eval_loss" in m][-1]
    single = evaluate(T5.from_hf(tmp_path / "hf"), validation_batches(cfg, load_tokenizer(tmp_path / "hf")),
                      lambda: torch.autocast("cpu", dtype=torch.bfloat16))
    for key in ("eval_loss", "eval_loss_shuffled_encoder", "encoder_gain"):
        assert abs(logged[key] - single[key]) < 1e-4, (key, logged[key], single[key])


@pytest.mark.parametrize("override,message", [
    ("optim.lrr=1e-3", "Did you mean optim.lr"),
    ("data.corpus=/no/such/dir/*.txt", "No file matches"),
    ("optim.warmup_steps=100000", "optim.warmup_steps (100000)"),
    ("model.vocab_size=1000", "set model.vocab_size=8192"),
])
def test_config_and_data_errors_come_before_compute(tmp_path, override, message):
    r = pretrain(tmp_path / "run", override)
    assert r.returncode == 2, r.stderr[-2000:]
    assert message in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "run" / "checkpoints").exists()
