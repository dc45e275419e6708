#!/usr/bin/env bash
# Build the course website into _site/ from the notebooks' saved outputs (nothing is executed), offline.
#   bash tools/site.sh            build (sets up .venv-site/ on first use)
#   bash tools/site.sh --check    build, then open every page in headless Chromium (tools/check_site.py)
# The site's tools live in their own virtual environment, .venv-site/ (pyproject's `site` extra, pinned), made with
# --system-site-packages so that the API page imports the nanot5_edu installed with its dependencies, while
# Sphinx's newer docutils & co. stay out of the environment the tests run in.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false MPLBACKEND=Agg PIP_DISABLE_PIP_VERSION_CHECK=1
PY=${PYTHON:-python3}
VENV=.venv-site
mapfile -t DEPS < <($PY -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["site"]))')
SPEC="${DEPS[*]}"   # reinstall when the pins change

if [[ ! -x $VENV/bin/python || "$(cat $VENV/.spec 2>/dev/null)" != "$SPEC" ]]; then
  echo "== site: installing the site tools into $VENV"
  $PY -m venv --system-site-packages $VENV
  # the `site` extra only: the project's own dependencies come from the system site-packages
  $VENV/bin/python -m pip install -q "${DEPS[@]}"
  echo "$SPEC" > $VENV/.spec
fi

start=$(date +%s)
rm -rf _site build/site
$VENV/bin/python site/stage.py build/site/src
# -W: a broken cross-reference, a missing image or a failed autodoc import fails the build; -j auto: both cores.
# Built under build/site/ (myst-nb writes its image files beside the output folder), then moved to _site/.
$VENV/bin/python -m sphinx -b html -q -W --keep-going -j auto -c site build/site/src build/site/html
mv build/site/html _site
touch _site/.nojekyll   # GitHub Pages: serve _static/ and friends as they are
echo "== site: built _site/ ($(find _site -name '*.html' | wc -l) pages) in $(( $(date +%s) - start )) s"

if [[ "${1:-}" == "--check" ]]; then
  $VENV/bin/python tools/check_site.py _site
fi
