"""Which CPU recipe teaches *span filling* (issue 20, part 3)? Scored by `span_gain`, not the encoder gain.

Every recipe is a change to the current `cpu-demo` preset (1 + 1 layers, lr 4e-2, batch 16, inputs 128), keeping
T5's objective (noise density 0.15, mean span 3). Two phases, so that timing is not taken under load:

    python experiments/span_sweep.py calibrate            # ms/step of every recipe, on a quiet machine
    python experiments/span_sweep.py run demo enc4 ... --budget 300 --seed 2137

`calibrate` times 12 training steps per recipe (after 10 warm-up steps) and writes
nbs/results/span_sweep_calibration.json. `run` gives each recipe `total_steps = budget / calibrated ms/step`,
so every schedule (warmup + cosine) ends at the same wall-clock on idle cores whatever else the machine is doing,
and appends one JSON line per (recipe, seed, budget) to nbs/results/span_sweep.jsonl, with the held-out loss,
the three gains and their document-bootstrap 95% intervals at every evaluation, and the training FLOPs per step.
"""
import argparse, json, os, sys, time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1"); os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false"); os.environ.setdefault("MPLBACKEND", "Agg")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo_sweep import step_cpu_ms, tokenizer_dir  # noqa: E402
from nanot5_edu.train import flops_per_step, make_config, train  # noqa: E402
from nanot5_edu.spans import compute_input_and_target_lengths  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "nbs" / "results" / "span_sweep.jsonl"
CALIB = ROOT / "nbs" / "results" / "span_sweep_calibration.json"
RUNS = ROOT / "runs" / "span_sweep"

RECIPES = {
    "demo": [],
    "enc4": ["model.num_layers=4"],
    "L2": ["model.num_layers=2", "model.num_decoder_layers=2"],
    "len256": ["data.inputs_length=256", "optim.batch_size=8"],
    "len512": ["data.inputs_length=512", "optim.batch_size=4"],
    "d128-enc4": ["model.d_model=128", "model.d_ff=512", "model.num_heads=4", "model.num_layers=4"],
}
GAINS = ("encoder_gain", "span_gain", "document_gain")


def config(name: str, extra: list[str] = ()):
    return make_config("cpu-demo", RECIPES[name] + [f"data.tokenizer={tokenizer_dir(8000)}", "checkpoint.resume=never",
                                                    "logging.progress_bar=false", *extra])


def calibrate(names):
    old = json.loads(CALIB.read_text()) if CALIB.exists() else {}
    for name in names:
        old[name] = round(step_cpu_ms(config(name)), 1)
        print(f"{name:12} {old[name]:7.1f} ms/step", flush=True)
    import torch, platform
    old["_machine"] = f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, torch {torch.__version__}"
    CALIB.write_text(json.dumps(old, indent=1))


def run(name: str, budget_s: float, seed: int, eval_points: int, keep: bool) -> dict:
    ms = json.loads(CALIB.read_text())[name]
    steps = max(50, int(budget_s * 1000 / ms))
    run_dir = RUNS / f"{name}_b{budget_s:.0f}_s{seed}"
    extra = [f"train.seed={seed}", f"train.total_steps={steps}", f"optim.warmup_steps={min(100, steps // 10)}",
             f"eval.every_steps={max(1, steps // eval_points)}", f"logging.every_steps={max(1, steps // 20)}",
             f"logging.run_dir={run_dir}",
             f"checkpoint.every_steps={max(1, steps // eval_points) if keep else 10**9}",
             f"checkpoint.keep_last={eval_points + 1 if keep else 1}"]
    cfg = config(name, extra)
    _, targets_length = compute_input_and_target_lengths(cfg.data.inputs_length, cfg.data.noise_density,
                                                        cfg.data.mean_noise_span_length)
    flops = flops_per_step(cfg.model, cfg.optim.batch_size * cfg.optim.grad_acc, cfg.data.inputs_length, targets_length)
    t0 = time.time()
    s = train(cfg)
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    curve = [{"step": r["step"], "flops": r["step"] * flops, "eval_loss": r["eval_loss"],
              **{g: r.get(g) for g in GAINS}, **{f"{g}_ci95": r.get(f"{g}_ci95") for g in GAINS}}
             for r in rows if "eval_loss" in r]
    return {"name": name, "overrides": RECIPES[name], "seed": seed, "budget_s": budget_s, "calib_ms_per_step": ms,
            "steps": steps, "flops_per_step": flops, "wall_s_under_load": round(time.time() - t0, 1),
            "eval_loss": s["final_eval_loss"], "eval_accuracy": s["final_eval_accuracy"],
            **{g: s[f"final_{g}"] for g in GAINS}, **{f"{g}_ci95": s[f"final_{g}_ci95"] for g in GAINS},
            "curve": curve}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("phase", choices=["calibrate", "run"])
    ap.add_argument("names", nargs="*", default=list(RECIPES))
    ap.add_argument("--budget", type=float, default=300, help="seconds of training per recipe on idle cores")
    ap.add_argument("--seed", type=int, default=2137)
    ap.add_argument("--eval-points", type=int, default=6)
    ap.add_argument("--keep-checkpoints", action="store_true")
    args = ap.parse_args()
    if args.phase == "calibrate":
        calibrate(args.names)
        sys.exit(0)
    for name in args.names:
        r = run(name, args.budget, args.seed, args.eval_points, args.keep_checkpoints)
        key = lambda d: (d["name"], d["seed"], d["budget_s"])
        old = [l for l in (OUT.read_text().splitlines() if OUT.exists() else []) if key(json.loads(l)) != key(r)]
        OUT.write_text("".join(l + "\n" for l in old + [json.dumps(r)]))
        print(f"== {name} seed {args.seed}: {r['steps']} steps, loss {r['eval_loss']:.3f}, span {r['span_gain']:.3f} "
              f"{r['span_gain_ci95']}, document {r['document_gain']:.3f}", flush=True)
