"""tools/grade.py grades a student's file against the exercise checks: the reference solutions pass, a known-wrong
one fails by name, and the exit status says so (a teacher's loop over a class relies on it)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _grade(tmp_path, body: str, marker: str):
    student = tmp_path / "student.py"
    student.write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'tests')!r})\n"
                       "from exercise_bank import REFERENCES, WRONG\n" + body)
    return subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), str(student), "-m", marker],
                          capture_output=True, text=True, cwd=tmp_path, timeout=300)


def test_reference_solutions_pass(tmp_path):
    r = _grade(tmp_path, "for n in ('adamwscale_step', 'cosine_lr', 'rouge_l', 'exact_match'):\n"
                         "    globals()[n] = REFERENCES[n]\n", "exercise_04 or exercise_09")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4 passed" in r.stdout, r.stdout


def test_a_wrong_solution_fails_by_name(tmp_path):
    r = _grade(tmp_path, "for n in ('adamwscale_step', 'cosine_lr', 'rouge_l'):\n    globals()[n] = REFERENCES[n]\n"
                         "exact_match = WRONG['exact_match'][0][0]\n", "exercise_04 or exercise_09")
    assert r.returncode != 0
    failed = [l for l in r.stdout.splitlines() if "FAILED" in l]
    assert len(failed) == 1 and "exact_match" in failed[0], r.stdout
