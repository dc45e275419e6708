"""Write the student exercise notebooks exercises/NN_lesson.ipynb from the registry in `nanot5_edu.exercises`.

    python exercises/build_notebooks.py            # rewrite exercises/*.ipynb (stubs only, no outputs)
    python exercises/build_notebooks.py OUT_DIR    # write them elsewhere, e.g. into a student hand-out folder

The notebooks hold the tasks, the stubs and the check cells; no solution. The reference solutions live in
tests/exercise_bank.py, which is not part of the installed package: hand students these notebooks (and the
`pip install` line in their first cell), not the repository's tests/ folder. `python tools/student_copy.py OUT_DIR`
writes such a hand-out and checks it holds no reference solution; docs/teaching.md says how to grade the returns.
"""
import json
import re
import sys
from pathlib import Path

from nanot5_edu.exercises import EXERCISES

ROOT = Path(__file__).resolve().parents[1]

INSTALL = ('import importlib.util, subprocess, sys\n'
           'if importlib.util.find_spec("nanot5_edu") is None:  # the README\'s install line\n'
           '    subprocess.run([sys.executable, "-m", "pip", "install", "-q", '
           '"git+https://github.com/nanot5-edu/nanot5_edu"], check=True)')

SETUP = ("import math\n"
         "import torch\n"
         "import torch.nn.functional as F\n"
         "from torch import BoolTensor, LongTensor, Tensor\n\n"
         "from nanot5_edu.exercises import EXERCISES")

TRY_IT = {  # a hint for trying the functions out before checking them, where inputs are not obvious
    "01_tokenizer": "To try your functions, train a small tokenizer as in the lesson, e.g. "
                    "`train_tokenizer(load_corpus('sotu')['text'][:200], vocab_size=500, out_dir='tok')` "
                    "(`from nanot5_edu.data import load_corpus`, `from nanot5_edu.tokenizer import train_tokenizer`).",
    "05_pretraining": "To try your functions, build a tiny model: `from nanot5_edu.layers import ModelConfig; from nanot5_edu.model import T5`; "
                   "`model = T5(ModelConfig(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4))`.",
    "07_config": "To try your functions, take a preset (`from nanot5_edu.layers import get_config`): nanoT5's step, "
                 "`flops_per_step(get_config('t5-v1_1-base'), 128, 512, 114)`, is about 54.5e12 FLOPs.",
    "07b_checkpoints": "To try `atomic_write`, pass a function that writes bytes to the file it is given, e.g. "
                       "`atomic_write('ckpt.bin', lambda f: f.write(b'weights'))`; the check also hands it writers "
                       "that fail halfway, as a full disk does.",
}


def lesson_key(lesson: str) -> str:
    "'03' for 03_t5_layers, '03b' for 03b_t5_model: the notebook's number and its pytest marker's suffix"
    return lesson.split("_")[0]


def _lesson_title(lesson: str) -> str:
    source = ROOT / "nbs" / f"{lesson}.py"
    if not source.exists():
        raise FileNotFoundError(f"{source} not found: nanot5_edu.exercises registers exercises for lesson '{lesson}'. "
                                "Rename the lesson in nbs/90_exercises.py to an existing nbs/NN_name.py, run "
                                "tools/sync.sh, then rebuild.")
    first = source.read_text().split("\n# # ", 1)[1].split("\n", 1)[0]
    return first.split(":")[0].strip()


def _cell(kind: str, source: str) -> dict:
    cell = {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
    if kind == "code":
        cell.update(execution_count=None, outputs=[])
    return cell


def notebook(lesson: str) -> dict:
    title = _lesson_title(lesson)
    names = [n for n, e in EXERCISES.items() if e.lesson == lesson]
    cells = [
        _cell("markdown", f"# Exercises {lesson_key(lesson)}: {title}\n\n"
                          f"Exercises for the lesson [{lesson}](https://github.com/nanot5-edu/nanot5_edu/blob/main/nbs/"
                          f"{lesson}.ipynb); read it first. For each exercise, replace `raise NotImplementedError` "
                          "with your code and run the check cell below it. A check prints `passed`, or raises an "
                          "`AssertionError` naming the first case that differs, the expected and the received "
                          "value, and a hint. Each check compares your function with two independent references "
                          "(`transformers`, the package's own implementation, or a hand computation) on small "
                          "inputs. The package holds its own versions of these functions: try first, read them "
                          "after.\n\n" + (TRY_IT.get(lesson, "") + "\n" if lesson in TRY_IT else "")),
        _cell("markdown", "On Colab (or any fresh environment) install the package first; where it is installed "
                          "this does nothing."),
        _cell("code", INSTALL),
        _cell("code", SETUP),
    ]
    for name in names:
        e = EXERCISES[name]
        cells += [
            _cell("markdown", f"## `{name}`\n\n{e.task}\n\n`{e.signature}`"),
            _cell("code", f"def {e.signature.split(' -> ')[0]} -> {e.signature.split(' -> ', 1)[1]}:\n"
                          "    raise NotImplementedError  # your code here"),
            _cell("code", f'EXERCISES["{name}"].check({name})\nprint("{name}: passed")'),
        ]
    return {"cells": cells, "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                                         "name": "python3"},
                                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def main(out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    for lesson in sorted({e.lesson for e in EXERCISES.values()}):
        nb = notebook(lesson)
        for i, cell in enumerate(nb["cells"]):  # stable ids: a rebuild changes nothing that did not change
            cell["id"] = re.sub(r"[^a-z0-9]", "", f"{lesson_key(lesson)}c{i}")
        path = out_dir / f"{lesson}.ipynb"
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
