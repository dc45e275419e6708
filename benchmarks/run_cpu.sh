#!/usr/bin/env bash
# Run every CPU benchmark once and keep what each printed, with the machine and its load, in one folder:
#   bash benchmarks/run_cpu.sh [OUT_DIR [NAME ...]]   (default benchmarks/results/cpu_<today>, every benchmark; about
#   15 minutes on 2 cores). With names, only those run again; machine.txt gains their lines.
# Each benchmark prints ours and its reference side by side, measured in the same run, and the ratio; the README's
# Speed table quotes these logs (tools/check_claims.py checks it against them). Timings need a quiet machine:
# machine.txt records the load average before and after each benchmark, and whatever else ran (top's first lines).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-benchmarks/results/cpu_$(date +%F)}
shift || true
NAMES=${*:-tokenizer spans optim model stream stream_stalls objectives}
mkdir -p "$OUT"
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1  # each script sets TOKENIZERS_PARALLELISM itself
{
  echo "date: $(date -u +%FT%TZ)"
  lscpu | grep -E "Model name|^CPU\(s\)|Thread|Core|Socket"
  python -c "import platform, torch, transformers; print('python', platform.python_version(), '| torch', torch.__version__, '| transformers', transformers.__version__)"
} >> "$OUT/machine.txt"
for name in $NAMES; do
  echo "== $name" | tee -a "$OUT/machine.txt"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
  start=$(date +%s)
  python "benchmarks/$name.py" > "$OUT/$name.log" 2>&1
  rc=$?
  echo "exit $rc, wall $(( $(date +%s) - start )) s, load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$OUT/machine.txt"
  top -bn1 | sed -n '7,12p' >> "$OUT/machine.txt"
done
echo "logs in $OUT"
