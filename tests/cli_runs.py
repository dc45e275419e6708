"Running `nanot5-edu pretrain` in a subprocess, offline, and reading its metrics: shared by the integration tests"
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}


def pretrain(run_dir, *overrides, popen=False, script=None):
    "`python -m nanot5_edu pretrain` (or `python SCRIPT pretrain`, a test's driver of the same CLI)"
    start = [sys.executable, str(script)] if script else [sys.executable, "-m", "nanot5_edu"]
    cmd = [*start, "pretrain", *overrides, f"logging.run_dir={run_dir}"]
    if popen:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)


def metrics(run_dir):
    return [json.loads(l) for l in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]


def kill_after_checkpoint(run_dir, args, checkpoint: str, script=None):
    "Start a run and SIGKILL it as soon as checkpoints/<checkpoint> exists (it must really be killed, not finish)"
    proc = pretrain(run_dir, *args, popen=True, script=script)
    first = Path(run_dir) / "checkpoints" / checkpoint
    deadline = time.time() + 300
    while not first.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"


def assert_same_run(run_a, run_b):
    "Both runs logged the same losses and ended with the same weights (rank 0's manifest)"
    losses = lambda d: [(m["step"], m.get("loss"), m.get("eval_loss")) for m in metrics(d)]
    assert losses(run_a) == losses(run_b)
    weights = lambda d: json.loads((Path(d) / "processes" / "rank_0.json").read_text())["weights_sha256"]
    assert weights(run_a) == weights(run_b)


def free_port() -> str:
    "A free TCP port for a launch's rendezvous: two DDP tests at once (pytest -n 2) must not both take 29500"
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def launch(num_processes: int = 2) -> list[str]:
    return ["accelerate", "launch", "--multi_gpu", "--num_processes", str(num_processes), "--num_machines", "1",
            "--main_process_port", free_port(), "--mixed_precision", "no", "--dynamo_backend", "no"]


def pretrain_ddp(run_dir, *overrides) -> list[dict]:
    """`accelerate launch` two CPU processes (DDP over gloo) and check what every DDP run must show: both
    processes ran, each trained on its own rows, and they ended with equal weights. Returns the manifests."""
    cmd = [*launch(2), "-m", "nanot5_edu", "pretrain", *overrides, f"logging.run_dir={run_dir}"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    ranks = [json.loads((Path(run_dir) / "processes" / f"rank_{i}.json").read_text()) for i in (0, 1)]
    assert [m["world_size"] for m in ranks] == [2, 2]
    assert ranks[0]["first_batch_sha256"] != ranks[1]["first_batch_sha256"]  # the first batches differ (rows split by rank, masks seeded by rank)
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]        # and DDP keeps the weights equal
    return ranks
