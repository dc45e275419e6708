"""Model benchmark: our T5 vs transformers' T5ForConditionalGeneration, same weights, same batch, one run.

Rows: train step (forward + backward + AdamW) in fp32 and bf16 autocast, on `tiny` (batch 32, 128 -> 32) and
`t5-v1_1-small` (batch 8, 512 -> 114); greedy generation of 32 tokens for batch 32 (tiny).
Each row runs in a fresh subprocess so peak memory (max RSS growth over the loaded model) is per row.
Run: python benchmarks/model.py [--quick]
"""
import json
import subprocess
import sys
import time

ROWS = [("tiny", 32, 128, 32, "fp32"), ("tiny", 32, 128, 32, "bf16"),
        ("t5-v1_1-small", 8, 512, 114, "fp32"), ("t5-v1_1-small", 8, 512, 114, "bf16")]


def measure(impl, preset, batch, src, tgt, precision, mode, steps):
    "Runs inside a subprocess: returns seconds per step (median) and peak RSS growth in MB"
    import resource
    import statistics
    import torch
    from transformers.utils import logging
    logging.set_verbosity_error()
    from nanot5_edu.model import T5, get_config
    torch.manual_seed(0)
    ours = T5(get_config(preset)).train()
    model = ours if impl == "ours" else ours.to_hf().train()
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 8000, (batch, src), generator=g)
    labels = torch.randint(3, 8000, (batch, tgt), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ctx = lambda: torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def train_step():
        with ctx():
            out = model(input_ids=ids, labels=labels)
        out.loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

    def generate():
        model.eval()
        with ctx():
            if impl == "ours":
                model.generate(ids, max_new_tokens=32)
            else:
                model.generate(input_ids=ids, max_new_tokens=32, min_new_tokens=32, do_sample=False, num_beams=1)

    fn = train_step if mode == "train" else generate
    fn()  # warm-up
    times = []
    for _ in range(steps):
        t = time.perf_counter(); fn(); times.append(time.perf_counter() - t)
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024
    return statistics.median(times), peak


def run(*args):
    code = f"import sys; sys.path.insert(0, 'benchmarks'); from model import measure; import json; print(json.dumps(measure(*{args!r})))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    import torch
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; s/step = median; mem = peak RSS growth (MB)")
    print(f"{'row':44} {'ours s':>8} {'HF s':>8} {'speed-up':>9} {'ours MB':>8} {'HF MB':>8}")
    rows = [(p, b, s, t, prec, "train") for p, b, s, t, prec in ROWS] + [("tiny", 32, 128, 32, "fp32", "generate"),
                                                                          ("tiny", 32, 128, 32, "bf16", "generate")]
    for preset, b, s, t, prec, mode in rows:
        steps = 2 if quick or preset != "tiny" else 5
        ours = run("ours", preset, b, s, t, prec, mode, steps)
        hf = run("hf", preset, b, s, t, prec, mode, steps)
        what = f"{mode} {preset} b{b} {s}->{t if mode == 'train' else 32} {prec}"
        print(f"{what:44} {ours[0]:8.3f} {hf[0]:8.3f} {hf[0] / ours[0]:8.2f}x {ours[1]:8.0f} {hf[1]:8.0f}", flush=True)
