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


def reading_table() -> str:
    rows = ["| lesson | prose words | code lines | reading time (estimate) |", "|---|---|---|---|"]
    total = 0.0
    for p in lessons():
        w, c = counts(p)
        minutes = w / WORDS_PER_MIN + c / CODE_LINES_PER_MIN
        total += minutes
        rows.append(f"| [{p.stem}](../nbs/{p.stem}.ipynb) | {w:,} | {c:,} | ≈ {max(5, 5 * round(minutes / 5))} min |")
    rows.append(f"| all | | | ≈ {total / 60:.0f} h |")
    return "\n".join(rows)


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


def refresh(text: str) -> str:
    for name, body in (("reading-time", reading_table()), ("answers", answers())):
        pattern = re.compile(rf"(<!-- generated:{name}[^>]*-->\n).*?(<!-- end:{name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"{GUIDE}: no <!-- generated:{name} --> ... <!-- end:{name} --> region to fill")
        text = pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)
    return text


if __name__ == "__main__":
    old = GUIDE.read_text()
    new = refresh(old)
    if "--check" in sys.argv[1:]:
        sys.exit(0 if new == old else print(f"{GUIDE} is out of date: run python tools/teaching_guide.py") or 1)
    GUIDE.write_text(new)
    print(f"wrote {GUIDE}" if new != old else f"{GUIDE} is up to date")
