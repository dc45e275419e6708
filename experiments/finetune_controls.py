"""Positive controls for fine-tuning (issue 20, part 5) -> nbs/results/finetune_controls.json
(nbs/09b_what_pretraining_buys reads all three parts)

Does the fine-tuning pipeline work, and what does pre-training buy? Three measurements, all through the lesson's
own code (`finetune`, `load_sni`, `evaluate_sni`, `name_copy_share` from `nanot5_edu.finetune`):

(a) memorisation: the final cpu-demo checkpoint fine-tuned on 5 instances per training task (30 in all) and scored on
    those same 30 instances every `--every` steps (Rouge-L, exact match, rank accuracy, the loss on them, the E2E
    name-copy share), beside the baselines `evaluate_sni` always computes;
(b) the E2E name-copy share (the share of generations that contain the input's `name[...]` value) of every model
    here, beside its baselines (the majority answer, the best a constant naming one restaurant can do, and the copy-the-name
    oracle = 100%);
(c) the lesson's experiment recipe started from pre-training checkpoints of increasing span_gain / document_gain
    (steps 0 = the random init `train` draws with the demo's seed, 500, 1500, 3000 of the cpu-demo run), over seeds,
    with each checkpoint's gains and their 95% intervals read from the run's metrics.jsonl (the eval at that step).

The pre-training run must keep every checkpoint (`nanot5-edu pretrain ... checkpoint.keep_last=7`, as runs/cpu-demo
does). Full experiment (CPU, ~the time printed by a tiny run):

    python experiments/finetune_controls.py --run runs/cpu-demo    # 4 checkpoints x 3 seeds x 2 sizes + (a)

A tiny check of the whole path (a minute or two):

    python experiments/finetune_controls.py --steps 10 --memorise-steps 10 --every 5 --seeds 0 \
        --checkpoints 0 500 --instances 100 --out /tmp/controls.json
"""
import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from nanot5_edu.finetune import (E2E, PaddingCollator, e2e_name, evaluate_sni, finetune, load_model, load_sni,
                                 make_finetune_config, name_copy_share, tokenize_sni)
from nanot5_edu.model import HF_ALIAS_KEYS, T5
from nanot5_edu.train import export_hf

# The recipe of the lesson's experiment (nbs/09b_what_pretraining_buys.py, the slow cells of "The experiment"), steps aside:
# keep the two in step.
RECIPE = ["train.precision=bf16", "optim.lr=1e-3", "optim.batch_size=8", "eval.every_steps=50", "eval.batches=1",
          "eval.batch_size=32", "eval.samples=0", "logging.every_steps=50", "sni.max_source_length=256",
          "sni.max_target_length=48", "sni.seen_instances_per_task=25", "sni.unseen_instances_per_task=50",
          "sni.eval_batch_size=32"]
QUIET = ["checkpoint.resume=never", "logging.progress_bar=false"]
SCORES = ("rougeL", "exact_match", "rank_accuracy", "majority_rougeL", "majority_exact_match", "majority_accuracy",
          "copy_input_rougeL", "copy_input_exact_match")


def checkpoint_dir(run: Path, step: int) -> Path:
    "runs/<run>/checkpoints/step_00000500 (the layout `fit` writes); a clear error when it was pruned or never written"
    path = run / "checkpoints" / f"step_{step:08d}"
    if not (path / "model.safetensors").exists():
        have = sorted(p.name for p in (run / "checkpoints").glob("step_*"))
        raise SystemExit(f"{path} not found (the run has {have}): pre-train with checkpoint.keep_last high enough "
                         "to keep every checkpoint, or pass --checkpoints with the steps it has.")
    return path


def random_init_start(run: Path, root: Path) -> Path:
    "Step 0: the weights `train` starts from (set_seed(train.seed), then T5(cfg.model)), exported with the run's tokenizer"
    from accelerate.utils import set_seed
    cfg = json.loads((checkpoint_dir(run, last_step(run)) / "trainer_state.json").read_text())["config"]
    model, tokenizer = load_model(checkpoint_dir(run, last_step(run)))
    set_seed(cfg["train"]["seed"])
    return export_hf(T5(model.config), tokenizer, root / "step_0-hf")


def last_step(run: Path) -> int:
    return max(int(p.name.split("_")[1]) for p in (run / "checkpoints").glob("step_*"))


def gains_at(run: Path, step: int) -> dict:
    "span/document/encoder gain (with ci95) of the pre-training run's evaluation at `step`"
    for line in (run / "metrics.jsonl").read_text().splitlines():
        m = json.loads(line)
        if m["step"] == step and "span_gain" in m:
            return {k: m[k] for k in ("eval_loss", "span_gain", "document_gain", "encoder_gain", "span_gain_ci95",
                                      "document_gain_ci95", "encoder_gain_ci95")}
    raise SystemExit(f"{run / 'metrics.jsonl'} has no evaluation at step {step}: pick steps that are multiples of "
                     "eval.every_steps of that run.")


def e2e_rows(ds) -> list[dict]:
    return [r for r in ds.to_list() if r["task"] == E2E]


def name_share_baselines(rows: list[dict]) -> dict:
    "The name-copy share of answers that need no model, on the same E2E instances"
    names = [e2e_name(r["input"]) for r in rows]
    inputs = [r["input"] for r in rows]
    best = max(set(names), key=names.count)  # the best a constant naming one restaurant can do: the most frequent
    return {"instances": len(rows), "majority_answer": name_copy_share([rows[0]["majority"]] * len(rows), inputs),
            "best_constant": name_copy_share([best] * len(rows), inputs), "best_constant_text": best,
            "copy_name_oracle": name_copy_share(names, inputs)}


@torch.no_grad()
def teacher_forced_loss(model, tokenizer, ds, max_source_length: int, max_target_length: int) -> float:
    "Mean per-token loss of the references given the prompts (the fine-tuning loss, on these instances)"
    model.eval()
    b = PaddingCollator(tokenizer.pad_token_id)(tokenize_sni(ds, tokenizer, max_source_length, max_target_length))
    return model(b["input_ids"], b["attention_mask"], labels=b["labels"]).loss.item()


def memorisation(start: Path, steps: int, every: int, seed: int, root: Path, lr: float = 1e-3) -> dict:
    "(a) fine-tune on 5 instances per training task and score those same instances every `every` steps"
    run_dir, t0 = root / "memorise", time.time()
    finetune(make_finetune_config(str(start), overrides=[
        *RECIPE, f"optim.lr={lr}", f"train.total_steps={steps}", "sni.instances_per_task=5", f"train.seed={seed}",
        f"eval.every_steps={every}", f"checkpoint.every_steps={every}", f"checkpoint.keep_last={steps // every + 1}",
        "sni.eval_on=seen", "sni.seen_instances_per_task=5", "eval.batch_size=30",  # held-out loss: 30 new instances
        f"logging.run_dir={run_dir}", *QUIET]))
    train_s = time.time() - t0
    model, tokenizer = load_model(start, 0.0)
    ds, _ = load_sni(None, "train", 5, tokenizer, 256, seed=seed)  # the very instances `finetune` trained on
    e2e = e2e_rows(ds)
    curve = []
    for step in [0, *range(every, steps + 1, every)]:
        if step:
            state = load_file(run_dir / "checkpoints" / f"step_{step:08d}" / "model.safetensors")
            missing, unexpected = model.load_state_dict(state, strict=False)  # the shared embedding's aliases aside
            assert set(missing) <= set(HF_ALIAS_KEYS) and not unexpected, (missing, unexpected)
        s = evaluate_sni(model, tokenizer, ds, 32, 256, 48)
        predictions = {p["id"]: p["prediction"] for p in s["predictions"]}
        curve.append({"step": step, "loss": teacher_forced_loss(model, tokenizer, ds, 256, 48),
                      **{k: s["overall"][k] for k in SCORES},
                      "e2e_name_share": name_copy_share([predictions[r["id"]] for r in e2e], [r["input"] for r in e2e]),
                      "distinct_outputs": len(set(predictions.values()))})
        print(f"memorise step {step:4d}: loss {curve[-1]['loss']:.3f}, Rouge-L {curve[-1]['rougeL']:5.1f}, "
              f"EM {curve[-1]['exact_match']:5.1f}, rank acc. {curve[-1]['rank_accuracy']:5.1f}, "
              f"{curve[-1]['distinct_outputs']} distinct outputs of {len(ds)}", flush=True)
    last = s["predictions"]
    shutil.rmtree(run_dir / "checkpoints"); shutil.rmtree(run_dir / "hf")
    return {"start": str(start), "instances": len(ds), "steps": steps, "every": every, "seed": seed, "lr": lr,
            "train_s": train_s, "wall_s": time.time() - t0, "curve": curve,
            "name_share_baselines": name_share_baselines(e2e),
            "final_predictions": [{k: p[k] for k in ("task", "prediction", "references")} for p in last]}


def transfer_run(start: Path, n: int, seed: int, steps: int, run_dir: Path, seen_e2e: list[dict]) -> dict:
    "(c) one fine-tuning run of the lesson's recipe from `start`; what the tables and plots need"
    t0 = time.time()
    finetune(make_finetune_config(str(start), overrides=[
        *RECIPE, f"train.total_steps={steps}", f"eval.every_steps={min(50, steps)}", f"checkpoint.every_steps={steps}",
        f"sni.instances_per_task={n}", f"train.seed={seed}", f"logging.run_dir={run_dir}", *QUIET]))
    scores = json.loads((run_dir / "sni_eval.json").read_text())
    metrics = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    held_out = [(m["step"], m["eval_loss"]) for m in metrics if "eval_loss" in m]
    predictions = {p["id"]: p["prediction"] for p in scores["seen"]["predictions"]}
    e2e_predictions = [predictions[r["id"]] for r in seen_e2e]
    for bulky in ("checkpoints", "hf"):  # weights and optimizer state, not needed here
        shutil.rmtree(run_dir / bulky)
    step_ms = [m["ms_per_step"] for m in metrics if m.get("ms_per_step")]
    return {"instances_per_task": n, "seed": seed, "wall_s": time.time() - t0, "held_out_loss": held_out,
            "ms_per_step": sum(step_ms) / len(step_ms) if step_ms else None,
            "lowest_held_out_loss": min(l for s, l in held_out if s > 0),
            **{name: {"overall": {k: s["overall"][k] for k in SCORES},
                      "e2e": {k: s["per_task"][E2E][k] for k in SCORES} if E2E in s["per_task"] else None}
               for name, s in scores.items()},
            "e2e_name_share": name_copy_share(e2e_predictions, [r["input"] for r in seen_e2e]),
            "e2e_distinct_outputs": len(set(e2e_predictions)), "e2e_predictions": e2e_predictions[:5]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", type=Path, default=Path("runs/cpu-demo"), help="the cpu-demo pre-training run (every checkpoint kept)")
    p.add_argument("--checkpoints", type=int, nargs="+", default=[0, 500, 1500, 3000], help="pre-training steps to start from (0: random init)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--instances", type=int, nargs="+", default=[10, 100],
                   help="training instances per task, (c): the lesson's experiment found pre-training's largest effect "
                        "on the held-out loss at 10 (0.77 nats), within the seed spread at 100")
    p.add_argument("--steps", type=int, default=200, help="fine-tuning steps of each (c) run (the lesson's: 200)")
    p.add_argument("--memorise-steps", type=int, default=400, help="fine-tuning steps of (a)")
    p.add_argument("--every", type=int, default=25, help="(a) is scored every this many steps")
    p.add_argument("--memorise-lr", type=float, default=1e-3, help="the learning rate of (a)")
    p.add_argument("--parts", nargs="+", choices=("a", "c"), default=["a", "c"], help="run (a) and/or (c); (b) comes with both")
    p.add_argument("--out", type=Path, default=Path("nbs/results/finetune_controls.json"))
    p.add_argument("--work", type=Path, default=None, help="run directories (default: a temporary one, removed)")
    args = p.parse_args(argv)
    if args.memorise_steps % args.every:
        raise SystemExit(f"--memorise-steps {args.memorise_steps} is not a multiple of --every {args.every}.")
    t0, root = time.time(), args.work or Path(tempfile.mkdtemp(prefix="finetune-controls-"))
    final = checkpoint_dir(args.run, last_step(args.run))
    checkpoints = args.checkpoints if "c" in args.parts else []
    starts = {step: (random_init_start(args.run, root) if step == 0 else checkpoint_dir(args.run, step))
              for step in checkpoints}  # every start found before any compute
    gains = {step: gains_at(args.run, step) for step in checkpoints}

    memorise = (memorisation(final, args.memorise_steps, args.every, args.seeds[0], root, args.memorise_lr)
                if "a" in args.parts else None)
    _, tokenizer = load_model(final)
    seen_e2e = e2e_rows(load_sni(None, "seen", 25, tokenizer, 256)[0])  # the recipe's seen set, its E2E instances
    transfer = []
    for step, start in starts.items():
        for n in args.instances:
            for seed in args.seeds:
                r = transfer_run(start, n, seed, args.steps, root / f"step{step}-n{n}-seed{seed}", seen_e2e)
                transfer.append({"pretraining_step": step, **gains[step], **r})
                print(f"start step {step:5d} n={n:3} seed={seed}: held-out loss {r['held_out_loss'][-1][1]:.3f} "
                      f"(lowest {r['lowest_held_out_loss']:.3f}), E2E Rouge-L {r['seen']['e2e']['rougeL']:5.1f}, "
                      f"name share {r['e2e_name_share']:5.1f}% ({r['wall_s']:.0f} s)", flush=True)
    results = {"run": str(args.run), "final_checkpoint": str(final), "recipe": RECIPE, "steps": args.steps,
               "seeds": args.seeds, "instances": args.instances, "checkpoints": checkpoints,
               "memorisation": memorise, "name_share_baselines": name_share_baselines(seen_e2e),
               "transfer": transfer, "wall_s": time.time() - t0, "cpu": _cpu()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    if args.work is None:
        shutil.rmtree(root)
    print(f"wrote {args.out} in {results['wall_s'] / 60:.1f} min")
    print(estimate_full(results))
    return results


def estimate_full(results: dict, checkpoints: int = 4, seeds: int = 3, sizes: int = 2, steps: int = 200,
                  memorise_steps: int = 400, every: int = 25) -> str:
    "The full experiment's time, scaled from this run's: fixed cost per run + steps x the measured step time"
    out, total, step_s = [], 0.0, None
    runs = [r for r in results["transfer"] if r["ms_per_step"]]
    if runs:  # the step time of a few-step run includes the first steps' warm-up: an upper bound
        step_s = sum(r["ms_per_step"] for r in runs) / len(runs) / 1000
        fixed = sum(r["wall_s"] for r in runs) / len(runs) - results["steps"] * step_s
        per_run = fixed + steps * step_s
        total += checkpoints * seeds * sizes * per_run
        out.append(f"(c) {checkpoints * seeds * sizes} runs x ({fixed:.0f} s fixed + {steps} steps x "
                   f"{step_s:.2f} s) = {total / 60:.1f} min")
    mem = results["memorisation"]
    if mem:
        points = len(mem["curve"])
        eval_s = (mem["wall_s"] - mem["train_s"]) / points
        step_s = step_s or mem["train_s"] / mem["steps"]  # without (c): the fixed cost counted per step (an upper bound)
        fixed = max(mem["train_s"] - mem["steps"] * step_s, 0.0)
        mem_s = fixed + memorise_steps * step_s + eval_s * (memorise_steps // every + 1)
        total += mem_s
        out.append(f"(a) {fixed:.0f} s fixed + {memorise_steps} steps x {step_s:.2f} s + {memorise_steps // every + 1} "
                   f"evaluations x {eval_s:.0f} s = {mem_s / 60:.1f} min")
    return ("estimate of the full experiment at this machine's current speed: " + "; ".join(out)
            + f"; in all {total / 60:.0f} min")


def _cpu() -> str:
    import platform
    try:
        model = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor()
    return f"{model}, {torch.get_num_threads()} threads"


if __name__ == "__main__":
    main()
