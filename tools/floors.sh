#!/usr/bin/env bash
# The lowest versions pyproject.toml allows, tested: a fresh virtual environment with torch, transformers, tokenizers,
# accelerate, datasets, torchdata and sentencepiece at their floors (the other dependencies at whatever pip resolves
# beside them), then a fast subset of the tests. By hand, not in .ci/run (it downloads a torch build):
#   bash tools/floors.sh                 # the floors written in pyproject.toml
#   TORCH_INDEX=https://download.pytorch.org/whl/cpu bash tools/floors.sh   # a CPU-only torch (a smaller download)
# Raise a floor in pyproject.toml to the lowest version this passes with, and name it in the README.
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-/tmp/nanot5_floors}
floor() {  # the ">=X" of a dependency in pyproject.toml
  python3 - "$1" <<'PY'
import re, sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
name = sys.argv[1]
spec = next(d for d in deps if re.split(r"[<>=!~ ;\[]", d)[0].lower() == name)
m = re.search(r">=\s*([\w.]+)", spec)
print(m.group(1) if m else "")
PY
}
pins=()
for dep in torch transformers tokenizers accelerate datasets torchdata sentencepiece; do
  v=$(floor $dep); [ -n "$v" ] && pins+=("$dep==$v")
done
echo "floors: ${pins[*]}"
rm -rf "$VENV"; python3 -m venv "$VENV" || exit 1
PIP=("$VENV/bin/python" -m pip install -q)
[ -n "${TORCH_INDEX:-}" ] && { "${PIP[@]}" --index-url "$TORCH_INDEX" "${pins[0]}" || exit 1; }
"${PIP[@]}" "${pins[@]}" || { echo "floors: these versions do not install together: ${pins[*]}"; exit 1; }
"${PIP[@]}" --no-deps -e . && "${PIP[@]}" $("$VENV/bin/python" - "${pins[@]}" <<'PY'
import re, sys, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
pinned = {p.split("==")[0] for p in sys.argv[1:]}  # those with a floor, installed at it above
print(" ".join(d.split("#")[0].strip() for d in deps if re.split(r"[<>=!~ ;\[]", d)[0].lower() not in pinned),
      "pytest pytest-xdist hypothesis nbdev==3.3.26 jupytext==1.19.6")
PY
) || exit 1
"$VENV/bin/python" -c "import torch, transformers, accelerate, datasets, torchdata; print('installed: torch', torch.__version__, '| transformers', transformers.__version__, '| accelerate', accelerate.__version__, '| datasets', datasets.__version__, '| torchdata', torchdata.__version__)"
HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 "$VENV/bin/python" -m pytest -q -x -p no:cacheprovider \
  tests/test_fp16_path.py tests/test_hot_loop.py tests/test_spans.py tests/test_data.py tests/test_tokenizer_t5.py \
  tests/test_train.py::test_kill_9_and_resume_gives_identical_losses "$@"
