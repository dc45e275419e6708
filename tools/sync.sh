#!/usr/bin/env bash
# After editing notebooks (either half of a pair): sync pairs, export the package, clean, re-sync, render README.
set -euo pipefail
cd "$(dirname "$0")/.."
jupytext --sync nbs/*.ipynb nbs/*.py 2>&1 | grep -E "Updating|Error|error" | grep -v timestamp || true
nbdev-export
python tools/strip_escapes.py   # widget cells run headless save clear_output as escape codes
nbdev-clean
jupytext --sync nbs/*.ipynb 2>&1 | grep -E "Updating|Error|error" | grep -v timestamp || true
python tools/mkreadme.py
