"""Model benchmark: our T5 vs transformers' T5ForConditionalGeneration, same weights, same batch, one run.

CPU (default): train step (forward + backward + AdamW) in fp32 and bf16 autocast, on `tiny` (batch 32, 128 -> 32)
and `t5-v1_1-small` (batch 8, 512 -> 114); greedy generation of 32 tokens for batch 32 (tiny). Each row runs in a
fresh subprocess, so peak memory (max RSS growth after the model is built) is per row.
GPU: python benchmarks/model.py --device cuda --preset t5-v1_1-base --batch 32 --compile
     (bf16 train steps, ours vs HF: s/step, tokens/s, MFU, peak CUDA memory).
Run: python benchmarks/model.py [--quick]
Goal (this project's own, not a published figure): each row at 1.5x the speed of HF's T5, same weights and batch.
"""
import argparse
import json
import subprocess
import sys
import time

CPU_ROWS = [("tiny", 32, 128, 32, "fp32", "train"), ("tiny", 32, 128, 32, "bf16", "train"),
            ("t5-v1_1-small", 8, 512, 114, "fp32", "train"), ("t5-v1_1-small", 8, 512, 114, "bf16", "train"),
            ("tiny", 32, 128, 32, "fp32", "generate"), ("tiny", 32, 128, 32, "bf16", "generate")]


def measure(impl, preset, batch, src, tgt, precision, mode, steps, device="cpu", compile_=False):
    "Runs inside a subprocess: (median seconds per step, peak memory growth in MB)"
    import resource
    import statistics
    import torch
    from transformers.utils import logging
    logging.set_verbosity_error()
    from nanot5_edu.model import T5
    from nanot5_edu.layers import get_config
    torch.manual_seed(0)
    ours = T5(get_config(preset))
    model = (ours if impl == "ours" else ours.to_hf()).to(device).train()
    if compile_:
        model = torch.compile(model)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 8000, (batch, src), generator=g).to(device)
    labels = torch.randint(3, 8000, (batch, tgt), generator=g).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    ctx = lambda: torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16")
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

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
    for _ in range(3 if compile_ else 1):  # warm-up (compilation)
        fn()
    sync()
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        t = time.perf_counter(); fn(); sync(); times.append(time.perf_counter() - t)
    peak = (torch.cuda.max_memory_allocated() / 2**20 if device == "cuda"
            else (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024)
    return statistics.median(times), peak


def run(*args):
    "`measure` in a fresh interpreter"
    code = ("import sys, json; sys.path.insert(0, 'benchmarks'); from model import measure; "
            f"print(json.dumps(measure(*{args!r})))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


def cpu_model() -> str:
    "The CPU's model name (speed ratios differ between CPUs: every figure is printed with it)"
    import platform
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer steps per row")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--preset", default="t5-v1_1-base", help="GPU mode: model preset")
    ap.add_argument("--batch", type=int, default=32, help="GPU mode: batch size (inputs 512, targets 114)")
    ap.add_argument("--compile", action="store_true", help="GPU mode: torch.compile both models")
    args = ap.parse_args()
    import torch
    if args.device == "cuda":
        from nanot5_edu.layers import get_config
        from nanot5_edu.config import flops_per_step, peak_flops
        flops = flops_per_step(get_config(args.preset), args.batch, 512, 114)
        peak = peak_flops(torch.device("cuda"))
        print(f"{torch.cuda.get_device_name()}, {args.preset}, batch {args.batch}, 512 -> 114, bf16"
              f"{' + compile' if args.compile else ''}; {flops / 1e12:.1f} TFLOP/step")
        print(f"{'impl':6} {'s/step':>8} {'tokens/s':>10} {'MFU':>6} {'peak GB':>8}")
        res = {}
        for impl in ("ours", "hf"):
            res[impl] = run(impl, args.preset, args.batch, 512, 114, "bf16", "train", 10, "cuda", args.compile)
            s, mem = res[impl]
            mfu = f"{flops / s / peak:.1%}" if peak else "n/a"
            print(f"{impl:6} {s:8.3f} {args.batch * 626 / s:10,.0f} {mfu:>6} {mem / 1024:8.1f}", flush=True)
        print(f"speed-up ours vs HF: {res['hf'][0] / res['ours'][0]:.2f}x")
        return
    cpu = cpu_model()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU {cpu}; s/step = median; "
          "mem = peak RSS growth (MB)")
    print(f"{'row':44} {'ours s':>8} {'HF s':>8} {'speed-up':>9} {'ours MB':>8} {'HF MB':>8}  CPU")
    for preset, b, s, t, prec, mode in CPU_ROWS:
        steps = 2 if args.quick or preset != "tiny" else 5
        ours = run("ours", preset, b, s, t, prec, mode, steps)
        hf = run("hf", preset, b, s, t, prec, mode, steps)
        what = f"{mode} {preset} b{b} {s}->{t if mode == 'train' else 32} {prec}"
        print(f"{what:44} {ours[0]:8.3f} {hf[0]:8.3f} {hf[0] / ours[0]:8.2f}x {ours[1]:8.0f} {hf[1]:8.0f}  {cpu}",
              flush=True)


if __name__ == "__main__":
    main()
