"""The training loop's hot path does not make the host wait for the device at every step: what reads a device value
back (`.item()`, `.tolist()`, `bool(t)`, ...) happens once per logging window, not once per step. Counted in-process
on `fit` with those Tensor methods patched (and, where CUDA exists, with torch.cuda.set_sync_debug_mode)."""
import warnings

import pytest
import torch

READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "numpy")  # each waits for a device value
TINY = ["model.num_layers=1", "model.num_decoder_layers=1", "model.d_model=32", "model.d_kv=8", "model.num_heads=4",
        "model.d_ff=64", "model.vocab_size=256", "optim.batch_size=4", "optim.grad_acc=2", "optim.warmup_steps=1",
        "data.inputs_length=32", "eval.batches=1", "eval.batch_size=4", "eval.samples=0", "eval.every_steps=1000",
        "checkpoint.every_steps=1000", "logging.progress_bar=false", "train.precision=fp32"]


class Batches:
    "Batches made before the loop starts (so the count sees the loop, not the data pipeline); resumable by index"
    def __init__(self, n, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.batches = [{"input_ids": torch.randint(3, 250, (2, 32), generator=g),
                         "labels": torch.randint(3, 250, (2, 8), generator=g)} for _ in range(n)]
        self.i = 0

    def __next__(self):
        self.i += 1
        return self.batches[self.i - 1]

    def state_dict(self):
        return {"i": self.i}

    def load_state_dict(self, state):
        self.i = state["i"]


def reads_in_fit(run_dir, steps, monkeypatch, *overrides) -> tuple[int, int]:
    "(host reads of tensor values, CUDA sync warnings) in a `fit` of `steps` steps logged once, at the end"
    from nanot5_edu.model import T5
    from nanot5_edu.train import fit, make_accelerator
    from nanot5_edu.config import make_config
    cfg = make_config("cpu-demo", [*TINY, f"train.total_steps={steps}", f"logging.every_steps={steps}",
                                   f"logging.run_dir={run_dir}", *overrides])
    run_dir.mkdir(parents=True, exist_ok=True)
    accelerator = make_accelerator(cfg)
    model, stream, valid = T5(cfg.model), Batches(2 * steps), Batches(1, seed=1).batches
    count = [0]
    with monkeypatch.context() as m:
        # T5._check scans token ids for out-of-range values only on CPU tensors (on a device it skips the scan: it
        # would sync); here the CPU stands in for a device, so the scan is skipped as on one
        m.setattr(T5, "_check", lambda self, *args: None)
        for name in READS:
            original = getattr(torch.Tensor, name)
            def counted(self, *args, _original=original, **kwargs):
                count[0] += 1
                return _original(self, *args, **kwargs)
            m.setattr(torch.Tensor, name, counted)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if torch.cuda.is_available():
                torch.cuda.set_sync_debug_mode("warn")
            try:
                fit(cfg, accelerator, model, None, stream, valid)
            finally:
                if torch.cuda.is_available():
                    torch.cuda.set_sync_debug_mode(0)
    accelerator.end_training()
    syncs = sum("synchroniz" in str(w.message) for w in caught)
    return count[0], syncs


def test_no_host_sync_per_step(tmp_path, monkeypatch):
    """Twice the steps between the same log points read back no more values: nothing syncs per step. Catches a
    per-step .tolist()/.item() (AdamWScale reading its RMS scales back, a loss read each step, a NaN check per step)
    and, on CUDA, a blocking batch copy from pageable memory."""
    short = reads_in_fit(tmp_path / "short", 3, monkeypatch)
    long = reads_in_fit(tmp_path / "long", 9, monkeypatch)
    assert short[0] > 0  # the counter works: logging, evaluation and the checkpoint do read values
    assert long == short, f"reads (host, CUDA sync warnings): {short} in 3 steps, {long} in 9: some grow per step"


def test_compiled_module_runs_training_steps_only(tmp_path, monkeypatch):
    """With train.compile the compiled module sees only training micro-batches (evaluation, at another batch size,
    runs uncompiled: no second graph), and the compiling first step stays out of the first window's ms/step.
    torch.compile is replaced by a stand-in that records its calls and takes 2 s on the first, as compiling does."""
    import json
    import time
    seen = []

    class FakeCompiled(torch.nn.Module):
        def __init__(self, module):
            super().__init__()
            self.module = module

        def forward(self, input_ids, *args, **kwargs):
            if not seen:
                time.sleep(2.0)
            seen.append(input_ids.shape[0])
            return self.module(input_ids, *args, **kwargs)
    monkeypatch.setattr(torch, "compile", FakeCompiled)
    reads_in_fit(tmp_path, 4, monkeypatch, "train.compile=true", "logging.every_steps=2", "eval.every_steps=2")
    assert seen == [2] * 8, seen  # 4 steps x grad_acc 2 micro-batches of 2 rows; no evaluation batch (4 rows)
    first = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[1])  # line 0: the step-0 evaluation
    assert first["step"] == 2 and first["ms_per_step"] < 1000, first  # with the 2 s in it: >= 1000


def test_fp16_syncs_once_per_step_for_its_loss_scaler_and_nothing_else(tmp_path, monkeypatch):
    """fp16 cannot avoid one host read every step: the loss scaler must know whether the gradients overflowed before
    it lets the optimizer step, and `GradScaler.step` reads that flag back with `.item()` (torch/amp/grad_scaler.py,
    `_maybe_opt_step`). The test pins the count: the reads of 9 steps minus those of 3 are exactly 6, one per step;
    a second read per step (a loss read, a NaN check per step) fails it. Its cost on a GPU: benchmarks/fp16_path.py
    `sync_cost` (a step with one added `.item()` against the same step without, on an H200 in
    benchmarks/results/h200_2026-12-04/)."""
    short = reads_in_fit(tmp_path / "short", 3, monkeypatch, "train.precision=fp16")
    long = reads_in_fit(tmp_path / "long", 9, monkeypatch, "train.precision=fp16")
    per_step = (long[0] - short[0]) / 6
    print(f"fp16 host reads: {short[0]} in 3 steps, {long[0]} in 9: {per_step} per step")
    assert per_step == 1, f"{per_step} host reads per fp16 step, expected the loss scaler's one"
