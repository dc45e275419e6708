"""Grade a student's exercises with the checks of `nanot5_edu.exercises`, one pytest result per exercise.

    python tools/grade.py alice/03_t5_layers.ipynb                     # the exercises of lesson 03 (from the name)
    python tools/grade.py alice/solutions.py -m "exercise_03 or exercise_04"
    STUDENT=alice/03_t5_layers.ipynb python -m pytest -m exercise_03 tools/grade.py   # the same, as pytest

STUDENT is a filled-in exercise notebook (exercises/NN_lesson.ipynb) or a .py file that defines the functions under
the exercises' names (`rms_norm`, `relative_position_bucket`, ...). A notebook's code cells run in order, except its
check cells (`EXERCISES[...].check(...)`) and shell/magic lines (`!pip`, `%time`); a .py file runs as a script.
Each selected exercise then runs `EXERCISES[name].check(student's function)`: it passes, or fails with the check's
message (the first case that differs, expected and got, a hint); a function the file does not define fails as
"not defined". Select lessons with the pytest markers exercise_01 ... exercise_09 (pyproject.toml); `python
tools/grade.py FILE` with no -m takes the marker from FILE's NN_ prefix, if it has one.
"""
import functools
import json
import os
import re
import runpy
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
from nanot5_edu.exercises import EXERCISES  # noqa: E402

CHECK_CELL = re.compile(r"EXERCISES\[[\"'][^\"']+[\"']\]\.check\(")


@functools.lru_cache(maxsize=None)
def student_namespace(path: str) -> dict:
    "The names a student's notebook or .py file defines"
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"STUDENT={path}: no such file. Pass a filled-in exercises/NN_lesson.ipynb or a .py file.")
    if p.suffix == ".py":
        return runpy.run_path(str(p), run_name="student")
    if p.suffix != ".ipynb":
        raise ValueError(f"STUDENT={path}: expected a .ipynb notebook or a .py file, got '{p.suffix}'")
    ns = {"__name__": "student"}
    for i, cell in enumerate(json.loads(p.read_text())["cells"]):
        src = "".join(cell["source"])
        if cell["cell_type"] != "code" or CHECK_CELL.search(src):
            continue
        src = "\n".join("" if line.lstrip().startswith(("!", "%")) else line for line in src.splitlines())
        exec(compile(src, f"{p.name}, code cell {i}", "exec"), ns)
    return ns


def _param(name):
    return pytest.param(name, marks=getattr(pytest.mark, f"exercise_{EXERCISES[name].lesson[:2]}"), id=name)


@pytest.mark.parametrize("name", [_param(n) for n in EXERCISES])
def test_exercise(name):
    path = os.environ.get("STUDENT")
    if not path:
        pytest.fail("set STUDENT to the student's file: STUDENT=path/03_t5_layers.ipynb pytest -m exercise_03 tools/grade.py")
    try:
        ns, problem = student_namespace(path), None
    except Exception as e:
        ns, problem = {}, f"running {path} failed before any check: {type(e).__name__}: {e}"
    if problem:
        pytest.fail(problem, pytrace=False)
    fn = ns.get(name)
    if not callable(fn):
        pytest.fail(f"{name} is not defined in {path} (expected a function `{EXERCISES[name].signature}`)")
    try:
        EXERCISES[name].check(fn)
        problem = None
    except AssertionError as e:  # the check's message is the feedback; the traceback into the checks is noise
        problem = str(e)
    if problem:
        pytest.fail(problem, pytrace=False)


def main(argv: list[str]) -> int:
    if not argv or argv[0].startswith("-"):
        print(__doc__)
        return 2
    os.environ["STUDENT"] = str(Path(argv[0]).resolve())
    rest = argv[1:]
    if "-m" not in rest and (m := re.match(r"(\d\d)_", Path(argv[0]).name)):
        rest = ["-m", f"exercise_{m.group(1)}", *rest]
    return pytest.main([__file__, "-q", "-rf", "-p", "no:cacheprovider", *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
