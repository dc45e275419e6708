"""Runs that survive what happens to real runs: SIGTERM at a random moment (one process and two gloo processes), a
damaged newest checkpoint, a full disk while checkpointing, a changed setup on resume; and three checks that the rest
of the suite lacked. Each test names the bug it catches."""
import errno
import json
import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from cli_runs import ENV, assert_same_run, kill_after_checkpoint, launch, metrics, pretrain, pretrain_ddp

SMALL = ["model.num_layers=1", "model.d_model=64", "model.d_kv=16", "model.num_heads=4", "model.d_ff=128",
         "model.vocab_size=2048", "optim.batch_size=8", "optim.warmup_steps=4", "optim.lr=1e-2", "eval.batches=1",
         "eval.batch_size=8", "eval.samples=0", "logging.progress_bar=false",
         "model.dropout_rate=0.1"]  # dropout draws from torch's RNG: a resume must restore it
# logging every 3 steps: a stop between two log lines must carry the window's losses over to the resumed run
RUN = [*SMALL, "train.total_steps=40", "logging.every_steps=3", "eval.every_steps=8", "checkpoint.every_steps=20"]


@pytest.fixture(scope="module")
def straight(tmp_path_factory, small_data):
    "The uninterrupted run every interrupted one must equal"
    run_dir = tmp_path_factory.mktemp("straight")
    r = pretrain(run_dir, *RUN, *small_data)
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir


@pytest.fixture
def one_thread():
    "In-process runs compared bit for bit with subprocess runs use one thread, as the subprocesses do (cli_runs.ENV)"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def last_step(run_dir) -> int:
    rows = metrics(run_dir) if (Path(run_dir) / "metrics.jsonl").exists() else []
    return max((m["step"] for m in rows if "loss" in m), default=0)


def signal_at_random_moment(proc, run_dir, target_pid=None, seed=None) -> int:
    "Once training has logged its first steps, wait a random moment, SIGTERM `target_pid`; returns the last logged step"
    rng = random.Random(seed)
    deadline = time.time() + 300
    while last_step(run_dir) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(rng.uniform(0, 0.3))
    logged = last_step(run_dir)
    os.kill(target_pid or proc.pid, signal.SIGTERM)
    return logged


def stopped_at(run_dir) -> int:
    done = sorted((Path(run_dir) / "checkpoints").glob("step_*"))
    return json.loads((done[-1] / "trainer_state.json").read_text())["step"]


# Catches: SIGTERM killing the run where it is (no checkpoint, exit -15); a stop that does not finish within a step;
# a resume that does not restore torch's RNG (dropout 0.1 draws from it), or that drops the cut logging window.
def test_sigterm_at_a_random_moment_stops_with_a_checkpoint_and_resumes_the_same_run(tmp_path, small_data, straight):
    run_dir = tmp_path / "stopped"
    proc = pretrain(run_dir, *RUN, *small_data, popen=True)
    logged = signal_at_random_moment(proc, run_dir, seed=os.getpid())
    sent = time.time()
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode == 3, err[-3000:]  # EXIT_STOPPED
    step = stopped_at(run_dir)
    print(f"SIGTERM after step {logged} was logged; stopped at {step}, {time.time() - sent:.1f} s later")
    # logging every 3 steps: the step in progress was at most logged + 3; it finishes, and no more than one more
    assert logged < step <= logged + 4 < 40
    assert f"Stopped at step {step} of 40 (SIGTERM)" in err and f"resume: nanot5-edu pretrain --config {run_dir}" in err

    resumed = pretrain(run_dir, *RUN, *small_data)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from {run_dir / 'checkpoints' / f'step_{step:08d}'}" in resumed.stdout
    assert_same_run(run_dir, straight)


FP16 = [*RUN, "train.precision=fp16"]
SCALER_DRIVER = Path(__file__).parent / "fp16_scaler_run.py"  # a loss scale that moves within 40 steps


@pytest.fixture(scope="module")
def straight_fp16(tmp_path_factory, small_data):
    "The uninterrupted fp16 run (a loss scaler that backs off, then grows) every interrupted one must equal"
    run_dir = tmp_path_factory.mktemp("straight_fp16")
    r = pretrain(run_dir, *FP16, *small_data, script=SCALER_DRIVER)
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir


def scaler_state(checkpoint: Path) -> dict:
    return torch.load(checkpoint / "state.pt", weights_only=True)["scaler"]


# Catches: the loss scaler's state left out of the checkpoint (a resumed fp16 run restarts at the initial scale and
# skips steps the uninterrupted run took: other losses, other weights), after kill -9.
def test_fp16_killed_with_kill_9_resumes_the_same_run(tmp_path, small_data, straight_fp16):
    kill_after_checkpoint(tmp_path, [*FP16, *small_data], "step_00000020", script=SCALER_DRIVER)
    saved = scaler_state(tmp_path / "checkpoints" / "step_00000020")
    print("scaler state at step 20:", saved)
    assert (saved["scale"], saved["_growth_tracker"]) != (2.0 ** 12, 0), "a fresh scaler's state: nothing to test"
    assert saved == scaler_state(straight_fp16 / "checkpoints" / "step_00000020")
    resumed = pretrain(tmp_path, *FP16, *small_data, script=SCALER_DRIVER)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout
    assert_same_run(tmp_path, straight_fp16)
    assert scaler_state(tmp_path / "checkpoints" / "step_00000040") == \
        scaler_state(straight_fp16 / "checkpoints" / "step_00000040")


# Catches: the same, for a run stopped by SIGTERM at a random moment (Colab's preset stops on time and resumes).
def test_fp16_stopped_by_sigterm_resumes_the_same_run(tmp_path, small_data, straight_fp16):
    proc = pretrain(tmp_path, *FP16, *small_data, popen=True, script=SCALER_DRIVER)
    signal_at_random_moment(proc, tmp_path, seed=os.getpid() + 1)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err.decode()[-3000:]
    assert scaler_state(latest(tmp_path))["scale"] > 0
    resumed = pretrain(tmp_path, *FP16, *small_data, script=SCALER_DRIVER)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert_same_run(tmp_path, straight_fp16)


def latest(run_dir) -> Path:
    return sorted((Path(run_dir) / "checkpoints").glob("step_*"))[-1]


# Catches: processes that stop at different steps (one writes a checkpoint the other never reached, or waits forever
# in a collective); a signal to one rank only must stop both at the same step.
def test_two_gloo_processes_agree_on_the_stop_step_and_resume_the_same_run(tmp_path, small_data):
    import psutil
    run = [*SMALL, *small_data, "train.total_steps=16", "logging.every_steps=2", "eval.every_steps=8",
           "checkpoint.every_steps=8"]
    pretrain_ddp(tmp_path / "straight", *run)
    run_dir = tmp_path / "stopped"
    cmd = [*launch(2), "-m", "nanot5_edu", "pretrain", *run, f"logging.run_dir={run_dir}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    deadline = time.time() + 300
    ranks = {}
    while not {"0", "1"} <= ranks.keys() and time.time() < deadline:  # a launcher process may match too (no RANK)
        try:
            ranks = {p.environ().get("RANK"): p.pid for p in psutil.Process(proc.pid).children(recursive=True)
                     if "nanot5_edu" in " ".join(p.cmdline())}
        except psutil.Error:  # a process that came or went while we looked
            pass
        time.sleep(0.05)
    assert {"0", "1"} <= ranks.keys(), f"both ranks did not start within 300 s: {ranks}"
    signal_at_random_moment(proc, run_dir, target_pid=ranks["1"], seed=os.getpid())  # rank 1 only
    _, err = proc.communicate(timeout=120)
    err = err.decode()
    assert proc.returncode != 0 and "exitcode  : 3" in err, err[-3000:]  # torchrun reports EXIT_STOPPED as a failure
    step = stopped_at(run_dir)
    assert step < 16
    assert sorted(p.name for p in (run_dir / "checkpoints" / f"step_{step:08d}").glob("process_*.pt")) == \
        ["process_0.pt", "process_1.pt"]
    pretrain_ddp(run_dir, *run)
    assert_same_run(run_dir, tmp_path / "straight")


def damage(path: Path, how: str):
    if how == "delete":
        path.unlink()
        return
    data = bytearray(path.read_bytes())
    if how == "truncate":
        path.write_bytes(bytes(data[:len(data) // 2]))
    else:
        data[len(data) // 3] ^= 0x01  # one bit
        path.write_bytes(bytes(data))


# Catches: resuming from a damaged checkpoint (a low-level error, or silently wrong weights) instead of falling back to
# the previous one that keep_last=2 kept; a checkpoint whose trainer_state.json is missing skipped without a word; a
# fallback that does not reproduce the uninterrupted run.
@pytest.mark.parametrize("file,how", [("model.safetensors", "truncate"), ("state.pt", "flip"),
                                      ("trainer_state.json", "delete")])
def test_a_damaged_newest_checkpoint_falls_back_and_ends_the_same(tmp_path, small_data, straight, one_thread, capsys,
                                                                  file, how):
    from nanot5_edu.train import train
    from nanot5_edu.config import make_config
    run_dir = tmp_path / "run"
    shutil.copytree(straight, run_dir)
    damage(run_dir / "checkpoints" / "step_00000040" / file, how)
    train(make_config("cpu-demo", [*RUN, *small_data, f"logging.run_dir={run_dir}"]))
    out = capsys.readouterr().out
    problem = {"truncate": "bytes but", "flip": "has changed since it was written", "delete": "cannot be read"}[how]
    assert f"checkpoint {run_dir / 'checkpoints' / 'step_00000040'} is damaged: {file} " in out and problem in out
    assert f"resumed from {run_dir / 'checkpoints' / 'step_00000020'} at step 20" in out
    assert [p.name[:21] for p in (run_dir / "checkpoints").glob("damaged_*")] == ["damaged_step_00000040"]
    assert_same_run(run_dir, straight)


# Catches: an unclear error (or a silent start from scratch) when no checkpoint is intact.
def test_every_checkpoint_damaged_is_a_clear_error(tmp_path, small_data, straight):
    from nanot5_edu.train import train
    from nanot5_edu.config import TrainingError, make_config
    run_dir = tmp_path / "run"
    shutil.copytree(straight, run_dir)
    for step in (20, 40):
        damage(run_dir / "checkpoints" / f"step_{step:08d}" / "model.safetensors", "flip")
    with pytest.raises(TrainingError, match="No intact checkpoint in .*checkpoint.resume=never"):
        train(make_config("cpu-demo", [*RUN, *small_data, f"logging.run_dir={run_dir}"]))
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_00000020", "step_00000040"]


# Catches: a full disk surfacing as a bare error from deep inside torch.save, a half-written checkpoint left behind,
# or an earlier checkpoint deleted before the new one was complete.
def test_a_full_disk_stops_with_a_message_and_keeps_the_last_good_checkpoint(tmp_path, small_data, monkeypatch):
    from nanot5_edu.checkpoint import _Hashing, checkpoint_problem
    from nanot5_edu.config import TrainingError, make_config
    from nanot5_edu.train import train
    run_dir = tmp_path / "run"
    real_write = _Hashing.write

    def full_disk(self, data):  # the disk fills up in the middle of the second checkpoint's optimizer state
        if ".tmp_step_00000004" in self.f.name and self.f.name.endswith("state.pt") and self.bytes > 1000:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(self, data)
    monkeypatch.setattr(_Hashing, "write", full_disk)
    cfg = make_config("cpu-demo", [*SMALL, *small_data, "train.total_steps=6", "checkpoint.every_steps=2",
                                   "checkpoint.keep_last=1", "eval.every_steps=6", f"logging.run_dir={run_dir}"])
    with pytest.raises(TrainingError) as e:
        train(cfg)
    message, good = str(e.value), run_dir / "checkpoints" / "step_00000002"
    print(message)
    for part in (f"Could not write checkpoint step_00000004 in {run_dir / 'checkpoints'}: No space left on device",
                 "A checkpoint needs about", "MB are free there", f"The last good checkpoint is {good}"):
        assert part in message
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_00000002"]  # keep_last=1 kept it
    assert checkpoint_problem(good) is None


# Catches: data workers killed by a SIGTERM sent to every process (Slurm does; a terminal's Ctrl-C sends SIGINT to
# all), which crashed the run; and a resume with another number of data workers going on with another data order.
def test_a_streamed_run_survives_sigterm_to_all_its_processes_and_refuses_changed_num_workers(tmp_path, small_data):
    import sys
    from nanot5_edu.train import train
    from nanot5_edu.config import ConfigError, make_config
    run = [*SMALL, *small_data, "data.streaming=true", "data.shuffle_buffer=64", "train.total_steps=400",
           "checkpoint.every_steps=400", "eval.every_steps=400", "logging.every_steps=1", f"logging.run_dir={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-m", "nanot5_edu", "pretrain", *run, "data.num_workers=1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV, start_new_session=True)
    deadline = time.time() + 300
    while last_step(tmp_path) < 3 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGTERM)  # the training process and its data worker
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 3, err.decode()[-3000:]
    step = stopped_at(tmp_path)
    before = (tmp_path / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError) as e:
        train(make_config("cpu-demo", [*run, "data.num_workers=2"]))
    assert "This run reads data.num_workers=2 but" in str(e.value) and "written with data.num_workers=1" in str(e.value)
    assert (tmp_path / "metrics.jsonl").read_text() == before and stopped_at(tmp_path) == step  # refused before compute


def children(pid: int) -> set[int]:
    "Child processes of `pid` (Linux /proc)"
    found = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found |= {int(c) for c in (task / "children").read_text().split()}
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    "Running (not gone, not a zombie waiting to be reaped)"
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# Catches: data workers that outlive a trainer killed outright (SIGKILL: the OOM killer, a preempted VM, a Colab
# runtime restart). They ignore SIGTERM/SIGINT by design, and one blocked on a full queue never noticed its parent
# was gone: it held its memory and shared-memory files for good.
# Idle workers notice on their own within torch's 5-second check (measured: 5.0 s before the fix, 0.05 s after); a
# worker blocked in its work (`blocked_worker_run.py` makes them sleep in their second block) never did.
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("blocked", [False, True], ids=["idle", "blocked"])
def test_data_workers_die_with_a_trainer_killed_by_sigkill(tmp_path, small_data, blocked):
    import sys
    run = [*SMALL, *small_data, "data.streaming=true", "data.shuffle_buffer=64", "data.num_workers=2",
           "train.total_steps=400", "checkpoint.every_steps=400", "eval.every_steps=400", "logging.every_steps=1",
           f"logging.run_dir={tmp_path}"]
    start = [str(Path(__file__).parent / "blocked_worker_run.py")] if blocked else ["-m", "nanot5_edu"]
    proc = subprocess.Popen([sys.executable, *start, "pretrain", *run], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=ENV, start_new_session=True)
    try:
        deadline = time.time() + 300
        while last_step(tmp_path) < 3 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        workers = children(proc.pid)
        assert len(workers) >= 2, f"expected 2 data workers, found {workers}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = time.time()
        while any(alive(w) for w in workers) and time.time() < killed + 10:
            time.sleep(0.05)
        print(f"workers gone {time.time() - killed:.2f} s after the trainer's SIGKILL")
        left = [w for w in workers if alive(w)]
        assert not left, f"data workers {left} outlived the killed trainer by 10 s"
        assert time.time() - killed < 2, "the workers ended on torch's 5-second check, not with their parent"
    finally:
        for w in children(proc.pid) | (workers if "workers" in locals() else set()):
            if alive(w):
                os.kill(w, signal.SIGKILL)


# Catches: train.max_minutes ignored (a Colab session cut off with the steps since the last checkpoint lost), or a
# stop that leaves no intact checkpoint.
def test_max_minutes_stops_with_an_intact_checkpoint(tmp_path, small_data):
    from nanot5_edu.train import train
    from nanot5_edu.config import make_config
    from nanot5_edu.checkpoint import RunStopped, checkpoint_problem
    cfg = make_config("cpu-demo", [*SMALL, *small_data, "train.total_steps=1000", "checkpoint.every_steps=1000",
                                   "eval.every_steps=1000", "logging.every_steps=1000", "train.max_minutes=0.0001",
                                   f"logging.run_dir={tmp_path}"])
    with pytest.raises(RunStopped, match=r"Stopped at step 1 of 1000 \(train.max_minutes=0.0001\)") as e:
        train(cfg)
    assert e.value.checkpoint == tmp_path / "checkpoints" / "step_00000001"
    assert checkpoint_problem(e.value.checkpoint) is None


# Catches: load_checkpoint without map_location (on N GPUs every process would first load onto cuda:0, the saver's).
def test_resume_maps_tensors_to_the_process_own_device(tmp_path, monkeypatch):
    from nanot5_edu.checkpoint import load_checkpoint, save_checkpoint
    from nanot5_edu.config import make_config
    from nanot5_edu.model import T5
    from nanot5_edu.stream import BatchStream
    from nanot5_edu.optim import get_lr_scheduler, get_optimizer
    cfg = make_config("cpu-demo", SMALL)
    model = T5(cfg.model)
    opt = get_optimizer("adamwscale", model.named_parameters(), 1e-2, 0.0)
    sched = get_lr_scheduler("constant", opt, 10, 0, 1e-5)
    stream = BatchStream(torch.zeros(8, 4, dtype=torch.long), Stateless(), 4, seed=0)
    save_checkpoint(tmp_path, 1, model, opt, sched, stream, cfg)
    calls, real_load = [], torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: calls.append(k.get("map_location")) or real_load(*a, **k))
    load_checkpoint(tmp_path / "checkpoints" / "step_00000001", model, opt, sched, stream)
    own = next(model.parameters()).device
    assert len(calls) == 2 and all(c is not None and torch.device(c) == own for c in calls), calls


class Stateless:
    "A collator with a state, for streams whose batches these tests never draw"
    def __call__(self, rows):
        return {"input_ids": rows}

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


# Catches: AdamWScale's foreach path with the wrong RMS floor (1e-6 instead of 1e-3): no other test has a tensor whose
# RMS is below the floor (a zero-initialised or tiny tensor), where the floor decides the step.
def test_adamwscale_rms_floor_for_tiny_tensors_foreach_equals_loop_equals_hand():
    import math
    from nanot5_edu.optim import AdamWScale
    g = torch.Generator().manual_seed(0)
    start = [torch.zeros(5, 3), 1e-5 * torch.randn(4, 4, generator=g), torch.randn(6, generator=g)]  # RMS 0, ~1e-5, ~1
    grads = [[torch.randn(p.shape, generator=g) for p in start] for _ in range(3)]
    lr, (b1, b2), eps = 1e-2, (0.9, 0.999), 1e-6
    ends = {}
    for foreach in (True, False):
        params = [torch.nn.Parameter(p.clone()) for p in start]
        opt = AdamWScale(params, lr=lr, betas=(b1, b2), eps=eps, foreach=foreach)
        for step_grads in grads:
            for p, gr in zip(params, step_grads):
                p.grad = gr.clone()
            opt.step()
            if step_grads is grads[0]:
                first = [p.detach().clone() for p in params]
        ends[foreach] = [p.detach() for p in params]
        for p0, p1, gr in zip(start, first, grads[0]):  # the first step by hand
            m, v = (1 - b1) * gr, (1 - b2) * gr ** 2
            scale = max(1e-3, (p0.norm() / math.sqrt(p0.numel())).item())
            expected = p0 - lr * math.sqrt(1 - b2) / (1 - b1) * scale * m / (v.sqrt() + eps)
            torch.testing.assert_close(p1, expected, rtol=1e-5, atol=1e-9)
    for a, b in zip(ends[True], ends[False]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-9)


class FixedBatches:
    "Micro-batches cut from fixed 8-row batches: the same rows for every grad_acc; resumable"
    def __init__(self, batches, micro):
        self.parts = [{k: v[i:i + micro] for k, v in b.items()} for b in batches for i in range(0, 8, micro)]
        self.i = 0

    def __next__(self):
        self.i += 1
        return self.parts[(self.i - 1) % len(self.parts)]

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, state):
        self.i = state["i"]


# Catches: fit scaling the loss wrongly under accumulation (e.g. multiplying by grad_acc before backward instead of
# dividing): grad_acc=4 with micro-batches of 2 must equal grad_acc=1 with micro-batches of 8, through `fit`.
def test_fit_with_grad_acc_4_equals_grad_acc_1_with_4x_micro_batch(tmp_path):
    from nanot5_edu.model import T5
    from nanot5_edu.train import fit, make_accelerator
    from nanot5_edu.config import make_config
    g = torch.Generator().manual_seed(0)
    batches = [{"input_ids": torch.randint(0, 2000, (8, 32), generator=g),
                "labels": torch.randint(1, 2000, (8, 8), generator=g)} for _ in range(4)]
    runs = {}
    for grad_acc in (1, 4):
        cfg = make_config("cpu-demo", [*SMALL, "model.dropout_rate=0", "train.precision=fp32", f"optim.grad_acc={grad_acc}",
                                       "train.total_steps=4", "optim.warmup_steps=1", "logging.every_steps=1",
                                       "eval.every_steps=100", "checkpoint.every_steps=100",
                                       f"logging.run_dir={tmp_path / str(grad_acc)}"])
        (tmp_path / str(grad_acc)).mkdir()
        accelerator = make_accelerator(cfg)
        model, _ = fit(cfg, accelerator, T5(cfg.model), None, FixedBatches(batches, 8 // grad_acc), batches[:1])
        runs[grad_acc] = (model.state_dict(), [m for m in metrics(tmp_path / str(grad_acc)) if "loss" in m])
    (w1, log1), (w4, log4) = runs[1], runs[4]
    assert [m["step"] for m in log1] == [m["step"] for m in log4] == [1, 2, 3, 4]
    for a, b in zip(log1, log4):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4)
    for k in w1:
        torch.testing.assert_close(w1[k], w4[k], rtol=1e-4, atol=1e-6)


# Catches: checkpoint.resume=never leaving the old run's checkpoints beside the new run's (a later resume would pick the
# old run's newest step, silently when its setup matches) or deleting them (nothing is lost: they are moved aside).
def test_resume_never_moves_the_old_checkpoints_aside(tmp_path, small_data):
    from nanot5_edu.train import train
    from nanot5_edu.config import make_config
    base = [*SMALL, *small_data, "optim.warmup_steps=1", "eval.every_steps=1000", "logging.every_steps=1000",
            f"logging.run_dir={tmp_path}"]
    train(make_config("cpu-demo", [*base, "train.total_steps=4", "checkpoint.every_steps=2"]))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_00000002", "step_00000004"]
    train(make_config("cpu-demo", [*base, "train.total_steps=2", "checkpoint.every_steps=2", "checkpoint.resume=never"]))
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step_00000002"]
    assert sorted(p.name for p in (tmp_path / "checkpoints_replaced_1").iterdir()) == ["step_00000002", "step_00000004"]
