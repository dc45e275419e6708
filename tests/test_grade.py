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


LATER = ("pack_documents", "shift_right", "kv_cache_step", "mask_position_bias", "next_rows", "flops_per_step",
         "training_state_bytes", "atomic_write", "checkpoint_problem", "nan_step")  # lessons 02b, 03b, 06, 07, 07b, 08


def test_the_later_lessons_references_pass_and_their_mistakes_fail(tmp_path):
    "Through the pipe too: atomic_write's writers (a full disk, a crash armed at the rename) act in the student's process"
    r = grade(tmp_path, f"for n in {LATER!r}:\n    globals()[n] = REFERENCES[n]\n",
              "-m", "exercise_02b or exercise_03b or exercise_06 or exercise_07 or exercise_07b or exercise_08",
              "--seed", "5")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [l.split()[1] for l in lines(r, "PASS")] == list(LATER), r.stdout
    wrong = {"atomic_write": "atomic_write_copies", "checkpoint_problem": "checkpoint_sizes_only"}
    (tmp_path / "wrong").mkdir()
    r = grade(tmp_path / "wrong", "".join(f"{n} = dict((f.__name__, f) for f, _ in WRONG[{n!r}])[{w!r}]\n"
                                          for n, w in wrong.items()), "--exercises", ",".join(wrong))
    assert [l.split()[1] for l in lines(r, "FAIL")] == list(wrong), r.stdout
    assert "it did not os.replace (or os.rename) a temporary file onto the path" in r.stdout
    assert "compare its sha256" in r.stdout


def test_the_later_lessons_package_answers_fail_with_a_message(tmp_path):
    "The package's own version, from each module the later exercises come from, is refused"
    r = grade(tmp_path, "from pathlib import Path\nimport torch\n"
                        "from nanot5_edu.spans import pack_token_rows\n"
                        "from nanot5_edu.model import shift_right\n"
                        "from nanot5_edu.stream import BatchStream\n"
                        "import nanot5_edu.config as C\n"
                        "from nanot5_edu.checkpoint import checkpoint_problem as problem, _write_file\n"
                        "def pack_documents(docs, raw_length, eos_id):\n"
                        "    return pack_token_rows([list(d) + [eos_id] for d in docs], raw_length)\n"
                        "def kv_cache_step(x, wq, wk, wv, wo, past_k, past_v, position_bias):  # found at run time\n"
                        "    import importlib\n    L = importlib.import_module('nanot5_' + 'edu.layers')\n"
                        "    att = L.Attention(L.ModelConfig(d_model=x.shape[-1], d_kv=wq.shape[0] // past_k.shape[1],"
                        " num_heads=past_k.shape[1]))\n"
                        "    out, kv = att(x, position_bias, past=L.KV(past_k, past_v))\n    return out, kv.k, kv.v\n"
                        "def next_rows(n, micro_batch, seed, rank, world_size, epoch, position):\n"
                        "    s = BatchStream(torch.arange(n), lambda rows: rows, micro_batch, seed, rank, world_size)\n"
                        "    s.epoch, s.position = epoch, position\n    return next(s).tolist(), s.epoch, s.position\n"
                        "def flops_per_step(config, *shape):\n    return C.flops_per_step(config, *shape)\n"
                        "def atomic_write(path, write):\n    import os\n"
                        "    record = _write_file(Path(path + '.tmp'), write)\n"
                        "    os.replace(path + '.tmp', path)\n    return record\n"
                        "def checkpoint_problem(directory):\n    return problem(Path(directory))\n"
                        "def nan_step(losses, step, grad_acc, checked, _t=__import__('nanot5_edu.train').train):\n"
                        "    window = _t.LogWindow()\n    return None\n",
              "--exercises", "pack_documents,shift_right,kv_cache_step,next_rows,flops_per_step,atomic_write,"
                             "checkpoint_problem,nan_step")
    assert r.returncode == 1
    assert lines(r, "PASS") == [], r.stdout
    out = r.stdout
    for used in ("nanot5_edu.spans.pack_token_rows", "nanot5_edu.model.shift_right", "nanot5_edu.stream.BatchStream",
                 "nanot5_edu.config from", "nanot5_edu.checkpoint._write_file",
                 "nanot5_edu.checkpoint.checkpoint_problem", "nanot5_edu.train from"):
        assert f"uses {used}" in out, (used, out)
    assert "kv_cache_step called layers." in out, out


def test_lessons_with_a_letter_are_selected_by_their_own_marker():
    import importlib.util
    spec = importlib.util.spec_from_file_location("grade_tool", ROOT / "tools" / "grade.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    assert tool.select("x.py", "exercise_03b", None) == ["shift_right", "kv_cache_step", "mask_position_bias"]
    assert "shift_right" not in tool.select("x.py", "exercise_03", None)
    assert tool.select("alice/07b_checkpoints.ipynb", None, None) == ["atomic_write", "checkpoint_problem"]
    assert tool.select("alice/07_config.ipynb", None, None) == ["flops_per_step", "training_state_bytes"]


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
