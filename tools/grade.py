"""Grade a student's exercises against the checks of `nanot5_edu.exercises`, the submission kept apart from them.

    python tools/grade.py alice/03_t5_layers.ipynb                   # the exercises of lesson 03 (from the name)
    python tools/grade.py alice/solutions.py -m "exercise_03 or exercise_03b" --csv grades.csv --junit grades.xml
    python tools/grade.py alice/solutions.py --exercises rms_norm,attention --time-limit 30
    python tools/grade.py alice/03_t5_layers.ipynb --seed 2026        # + hidden cases drawn from the seed

The submission is a filled-in exercise notebook (exercises/NN_lesson.ipynb) or a .py file that defines the functions
under the exercises' names (`rms_norm`, `relative_position_bucket`, ...). Each exercise is graded in its own fresh
process that runs the submission (a notebook's code cells in order, each on its own: a cell that raises is reported
and the next one runs; check cells `EXERCISES[...].check(...)` and `!`/`%` lines are skipped); the checks run here,
in the grading process, and only call the student's function through a pipe, so nothing the submission does (patching
a check, replacing `Exercise._check`) reaches them. Each exercise has a time limit (loading included): a function that
hangs fails with a message and the process is killed. `--seed N` adds hidden cases drawn from N (other sizes, values and
texts, answered by the same two oracles) to the exercises that have them. A function taken from `nanot5_edu` (the package's own version
of what the exercise asks for, or one of the checks' helpers) fails with a message that says so.

Output: one line per exercise (PASS / FAIL and the check's message: the first case that differs, expected and got, a
hint), a summary line, and on request a CSV (student, exercise, lesson, passed, seconds, message) and a JUnit XML file
for a gradebook. Exit status 0 when every selected exercise passed, 1 when one failed, 2 for bad usage.
"""
from __future__ import annotations

import argparse
import builtins
import csv
import functools
import json
import multiprocessing
import os
import re
import sys
import time
import types
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

STUDENT_FILES: set[str] = set()  # the names the submission's code was compiled under (its frames' co_filename)
CHECK_CELL = re.compile(r"EXERCISES\[[\"'][^\"']+[\"']\]\.check\(")
PACKAGE = "nanot5_edu"


# ---------------------------------------------------------------- the student's process
class _NoShell:
    "What `get_ipython()` gives a notebook's cells here: shell commands and magics (`!pip`, `%time`) do nothing"
    def __getattr__(self, name):
        return lambda *args, **kwargs: None


def notebook_cell(src: str) -> str:
    """A notebook cell as Python: IPython's own translation of `!`/`%` lines (continuation lines left alone), and
    check calls `EXERCISES[...].check(...)` made into no-ops (the rest of the cell still runs)"""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
        src = TransformerManager().transform_cell(src)
    except Exception:  # noqa: BLE001 (no IPython: leave the cell as it is)
        pass
    return CHECK_CELL.sub("(lambda *args, **kwargs: None)(", src)


def load_submission(path: str) -> tuple[dict, list[str]]:
    "The names a notebook or .py file defines, and a message for each part of it that raised"
    p = Path(path)
    ns, problems = {"__name__": "student", "__file__": str(p), "get_ipython": _NoShell}, []
    if p.suffix == ".py":
        cells = [(None, p.read_text())]
    else:
        cells = [(i, notebook_cell("".join(c["source"]))) for i, c in enumerate(json.loads(p.read_text())["cells"])
                 if c["cell_type"] == "code"]
    for i, src in cells:
        where = p.name if i is None else f"{p.name}, code cell {i}"
        STUDENT_FILES.add(where)
        try:
            exec(compile(src, where, "exec"), ns)
        except BaseException as e:  # noqa: BLE001 (a student's SystemExit or KeyboardInterrupt is reported too)
            problems.append(f"{where} raised {type(e).__name__}: {e}"[:300])
    return ns, problems


def _from_package(obj) -> str | None:
    "The nanot5_edu name behind `obj` (a module, function or class of the package), else None"
    if isinstance(obj, types.ModuleType):
        return obj.__name__ if obj.__name__.split(".")[0] == PACKAGE else None
    module = getattr(obj, "__module__", None) or ""
    if module.split(".")[0] == PACKAGE:
        return f"{module}.{getattr(obj, '__qualname__', getattr(obj, '__name__', '?'))}"
    return None


def package_uses(fn, seen=None) -> list[str]:
    """nanot5_edu names that `fn` is, or that its code refers to: globals, closures, default arguments, the parts of a
    functools.partial or of a callable object, one level into containers, and the student's functions it calls"""
    seen = set() if seen is None else seen
    if id(fn) in seen:
        return []
    seen.add(id(fn))
    if (own := _from_package(fn)) is not None:
        return [own]
    if isinstance(fn, (list, tuple, set, frozenset)):
        return [u for v in fn for u in package_uses(v, seen)]
    if isinstance(fn, dict):
        return [u for v in fn.values() for u in package_uses(v, seen)]
    if isinstance(fn, functools.partial):
        return package_uses(fn.func, seen) + package_uses(list(fn.args) + list(fn.keywords.values()), seen)
    fn = getattr(fn, "__func__", fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        if callable(fn) and not isinstance(fn, type) and hasattr(type(fn), "__call__"):  # an object with __call__
            return (package_uses(type(fn).__call__, seen)
                    + package_uses(list(getattr(fn, "__dict__", {}).values()), seen))
        return []
    names, stack = set(), [code]
    while stack:
        c = stack.pop()
        names |= set(c.co_names)
        stack += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    found = package_uses(list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values()), seen)
    scope = dict(getattr(fn, "__globals__", {}))
    for cell_name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            scope[cell_name] = cell.cell_contents
        except ValueError:
            pass
    for name in sorted(names | set(code.co_freevars)):
        if name in scope:
            found += package_uses(scope[name], seen)
    return found


def _watch(exercise: str, flagged: list, student_files: set, arguments: set):
    """A profile hook: flag a call from the student's code straight into the package, and any call into the checks
    (nanot5_edu/exercises.py) from outside the package; a method of an object the grader passed in (the model's, or
    the writer a check hands `atomic_write`) excepted"""
    package_dir = None
    try:
        import importlib.util
        package_dir = str(Path(importlib.util.find_spec(PACKAGE).origin).parent)
    except Exception:  # noqa: BLE001
        pass

    def hook(frame, event, arg):
        if event != "call" or not package_dir or not frame.f_code.co_filename.startswith(package_dir):
            return
        f, caller = frame.f_code, frame.f_back
        if f.co_name.startswith("<") or caller is None:
            return
        into_checks = f.co_filename.endswith("exercises.py") and not caller.f_code.co_filename.startswith(package_dir)
        if ((into_checks or caller.f_code.co_filename in student_files)
                and id(frame.f_locals.get("self")) not in arguments):
            flagged.append(f"{Path(f.co_filename).stem}.{f.co_name}")
    return hook


def _ids(args) -> set:
    "ids of the call's arguments and of what they hold (one level): their methods may run the package's code"
    out = set()
    for a in args:
        out.add(id(a))
        if isinstance(a, (list, tuple)):
            out |= {id(x) for x in a}
        elif isinstance(a, dict):
            out |= {id(x) for x in a.values()}
    return out


def _pack(message) -> bytes:
    "A message to the grader as `torch.save` bytes: the grader reads it with weights_only=True (data, never code)"
    import io
    import torch
    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def _unpack(data: bytes):
    import io
    import torch
    return torch.load(io.BytesIO(data), weights_only=True)


def _mutations(args) -> list:
    "What a call may have changed in its arguments, as plain data: state dicts, generator states, tensors"
    import torch
    out = []
    for a in args:
        if isinstance(a, torch.nn.Module):
            out.append(("module", {k: v.detach() for k, v in a.state_dict().items()}))
        elif isinstance(a, torch.optim.Optimizer):
            out.append(("optimizer", a.state_dict()))
        elif isinstance(a, torch.Generator):
            out.append(("generator", a.get_state()))
        elif isinstance(a, torch.Tensor):
            out.append(("tensor", a.detach()))
        elif isinstance(a, (list, tuple)):
            out.append(("sequence", _mutations(a)))
        elif isinstance(a, dict):
            out.append(("dict", dict(zip(a.keys(), _mutations(list(a.values()))))))
        else:
            out.append(None)
    return out


def serve(path: str, exercise: str, conn):
    "In the student's process: run the submission, then call the exercise's function for the grader, one call at a time"
    try:
        os.setpgid(0, 0)  # a process group of its own: the grader ends whatever the submission starts
    except (AttributeError, OSError):
        pass
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        pass
    ns, problems = load_submission(path)
    fn = ns.get(exercise)
    uses = package_uses(fn) if callable(fn) else []
    conn.send_bytes(_pack(("ready", callable(fn), problems, uses)))
    while True:
        msg = conn.recv()  # from the grader: its own objects
        if msg[0] == "stop":
            return
        _, args, kwargs = msg
        flagged: list[str] = []
        hook = _watch(exercise, flagged, STUDENT_FILES, _ids(list(args) + [kwargs]))
        sys.setprofile(hook)
        try:
            result = fn(*args, **kwargs)
            error = None
        except BaseException as e:  # noqa: BLE001
            result, error = None, (type(e).__name__, str(e)[:2000])
        finally:
            if sys.getprofile() is not hook:
                flagged.append("sys.setprofile (the grader's watch was switched off)")
            sys.setprofile(None)
        if flagged:
            conn.send_bytes(_pack(("package", sorted(set(flagged)))))
        elif error:
            conn.send_bytes(_pack(("raised", *error)))
        else:
            try:
                data = _pack(("ok", result, _mutations(args), _mutations([kwargs])[0]))
                _unpack(data)  # only data a weights_only load accepts goes back: tensors, numbers, strings, containers
            except Exception as e:  # noqa: BLE001
                data = _pack(("raised", "TypeError", f"the value returned cannot be graded: return tensors, numbers, "
                                                     f"strings or lists of them ({type(e).__name__})"))
            conn.send_bytes(data)


# ---------------------------------------------------------------- the grading process
class Timeout(BaseException):
    "The student's process did not answer in time (a BaseException: the checks' `except Exception` lets it through)"


class FromPackage(BaseException):
    "The student's function used the package's own version or a check's helper"


def _sync_back(mine, change):
    "Apply what the student's function changed in an argument (weights, optimizer state, generator, tensor) to ours"
    import torch
    if change is None:
        return
    kind, value = change
    if kind == "module" and isinstance(mine, torch.nn.Module):
        mine.load_state_dict(value)
    elif kind == "optimizer" and isinstance(mine, torch.optim.Optimizer):
        mine.load_state_dict(value)
    elif kind == "generator" and isinstance(mine, torch.Generator):
        mine.set_state(value)
    elif kind == "tensor" and isinstance(mine, torch.Tensor):
        if mine.shape == value.shape and mine.dtype == value.dtype and not mine.requires_grad:
            mine.copy_(value)
    elif kind == "sequence" and isinstance(mine, (list, tuple)) and len(mine) == len(value):
        for a, b in zip(mine, value):
            _sync_back(a, b)
    elif kind == "dict" and isinstance(mine, dict):
        for k, b in value.items():
            if k in mine:
                _sync_back(mine[k], b)


def _exception(name: str, message: str) -> Exception:
    "The student's exception, re-made here (a builtin type by name; NotImplementedError stays one: 'not implemented')"
    cls = getattr(builtins, name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = type(name, (Exception,), {})
    try:
        return cls(message)
    except Exception:  # noqa: BLE001
        return type(name, (Exception,), {})(message)


def grade_one(path: str, name: str, time_limit: float, seed: int | None = None) -> tuple[bool, str]:
    "(passed, message) for one exercise, the submission in a fresh process of its own"
    from nanot5_edu.exercises import EXERCISES
    ex = EXERCISES[name]
    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe()
    proc = ctx.Process(target=serve, args=(path, name, there), daemon=True)
    deadline = time.monotonic() + time_limit
    proc.start()
    there.close()  # ours closed: the student's process ending (exit, crash) reads as end-of-file at once

    def receive():
        left = deadline - time.monotonic()
        if left <= 0 or not here.poll(left):
            raise Timeout()
        try:
            data = here.recv_bytes(maxlength=512 * 2 ** 20)
        except (EOFError, OSError):
            raise RuntimeError("the student's process ended unexpectedly (it exited, or crashed)") from None
        try:
            return _unpack(data)  # data only: nothing the submission sends can run here
        except Exception as e:  # noqa: BLE001
            raise RuntimeError(f"the student's process sent something that is not data ({type(e).__name__})") from None

    try:
        try:
            _, defined, problems, uses = receive()
        except Timeout:
            return False, f"{name}: the submission did not finish running within {time_limit:g} s (an endless loop " \
                          "at the top level, or a long computation outside the function?)"
        except RuntimeError as e:
            return False, f"{name}: {e} while running the submission"
        notes = ("\n" + "\n".join(f"note: {p}" for p in problems)) if problems else ""
        if not defined:
            return False, f"{name} is not defined in {Path(path).name} (expected a function `{ex.signature}`){notes}"
        if uses:
            return False, (f"{name} uses {', '.join(uses)} from the nanot5_edu package: the exercise asks for your own "
                           f"implementation (the package's version and the checks' helpers do not count){notes}")

        def proxy(*args, **kwargs):
            here.send(("call", args, kwargs))
            msg = receive()
            if msg[0] == "package":
                raise FromPackage(", ".join(msg[1]))
            if msg[0] == "raised":
                raise _exception(msg[1], msg[2])
            _, result, changed_args, changed_kwargs = msg
            for a, change in zip(args, changed_args):
                _sync_back(a, change)
            _sync_back(kwargs, changed_kwargs)
            return result
        try:
            ex.check(proxy, seed=seed)
            return True, f"{name}: passed{notes}"
        except AssertionError as e:
            return False, str(e) + notes
        except Timeout:
            return False, (f"{name}: no answer within the time limit of {time_limit:g} s for the exercise (an endless "
                           f"loop?): the process was stopped{notes}")
        except FromPackage as e:
            return False, (f"{name} called {e} from the nanot5_edu package: the exercise asks for your own "
                           f"implementation{notes}")
        except RuntimeError as e:
            return False, f"{name}: {e}{notes}"
    finally:
        try:
            here.send(("stop",))
        except (OSError, ValueError):
            pass
        proc.join(timeout=2)
        try:  # the student's process and anything it started (its process group)
            os.killpg(proc.pid, 9)
        except (AttributeError, OSError):
            pass
        if proc.is_alive():
            proc.kill()
        proc.join(timeout=5)


def select(path: str, marker: str | None, names: str | None) -> list[str]:
    from nanot5_edu.exercises import EXERCISES
    if names:
        chosen = [n.strip() for n in names.split(",") if n.strip()]
        unknown = [n for n in chosen if n not in EXERCISES]
        if unknown:
            raise SystemExit(f"unknown exercise(s) {unknown}: choose from {sorted(EXERCISES)}")
        return chosen
    if marker is None and (m := re.match(r"(\d\d[a-z]?)_", Path(path).name)):
        marker = f"exercise_{m.group(1)}"
    if marker is None:
        return list(EXERCISES)
    lessons = set(re.findall(r"exercise_(\d\d[a-z]?)\b", marker))
    if not lessons:
        raise SystemExit(f"-m {marker!r}: use exercise_NN markers, e.g. -m 'exercise_03 or exercise_03b'")
    return [n for n, ex in EXERCISES.items() if lesson_key(ex.lesson) in lessons]


def lesson_key(lesson: str) -> str:
    "A lesson's marker suffix: '03' for 03_t5_layers, '03b' for 03b_t5_model (exercise_03, exercise_03b)"
    return lesson.split("_")[0]


def _clean(text: str, limit: int = 2000) -> str:
    "A message fit for a report: printable characters only (valid XML), at most `limit` of them"
    text = "".join(c if c.isprintable() or c in "\n\t" else "?" for c in text)
    return text if len(text) <= limit else text[:limit] + f" … ({len(text) - limit:,} characters more)"


def write_reports(student: str, rows: list[dict], csv_path: str | None, junit_path: str | None):
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            w = csv.DictWriter(f, ["student", "exercise", "lesson", "passed", "seconds", "message"])
            w.writeheader()
            for r in rows:
                w.writerow({"student": student, **r})
    if junit_path:
        failures = sum(not r["passed"] for r in rows)
        lines = ['<?xml version="1.0" encoding="utf-8"?>',
                 f'<testsuite name={quoteattr(student)} tests="{len(rows)}" failures="{failures}" errors="0">']
        for r in rows:
            lines.append(f'  <testcase classname={quoteattr(r["lesson"])} name={quoteattr(r["exercise"])} '
                         f'time="{r["seconds"]:.2f}">')
            if not r["passed"]:
                lines.append(f'    <failure message={quoteattr(r["message"].splitlines()[0][:200])}>'
                             f'{escape(r["message"])}</failure>')
            lines.append("  </testcase>")
        lines.append("</testsuite>")
        Path(junit_path).write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], epilog="See the module docstring for more.")
    ap.add_argument("submission", help="a filled-in exercises/NN_lesson.ipynb, or a .py file")
    ap.add_argument("-m", dest="marker", help="lessons by marker: 'exercise_03 or exercise_03b' (default: from the "
                                              "file's NN_ or NNx_ prefix, else every exercise)")
    ap.add_argument("--exercises", help="comma-separated exercise names instead of -m")
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per exercise, loading included")
    ap.add_argument("--seed", type=int, help="add the hidden cases drawn from this seed (exercises that have them)")
    ap.add_argument("--student", help="the name the CSV and JUnit reports give (default: the file's name)")
    ap.add_argument("--csv", help="write one row per exercise here")
    ap.add_argument("--junit", help="write a JUnit XML report here")
    args = ap.parse_args(argv)
    path = Path(args.submission)
    if not path.is_file():
        print(f"error: {path}: no such file. Pass a filled-in exercises/NN_lesson.ipynb or a .py file.", file=sys.stderr)
        return 2
    if path.suffix not in (".py", ".ipynb"):
        print(f"error: {path}: expected a .ipynb notebook or a .py file, got '{path.suffix}'.", file=sys.stderr)
        return 2
    if path.suffix == ".ipynb":
        try:
            cells = json.loads(path.read_text())["cells"]
            assert isinstance(cells, list)
        except Exception as e:  # noqa: BLE001
            print(f"error: {path} is not a readable notebook ({type(e).__name__}: {e}): open it in Jupyter and save "
                  "it again, or hand in a .py file.", file=sys.stderr)
            return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    from nanot5_edu.exercises import EXERCISES
    names = select(str(path), args.marker, args.exercises)
    rows = []
    for name in names:
        t = time.monotonic()
        passed, message = grade_one(str(path.resolve()), name, args.time_limit, args.seed)
        rows.append({"exercise": name, "lesson": EXERCISES[name].lesson, "passed": passed,
                     "seconds": time.monotonic() - t, "message": _clean(message)})
        print(f"{'PASS' if passed else 'FAIL'} {name} ({rows[-1]['seconds']:.1f} s)"
              + ("" if passed else "\n    " + rows[-1]["message"].replace("\n", "\n    ")), flush=True)
    passed = sum(r["passed"] for r in rows)
    print(f"{path.name}: {passed} of {len(rows)} exercises passed")
    write_reports(args.student or path.name, rows, args.csv, args.junit)
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
