"""tools/grade.py grades a student's file against the exercise checks with the submission in a process of its own:
references pass, a known-wrong one fails by name, and the ways round the checks a student might try fail with a
message: patching the checks, importing the package's answer or a check's helper, hanging. Bad input (a missing
file, a notebook that does not parse, a cell that raises, a wrong signature) gets a clear message; the rest is still
graded; CSV and JUnit reports hold a row per exercise."""
import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BANK = f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\nfrom exercise_bank import REFERENCES, WRONG\n"


def grade(tmp_path, body: str, *args, name="student.py"):
    student = tmp_path / name
    student.write_text(BANK + body) if name.endswith(".py") else student.write_text(body)
    return subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), str(student), *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600)


def lines(r, word):
    return [l for l in r.stdout.splitlines() if l.startswith(word)]


def test_reference_solutions_pass_and_reports_are_written(tmp_path):
    r = grade(tmp_path, "for n in ('adamwscale_step', 'cosine_lr', 'rouge_l', 'exact_match'):\n"
                        "    globals()[n] = REFERENCES[n]\n", "-m", "exercise_04 or exercise_09",
              "--csv", "g.csv", "--junit", "g.xml", "--student", "alice", "--seed", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 of 4 exercises passed" in r.stdout, r.stdout
    rows = list(csv.DictReader(open(tmp_path / "g.csv")))
    assert [row["exercise"] for row in rows] == ["adamwscale_step", "cosine_lr", "rouge_l", "exact_match"]
    assert all(row["passed"] == "True" and row["student"] == "alice" for row in rows)
    assert 'tests="4" failures="0"' in (tmp_path / "g.xml").read_text()


def test_a_wrong_solution_fails_by_name(tmp_path):
    r = grade(tmp_path, "for n in ('adamwscale_step', 'cosine_lr', 'rouge_l'):\n    globals()[n] = REFERENCES[n]\n"
                        "exact_match = WRONG['exact_match'][0][0]\n", "-m", "exercise_04 or exercise_09",
              "--junit", "g.xml")
    assert r.returncode == 1
    assert [l.split()[1] for l in lines(r, "FAIL")] == ["exact_match"], r.stdout
    assert 'failures="1"' in (tmp_path / "g.xml").read_text()


def test_patching_the_checks_reaches_nothing(tmp_path):
    "One line that made every check pass when the checks ran in the submission's process"
    r = grade(tmp_path, "from nanot5_edu.exercises import Exercise\nExercise._check = lambda self, fn: None\n"
                        "Exercise.check = lambda self, fn: None\n"
                        "rms_norm = WRONG['rms_norm'][0][0]\n", "--exercises", "rms_norm")
    assert r.returncode == 1 and lines(r, "FAIL rms_norm"), r.stdout


def test_the_package_answer_and_the_checks_helpers_fail_with_a_message(tmp_path):
    r = grade(tmp_path, "from nanot5_edu.layers import relative_position_bucket\n"
                        "import nanot5_edu.finetune as ft\n"
                        "def rouge_l(prediction, references):\n    return ft.rouge_l(prediction, references)\n"
                        "def rms_norm(x, weight, eps):  # a check's helper, reached at run time\n"
                        "    import importlib\n"
                        "    helpers = importlib.import_module('nanot5_edu' + '.exercises')\n"
                        "    return getattr(helpers, '_rms_oracles')(x, weight, eps)[0]\n"
                        "import nanot5_edu.optim as O\n"
                        "def cosine_lr(step, lr, total_steps, warmup_steps, final_lr, _f=O.cosine_lr):  # a default\n"
                        "    return _f(step, lr, total_steps, warmup_steps, final_lr)\n"
                        "def exact_match(prediction, references):  # the watch switched off, the answer looked up\n"
                        "    import sys, importlib\n    sys.setprofile(None)\n"
                        "    return importlib.import_module('nanot5_' + 'edu.finetune').exact_match(prediction, references)\n",
              "--exercises", "relative_position_bucket,rouge_l,rms_norm,cosine_lr,exact_match")
    assert r.returncode == 1
    assert len(lines(r, "FAIL")) == 5, r.stdout
    out = r.stdout
    assert "relative_position_bucket uses nanot5_edu.layers.relative_position_bucket from the nanot5_edu package" in out
    assert "rouge_l uses nanot5_edu.finetune from the nanot5_edu package" in out
    assert "rms_norm called exercises._rms_oracles from the nanot5_edu package" in out
    assert "cosine_lr uses nanot5_edu.optim.cosine_lr" in out
    assert "exact_match called" in out and "the grader's watch was switched off" in out


def test_a_hanging_function_and_a_hanging_file_fail_within_the_time_limit(tmp_path):
    r = grade(tmp_path, "def cosine_lr(*args, **kwargs):\n    while True:\n        pass\n"
                        "adamwscale_step = REFERENCES['adamwscale_step']\n", "--exercises", "cosine_lr,adamwscale_step",
              "--time-limit", "30")
    assert r.returncode == 1
    assert [l.split()[1] for l in lines(r, "FAIL")] == ["cosine_lr"], r.stdout
    assert "no answer within the time limit of 30 s" in r.stdout
    (tmp_path / "loop").mkdir()
    r = grade(tmp_path / "loop", "while True:\n    pass\n", "--exercises", "rms_norm", "--time-limit", "8")
    assert r.returncode == 1 and "did not finish running within 8 s" in r.stdout, r.stdout


def test_bad_input_gets_a_clear_message_and_the_rest_is_graded(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), str(tmp_path / "missing.ipynb")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "no such file" in r.stderr
    (tmp_path / "broken.ipynb").write_text('{"cells": [')
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), str(tmp_path / "broken.ipynb")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "is not a readable notebook" in r.stderr
    cells = [BANK, "rms_norm = REFERENCES['rms_norm']", "1 / 0",
             "def gated_gelu_ff(x):  # the wrong signature\n    return x", "cosine_lr = REFERENCES['cosine_lr']"]
    nb = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    r = grade(tmp_path, json.dumps(nb), "--exercises", "rms_norm,gated_gelu_ff,cosine_lr,attention",
              name="03_student.ipynb")
    assert r.returncode == 1
    assert [l.split()[1] for l in lines(r, "PASS")] == ["rms_norm", "cosine_lr"], r.stdout
    assert "code cell 2 raised ZeroDivisionError" in r.stdout
    assert "your function raised TypeError" in r.stdout  # gated_gelu_ff(x) called with four arguments
    assert "attention is not defined in 03_student.ipynb" in r.stdout


def test_a_return_value_cannot_run_code_in_the_grader(tmp_path):
    "A result whose pickle would call a function in the grader (here: rebind the grader's `grade_one`) is refused"
    r = grade(tmp_path, "class Lazy:\n    def __reduce__(self):\n"
                        "        return (exec, (\"import __main__; __main__.grade_one = lambda *a: (True, 'pwned')\",))\n"
                        "def rms_norm(x, weight, eps):\n    return Lazy()\n", "--exercises", "rms_norm,attention")
    assert r.returncode == 1 and "pwned" not in r.stdout
    assert [l.split()[1] for l in lines(r, "FAIL")] == ["rms_norm", "attention"], r.stdout
    assert "cannot be graded" in r.stdout


def test_a_process_that_exits_is_reported_at_once_not_after_the_time_limit(tmp_path):
    r = grade(tmp_path, "import os\ndef cosine_lr(*args):\n    os._exit(0)\n", "--exercises", "cosine_lr",
              "--time-limit", "60")
    assert r.returncode == 1 and "ended unexpectedly" in r.stdout, r.stdout
    seconds = float(lines(r, "FAIL")[0].split("(")[1].split(" s)")[0])
    assert seconds < 30, r.stdout


def test_notebook_cells_run_as_jupyter_runs_them(tmp_path):
    "A magic line, a check call in the cell that defines the function, a continuation line starting with %"
    cells = [BANK.replace("from exercise_bank", "%pip install -q nothing\nfrom exercise_bank"),
             "cosine_lr = REFERENCES['cosine_lr']\nEXERCISES['cosine_lr'].check(cosine_lr)",
             "note = ('%d steps'\n        % 3)\nrms_norm = REFERENCES['rms_norm']"]
    nb = {"cells": [{"cell_type": "code", "source": c, "metadata": {}, "outputs": []} for c in cells],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    r = grade(tmp_path, json.dumps(nb), "--exercises", "cosine_lr,rms_norm", name="04_student.ipynb")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "note:" not in r.stdout
