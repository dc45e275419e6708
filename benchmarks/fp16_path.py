"""The fp16 / GPU path, measured side by side in one run (issue: "fp16 and the GPU path"). Each section is recorded
on its own in the JSON (--out); an error in one does not hide the others.

  overflow     the tiny model with its `wo` weights scaled so |wo output| ~ 1e5: loss in fp32, bf16, fp16 with the
               fp32 `wo` guard, and fp16 without it (the overflow the guard exists for)
  padding      an all-padding row (every key masked) in a padded batch: loss and gradients finite in fp32 / bf16 /
               fp16, with today's masks (half the dtype's minimum) and with the dtype's own minimum (what HF adds)
  guard_cost   an fp16 train step with the `wo` guard and without it (ms/step, same batch, same run)
  sync_cost    the one host sync an fp16 step cannot avoid (the loss scaler's inf check, `.item()`): a bf16 step with
               an added `.item()` against the same step without it
  compile      fine-tuning batches of varied length through `torch.compile` as `fit` calls it: graphs compiled,
               with and without the power-of-two length buckets (CUDA only: inductor; the CPU test uses dynamo alone)
  memory       estimate_memory's fine-tuning case (padding masks) against torch.cuda.max_memory_allocated (CUDA only)

  python benchmarks/fp16_path.py                 # CUDA if present (T5-Base sizes), else tiny sizes on the CPU
  python benchmarks/fp16_path.py --out fp16_path.json --sections overflow,padding
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
import traceback


def _device():
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def _machine(device: str) -> dict:
    import torch
    info = {"device": device, "torch": torch.__version__, "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine()}
    try:
        info["cpu"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    info["threads"] = torch.get_num_threads()
    return info


def _tiny():
    from nanot5_edu.layers import ModelConfig
    return ModelConfig(vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)


def _autocast(device, precision):
    import torch
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    return torch.autocast(device, dtype=dtype or torch.float32, enabled=dtype is not None)


def _set_guard(model, on: bool):
    "Every feed-forward's fp32 `wo` under fp16: on (the default) or off"
    from nanot5_edu.layers import GatedFeedForward
    for m in model.modules():
        if isinstance(m, GatedFeedForward):
            m.wo_in_fp32_under_fp16 = on


def section_overflow(device, big) -> dict:
    "Loss per precision on a model whose wo outputs reach ~1e5 (beyond fp16's 65,504)"
    import torch
    from nanot5_edu.layers import GatedFeedForward
    from nanot5_edu.model import T5
    torch.manual_seed(0)
    model = T5(_tiny()).to(device)
    ids = torch.randint(3, 250, (4, 32), device=device)
    labels = torch.randint(3, 250, (4, 8), device=device)
    ffs = [m for m in model.modules() if isinstance(m, GatedFeedForward)]
    outs = []
    hooks = [f.wo.register_forward_hook(lambda m, i, o: outs.append(o.detach().float().abs().max())) for f in ffs]
    with torch.no_grad():
        model(ids, labels=labels)
        scale = 1e5 / float(torch.stack(outs).max())
        for f in ffs:
            f.wo.weight.mul_(scale)
        outs.clear()
        model(ids, labels=labels)
    for h in hooks:
        h.remove()
    row = {"largest_wo_output_fp32": float(torch.stack(outs).max())}
    for name, precision, guard in [("fp32", "fp32", True), ("bf16", "bf16", True), ("fp16", "fp16", True),
                                   ("fp16_unguarded", "fp16", False)]:
        _set_guard(model, guard)
        with torch.no_grad(), _autocast(device, precision):
            row[name] = float(model(ids, labels=labels).loss)
    _set_guard(model, True)
    row["fp16_over_fp32"] = row["fp16"] / row["fp32"]
    return row


def section_padding(device, big) -> dict:
    "An all-padding row: finite loss and gradients per precision, with our masks and with the dtype's own minimum"
    import torch
    import nanot5_edu.model as M
    from nanot5_edu.model import T5
    torch.manual_seed(0)
    model = T5(_tiny()).to(device)
    ids = torch.randint(3, 250, (3, 16), device=device)
    mask = torch.ones_like(ids)
    mask[1] = 0          # row 1: every key is padding
    mask[2, 9:] = 0
    labels = torch.randint(3, 250, (3, 8), device=device)
    labels[1] = -100     # nothing to predict for it either
    rows = []
    original = M.mask_value
    for masks in ("half_min", "dtype_min"):
        M.mask_value = original if masks == "half_min" else (lambda dtype: torch.finfo(dtype).min)
        try:
            for precision in ("fp32", "bf16", "fp16"):
                model.zero_grad(set_to_none=True)
                with _autocast(device, precision):
                    out = model(ids, attention_mask=mask, labels=labels)
                out.loss.backward()
                grads_finite = all(bool(torch.isfinite(p.grad).all()) for p in model.parameters() if p.grad is not None)
                rows.append({"masks": masks, "precision": precision, "loss": float(out.loss),
                             "loss_finite": bool(torch.isfinite(out.loss)), "grads_finite": grads_finite,
                             "encoder_out_finite": bool(torch.isfinite(out.encoder_last_hidden_state).all())})
        finally:
            M.mask_value = original
    return {"rows": rows}


def _step_fn(model, opt, scaler, ids, labels, device, precision, extra_sync=False):
    import torch

    def step():
        with _autocast(device, precision):
            loss = model(ids, labels=labels).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt); scaler.update(); opt.zero_grad(set_to_none=True)
        if extra_sync:
            loss.item()
    return step


def _time(step, device, steps, warmup) -> float:
    import torch
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(warmup):
        step()
    sync()
    t = time.perf_counter()
    for _ in range(steps):
        step()
    sync()
    return (time.perf_counter() - t) / steps


def _base_setup(device, big, precision):
    import torch
    from nanot5_edu.model import T5
    from nanot5_edu.layers import get_config
    from nanot5_edu.optim import get_optimizer
    torch.manual_seed(0)
    cfg = get_config("t5-v1_1-base") if big else _tiny()
    model = T5(cfg).to(device).train()
    opt = get_optimizer("adamwscale", model.named_parameters(), 1e-3)
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    B, L_in, L_t = (32, 512, 114) if big else (8, 64, 16)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, cfg.vocab_size, (B, L_in), generator=g).to(device)
    labels = torch.randint(3, cfg.vocab_size, (B, L_t), generator=g).to(device)
    return model, opt, scaler, ids, labels


def section_guard_cost(device, big) -> dict:
    "fp16 train steps with and without the fp32 `wo`, alternated in rounds so drift hits both (TF32 on, as in `fit`)"
    import torch
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    model, opt, scaler, ids, labels = _base_setup(device, big, "fp16")
    step = _step_fn(model, opt, scaler, ids, labels, device, "fp16")
    times = {True: [], False: []}
    for _ in range(3):
        for guard in (True, False):
            _set_guard(model, guard)
            times[guard].append(_time(step, device, 10 if big else 5, 2))
    g, u = statistics.median(times[True]), statistics.median(times[False])
    return {"tf32": device == "cuda", "ms_per_step_guarded": g * 1e3, "ms_per_step_unguarded": u * 1e3, "guarded_over_unguarded": g / u,
            "shape": list(ids.shape) + [labels.shape[1]], "rounds": 3}


def section_sync_cost(device, big) -> dict:
    "A bf16 step with one added host sync (`.item()`, as the fp16 scaler's inf check does) vs the same step without"
    model, opt, scaler, ids, labels = _base_setup(device, big, "bf16")
    times = {True: [], False: []}
    for _ in range(3):
        for extra in (False, True):
            times[extra].append(_time(_step_fn(model, opt, scaler, ids, labels, device, "bf16", extra), device,
                                      10 if big else 5, 2))
    a, b = statistics.median(times[True]), statistics.median(times[False])
    return {"ms_per_step_with_sync": a * 1e3, "ms_per_step_without": b * 1e3, "sync_cost_ms": (a - b) * 1e3,
            "sync_cost_fraction": (a - b) / b}


def section_compile(device, big) -> dict:
    "Graphs compiled over fine-tuning batches of varied length, with and without length buckets (inductor on CUDA)"
    import random
    import torch
    import torch._dynamo as dynamo
    from nanot5_edu.finetune import PaddingCollator
    from nanot5_edu.model import T5
    from nanot5_edu.layers import get_config
    if device != "cuda":
        return {"skipped": "inductor is not run on the CPU here (tests/test_fp16_path.py counts dynamo graphs)"}
    out = {}
    for buckets in (False, True):
        dynamo.reset()
        dynamo.utils.counters.clear()
        torch.manual_seed(0)
        model = T5(get_config("t5-v1_1-small")).to(device).train()
        compiled = torch.compile(model)  # as fit calls it
        collate, rng = PaddingCollator(buckets=buckets), random.Random(0)
        shapes, t0, step_s = set(), time.perf_counter(), []
        for i in range(12):
            ex = [([rng.randrange(3, 30000) for _ in range(rng.randrange(20, 500))],
                   [rng.randrange(3, 30000) for _ in range(rng.randrange(2, 100))]) for _ in range(8)]
            b = {k: v.to(device) for k, v in collate(ex).items()}
            shapes.add((b["input_ids"].shape[1], b["labels"].shape[1]))
            t = time.perf_counter()
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = compiled(b["input_ids"], attention_mask=b["attention_mask"], labels=b["labels"],
                                decoder_attention_mask=b["decoder_attention_mask"]).loss
            loss.backward()
            torch.cuda.synchronize()
            step_s.append(time.perf_counter() - t)
        counters = dynamo.utils.counters
        out["buckets" if buckets else "no_buckets"] = {
            "batches": 12, "distinct_shapes": len(shapes), "frames_compiled": int(counters["stats"]["unique_graphs"]),
            "recompiles": sum(counters["recompiles"].values()) if "recompiles" in counters else None,
            "total_s": time.perf_counter() - t0, "last_6_median_ms": statistics.median(step_s[-6:]) * 1e3}
        del model, compiled
        torch.cuda.empty_cache()
    return out


def section_memory(device, big) -> dict:
    "estimate_memory with padding masks vs the CUDA peak of a fine-tuning-shaped step (bf16, padded batch)"
    import torch
    from nanot5_edu.config import estimate_memory, make_config
    if device != "cuda":
        return {"skipped": "CUDA peak only (tests/test_precision_memory.py checks the CPU case)"}
    rows = []
    for padding in (False, True):
        torch.cuda.empty_cache(); torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        model, opt, scaler, ids, labels = _base_setup(device, big, "bf16")
        mask = torch.ones_like(ids) if padding else None
        if padding:
            mask[:, ids.shape[1] // 2:] = 0
        for _ in range(2):
            with _autocast(device, "bf16"):
                loss = model(ids, attention_mask=mask, labels=labels).loss
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        cfg = make_config("t5-base", ["train.precision=bf16", "optim.batch_size=32"])
        est = estimate_memory(cfg, shape=(ids.shape[0], ids.shape[1], labels.shape[1]), padding_mask=padding)
        rows.append({"padding_mask": padding, "peak_gib": peak / 2 ** 30, "estimate_gib": est["total"] / 2 ** 30,
                     "attention_bias_gib": est["attention_bias"] / 2 ** 30, "peak_over_estimate": peak / est["total"]})
        del model, opt, scaler
        torch.cuda.empty_cache()
    return {"rows": rows}


def section_explain(device, big) -> dict:
    "Graph breaks of the model's forward under torch._dynamo.explain: pre-training and fine-tuning inputs, per precision"
    import torch
    import torch._dynamo as dynamo
    from nanot5_edu.model import T5
    torch.manual_seed(0)
    model = T5(_tiny()).to(device)
    ids = torch.randint(3, 250, (2, 32), device=device); labels = torch.randint(3, 250, (2, 8), device=device)
    am, dam = torch.ones_like(ids), torch.ones_like(labels)
    am[1, 20:] = 0; dam[1, 5:] = 0
    rows = []
    for precision in ("fp32", "bf16", "fp16"):
        for name, kw in (("pretrain", {}), ("finetune", {"attention_mask": am, "decoder_attention_mask": dam})):
            def f(ids, labels, kw=kw):
                with _autocast(device, precision):
                    return model(ids, labels=labels, **kw).loss
            dynamo.reset()
            e = dynamo.explain(f)(ids, labels)
            rows.append({"precision": precision, "inputs": name, "graph_breaks": e.graph_break_count,
                         "reasons": [str(r.reason)[:300] for r in e.break_reasons][:3]})
    return {"rows": rows}


SECTIONS = {"explain": section_explain, "overflow": section_overflow, "padding": section_padding, "guard_cost": section_guard_cost,
            "sync_cost": section_sync_cost, "compile": section_compile, "memory": section_memory}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="fp16_path.json")
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--tiny", action="store_true", help="tiny sizes even on a GPU")
    args = ap.parse_args(argv)
    import torch
    device = _device()
    big = device == "cuda" and not args.tiny
    if device == "cpu":
        torch.set_num_threads(1)
    result = {"machine": _machine(device), "sizes": "T5-Base (batch 32, 512 -> 114)" if big else "tiny", "sections": {}}
    print(f"fp16_path on {result['machine'].get('gpu', result['machine']['cpu'])} ({device})", flush=True)
    for name in args.sections.split(","):
        t = time.perf_counter()
        try:
            result["sections"][name] = SECTIONS[name](device, big)
        except Exception as e:
            result["sections"][name] = {"error": f"{type(e).__name__}: {e}"[:1000], "traceback": traceback.format_exc()[-3000:]}
        result["sections"][name]["seconds"] = time.perf_counter() - t
        print(f"[{name}] {json.dumps(result['sections'][name], default=str)[:600]}", flush=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
