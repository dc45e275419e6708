"""Integration tests of pre-training as a user runs it: the CLI in subprocesses, a real `kill -9` and exact resume,
a 2-process DDP run through `accelerate launch`, and errors reported before any compute."""
import json

import pytest

from cli_runs import assert_same_run, kill_after_checkpoint, metrics, pretrain, pretrain_ddp

SMALL = ["model.num_layers=1", "model.d_model=64", "model.d_kv=16", "model.num_heads=4", "model.d_ff=128",
         "model.vocab_size=2048", "optim.batch_size=8", "optim.warmup_steps=4", "optim.lr=1e-2",
         "logging.every_steps=1", "eval.batches=1", "eval.batch_size=8", "logging.progress_bar=false"]


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


PEAK = "train.peak_tflops=0.05"  # any fixed peak: MFU is then logged on CPU too


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, small_data):
    "A 2-process DDP run (batch 8: micro-batches of 4 per process), shared by the tests below"
    run = tmp_path_factory.mktemp("ddp")
    pretrain_ddp(run, *SMALL, *small_data, PEAK, "train.total_steps=6", "checkpoint.every_steps=3", "eval.every_steps=6")
    return run


def test_mfu_is_per_device_under_two_processes(tmp_path, small_data, ddp_run):
    """MFU = this process's FLOPs / its device's peak: a 2-process run logs the MFU a 1-process run logs at the same
    per-process batch. Catches counting every process's FLOPs against one device's peak (N x too high)."""
    from nanot5_edu.spans import SpanCorruptionCollator
    from nanot5_edu.tokenizer import load_tokenizer
    from nanot5_edu.config import flops_per_step, make_config
    single = pretrain(tmp_path, *SMALL, *small_data, PEAK, "optim.batch_size=4", "train.total_steps=6",
                      "checkpoint.every_steps=6", "eval.every_steps=6")
    assert single.returncode == 0, single.stderr[-3000:]
    cfg = make_config("cpu-demo", [*SMALL, *small_data])
    collator = SpanCorruptionCollator(load_tokenizer(tmp_path / "hf"), cfg.data.inputs_length)
    step_flops = flops_per_step(cfg.model, 4, cfg.data.inputs_length, collator.targets_length)  # one process's
    logs = {run: [m for m in metrics(run) if "mfu" in m] for run in (tmp_path, ddp_run)}
    for run, logged in logs.items():
        assert len(logged) == 6 and all(m["mfu"] is not None for m in logged)
        for m in logged:  # exact, no timing noise: MFU x step time = one process's FLOPs per step / one device's peak
            assert m["mfu"] * m["ms_per_step"] / 1e3 == pytest.approx(step_flops / 0.05e12, rel=1e-9), (run, m)
    # (no comparison of the two runs' MFU values: they are timings, noise on a shared machine or under pytest -n 2;
    # the identity above is exact and fails when a run counts every process's FLOPs against one device's peak)


def test_two_process_ddp_on_cpu(ddp_run, small_data):
    tmp_path = ddp_run
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "step_00000006").glob("process_*.pt")) == \
        ["process_0.pt", "process_1.pt"]
    # the evaluation logged under DDP equals a single-process evaluation of the final weights
    import torch
    from nanot5_edu.model import T5
    from nanot5_edu.tokenizer import load_tokenizer
    from nanot5_edu.train import validation_batches
    from nanot5_edu.config import make_config
    from nanot5_edu.pretrain import evaluate
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
