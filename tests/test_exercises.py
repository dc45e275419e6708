"""The exercise checks can fail: for every exercise of `nanot5_edu.exercises`, the reference solution passes, a stub is
reported as "not implemented yet", and each known-wrong solution of `tests/exercise_bank.py` fails with a message
that names its mistake. The exercise notebooks in exercises/ run as shipped (every check cell says "not implemented
yet", none crashes) and pass once the reference solutions are substituted.

One lesson's gates: `pytest -m exercise_03 tests/test_exercises.py` (lesson 03b's: `-m exercise_03b`)."""
import json
from pathlib import Path

import pytest

from nanot5_edu.exercises import EXERCISES
from exercise_bank import REFERENCES, WRONG

ROOT = Path(__file__).resolve().parents[1]


def _marker(lesson: str):
    "exercise_03 for lesson 03_t5_layers, exercise_03b for 03b_t5_model (pyproject.toml declares each)"
    return getattr(pytest.mark, f"exercise_{lesson.split('_')[0]}")


def _marked(name, *values, id=None):
    return pytest.param(name, *values, marks=_marker(EXERCISES[name].lesson), id=id)


def _stub(*args, **kwargs):
    raise NotImplementedError


def test_registry_covers_the_bank():
    assert len(EXERCISES) >= 25
    for name in ("relative_position_bucket", "rms_norm", "noise_span_lengths", "adamwscale_step", "span_gain",
                 "pack_documents", "kv_cache_step", "next_rows", "flops_per_step", "atomic_write", "nan_step"):
        assert name in EXERCISES
    lessons = {e.lesson.split("_")[0] for e in EXERCISES.values()}
    assert {"01", "02", "02b", "03", "03b", "04", "05", "06", "07", "07b", "08", "09"} <= lessons, lessons
    assert set(REFERENCES) == set(EXERCISES), "every exercise needs a reference solution in exercise_bank.py"
    short = [n for n in EXERCISES if len(WRONG[n]) < 2]
    assert not short, f"exercises with fewer than 2 known-wrong solutions: {short}"


@pytest.mark.parametrize("name", [_marked(n) for n in EXERCISES])
def test_reference_passes(name):
    EXERCISES[name].check(REFERENCES[name])


HIDDEN = [n for n in EXERCISES if EXERCISES[n].hidden]


def test_most_exercises_have_hidden_cases():
    assert len(HIDDEN) >= 19, HIDDEN


@pytest.mark.parametrize("name", [_marked(n) for n in HIDDEN])
def test_reference_passes_hidden_cases_of_many_seeds(name):
    for seed in range(6):
        EXERCISES[name].check(REFERENCES[name], seed=seed)


@pytest.mark.parametrize("name", [_marked(n) for n in HIDDEN])
def test_hidden_cases_alone_reject_known_wrong_solutions(name):
    "The hidden cases are not decoration: on their own (no open case), they reject known-wrong solutions"
    ex, caught = EXERCISES[name], []
    for wrong, _ in WRONG[name]:
        for seed in range(6):
            try:
                ex._check(wrong, list(ex.hidden(seed)))
            except AssertionError:
                caught.append(wrong.__name__)
                break
    assert caught, f"no known-wrong solution of {name} fails its hidden cases"
    print(f"{name}: hidden cases alone reject {len(caught)} of {len(WRONG[name])} known-wrong solutions")


@pytest.mark.parametrize("name", [_marked(n) for n in EXERCISES])
def test_stub_is_not_implemented_yet(name):
    with pytest.raises(AssertionError, match="not implemented yet"):
        EXERCISES[name].check(_stub)


@pytest.mark.parametrize("name,wrong,expect",
                         [_marked(n, fn, expect, id=f"{n}-{fn.__name__}") for n in EXERCISES for fn, expect in WRONG[n]])
def test_wrong_solution_fails_with_its_hint(name, wrong, expect):
    with pytest.raises(AssertionError) as info:
        EXERCISES[name].check(wrong)
    message = str(info.value)
    assert "not implemented" not in message
    assert expect in message, f"{wrong.__name__} failed, but the message does not point at its mistake:\n{message}"


NOTEBOOKS = sorted((ROOT / "exercises").glob("[0-9][0-9]*_*.ipynb"))  # 03_t5_layers, 03b_t5_model, ...


def _code_cells(nb_path):
    return ["".join(c["source"]) for c in json.loads(nb_path.read_text())["cells"] if c["cell_type"] == "code"]


def test_one_exercise_notebook_per_lesson():
    lessons = {e.lesson for e in EXERCISES.values()}
    assert {p.stem for p in NOTEBOOKS} == lessons
    for p in NOTEBOOKS:
        checks = "".join(_code_cells(p))
        for e in EXERCISES.values():
            assert (f'EXERCISES["{e.name}"].check' in checks) == (e.lesson == p.stem), (p.name, e.name)


@pytest.mark.parametrize("nb", [pytest.param(p, marks=_marker(p.stem), id=p.name) for p in NOTEBOOKS])
def test_exercise_notebook_as_shipped_and_solved(nb):
    "Run the code cells in order; each check cell must say 'not implemented yet', then pass with the reference"
    ns, checked = {}, []
    for src in _code_cells(nb):
        if ".check(" not in src:
            exec(compile(src, f"{nb.name}", "exec"), ns)
            continue
        name = src.split('EXERCISES["')[1].split('"')[0]
        with pytest.raises(AssertionError, match="not implemented yet"):
            exec(compile(src, f"{nb.name}", "exec"), ns)
        ns[name] = REFERENCES[name]  # what a student's finished cell would define
        exec(compile(src, f"{nb.name}", "exec"), ns)
        checked.append(name)
    assert sorted(checked) == sorted(n for n, e in EXERCISES.items() if e.lesson == nb.stem)
