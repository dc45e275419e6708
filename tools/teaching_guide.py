"""Refresh the generated parts of docs/teaching.md: `python tools/teaching_guide.py [--check]`.

Two regions, each between `<!-- generated:NAME ... -->` and `<!-- end:NAME -->`, are rewritten; the rest of the
guide is written by hand.

- reading-time: each lesson's estimated reading time from counts, not a timed read. From the jupytext
  `py:percent` sources nbs/NN_*.py and nbs/NNx_*.py (a lesson split in two, e.g. 05b; NN < 90): the prose words of
  the markdown cells (link targets dropped) and the non-blank code lines of the code cells, leaving out `#| hide`
  cells (test plumbing, dropped from the site too), `#|` directive lines and saved outputs. Rates: prose at 200
  words per minute, code at 10 lines per minute (both assumptions, not measurements).
- answers: docs/answers/NN_name.md, one per lesson, merged in lesson order with their headings moved two levels
  down and their relative links re-pointed from docs/answers/ to docs/; then the lessons whose questions have no
  answers file yet, and the lessons without questions.

--check exits 1 if the guide is not up to date (nothing is written).
"""
import os
import json
import re
import sys
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "teaching.md"
WORDS_PER_MIN, CODE_LINES_PER_MIN = 200, 10
LINK = re.compile(r"(\]\()([^)\s]+)(\))")
LESSON = re.compile(r"^\d\d[a-z]?_.+\.py$")  # 05_pretraining.py, 05b_what_it_learned.py


def lessons() -> list[Path]:
    return sorted(p for p in (ROOT / "nbs").glob("[0-9][0-9]*_*.py") if LESSON.match(p.name) and int(p.name[:2]) < 90)


def cells(text: str):
    "(kind, lines) of each cell of a py:percent file"
    kind, lines = None, []
    for line in text.splitlines():
        if line.startswith("# %%"):
            if kind:
                yield kind, lines
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        elif kind:
            lines.append(line)
    if kind:
        yield kind, lines


def counts(path: Path) -> tuple[int, int]:
    "(prose words, code lines) a student reads in the lesson at `path`"
    words = code = 0
    for kind, lines in cells(path.read_text()):
        if kind == "markdown":
            prose = " ".join(re.sub(r"^#\s?", "", l) for l in lines)
            words += len(LINK.sub("]", prose).split())
        elif not any(re.match(r"^#\|\s*hide\b", l) for l in lines):
            code += sum(1 for l in lines if l.strip() and not l.startswith("#|"))
    return words, code


def reading() -> dict:
    "Each lesson's prose words, code lines and reading estimate (minutes, to the nearest 5); the total in hours"
    out = {}
    for p in lessons():
        w, c = counts(p)
        minutes = w / WORDS_PER_MIN + c / CODE_LINES_PER_MIN
        out[p.stem] = {"prose_words": w, "code_lines": c, "minutes": minutes, "reading_min": max(5, 5 * round(minutes / 5))}
    return out


def reading_table() -> str:
    rows = ["| lesson | prose words | code lines | reading time (estimate) |", "|---|---|---|---|"]
    r = reading()
    for stem, x in r.items():
        rows.append(f"| [{stem}](../nbs/{stem}.ipynb) | {x['prose_words']:,} | {x['code_lines']:,} | ≈ {x['reading_min']} min |")
    rows.append(f"| all | | | ≈ {sum(x['minutes'] for x in r.values()) / 60:.0f} h |")
    return "\n".join(rows)


def reading_record() -> str:
    "nbs/results/reading.json: the estimates the README's lesson table quotes (tools/check_claims.py checks them)"
    r = reading()
    return json.dumps({"rates": {"prose_words_per_min": WORDS_PER_MIN, "code_lines_per_min": CODE_LINES_PER_MIN},
                       "lessons": {k: {**v, "minutes": round(v["minutes"], 1)} for k, v in r.items()},
                       "total_h": round(sum(v["minutes"] for v in r.values()) / 60, 1)}, indent=1) + "\n"


def _relink(text: str) -> str:
    "Relative links written from docs/answers/ re-pointed for docs/teaching.md"
    def fix(m):
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return m.group(0)
        path, _, frag = target.partition("#")
        new = os.path.relpath(os.path.normpath(os.path.join("docs/answers", path)), "docs")
        return m.group(1) + PurePosixPath(new).as_posix() + (f"#{frag}" if frag else "") + m.group(3)
    return LINK.sub(fix, text)


def _demote(text: str, levels: int = 2) -> str:
    out, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if not fence and re.match(r"^#{1,6}\s", line):
            line = "#" * levels + line
        out.append(line)
    return "\n".join(out)


def answers() -> str:
    files = {p.stem: p for p in sorted((ROOT / "docs" / "answers").glob("[0-9][0-9]*_*.md"))}
    parts = [_relink(_demote(files[p.stem].read_text().strip())) for p in lessons() if p.stem in files]
    asks = {p.stem: bool(re.search(r"^# ## Questions", p.read_text(), re.M)) for p in lessons()}
    missing = [m for m, q in asks.items() if q and m not in files]
    if missing:
        parts.append("### Not written yet\n\nNo answers yet for the questions of: " + ", ".join(
            f"[{m}](../nbs/{m}.ipynb)" for m in missing) + ".")
    if none := [m for m, q in asks.items() if not q]:
        parts.append("Lessons without questions: " + ", ".join(f"[{m}](../nbs/{m}.ipynb)" for m in none) + ".")
    return "\n\n".join(parts)


def notebook_seconds() -> dict:
    "Each notebook's time in the last recorded test run (nbs/results/test_run.json), {} before one is recorded"
    runs = ROOT / "nbs" / "results" / "test_run.json"
    return json.loads(runs.read_text())["notebook_s"] if runs.exists() else {}


def cpu_time(seconds: float) -> str:
    return "< 1 s" if seconds < 1 else f"{seconds:.0f} s"


def refresh_cpu_times(text: str) -> str:
    "The lesson table's 'CPU: notebook' column from the last recorded test run, as in README's learning path"
    seconds = notebook_seconds()

    def row(m):
        cols = m.group(0).split(" | ")  # "| NN", link, what, exercises, CPU: notebook, experiments |
        stem = re.search(r"\(\.\./nbs/(\w+)\.ipynb\)", cols[1])
        if stem and stem.group(1) in seconds:
            cols[4] = cpu_time(seconds[stem.group(1)])
        return " | ".join(cols)
    return re.sub(r"^\| \d\d[a-z]? \| \[[^\]]+\]\(\.\./nbs/.*$", row, text, flags=re.M)


def refresh(text: str) -> str:
    text = refresh_cpu_times(text)
    for name, body in (("reading-time", reading_table()), ("answers", answers())):
        pattern = re.compile(rf"(<!-- generated:{name}[^>]*-->\n).*?(<!-- end:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{GUIDE}: no <!-- generated:{name} --> ... <!-- end:{name} --> region to fill")
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    return text


def refresh_index(text: str) -> str:
    """nbs/index.py's lesson table: the reading estimate (nbs/results/reading.json) and the notebook's CPU time in the
    last recorded test run (nbs/results/test_run.json, written by `NANOT5_EDU_TEST_RECORD=... pytest`), per row"""
    runs = ROOT / "nbs" / "results" / "test_run.json"
    seconds = notebook_seconds()
    r = reading()

    def row(m):
        cols = m.group(0).split(" | ")  # "#", number, link, what, needs, reading, CPU time, ...
        stem = re.search(r"\(nbs/(\w+)\.ipynb\)", cols[2])
        if not stem or stem.group(1) not in r:
            raise SystemExit(f"nbs/index.py's lesson table: no lesson link in the third column of {m.group(0)[:60]!r}")
        cols[5] = f"≈ {r[stem.group(1)]['reading_min']} min"
        if stem.group(1) in seconds:
            cols[6] = cpu_time(seconds[stem.group(1)])
        return " | ".join(cols)
    text = re.sub(r"^# \| \d\d[a-z]? \| \[.*$", row, text, flags=re.M)
    if runs.exists():  # the README's test command: what its last recorded run took
        rec = json.loads(runs.read_text())
        text = re.sub(r"(\(`nbs/results/test_run.json`\): )\S+ tests passed in \S+ minutes on \S+ CPU cores, \S+:",
                      lambda m: f"{m.group(1)}{rec['passed']} tests passed in {rec['wall_min']} minutes on {rec['cores']} "
                                f"CPU cores, {rec['date']}:", text)
    return text


if __name__ == "__main__":
    index = ROOT / "nbs" / "index.py"
    old_index = index.read_text()
    new_index = refresh_index(old_index)
    old, new = GUIDE.read_text(), refresh(GUIDE.read_text())
    record = ROOT / "nbs" / "results" / "reading.json"
    old_record, new_record = (record.read_text() if record.exists() else ""), reading_record()
    if "--check" in sys.argv[1:]:
        stale = [str(f) for f, a, b in ((GUIDE, old, new), (record, old_record, new_record), (index, old_index, new_index))
                 if a != b]
        sys.exit(0 if not stale else print(f"{', '.join(stale)} out of date: run python tools/teaching_guide.py") or 1)
    GUIDE.write_text(new)
    record.write_text(new_record)
    index.write_text(new_index)  # then tools/sync.sh renders README.md
    print(f"wrote {GUIDE}" if new != old else f"{GUIDE} is up to date", "and", record)
