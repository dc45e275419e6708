#!/usr/bin/env bash
# Every lesson notebook's fast cells run as Colab runs them: the package built as a wheel and installed in a fresh
# virtual environment (no repository on its path; the dependencies come from this Python's site-packages as plain
# paths, offline), each notebook copied alone into an empty folder, the results URL unreachable. By hand (too slow for
# CI, which runs one such notebook in tests/test_wheel.py):   bash tools/colab_check.sh [NOTEBOOK_GLOB]
# Prints one line per notebook and a summary; exits non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
GLOB=${1:-"[0-9]*.ipynb"}
WORK=$(mktemp -d /tmp/colab_check.XXXX)
python3 -m pip wheel -q --no-deps --no-build-isolation -w "$WORK/wheel" . || exit 1
python3 - "$WORK" <<'PY'
import sys, pathlib
sys.path.insert(0, "tests")
from test_wheel import venv_with
work = pathlib.Path(sys.argv[1])
venv_with(next((work / "wheel").glob("*.whl")), work / "venv")
PY
export IN_TEST=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg
export NANOT5_EDU_RESULTS_URL="file://$WORK/no_such_repository" NANOT5_EDU_CACHE="$WORK/cache"
failed=0; total=0
for nb in nbs/$GLOB; do
  name=$(basename "$nb"); dir="$WORK/run/${name%.ipynb}"; mkdir -p "$dir"; cp "$nb" "$dir/"
  start=$(date +%s)
  if (cd "$dir" && "$WORK/venv/bin/python" -c "import sys, nbdev.test as t; ok, _ = t.test_nb(sys.argv[1], skip_flags=['slow', 'gpu'], basepath=None); sys.exit(0 if ok else 1)" "$name" >"$dir/log.txt" 2>&1); then
    echo "ok     $name ($(( $(date +%s) - start )) s)"
  else
    echo "FAILED $name ($(( $(date +%s) - start )) s): $dir/log.txt"; failed=$((failed + 1))
  fi
  total=$((total + 1))
done
echo "colab_check: $((total - failed)) of $total notebooks ran from the wheel in empty folders ($(date -u +%F), $(python3 -c 'import torch; print("torch", torch.__version__)'))"
[ "$failed" -eq 0 ]
