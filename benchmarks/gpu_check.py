"""One prepared GPU check (run through benchmarks/gpu_check.sh): what the README and the presets only *estimate*.

Sections, each timed and recorded on its own (an error is written into the JSON and the next section runs):
  precision   train steps of T5-Base (micro-batch 32, 512 -> 114; and the t5-base preset's micro-batch 128 in bf16)
              in fp32 (TF32), bf16 and fp16: ms/step, MFU, peak memory vs estimate_memory
  compile     the same step under torch.compile (bf16, or fp16 below compute capability 8.0): compile time, ms/step
  colab_t4    the colab-t4 preset's first 200 steps through the real `train` loop, on a local C4-format folder
              (--c4 DIR, or one written from the embedded corpus), with the time the loop waits for data
  hf          ours vs transformers' T5ForConditionalGeneration: a bf16 train step and greedy generation
It writes one JSON (--out, default gpu_check.json) after every section and prints a table at the end.
`--cpu` runs every section at tiny sizes on the CPU (what tests/test_gpu_check.py runs); compile is skipped there.
No file outside this repository is needed: without --tokenizer, T5's vocabulary is used if the hub (or its cache)
has it, else a small tokenizer is trained on the embedded corpus.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path


class TimeCap(Exception):
    "The check's total time cap was reached"


_CPU_PEAK = []


def _cpu_peak() -> float:
    "The CPU's measured bf16 matmul FLOP/s (once): the peak MFU divides by on a CPU"
    if not _CPU_PEAK:
        from nanot5_edu.config import matmul_peak_flops
        _CPU_PEAK.append(matmul_peak_flops(n=1024, repeats=3))
    return _CPU_PEAK[0]


def _hub_reachable(timeout: float = 3.0) -> bool:
    import socket
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _device_info(device: str) -> dict:
    import torch
    info = {"device": device, "torch": torch.__version__, "python": platform.python_version()}
    if device == "cuda":
        p = torch.cuda.get_device_properties(0)
        info.update(name=p.name, capability=f"{p.major}.{p.minor}", memory_gib=p.total_memory / 2 ** 30,
                    native_bf16=(p.major, p.minor) >= (8, 0))
    else:
        info.update(name=platform.processor() or platform.machine(), threads=torch.get_num_threads(), native_bf16=True)
    return info


def _sizes(cpu: bool) -> dict:
    "Model and batch of each section: T5-Base on a GPU, a tiny T5 on the CPU"
    if cpu:
        model = ["model.num_layers=1", "model.num_decoder_layers=1", "model.d_model=64", "model.d_kv=16", "model.num_heads=4", "model.d_ff=128",
                 "model.vocab_size=2048"]
        return {"base": ["model_preset=tiny", *model, "data.inputs_length=64", "optim.batch_size=4"],
                "big_micro": ["model_preset=tiny", *model, "data.inputs_length=64", "optim.batch_size=8"],
                "steps": 2, "warmup": 1, "t4_steps": 4, "t4": [*model, "data.inputs_length=64", "optim.batch_size=8",
                                                                 "eval.batch_size=8", "data.shuffle_buffer=64",
                                                                 "data.num_workers=0"],
                "gen_batch": 4, "gen_tokens": 8}
    return {"base": ["model_preset=t5-v1_1-base", "optim.batch_size=32"],
            "big_micro": ["model_preset=t5-v1_1-base", "optim.batch_size=128"],
            "steps": 10, "warmup": 3, "t4_steps": 200, "t4": [], "gen_batch": 32, "gen_tokens": 32}


def _batch(cfg, device, seed=0):
    import torch
    from nanot5_edu.noise import compute_input_and_target_lengths
    L_t = compute_input_and_target_lengths(cfg.data.inputs_length)[1]
    g = torch.Generator().manual_seed(seed)
    micro = cfg.optim.batch_size // cfg.optim.grad_acc
    ids = torch.randint(3, cfg.model.vocab_size, (micro, cfg.data.inputs_length), generator=g)
    labels = torch.randint(3, cfg.model.vocab_size, (micro, L_t), generator=g)
    return ids.to(device), labels.to(device)


def train_steps(cfg, device: str, steps: int, warmup: int, compile_: bool = False, hf: bool = False) -> dict:
    "Bare train steps (forward, backward, clip, AdamWScale) as `fit` runs them: ms/step, MFU, peak memory vs estimate"
    import torch
    from nanot5_edu.model import T5
    from nanot5_edu.optim import get_optimizer
    from nanot5_edu.config import estimate_memory, flops_per_step, peak_flops
    precision = cfg.train.precision
    if device == "cuda":
        torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    base_mem = torch.cuda.memory_allocated() if device == "cuda" else 0
    torch.manual_seed(0)
    ours = T5(cfg.model)
    model = (ours.to_hf() if hf else ours).to(device).train()
    del ours
    opt = get_optimizer(cfg.optim.name, model.named_parameters(), 1e-3)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    run = torch.compile(model) if compile_ else model
    ids, labels = _batch(cfg, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    skipped, times = 0, []

    def step():
        nonlocal skipped
        with torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None):
            loss = run(input_ids=ids, labels=labels).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        before = scaler.get_scale() if scaler.is_enabled() else None
        scaler.step(opt); scaler.update(); opt.zero_grad(set_to_none=True)
        if before is not None and scaler.get_scale() < before:
            skipped += 1
        return loss

    t0 = time.perf_counter()
    for _ in range(warmup):
        loss = step()
    sync()
    first_s = time.perf_counter() - t0
    for _ in range(steps):
        t = time.perf_counter(); loss = step(); sync(); times.append(time.perf_counter() - t)
    s = statistics.median(times)
    micro, L_in, L_t = ids.shape[0], ids.shape[1], labels.shape[1]
    peak = peak_flops(torch.device(device)) if device == "cuda" else _cpu_peak()
    est = estimate_memory(cfg, device=device)
    row = {"precision": precision, "compile": compile_, "model": "hf" if hf else "ours", "micro_batch": micro,
           "inputs_length": L_in, "targets_length": L_t, "ms_per_step": s * 1e3, "warmup_s": first_s,
           "tokens_per_s": micro * (L_in + L_t) / s, "loss": loss.item(), "skipped_steps": skipped,
           "mfu": flops_per_step(cfg.model, micro, L_in, L_t) / s / peak if peak else None,
           "estimate_gib": est["total"] / 2 ** 30}
    if device == "cuda":
        row["peak_gib"] = (torch.cuda.max_memory_allocated() - base_mem) / 2 ** 30
        row["peak_over_estimate"] = row["peak_gib"] / row["estimate_gib"]
    del model, run, opt
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


def section_precision(args, sizes, device, info) -> dict:
    from nanot5_edu.config import make_config
    rows = []
    for precision in ("fp32", "bf16", "fp16"):
        if precision == "bf16" and not info["native_bf16"]:
            rows.append({"precision": "bf16", "skipped": "no native bf16 (compute capability < 8.0)"}); continue
        try:
            rows.append(train_steps(make_config("t5-base", [*sizes["base"], f"train.precision={precision}"]), device,
                                    sizes["steps"], sizes["warmup"]))
        except Exception as e:  # one precision failing (e.g. out of memory) must not hide the others
            rows.append({"precision": precision, "error": f"{type(e).__name__}: {e}"[:500]})
        print("  ", _fmt_row(rows[-1]), flush=True)
    big = "bf16" if info["native_bf16"] else "fp16"
    try:  # the t5-base preset's own micro-batch: does the estimate that says it fits 80 GB hold?
        rows.append(train_steps(make_config("t5-base", [*sizes["big_micro"], f"train.precision={big}"]), device,
                                max(2, sizes["steps"] // 3), 1))
    except Exception as e:
        rows.append({"precision": big, "micro_batch": 128, "error": f"{type(e).__name__}: {e}"[:500]})
    print("  ", _fmt_row(rows[-1]), flush=True)
    return {"rows": rows}


def section_compile(args, sizes, device, info) -> dict:
    from nanot5_edu.config import make_config
    if device == "cpu":
        return {"skipped": "torch.compile is not measured on CPU here (see results/compile_cpu.json)"}
    precision = "bf16" if info["native_bf16"] else "fp16"
    cfg = make_config("t5-base", [*sizes["base"], f"train.precision={precision}"])
    rows = [train_steps(cfg, device, sizes["steps"], 3, compile_=True)]
    print("  ", _fmt_row(rows[-1]), flush=True)
    return {"rows": rows}


class TimedStream:
    "A batch stream that passes everything through and adds up the seconds spent waiting for each batch"
    def __init__(self, stream):
        self.stream, self.wait_s, self.batches = stream, 0.0, 0

    def __next__(self):
        t = time.perf_counter()
        batch = next(self.stream)
        self.wait_s += time.perf_counter() - t
        self.batches += 1
        return batch

    def __getattr__(self, name):
        if name == "stream":
            raise AttributeError(name)
        return getattr(self.stream, name)


def _tokenizer(args, workdir: Path, cpu: bool) -> tuple[str, str]:
    "A tokenizer dir or hub name for the colab-t4 run, and where it came from"
    from nanot5_edu.data import load_corpus
    from nanot5_edu.tokenizer import load_tokenizer, train_tokenizer
    if args.tokenizer:
        return args.tokenizer, "--tokenizer"
    if not cpu:
        try:
            load_tokenizer("google/t5-v1_1-base")
            return "google/t5-v1_1-base", "hub (or its cache)"
        except Exception as e:  # offline and not cached: a small one from the embedded corpus
            print(f"   google/t5-v1_1-base unavailable ({type(e).__name__}); training a tokenizer on the embedded corpus")
    texts = load_corpus("sotu", "train")["text"]
    train_tokenizer(texts[:40] if cpu else texts, 1000 if cpu else 8000, workdir / "tokenizer")
    return str(workdir / "tokenizer"), "trained here on the embedded corpus"


def section_colab_t4(args, sizes, device, info) -> dict:
    import nanot5_edu.train as tr  # its `training_stream` is swapped below for a timed one
    from nanot5_edu.config import estimate_memory, make_config
    from nanot5_edu.data import load_corpus, write_c4_shards
    workdir = Path(tempfile.mkdtemp(prefix="gpu_check_"))
    c4 = args.c4
    if not c4:
        c4 = workdir / "c4"
        for split in ("train", "validation"):  # on a GPU 4 copies of the speeches: 200 steps stay in one epoch
            texts = list(load_corpus("sotu", split)["text"]) * (4 if device == "cuda" and split == "train" else 1)
            write_c4_shards(texts, c4, split, num_shards=16 if device == "cuda" else 2)
    tokenizer, source = _tokenizer(args, workdir, device == "cpu")
    steps = sizes["t4_steps"]
    over = [*sizes["t4"], f"data.corpus={c4}", f"data.tokenizer={tokenizer}", f"train.total_steps={steps}",
            "optim.warmup_steps=20" if steps > 20 else "optim.warmup_steps=1", f"eval.every_steps={steps}",
            "eval.batches=2", "eval.samples=0", f"checkpoint.every_steps={steps}", "checkpoint.resume=never",
            f"logging.every_steps={max(1, steps // 4)}", "logging.progress_bar=false",
            f"logging.run_dir={workdir / 'run'}"]
    if device == "cpu":
        over += ["train.precision=bf16"]  # fp16 matmuls are ~400x slower on most CPUs
    cfg = make_config("colab-t4", over)
    if device == "cuda":  # this run's own peak, not an earlier section's (the H200 run of 2026-12-04 lacked this)
        import torch
        torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
    timed = {}
    original = tr.training_stream
    def training_stream(*a, **k):
        timed["stream"] = TimedStream(original(*a, **k))
        return timed["stream"]
    tr.training_stream = training_stream
    try:
        t0 = time.perf_counter()
        summary = tr.train(cfg)
        wall = time.perf_counter() - t0
    finally:
        tr.training_stream = original
    logged = [json.loads(l) for l in (workdir / "run" / "metrics.jsonl").read_text().splitlines()]
    train_rows = [r for r in logged if "ms_per_step" in r]
    stream = timed["stream"]
    est = estimate_memory(cfg, device=device)
    ends = [r["step"] for r in train_rows]  # the loop's own time for its steps (evaluations and checkpoints excluded)
    train_s = sum(r["ms_per_step"] / 1e3 * (end - start) for r, start, end in zip(train_rows, [0] + ends, ends))
    out = {"steps": summary["steps"], "wall_s": wall, "tokenizer": source,
           "corpus": str(c4) if args.c4 else "C4-format shards written from the embedded corpus",
           "precision": cfg.train.precision, "micro_batch": est["micro_batch"],
           "ms_per_step_logged": [r["ms_per_step"] for r in train_rows],
           "loss_logged": [r["loss"] for r in train_rows], "grad_norm_logged": [r["grad_norm"] for r in train_rows],
           "data_wait_s": stream.wait_s, "batches": stream.batches,
           "data_wait_fraction": stream.wait_s / max(1e-9, train_s),
           "final_eval_loss": summary.get("final_eval_loss"), "estimate_gib": est["total"] / 2 ** 30}
    if device == "cuda":
        import torch
        out["peak_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    print(f"   {out['steps']} steps in {wall:.0f} s; logged ms/step {[round(x) for x in out['ms_per_step_logged']]}; "
          f"data wait {stream.wait_s:.1f} s ({out['data_wait_fraction']:.1%}); tokenizer: {source}", flush=True)
    return out


def section_hf(args, sizes, device, info) -> dict:
    import torch
    from nanot5_edu.model import T5
    from nanot5_edu.config import make_config
    precision = "bf16" if info["native_bf16"] else "fp16"
    cfg = make_config("t5-base", [*sizes["base"], f"train.precision={precision}"])
    rows = []
    for hf in (False, True):
        rows.append(train_steps(cfg, device, max(2, sizes["steps"] // 2), 1, hf=hf))
        print("  ", _fmt_row(rows[-1]), flush=True)
    gen = {}
    ids, _ = _batch(make_config("t5-base", [*sizes["base"], f"optim.batch_size={sizes['gen_batch']}"]), device)
    torch.manual_seed(0)
    ours = T5(cfg.model).to(device).eval()
    dtype = torch.bfloat16 if precision == "bf16" else torch.float16
    n = sizes["gen_tokens"]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for name, model, call in (("ours", ours, lambda m: m.generate(ids, max_new_tokens=n)),
                              ("hf", None, lambda m: m.generate(input_ids=ids, max_new_tokens=n, min_new_tokens=n,
                                                                do_sample=False, num_beams=1))):
        model = model or ours.to_hf().to(device).eval()
        with torch.no_grad(), torch.autocast(device, dtype=dtype):
            call(model); sync()  # warm-up
            t = time.perf_counter(); out = call(model); sync()
        gen[name] = {"s": time.perf_counter() - t, "tokens": int(out.shape[1])}
    gen["ours_over_hf_speed"] = gen["hf"]["s"] / gen["ours"]["s"]
    print(f"   greedy generation, batch {ids.shape[0]}, {n} tokens: ours {gen['ours']['s']:.3f} s, "
          f"HF {gen['hf']['s']:.3f} s", flush=True)
    return {"train": rows, "train_ours_over_hf_speed": rows[1]["ms_per_step"] / rows[0]["ms_per_step"],
            "generate": gen}


def _fmt_row(r: dict) -> str:
    if "error" in r or "skipped" in r:
        return f"{r.get('precision', ''):5} {r.get('error') or r.get('skipped')}"
    mem = (f"peak {r['peak_gib']:.1f} GiB / estimate {r['estimate_gib']:.1f} ({r['peak_over_estimate']:.2f}x)"
           if "peak_gib" in r else f"estimate {r['estimate_gib']:.2f} GiB")
    mfu = f"MFU {r['mfu']:.1%}" if r.get("mfu") is not None else "MFU n/a"
    return (f"{r['precision']:5} {r['model']:4} compile={str(r['compile']):5} micro {r['micro_batch']:3}: "
            f"{r['ms_per_step']:8.1f} ms/step {r['tokens_per_s']:10,.0f} tok/s {mfu:10} {mem}"
            + (f", {r['skipped_steps']} skipped" if r.get("skipped_steps") else ""))


SECTIONS = {"precision": section_precision, "compile": section_compile, "colab_t4": section_colab_t4,
            "hf": section_hf}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="tiny sizes on the CPU (a check of the check)")
    ap.add_argument("--out", default="gpu_check.json")
    ap.add_argument("--time-cap", type=float, default=540.0, help="seconds for everything; sections left are skipped")
    ap.add_argument("--c4", help="a local C4-format folder (c4-train.*.json.gz, c4-validation.*) for colab_t4")
    ap.add_argument("--tokenizer", help="tokenizer dir or hub name for colab_t4 (default: T5's, else trained here)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {','.join(SECTIONS)}")
    args = ap.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if os.environ.get("HF_HUB_OFFLINE") != "1" and not _hub_reachable():  # no waiting on retries to an unreachable hub
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    import torch
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    device = "cpu" if args.cpu or not torch.cuda.is_available() else "cuda"
    if device == "cpu" and not args.cpu:
        print("No CUDA device: running the --cpu form (tiny sizes).", flush=True)
    sizes = _sizes(device == "cpu")
    if device == "cpu":
        torch.set_num_threads(1)  # tiny matmuls: more threads only wait for each other on a busy machine
    start = time.perf_counter()
    result = {"mode": device, "time_cap_s": args.time_cap, "device": _device_info(device), "sections": {},
              "errors": []}
    print(f"gpu_check on {result['device']['name']} ({device}); time cap {args.time_cap:.0f} s", flush=True)

    def on_alarm(*_):
        raise TimeCap(f"time cap of {args.time_cap:.0f} s reached")
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, on_alarm)
        signal.alarm(max(1, int(args.time_cap)))
    out = Path(args.out)
    try:
        for name in args.sections.split(","):
            left = args.time_cap - (time.perf_counter() - start)
            if left < 10:
                result["sections"][name] = {"skipped": f"time cap ({left:.0f} s left)"}
                continue
            print(f"[{name}] ({left:.0f} s left)", flush=True)
            t = time.perf_counter()
            try:
                result["sections"][name] = SECTIONS[name](args, sizes, device, result["device"])
            except TimeCap as e:
                result["sections"][name] = {"error": str(e)}
                result["errors"].append(f"{name}: {e}")
                break
            except Exception as e:
                result["sections"][name] = {"error": f"{type(e).__name__}: {e}"[:1000],
                                            "traceback": traceback.format_exc()[-3000:]}
                result["errors"].append(f"{name}: {type(e).__name__}: {e}"[:300])
                print(f"   ERROR {type(e).__name__}: {e}"[:300], flush=True)
            result["sections"].setdefault(name, {})["seconds"] = time.perf_counter() - t
            result["total_s"] = time.perf_counter() - start
            out.write_text(json.dumps(result, indent=1, default=str))  # what is done survives a kill
    except TimeCap as e:
        result["errors"].append(str(e))
    finally:
        if hasattr(signal, "SIGALRM"):
            signal.alarm(0)
    result["total_s"] = time.perf_counter() - start
    out.write_text(json.dumps(result, indent=1, default=str))
    print_table(result)
    print(f"\nwrote {out} ({result['total_s']:.0f} s)")
    return 0


def print_table(result: dict):
    print(f"\n{'section':10} {'what':54} {'ms/step':>9} {'MFU':>7} {'peak GiB':>9} {'est. GiB':>9} {'peak/est':>8}")
    for name in ("precision", "compile", "hf"):
        sec = result["sections"].get(name, {})
        for r in sec.get("rows", sec.get("train", [])):
            if "ms_per_step" not in r:
                print(f"{name:10} {r.get('precision', '')} {r.get('error') or r.get('skipped')}"[:120]); continue
            what = f"{r['model']} {r['precision']} compile={r['compile']} micro {r['micro_batch']} ({r['inputs_length']}->{r['targets_length']})"
            mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "n/a"
            peak = f"{r['peak_gib']:.1f}" if "peak_gib" in r else "n/a"
            ratio = f"{r['peak_over_estimate']:.2f}" if "peak_over_estimate" in r else "n/a"
            print(f"{name:10} {what:54} {r['ms_per_step']:9.1f} {mfu:>7} {peak:>9} {r['estimate_gib']:9.2f} {ratio:>8}")
        if "error" in sec or "skipped" in sec:
            print(f"{name:10} {sec.get('error') or sec.get('skipped')}"[:160])
    t4 = result["sections"].get("colab_t4", {})
    if "steps" in t4:
        ms = t4["ms_per_step_logged"]
        print(f"{'colab_t4':10} {t4['steps']} steps, {t4['precision']}, micro {t4['micro_batch']}: logged ms/step "
              f"{', '.join(f'{x:.0f}' for x in ms)}; data wait {t4['data_wait_fraction']:.1%}; "
              f"est. {t4['estimate_gib']:.2f} GiB" + (f", peak {t4['peak_gib']:.2f} GiB" if "peak_gib" in t4 else ""))
    elif t4:
        print(f"{'colab_t4':10} {t4.get('error') or t4.get('skipped')}"[:160])
    gen = result["sections"].get("hf", {}).get("generate")
    if gen:
        print(f"{'hf':10} greedy generation: ours {gen['ours']['s']:.3f} s, HF {gen['hf']['s']:.3f} s "
              f"(ours {gen['ours_over_hf_speed']:.2f}x HF's speed)")
    for e in result["errors"]:
        print("error:", e[:200])


if __name__ == "__main__":
    sys.exit(main())
