"""Write a hand-out for students, without the reference solutions: `python tools/student_copy.py OUT_DIR`.

    OUT_DIR/exercises/NN_lesson.ipynb   the exercise notebooks (task, stub, check cell per exercise; no outputs),
                                        written by exercises/build_notebooks.py from `nanot5_edu.exercises`
    OUT_DIR/README.md                   what to install, what to fill in, how to check, what to hand back

It then checks the hand-out: one notebook per lesson with exercises, every exercise's check cell present, every
stub still `raise NotImplementedError`, and no line of a reference solution (tests/exercise_bank.py) anywhere
under OUT_DIR; it exits non-zero, naming the file and line, if one is found.

What is withheld: tests/exercise_bank.py (the solutions written as a student would, and the known-wrong bank).
What is not: the installed package. Its implementations are one of the two oracles every check compares a
student's function with, and the lessons build and import them (the model needs its RMSNorm), so the checks need
them; a student can read them, as they can read the lesson that builds them. See docs/teaching.md.
"""
import functools
import importlib.util
import inspect
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

README = """# Exercises: nanot5_edu

One notebook per lesson. For each exercise: read the task, replace `raise NotImplementedError` with your code, run
the check cell under it. A check prints `passed`, or raises an `AssertionError` that names the first case where your
function differs from two independent references (`transformers`, the course's package or a hand computation),
the expected and the received value, and a hint.

Setup: Python >= 3.10 and `pip install git+https://github.com/nanot5-edu/nanot5_edu` (the first code cell of each
notebook does this on Colab). Read the lesson first: https://github.com/nanot5-edu/nanot5_edu/tree/main/nbs

Hand back your filled-in notebooks under their names (`03_t5_layers.ipynb`, ...). Your teacher grades them with
the same checks; functions must keep the names and signatures given in the notebooks.

Notebooks: {notebooks}
"""


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def solution_lines() -> dict[str, set[str]]:
    "Each reference solution's distinctive code lines (its body, stripped; short or generic lines left out)"
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        bank = _load(ROOT / "tests" / "exercise_bank.py", "exercise_bank")
    finally:
        sys.path.pop(0)
    out = {}
    for name, fn in bank.REFERENCES.items():
        body = inspect.getsource(fn).splitlines()[1:]
        out[name] = {l.strip() for l in body if len(l.strip()) >= 20 and not l.strip().startswith(("#", '"'))}
    return out


def check_handout(out_dir: Path) -> list[str]:
    "Problems with the hand-out in out_dir (an empty list when it is fine)"
    from nanot5_edu.exercises import EXERCISES
    problems = []
    lessons = sorted({e.lesson for e in EXERCISES.values()})
    found = sorted(p.stem for p in (out_dir / "exercises").glob("*.ipynb"))
    if found != lessons:
        problems.append(f"expected notebooks {lessons}, found {found}")
    for lesson in set(lessons) & set(found):
        cells = json.loads((out_dir / "exercises" / f"{lesson}.ipynb").read_text())["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        for name in (n for n, e in EXERCISES.items() if e.lesson == lesson):
            stub = [c for c in code if c.startswith(f"def {name}(")]
            if len(stub) != 1 or "raise NotImplementedError" not in stub[0]:
                problems.append(f"{lesson}.ipynb: expected one stub `def {name}(...): raise NotImplementedError`")
            if not any(f'EXERCISES["{name}"].check({name})' in c for c in code):
                problems.append(f"{lesson}.ipynb: no check cell for {name}")
    for path in sorted(p for p in out_dir.rglob("*") if p.is_file()):
        if path.suffix == ".ipynb":
            text = "".join("".join(c["source"]) + "\n" for c in json.loads(path.read_text())["cells"])
        else:
            text = path.read_text(errors="replace")
        for i, line in enumerate(text.splitlines(), 1):
            for name, lines in solution_lines().items():
                if line.strip() in lines:
                    problems.append(f"{path.relative_to(out_dir)} (line {i} of its text) holds a line of the reference "
                                    f"solution of {name}: {line.strip()!r}")
    return problems


def main(out_dir: Path) -> int:
    builder = _load(ROOT / "exercises" / "build_notebooks.py", "build_notebooks")
    builder.main(out_dir / "exercises")
    names = ", ".join(sorted(p.name for p in (out_dir / "exercises").glob("*.ipynb")))
    (out_dir / "README.md").write_text(README.format(notebooks=names))
    print(f"wrote {out_dir / 'README.md'}")
    problems = check_handout(out_dir)
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    print(f"checked {out_dir}: " + ("no reference solution in the hand-out" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1].startswith("-"):  # --help, or a flag mistaken for the output folder
        print(__doc__)
        sys.exit(0 if sys.argv[1:] in (["-h"], ["--help"]) else 2)
    sys.exit(main(Path(sys.argv[1])))
