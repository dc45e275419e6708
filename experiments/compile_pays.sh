#!/usr/bin/env bash
# Does torch.compile pay for itself in the CPU demo? The demo recipe for 500 steps, eager vs compiled, through the
# real loop (`nanot5-edu pretrain`), on an otherwise idle 2-core machine; writes nbs/results/compile_cpu.json.
set -euo pipefail
cd "$(dirname "$0")/.."
for c in false true; do
  [ -f runs/compile_$c/summary.json ] || python -m nanot5_edu pretrain model.num_layers=1 model.num_decoder_layers=1 \
    optim.lr=4e-2 train.compile=$c train.total_steps=500 eval.every_steps=250 logging.every_steps=50 \
    checkpoint.every_steps=1000 logging.run_dir=runs/compile_$c checkpoint.resume=never logging.progress_bar=false
done
python - <<'PY'
import json
from pathlib import Path
out = {}
for c in ("false", "true"):
    rows = [json.loads(l) for l in Path(f"runs/compile_{c}/metrics.jsonl").read_text().splitlines() if "ms_per_step" in l]
    s = json.loads(Path(f"runs/compile_{c}/summary.json").read_text())
    out["compiled" if c == "true" else "eager"] = {
        "first_window_ms_per_step": rows[0]["ms_per_step"],  # includes the compilation
        "steady_ms_per_step": sum(r["ms_per_step"] for r in rows[1:]) / len(rows[1:]), "wall_s": s["wall_s"],
        "final_eval_loss": s["final_eval_loss"]}
out["steady_speedup"] = out["eager"]["steady_ms_per_step"] / out["compiled"]["steady_ms_per_step"]
print(json.dumps(out, indent=1))
Path("nbs/results/compile_cpu.json").write_text(json.dumps(out, indent=1))
PY
