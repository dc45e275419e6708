"""Check that every number in the course's prose is traced: `python tools/check_claims.py` (CI runs it).

The prose is the markdown cells of `nbs/*.ipynb` and `README.md`. README.md is rendered from `nbs/index.ipynb`
(`tools/mkreadme.py`), so it is checked in index's place: fix a number there in `nbs/index.ipynb`, then re-render.

A number is TRACED when one of these holds a number equal to it as rounded in the prose:
  1. the saved outputs of the same notebook (stream text, text/plain, text/markdown, text/html without its tags)
     or the source of its code cells ("values that appear in the code cells"); README.md: nbs/index.ipynb's;
  2. the saved outputs of a lesson named in the same markdown cell: a link `[07](07_config.ipynb)`, "lesson 07",
     "07's", a zero-padded or suffixed lesson id (05b). README.md's "cells" are its blocks (a paragraph or list, with
     the table after it), so README may cite any lesson's saved output where the block names that lesson;
  3. a value (a number, or a number inside a string, anywhere in the file) of a `nbs/results/*.json(l)` file named
     in the same markdown cell or in the code cells next to it (`results/demo_run.json`, `"optimizers.json"`), or
     of a benchmark record named in the cell by its path (`benchmarks/results/cpu_2026-12-04/`: every file of that
     folder, what the scripts printed there unedited; or one file of it);
  4. an entry of the citation registry `nbs/sources.yaml` (value as written; what; source: paper and table or
     section, or repository and file) whose `used_in` names the file (the notebook's stem, or README). An entry
     with `file:` (a path in this repository) is itself checked: its value must be in that file.
Scopes are per cell, not per notebook, because outputs and results are dense: with the whole notebook (every
lesson it names, every results file) as the scope, half of the wrong values planted by tests/test_check_claims.py
matched some other printed number.

"Equal as rounded": a prose decimal 1.95 is matched by a trace value v with |v - 1.95| < 0.005 (1.9532, not 1.945
or 1.96); 31% by 31.x or 0.31x; 2.3x / 2.3× like 2.3 (a ratio is printed by a cell, never computed in prose);
scales (16k, 1.2M, 3.2 billion) round to the digits shown; 1.7·10³⁸, 1e-3, 2^16 are read as their values. A bare
integer (a count, 512 rows), or a scientific number with an integer mantissa (4e-2), is EXACT: only an equal trace
value matches it, unless a unit of time, memory or FLOPs follows (16 h, 248 GFLOP/s: it rounds) or it follows
about / ≈ / ~ / roughly / around / nearly (it rounds, and its trailing zeros are rounding: "about 48,000" is 47,500
to 48,500). Signs are ignored.

Not read as numbers at all: fenced code blocks, `inline code`, URLs and link targets `](...)`, HTML tags and
comments, digits glued to a word on the left (fp16, T5, v1.1, A100, H200, b32, GPT-2, T5-Base, A100-40GB) or to
`_` on the right (05_pretraining). Numbers in LaTeX math are read like prose (`8{,}192` is 8,192).

EXEMPT (each rule narrow; `--list-exempt` prints every exemption applied):
  small count  an integer 0-10 written bare (no decimals, %, ×, scale)
  year         a 4-digit integer 1700-2100 but 2048 (the corpus starts in 1790), or an ISO date 2026-12-04
  lesson       a lesson id 00-11 (optional b/c suffix) written zero-padded or suffixed, after "lesson(s)" or
               "notebook(s)", or on a line that links to that lesson's notebook
  list marker  the number of a numbered list item ("3. ") at the start of a line
  ordinal      an integer followed by st/nd/rd/th (1st, 18th-century)
  reference    after Table, Figure, Fig., Section, §, Eq., Equation, Chapter, Appendix; an issue number #8295; an
               arXiv id 2309.02373
  version      after a package name (Python, torch, transformers, tokenizers, datasets, accelerate, torchdata, CUDA,
               nbdev, numpy, sphinx, Jupyter Book, ...), with a range or "and" list of versions there; a dotted
               triple 2.13.0

Output: a line per untraced number, `FILE:cell C:line L (paired .py:LINE): NUMBER — ... | the line`, then a count;
exit status 1 if any. A notebook without saved outputs is one error line ("no saved outputs"), not a crash.
Options: --file PATH (repeatable), --summary (per-file counts), --list-exempt, --explain (each traced number and
the trace it matched).
"""
from __future__ import annotations

import argparse, bisect, functools, json, re, sys, time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = "README.md"

# ---------------------------------------------------------------- masking: spans that hold no checked numbers
_MASKS = [
    re.compile(r"^[ \t]*(```|~~~).*?^[ \t]*\1[^\n]*$", re.S | re.M),  # fenced code blocks
    re.compile(r"<!--.*?-->", re.S),  # HTML comments
    re.compile(r"(`+)(?:(?!\1).)+?\1", re.S),  # inline code
    re.compile(r"\]\([^)\s]*(?:\s+\"[^\"]*\")?\)"),  # link / image targets
    re.compile(r"<https?://[^>]*>|https?://[^\s)>\]]+|www\.[^\s)>\]]+"),  # URLs
    re.compile(r"</?[A-Za-z][^<>]*>"),  # HTML tags and their attributes
]


def mask(text: str) -> str:
    "The text with every masked span blanked (newlines kept, so line numbers stay put)"
    for rx in _MASKS:
        text = rx.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    return re.sub(r"(\d)\{,\}(\d{3})", r"\1,\2  ", text)  # LaTeX 8{,}192 -> 8,192


# ---------------------------------------------------------------- numbers in prose
_SCALES = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "thousand": 1e3, "million": 1e6, "billion": 1e9,
           "trillion": 1e12}
_SUP = str.maketrans("⁻⁰¹²³⁴⁵⁶⁷⁸⁹", "-0123456789")
PROSE_NUM = re.compile(r"""
    (?<![\w.^])(?<!\d,)
    (?P<int>\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?P<frac>\.\d+)?
    (?:(?P<exp>[eE][-+−]?\d+)(?![\w.])|\s?[·×]\s?10(?:\^(?P<exp10>[-−]?\d+)|(?P<sup>[⁻⁰¹²³⁴⁵⁶⁷⁸⁹]+))
       |\^(?P<pow>\d+))?
    (?P<pct>\s?%)?(?P<mult>[×x](?!\w))?
    (?:(?P<scale>[kKMBG])(?!\w)|\s(?P<scaleword>thousand|million|billion|trillion)\b)?
""", re.X)
PACKAGES = (r"python|pytorch|torch|transformers|tokenizers|datasets|accelerate|torchdata|cuda|nbdev|numpy|sphinx|"
            r"jupytext|sentencepiece|safetensors|pytest|myst-nb|myst-parser|playwright|hub|jupyter book|pandas|"
            r"triton|cudnn|nccl|driver")
_V = r"v?\d+(?:\.\d+|\.x)*"
VERSION_RUN = re.compile(rf"\b(?:{PACKAGES})\s*(?:[≥≤<>=~!]=?\s*)?{_V}(?:(?:\s*[–/-]\s*|\s+(?:and|or|to)\s+){_V})*",
                         re.I)
REF_BEFORE = re.compile(r"(?:\b(?:Tables?|Figures?|Fig\.|Sections?|Eq\.|Equations?|Chapter|Appendix)\s*|§\s*|#)$")
LESSON_BEFORE = re.compile(r"\b(?:[Ll]essons?|[Nn]otebooks?)\s*(?:(?:0\d|1[01])[bc]?\s*(?:,|–|-|and|or|to)\s*)*\(?$")
UNIT_AFTER = re.compile(r"\s?(?:ms|s|min|minutes?|h|hours?|days?|[kMGT]i?B|[kMGTP]?FLOP(?:s|/s)?|W)\b")
APPROX_BEFORE = re.compile(r"(?:\babout|≈|~|\broughly|\baround|\bnearly|\bapproximately)\s*$", re.I)
DATE = re.compile(r"\b(?:19|20)\d\d-[01]\d-[0-3]\d\b")
ARXIV = re.compile(r"\b\d{4}\.\d{4,5}(?:v\d+)?\b")
LESSON_LINK = re.compile(r"\((?:[^()\s]*/)?(\d\d[a-z]?)_\w+\.ipynb")
LESSON_ID = re.compile(r"(0\d|1[01])([bc]?)")
RESULT_NAME = re.compile(r"[\w.-]+\.jsonl?")
BENCH_NAME = re.compile(r"benchmarks/results/[\w.-]+(?:/[\w.-]+)?")  # a benchmark record: one folder, or one file


@dataclass
class Num:
    text: str  # as written
    value: float  # its value, scale applied
    tol: float  # a trace value v matches when |v - value| < tol (0: equal)
    percent: bool
    line: int  # 1-based, within the cell
    cell: int | None = None
    status: str = "untraced"  # traced | untraced | exempt: RULE
    start: int = 0  # offset in the cell's text
    end: int = 0
    where: str = ""  # the trace it matched


def prose_numbers(text: str) -> list[Num]:
    "Every number of a markdown text, each 'exempt: RULE' or 'untraced' (matching against traces comes later)"
    mt = mask(text)
    spans = [(m.start(), m.end(), "year") for m in DATE.finditer(mt)]
    spans += [(m.start(), m.end(), "reference") for m in ARXIV.finditer(mt)]
    spans += [(m.start(), m.end(), "version") for m in VERSION_RUN.finditer(mt)]
    lines, raw_lines = mt.split("\n"), text.split("\n")
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln) + 1)
    out = []
    for m in PROSE_NUM.finditer(mt):
        s, e = m.start(), m.end()
        before, after = mt[max(0, s - 40):s], mt[e:e + 3]
        if re.search(r"[A-Za-z]\w*-$", before) or after[:1] == "_":
            continue  # part of an identifier: GPT-2, A100-40GB, 05_pretraining
        intpart, frac = m["int"].replace(",", ""), m["frac"] or ""
        value, tol = float(intpart + frac), 0.5 * 10.0 ** -(len(frac) - 1 if frac else 0)
        if m["exp"] or m["exp10"] or m["sup"]:
            x = int((m["exp"] or "e" + (m["exp10"] or m["sup"].translate(_SUP)))[1:].replace("−", "-"))
            value, tol = value * 10.0 ** x, tol * 10.0 ** x
        if m["pow"]:
            value, tol = float(int(intpart) ** int(m["pow"])), 0.0
        scale = _SCALES.get(m["scale"] or m["scaleword"] or "", 1.0)
        value, tol = value * scale, tol * scale
        bare = not (frac or m["exp"] or m["exp10"] or m["sup"] or m["pow"] or m["pct"] or m["mult"] or scale != 1)
        if not frac and not m["pow"] and not m["pct"] and not m["mult"] and scale == 1:
            if not APPROX_BEFORE.search(before):
                tol = 0.5 if bare and UNIT_AFTER.match(mt, e) else 0.0  # a bare integer is exact, a measure rounds
            elif bare:  # "about 48,000": trailing zeros are rounding
                tol = 0.5 * 10.0 ** min(len(intpart) - len(intpart.rstrip("0")), len(intpart) - 1)
        line = bisect.bisect_right(starts, s)
        col = s - starts[line - 1]
        n = Num(m.group(0).strip(), value, tol, bool(m["pct"]), line, start=s, end=e)
        lid = LESSON_ID.fullmatch(mt, s, e + (after[:1] in ("b", "c") and not mt[e + 1:e + 2].isalnum()))
        rule = next((r for a, b, r in spans if a <= s < b), None)
        if rule:
            pass
        elif re.match(r"\.\d", after):
            rule = "version"  # a dotted triple 2.13.0
        elif lid and (lid[1].startswith("0") or lid[2] or LESSON_BEFORE.search(before)
                      or lid[0] in LESSON_LINK.findall(raw_lines[line - 1])):
            rule, n.text = "lesson", lid[0]
        elif bare and value <= 10 and "," not in m["int"]:
            rule = "small count"
        elif bare and len(m["int"]) == 4 and 1700 <= value <= 2100 and value != 2048:
            rule = "year"
        elif bare and re.match(r"(?:st|nd|rd|th)\b", after):
            rule = "ordinal"
        elif bare and re.fullmatch(r"\s*(?:>\s*)*", lines[line - 1][:col]) and re.match(r"[.)]\s", after):
            rule = "list marker"
        elif REF_BEFORE.search(before):
            rule = "reference"
        if rule:
            n.status = f"exempt: {rule}"
        out.append(n)
    return out


def lessons_named(text: str, nums: list[Num] | None = None) -> set[str]:
    "Lesson ids a markdown text names: links to NN_*.ipynb, 'lesson NN', NN's, zero-padded or suffixed ids"
    ids = set(LESSON_LINK.findall(text)) | {a + b for a, b in re.findall(r"\b(0\d|1[01])([bc]?)(?:'s|’s)", text)}
    return ids | {n.text for n in (prose_numbers(text) if nums is None else nums) if n.status == "exempt: lesson"}


# ---------------------------------------------------------------- numbers in traces
TRACE_NUM = re.compile(r"(\d+(?:,\d{3})+(?!\d)|\d+(?:_\d{3})+|\d+)(\.\d+)?(?:([eE][-+]?\d+)|(?:\^|\*\*)(\d+))?"
                       r"(?:([kKMBG])(?![A-Za-z])|\s(thousand|million|billion|trillion)\b)?")


def trace_values(text: str) -> list[float]:
    "Every number in a trace, loosely: 1,024 gives 1024, 1 and 24; 6.6M gives 6.6e6 and 6.6; 2**16 gives 65536"
    vals = []
    for m in TRACE_NUM.finditer(text):
        whole = m[1].replace(",", "").replace("_", "")
        v = float(whole + (m[2] or ""))
        vals.append(v)
        if "," in m[1]:
            vals += [float(p) for p in m[1].split(",")]
        if m[3]:
            vals.append(v * 10.0 ** int(m[3][1:]))
        if m[4] and len(m[4]) < 4 and len(whole) < 6:
            vals.append(float(int(whole) ** int(m[4])))
        if m[5] or m[6]:
            vals.append(v * _SCALES[m[5] or m[6]])
    return vals


class Traces:
    "Named groups of trace values, each sorted once"

    def __init__(self, groups: list[tuple[str, list[float]]]):
        self.groups = groups

    @staticmethod
    def group(values: list[float]) -> list[float]:
        return sorted({abs(v) for v in values})

    def find(self, n: Num) -> str | None:
        "Where a trace value equal to the prose number as rounded comes from, or None"
        targets = [(n.value, n.tol)] + ([(n.value / 100, n.tol / 100)] if n.percent else [])
        for name, vals in self.groups:
            for v, tol in targets:
                tol = tol * (1 - 1e-9) if tol else 1e-9 * max(1.0, v)
                i = bisect.bisect_right(vals, v - tol)
                if i < len(vals) and vals[i] < v + tol:
                    return f"{name} ({vals[i]:g})"
        return None


# ---------------------------------------------------------------- the project: notebooks, README, results, sources
@dataclass
class Doc:
    path: str  # relative to the root
    markdown: list[tuple[int, str]]  # (cell index, text); README.md: (first line - 1, block text)
    near: dict[int, str] = field(default_factory=dict)  # cell -> the code cells between it and its neighbour cells
    outputs: list[float] = field(default_factory=list)
    code: list[float] = field(default_factory=list)
    n_outputs: int = 0


def _src(c) -> str:
    return "".join(c["source"]) if isinstance(c["source"], list) else c["source"]


def output_text(o: dict) -> str:
    data = o.get("data", {})
    parts = [o.get("text", "")] + [data.get(k, "") for k in ("text/plain", "text/markdown", "text/latex")]
    html = data.get("text/html", "")
    parts.append(re.sub(r"<[^<>]*>", " ", "".join(html) if isinstance(html, list) else html))
    return "".join("".join(p) if isinstance(p, list) else p for p in parts)


def md_blocks(text: str) -> list[tuple[int, str]]:
    "(first line - 1, text) of each block of a markdown file: paragraphs, lists, a table with the paragraph before it"
    lines, blocks, start = text.split("\n"), [], 0
    for i in range(1, len(lines) + 1):
        end = i == len(lines) or (not lines[i].strip() and i + 1 < len(lines) and lines[i + 1].strip()
                                  and not lines[i + 1].lstrip().startswith("|"))
        if end:
            if "\n".join(lines[start:i]).strip():
                blocks.append((start, "\n".join(lines[start:i])))
            start = i
    return blocks


def read_doc(path: Path, root: Path) -> Doc:
    rel = path.relative_to(root).as_posix()
    if path.suffix == ".md":
        return Doc(rel, md_blocks(path.read_text()))
    nb = json.loads(path.read_text())
    cells = nb["cells"]
    doc = Doc(rel, [(i, _src(c)) for i, c in enumerate(cells) if c["cell_type"] == "markdown"])
    for i, c in enumerate(cells):  # the code cells just before and just after a markdown cell
        if c["cell_type"] == "markdown":
            near = []
            for step in (-1, 1):
                j = i + step
                while 0 <= j < len(cells) and cells[j]["cell_type"] != "markdown":
                    near.append(_src(cells[j]))
                    j += step
            doc.near[i] = "\n".join(near)
    code = [c for c in cells if c["cell_type"] == "code"]
    outs = [output_text(o) for c in code for o in c.get("outputs", [])]
    doc.n_outputs = sum(bool(t.strip()) for t in outs)
    doc.outputs = Traces.group(trace_values("\n".join(outs)))
    doc.code = Traces.group(trace_values("\n".join(_src(c) for c in code)))
    return doc


class Project:
    "Every notebook, README.md, the results files and the citation registry of a checkout"

    def __init__(self, root: Path = ROOT):
        self.root, nbs = Path(root), Path(root) / "nbs"
        self.docs = {d.path: d for d in (read_doc(p, self.root) for p in sorted(nbs.glob("*.ipynb")))}
        if (self.root / README).exists():
            self.docs[README] = read_doc(self.root / README, self.root)
        self.results = {p.name: Traces.group(trace_values(p.read_text()))
                        for p in sorted((nbs / "results").glob("*.json*"))}
        src = nbs / "sources.yaml"
        self.sources = (__import__("yaml").safe_load(src.read_text()) or []) if src.exists() else []
        self._cited: dict[str, list[float]] = {}

    @functools.lru_cache(maxsize=None)
    def bench(self, name: str) -> list[float]:
        "The values in a benchmark record under benchmarks/results/ (a folder: every file in it)"
        path = self.root / name
        files = sorted(f for f in path.iterdir() if f.is_file()) if path.is_dir() else [path] if path.is_file() else []
        return Traces.group([v for f in files for v in trace_values(f.read_text(errors="replace"))])

    def lesson(self, lid: str) -> Doc | None:
        return next((d for p, d in self.docs.items() if re.fullmatch(rf"nbs/{lid}_\w+\.ipynb", p)), None)

    def traces(self, doc: Doc, cell: int, text: str, nums: list[Num]) -> Traces:
        "What a markdown cell's numbers may cite (the rules 1-4 of the docstring)"
        own = self.docs.get("nbs/index.ipynb", Doc("", [])) if doc.path == README else doc
        groups = [("its outputs", own.outputs), ("its code", own.code)]
        results = set(RESULT_NAME.findall(text + "\n" + doc.near.get(cell, "")))
        for lid in sorted(lessons_named(text, nums)):
            if (d := self.lesson(lid)) and d is not doc:
                groups.append((f"lesson {lid}", d.outputs))
        groups += [(f"results/{r}", self.results[r]) for r in sorted(results & set(self.results))]
        groups += [(b, self.bench(b)) for b in sorted(set(BENCH_NAME.findall(text)))]
        if doc.path not in self._cited:
            names = {Path(doc.path).stem, doc.path} | ({"index"} if doc.path == README else set())
            self._cited[doc.path] = Traces.group([n.value for e in self.sources if names & set(e.get("used_in") or [])
                                                  for n in prose_numbers(str(e.get("value", "")))])
        return Traces(groups + [("nbs/sources.yaml", self._cited[doc.path])])


def scan(project: Project, path: str, markdown: list[tuple[int, str]] | None = None) -> list[Num]:
    "Every prose number of one file with its status; `markdown` replaces the file's markdown cells (for tests)"
    doc, out = project.docs[path], []
    for cell, text in (doc.markdown if markdown is None else markdown):
        nums = prose_numbers(text)
        traces = project.traces(doc, cell, text, nums)
        for n in nums:
            n.cell = cell
            if n.status == "untraced" and (where := traces.find(n)):
                n.status, n.where = "traced", where
        out += nums
    return out


def location(project: Project, path: str, n: Num, text: str) -> str:
    "FILE:cell C:line L, plus the paired py:percent file's line when that file has the same line there"
    if path.endswith(".md"):
        return f"{path}:{n.cell + n.line}"
    loc, py = f"{path}:cell {n.cell}:line {n.line}", project.root / Path(path).with_suffix(".py")
    if py.exists():
        lines = _read_lines(py)
        markers = [i for i, ln in enumerate(lines) if ln.startswith("# %%")]
        k = markers[n.cell] + n.line if n.cell < len(markers) else -1
        if 0 <= k < len(lines) and lines[k].rstrip() == ("# " + text.split("\n")[n.line - 1]).rstrip():
            loc += f" ({py.relative_to(project.root).as_posix()}:{k + 1})"
    return loc


@functools.lru_cache(maxsize=None)
def _read_lines(path: Path) -> list[str]:
    return path.read_text().split("\n")


def check(project: Project, paths: list[str], list_exempt=False, summary=False, explain=False, out=sys.stdout,
          overrides: dict[str, list[tuple[int, str]]] | None = None) -> int:
    "Print a line per untraced number, notebook without outputs and unverified registry entry; return how many"
    errors, rows, overrides = 0, [], overrides or {}
    for e in project.sources:  # every entry has a number; one that names a file of this repository is checked
        nums, f = prose_numbers(str(e.get("value", ""))), project.root / str(e.get("file", ""))
        if not nums or not e.get("source"):
            print(f"nbs/sources.yaml: {e} — an entry needs a value with a number and a source", file=out)
            errors += 1
        elif e.get("file") and not (f.is_file() and Traces([("", Traces.group(trace_values(f.read_text())))]).find(
                nums[0])):
            print(f"nbs/sources.yaml: {e['value']} — not found in {e['file']}", file=out)
            errors += 1
    for path in paths:
        doc = project.docs[path]
        if path.endswith(".ipynb") and doc.n_outputs == 0:
            print(f"{path}: no saved outputs (run the notebook and save it); its numbers are not checked", file=out)
            errors += 1
            rows.append((path, "no saved outputs", "", ""))
            continue
        nums, texts = scan(project, path, overrides.get(path)), dict(overrides.get(path) or doc.markdown)
        for n in nums:
            if n.status == "untraced":
                ctx = texts[n.cell].split("\n")[n.line - 1].strip()
                print(f"{location(project, path, n, texts[n.cell])}: {n.text} — not in its outputs/code, outputs of "
                      f"lessons named in the cell, its results or sources.yaml | {ctx[:100]}", file=out)
            elif (list_exempt and n.status.startswith("exempt")) or (explain and n.status == "traced"):
                print(f"{location(project, path, n, texts[n.cell])}: {n.text} — {n.status}"
                      f"{': ' + n.where if n.where else ''}", file=out)
        bad = sum(n.status == "untraced" for n in nums)
        errors += bad
        rows.append((path, bad, sum(n.status == "traced" for n in nums), sum(n.status != "traced" for n in nums) - bad))
    if summary:
        print(f"\n{'file':40} {'untraced':>8} {'traced':>7} {'exempt':>7}", file=out)
        for r in rows:
            print(f"{r[0]:40} {r[1]:>8} {r[2]:>7} {r[3]:>7}", file=out)
    print(f"{errors} untraced number(s) or error(s) in {len(paths)} file(s)" if errors else
          f"every number traced in {len(paths)} file(s)", file=out)
    return errors


def default_paths(project: Project) -> list[str]:
    "Every notebook and README.md; nbs/index.ipynb's prose is checked as README.md, its rendering"
    return [p for p in project.docs if p != "nbs/index.ipynb" or README not in project.docs]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file", action="append", help="check only this file (nbs/05_pretraining.ipynb, README.md)")
    ap.add_argument("--summary", action="store_true", help="per-file counts of untraced, traced and exempt numbers")
    ap.add_argument("--list-exempt", action="store_true", help="print every exempt number and its rule")
    ap.add_argument("--explain", action="store_true", help="print every traced number and the trace it matched")
    a = ap.parse_args(argv)
    t0 = time.time()
    project = Project()
    paths = default_paths(project) if not a.file else [Path(f).resolve().relative_to(ROOT).as_posix() for f in a.file]
    if unknown := [p for p in paths if p not in project.docs]:
        print(f"not a checked file: {', '.join(unknown)} (nbs/*.ipynb or README.md)")
        return 2
    errors = check(project, paths, a.list_exempt, a.summary, a.explain)
    print(f"({time.time() - t0:.1f} s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
