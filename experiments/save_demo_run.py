"""Keep what the lessons read of a finished `nanot5-edu pretrain` run: nbs/results/demo_run.json.

    python experiments/save_demo_run.py runs/cpu-demo
    # lesson 05b's run twice as long (`nanot5-edu pretrain train.total_steps=6000 eval.every_steps=500
    #   logging.run_dir=runs/cpu-demo-long`):
    python experiments/save_demo_run.py runs/cpu-demo-long nbs/results/demo_long.json

Writes the resolved config, the training FLOPs per step, every evaluation (held-out loss, accuracy, the three gains
and their document-bootstrap 95% intervals) and the logged training loss, so a notebook opened anywhere (Colab
included) can plot the run without its run directory.
"""
import json, sys
from pathlib import Path

from omegaconf import OmegaConf
from nanot5_edu.spans import compute_input_and_target_lengths
from nanot5_edu.train import flops_per_step, make_config

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    run_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/cpu-demo")
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "nbs" / "results" / "demo_run.json"
    cfg = make_config("cpu-demo")
    saved = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"))
    _, targets = compute_input_and_target_lengths(cfg.data.inputs_length, cfg.data.noise_density, cfg.data.mean_noise_span_length)
    rows = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    keep = ("eval_loss", "eval_accuracy", "eval_loss_own", "eval_loss_same_document", "eval_loss_other_document",
            "span_gain", "document_gain", "encoder_gain", "span_gain_ci95", "document_gain_ci95", "encoder_gain_ci95",
            "eval_documents", "eval_gain_rows")
    evals = [{"step": r["step"], **{k: r[k] for k in keep if k in r}} for r in rows if "eval_loss" in r]
    train = [{k: r[k] for k in ("step", "loss", "lr", "grad_norm", "ms_per_step")} for r in rows if "loss" in r]
    result = {"run_dir": str(run_dir), "config": saved,
              "flops_per_step": flops_per_step(cfg.model, cfg.optim.batch_size * cfg.optim.grad_acc,
                                               cfg.data.inputs_length, targets),
              "evals": evals, "train": train}
    out.write_text(json.dumps(result, indent=1))
    last = evals[-1]
    print(f"wrote {out}: {len(evals)} evaluations; step {last['step']}: loss {last['eval_loss']:.3f}, "
          f"span {last['span_gain']:.3f}, document {last['document_gain']:.3f}")
