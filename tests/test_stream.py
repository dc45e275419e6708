"""The streamed data path as a user runs it: a local C4-format corpus read by DataLoader workers, a real `kill -9`
and an exact resume, 2-process DDP over gloo, and the `t5-base` preset end to end on CPU."""
import hashlib
import json
import time
from pathlib import Path

import pytest
import torch

from cli_runs import assert_same_run, kill_after_checkpoint, metrics, pretrain, pretrain_ddp

SMALL = ["model.num_layers=1", "model.d_model=64", "model.d_kv=16", "model.num_heads=4", "model.d_ff=128",
         "optim.warmup_steps=4", "optim.lr=1e-2", "logging.every_steps=1", "eval.batches=1", "eval.batch_size=8",
         "logging.progress_bar=false"]
T5_SPIECE = Path(__file__).resolve().parents[2] / "shared" / "data" / "t5-spiece"


@pytest.fixture(scope="module")
def c4_data(tmp_path_factory):
    "A C4-format folder (8 train shards, 2 validation shards) written from the embedded corpus, and a tokenizer"
    from nanot5_edu.data import load_corpus, write_c4_shards
    from nanot5_edu.tokenizer import train_tokenizer
    root = tmp_path_factory.mktemp("c4")
    texts = list(load_corpus("sotu", "validation")["text"])
    write_c4_shards(texts, root / "c4", num_shards=8)
    write_c4_shards(texts[:4], root / "c4", "validation", num_shards=2)
    train_tokenizer(texts, 1900, root / "tok")  # + 100 sentinels = 2,000 ids
    return root


def data_args(root, workers=2):
    return [f"data.corpus={root / 'c4'}", f"data.tokenizer={root / 'tok'}", "model.vocab_size=2048",
            f"data.num_workers={workers}", "data.shuffle_buffer=64"]


def stream_of(args, rank=0, world_size=1):
    "The training stream `train` builds for these overrides, in this process"
    from nanot5_edu.spans import SpanCorruptionCollator
    from nanot5_edu.tokenizer import load_tokenizer
    from nanot5_edu.config import make_config
    from nanot5_edu.stream import training_stream
    cfg = make_config("cpu-demo", args)
    tok = load_tokenizer(cfg.data.tokenizer)
    collator = SpanCorruptionCollator(tok, cfg.data.inputs_length, seed=cfg.train.seed + rank)
    micro = cfg.optim.batch_size // (cfg.optim.grad_acc * world_size)
    return training_stream(cfg, tok, collator, micro, rank, world_size), collator


def sha(batch):
    return hashlib.sha256(b"".join(batch[k].numpy().tobytes() for k in sorted(batch))).hexdigest()


def first_batch_seconds(stream):
    t = time.perf_counter()
    batch = next(stream)
    return batch, time.perf_counter() - t


def test_kill_9_of_a_streamed_run_resumes_exactly(tmp_path, c4_data):
    from nanot5_edu.stream import StreamingBatches
    args = [*SMALL, *data_args(c4_data), "optim.batch_size=8", "optim.grad_acc=2", "train.total_steps=40",
            "checkpoint.every_steps=10", "checkpoint.keep_last=4", "eval.every_steps=20"]
    straight = pretrain(tmp_path / "straight", *args)
    assert straight.returncode == 0, straight.stderr[-3000:]

    kill_after_checkpoint(tmp_path / "killed", args, "step_00000010")
    last = sorted((tmp_path / "killed" / "checkpoints").glob("step_*"))[-1]
    killed_at = json.loads((last / "trainer_state.json").read_text())["step"]
    assert killed_at < 40
    saved = torch.load(last / "process_0.pt", weights_only=True)["stream"]

    resumed = pretrain(tmp_path / "killed", *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stdout
    assert_same_run(tmp_path / "killed", tmp_path / "straight")

    # the batches of the 5 steps after the checkpoint (2 micro-batches each), resumed vs uninterrupted
    fresh, _ = stream_of(args)
    assert isinstance(fresh, StreamingBatches) and fresh.num_workers == 2
    _, t_fresh = first_batch_seconds(fresh)
    for _ in range(killed_at * 2 - 1):
        next(fresh)
    expected = [sha(next(fresh)) for _ in range(10)]
    again, _ = stream_of(args)
    again.load_state_dict(saved)
    batch, t_resume = first_batch_seconds(again)
    assert [sha(batch)] + [sha(next(again)) for _ in range(9)] == expected
    # resuming re-reads at most one block per worker, whatever the step: as fast as starting
    assert t_resume < 2 * t_fresh + 1.0, (t_resume, t_fresh)


def test_streamed_epoch_splits_rows_between_processes(c4_data):
    "Each process (rank of 2) reads its own shards in 2 workers: no row twice in an epoch, none on both ranks"
    from nanot5_edu.noise import uncorrupt
    seen = {}
    for rank in (0, 1):
        stream, collator = stream_of([*SMALL, *data_args(c4_data), "optim.batch_size=8"], rank, world_size=2)
        rows = []
        while True:
            batch = next(stream)
            if stream.epoch == 1:
                break
            rows += [tuple(uncorrupt(i.tolist(), l.tolist(), collator.first_sentinel, collator.eos_id))
                     for i, l in zip(batch["input_ids"], batch["labels"])]
        assert len(rows) == len(set(rows)), f"rank {rank} saw a row twice in one epoch"
        seen[rank] = set(rows)
    assert not seen[0] & seen[1]
    from nanot5_edu.data import load_corpus
    from nanot5_edu.tokenizer import encode_batch, load_tokenizer
    tokens = sum(map(len, encode_batch(load_tokenizer(c4_data / "tok"), load_corpus("sotu", "validation")["text"])))
    assert len(seen[0] | seen[1]) > 0.9 * tokens / collator.raw_length  # only group and batch remainders dropped


def test_two_process_ddp_on_a_streamed_corpus(tmp_path, c4_data):
    pretrain_ddp(tmp_path, *SMALL, *data_args(c4_data, workers=1), "optim.batch_size=8", "train.total_steps=6",
                 "checkpoint.every_steps=3", "eval.every_steps=6")
    states = [torch.load(tmp_path / "checkpoints" / "step_00000006" / f"process_{i}.pt", weights_only=True)
              for i in (0, 1)]
    assert all("loader" in s["stream"] for s in states)  # each process saved its own stream position


def test_t5_base_preset_runs_on_cpu(tmp_path, c4_data):
    "nanoT5's preset end to end, shrunk: a tiny model, the local C4 shards, the real T5 vocabulary, 4 steps"
    if not T5_SPIECE.is_dir():
        pytest.skip(f"{T5_SPIECE} is absent: the t5-base smoke test needs the T5 SentencePiece vocabulary")
    r = pretrain(tmp_path, "t5-base", *SMALL, f"data.corpus={c4_data / 'c4'}", f"data.tokenizer={T5_SPIECE}",
                 "data.inputs_length=128", "data.num_workers=1", "data.shuffle_buffer=64", "model.num_decoder_layers=1",
                 "optim.batch_size=4", "optim.warmup_steps=2", "train.total_steps=4", "train.compile=false",
                 "train.precision=fp32", "eval.every_steps=4", "checkpoint.every_steps=4")
    assert r.returncode == 0, r.stderr[-3000:]
    cfg = (tmp_path / "config.yaml").read_text()
    assert "vocab_size: 32128" in cfg and "warmup_steps: 2" in cfg  # t5-base's vocabulary, our overrides
    assert [m["step"] for m in metrics(tmp_path) if "loss" in m] == [1, 2, 3, 4]
    assert (tmp_path / "checkpoints" / "step_00000004" / "model.safetensors").exists()


def test_data_streaming_streams_local_files(tmp_path, c4_data):
    "data.streaming=true reads local files through the same workers, with the same held-out documents"
    from nanot5_edu.data import load_corpus
    from nanot5_edu.tokenizer import load_tokenizer
    from nanot5_edu.train import validation_batches
    from nanot5_edu.config import make_config
    from nanot5_edu.stream import StreamingBatches, load_texts
    texts = list(load_corpus("sotu", "validation")["text"])
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    args = [*SMALL, f"data.corpus={tmp_path / 'docs.jsonl'}", f"data.tokenizer={c4_data / 'tok'}",
            "data.streaming=true", "data.num_workers=1", "optim.batch_size=8"]
    stream, collator = stream_of(args)
    assert isinstance(stream, StreamingBatches)
    assert {k: tuple(v.shape) for k, v in next(stream).items()} == \
        {"input_ids": (8, 128), "labels": (8, collator.targets_length), "decoder_input_ids": (8, collator.targets_length)}
    cfg = make_config("cpu-demo", args)
    assert [r["text"] for r in load_texts(cfg, "validation")] == load_corpus(str(tmp_path / "docs.jsonl"), "validation")["text"]
    assert len(validation_batches(cfg, load_tokenizer(c4_data / "tok"))) == cfg.eval.batches


def test_a_stream_resumed_twice_continues_exactly(c4_data):
    """Resume, go on, checkpoint, resume again: the second resume continues where the first resumed run was. Catches
    the datasets bug fixed in 5.1 (huggingface/datasets#8295): after one load_state_dict the saved position stops
    advancing, so a second resume silently restarts the stream (hence pyproject's datasets>=5.1)."""
    args = [*SMALL, *data_args(c4_data, workers=1), "optim.batch_size=8"]
    straight, _ = stream_of(args)
    [next(straight) for _ in range(3)]
    first = straight.state_dict()
    expected = [sha(next(straight)) for _ in range(6)]
    resumed, _ = stream_of(args)
    resumed.load_state_dict(first)
    assert [sha(next(resumed)) for _ in range(3)] == expected[:3]
    second = resumed.state_dict()
    again, _ = stream_of(args)
    again.load_state_dict(second)
    assert [sha(next(again)) for _ in range(3)] == expected[3:]


# Catches: close() losing the stream's position (a stream closed and used again starting over, or skipping batches).
def test_a_closed_stream_goes_on_where_it_was(c4_data):
    args = [*SMALL, *data_args(c4_data, workers=1), "optim.batch_size=8"]
    straight, _ = stream_of(args)
    expected = [sha(next(straight)) for _ in range(4)]
    straight.close()
    closed, _ = stream_of(args)
    got = [sha(next(closed)) for _ in range(2)]
    closed.close()
    assert closed.state_dict()["loader"] is not None  # the position, kept
    got += [sha(next(closed)) for _ in range(2)]
    closed.close()
    assert got == expected

# Catches: a script (or notebook, or `train` run) that ends with a stream's data workers alive hanging at exit for
# minutes. The workers ignore SIGTERM (so a SIGTERM to every process stops the run with a checkpoint), and Python's
# exit sends its worker processes SIGTERM and then waits for them, forever, unless the stream is closed first.
def test_a_script_exits_promptly_with_the_stream_workers_alive(tmp_path, c4_data):
    import os
    import signal
    import subprocess
    import sys
    from cli_runs import ENV
    script = f"""
from nanot5_edu.data import load_corpus
from nanot5_edu.spans import SpanCorruptionCollator
from nanot5_edu.stream import StreamingBatches
from nanot5_edu.tokenizer import load_tokenizer
tok = load_tokenizer({str(c4_data / 'tok')!r})
stream = StreamingBatches(load_corpus({str(c4_data / 'c4')!r}), tok, SpanCorruptionCollator(tok, 64), micro_batch=4,
                          seed=0, num_workers=2, shuffle_buffer=32)
next(stream)
import nanot5_edu; print("took a batch", nanot5_edu.__file__, flush=True)  # and exits, the stream and its two workers alive
"""
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=f, stderr=subprocess.STDOUT, env=ENV,
                                cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.time() + 120
        while "took a batch" not in out.read_text() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.05)
        assert "took a batch" in out.read_text(), out.read_text()[-3000:]
        took = time.time()
        try:
            proc.wait(timeout=20)  # about 1 s when fixed; a hang lasts minutes (20 s leaves room for a loaded machine)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the script had not exited {time.time() - took:.0f} s after its last line: "
                        f"{out.read_text()[-300:]!r}")
        assert proc.returncode == 0, out.read_text()[-3000:]
        print(f"exited {time.time() - took:.1f} s after its last line")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the script and its workers (same session)
            proc.wait()
