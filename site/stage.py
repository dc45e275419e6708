"""Stage the course's sources for Sphinx: `python site/stage.py DEST`.

The page list is derived from what is in the repository, never hard-coded:
  nbs/index.ipynb           -> the home page (README's landing content)
  nbs/NN_*.ipynb            -> the lessons, in file-name (learning-path) order, titled by their first heading;
                               NN >= 90 (the exercise checks) go to the Reference section
  exercises/*.ipynb         -> an Exercises section, if the folder exists
  docs/teaching.md          -> a teaching guide, if it exists
  nanot5_edu (__all__)      -> api.md, each exported name's signature and docstring (Sphinx autodoc)
Notebooks are copied with their saved outputs (nothing is executed) and adapted for the web, without touching
the originals: `#| hide` cells dropped and `#|` directives stripped (as nbdev's docs do), a Colab badge and a
GitHub link under each title, links that leave the site pointed at GitHub, widgets (which need a live kernel)
replaced by a note, and the home page given the (hidden) tables of contents that build the sidebar.
"""
import json
import re
import shutil
import sys
import tomllib
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parent.parent
REPO = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"].rstrip("/")
BRANCH = "main"
GH_PATH = REPO.removeprefix("https://github.com/")
COLAB_BADGE_REMOTE = "https://colab.research.google.com/assets/colab-badge.svg"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".svg", ".webp"}
LESSON_RE = re.compile(r"^\d+[a-z]?_.+\.ipynb$")
LINK_RE = re.compile(r"(\]\()([^)\s]+)(\))")                      # markdown [text](target)
HTML_LINK_RE = re.compile(r"""((?:href|src)=["'])([^"']+)(["'])""")  # raw html href/src


def first_heading(nb: dict, default: str) -> str:
    "Text of the first markdown heading (`# Title`) of a notebook"
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            for line in "".join(c["source"]).splitlines():
                if m := re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line):
                    return m.group(1).strip()
    return default


def md_heading(path: Path, default: str) -> str:
    for line in path.read_text().splitlines():
        if m := re.match(r"^#\s+(.+?)\s*$", line):
            return m.group(1)
    return default


def rel(target: str, start: str) -> str:
    "POSIX relative path from the folder of page `start` to `target` (both relative to the site root)"
    start_dir = PurePosixPath(start).parent
    up = len(start_dir.parts)
    return "/".join([".."] * up + [target]) if up else target


class Stager:
    def __init__(self, dest: Path):
        self.dest = dest
        self.pages: dict[str, str] = {}  # repo path (posix) -> staged path (posix), for link rewriting
        self.lessons = sorted(p for p in (ROOT / "nbs").glob("*.ipynb") if LESSON_RE.match(p.name))
        self.exercises = sorted((ROOT / "exercises").glob("*.ipynb")) if (ROOT / "exercises").is_dir() else []
        self.teaching = ROOT / "docs" / "teaching.md"
        self.pages["nbs/index.ipynb"] = "index.ipynb"
        for p in self.lessons:
            self.pages[f"nbs/{p.name}"] = p.name
        for p in self.exercises:
            self.pages[f"exercises/{p.name}"] = f"exercises/{p.name}"
        if self.teaching.exists():
            self.pages["docs/teaching.md"] = "teaching.md"
        self.pages["README.md"] = "index.ipynb"

    # ---- links ---------------------------------------------------------------------------------------------
    def fix_target(self, target: str, src_repo: str, staged: str) -> str:
        "A link as written in the repository file `src_repo`, rewritten for the page at `staged`"
        if target == COLAB_BADGE_REMOTE:
            return rel("_static/colab-badge.svg", staged)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith(("#", "/")):
            return target  # absolute URL, mailto:, in-page anchor, site-absolute
        path, _, frag = target.partition("#")
        repo_path = PurePosixPath(*_norm((PurePosixPath(src_repo).parent / path).parts))
        key = str(repo_path)
        if key in self.pages:
            return rel(self.pages[key], staged) + (f"#{frag}" if frag else "")
        if (ROOT / key).is_file() and repo_path.suffix.lower() in IMAGE_SUFFIXES:  # a local figure: ship it
            copy = self.dest / "_repo" / key
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / key, copy)
            return rel(f"_repo/{key}", staged)
        kind = "tree" if (ROOT / key).is_dir() else "blob"
        return f"{REPO}/{kind}/{BRANCH}/{key}" + (f"#{frag}" if frag else "")

    def fix_links(self, text: str, src_repo: str, staged: str) -> str:
        sub = lambda m: m.group(1) + self.fix_target(m.group(2), src_repo, staged) + m.group(3)
        return HTML_LINK_RE.sub(sub, LINK_RE.sub(sub, text))

    # ---- notebooks -----------------------------------------------------------------------------------------
    def badge_cell(self, src_repo: str, staged: str) -> dict:
        colab = f"https://colab.research.google.com/github/{GH_PATH}/blob/{BRANCH}/{src_repo}"
        github = f"{REPO}/blob/{BRANCH}/{src_repo}"
        badge = rel("_static/colab-badge.svg", staged)
        src = (f'<p class="nb-links"><a href="{colab}"><img src="{badge}" alt="Open In Colab"></a> '
               f'<a class="nb-github" href="{github}">View <code>{src_repo}</code> on GitHub</a></p>')
        return {"cell_type": "markdown", "id": "nb-links", "metadata": {}, "source": src}

    def stage_notebook(self, src: Path, staged: str, extra_cells=()) -> dict:
        src_repo = src.relative_to(ROOT).as_posix()
        nb = json.loads(src.read_text())
        cells = []
        for i, c in enumerate(nb["cells"]):
            c = dict(c)
            c.setdefault("id", f"cell-{i}")  # nbformat 4.5 wants cell ids; hand-made notebooks may lack them
            text = "".join(c["source"])
            if c["cell_type"] == "code":
                lines = text.splitlines()
                directives = [l for l in lines if re.match(r"^#\|", l)]
                if any(re.match(r"^#\|\s*hide\b", d) for d in directives):
                    continue  # test plumbing: out of the reading path, as in nbdev's docs
                c["source"] = "\n".join(l for l in lines if not re.match(r"^#\|", l)).strip("\n")
                c["outputs"] = [self.fix_output(o) for o in c.get("outputs", [])]
            elif c["cell_type"] == "markdown":  # index.ipynb is README.md: its links are relative to the root
                c["source"] = self.fix_links(text, "README.md" if src_repo == "nbs/index.ipynb" else src_repo, staged)
            elif c["cell_type"] == "raw":
                continue
            cells.append(c)
        first_md = next((i for i, c in enumerate(cells) if c["cell_type"] == "markdown"), -1)
        if first_md >= 0:  # the links go right under the title (and nbdev's `> summary` line), before the prose
            lines = cells[first_md]["source"].splitlines()
            cut = next((j + 1 for j, l in enumerate(lines) if l.startswith("# ")), 0)
            while cut < len(lines) and lines[cut].startswith(">"):
                cut += 1
            head, rest = "\n".join(lines[:cut]).strip(), "\n".join(lines[cut:]).strip()
            if head and rest:
                cells[first_md]["source"] = head
                cells.insert(first_md + 1, {**cells[first_md], "id": "nb-rest", "source": rest})
        cells.insert(first_md + 1, self.badge_cell(src_repo, staged))
        cells.extend(extra_cells)
        nb["cells"] = cells
        nb["nbformat"], nb["nbformat_minor"] = 4, max(5, nb.get("nbformat_minor", 5))
        nb["metadata"] = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                          "language_info": {"name": "python"}}
        out = self.dest / staged
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(nb, indent=1))
        return nb

    @staticmethod
    def fix_output(o: dict) -> dict:
        "A saved ipywidgets output has no widget state (nbdev-clean drops it): say what it is instead"
        if WIDGET_MIME in o.get("data", {}):
            o = dict(o)
            o["data"] = {"text/html": '<p class="widget-note">An interactive widget stands here: open the '
                                      'notebook in Colab or Jupyter to use it.</p>'}
        return o

    # ---- API page ------------------------------------------------------------------------------------------
    def api_page(self) -> str:
        "One section per module of nanot5_edu, named after the lesson that builds it (from `#| default_exp`)"
        mods = []
        for p in self.lessons:
            for c in json.loads(p.read_text())["cells"]:
                if c["cell_type"] == "code" and (m := re.search(r"^#\|\s*default_exp\s+(\S+)", "".join(c["source"]), re.M)):
                    mods.append((m.group(1), p))
                    break
        out = ["# API reference", "",
               "Every name the package `nanot5_edu` exports (its modules' `__all__`), with its signature and "
               "docstring, module by module, each next to the lesson that builds it.", ""]
        for mod, p in mods:
            if mod == "__main__":
                continue
            title = first_heading(json.loads(p.read_text()), p.stem)
            out += [f"## `nanot5_edu.{mod}`", "", f"Built in lesson [{p.stem.split('_')[0]} · {title}]({p.name}).", "",
                    "```{eval-rst}", f".. automodule:: nanot5_edu.{mod}", "   :members:", "   :undoc-members:",
                    "   :member-order: bysource", "```", ""]  # autodoc writes reST: parsed as such, not as MyST
        return "\n".join(out)

    # ---- the whole site ------------------------------------------------------------------------------------
    def toctree(self, caption: str, entries: list[str]) -> str:
        return "\n".join([f"```{{toctree}}", ":hidden:", f":caption: {caption}", "", *entries, "```"])

    def run(self):
        if self.dest.exists():
            shutil.rmtree(self.dest)
        self.dest.mkdir(parents=True)
        (self.dest / "_static").mkdir()  # the local Colab badge, for markdown images (Sphinx copies them)
        shutil.copy2(ROOT / "site" / "_static" / "colab-badge.svg", self.dest / "_static")
        lessons, references = [], []  # nbs/90_* and above are reference notebooks (the exercise checks), not lessons
        for p in self.lessons:
            nb = self.stage_notebook(p, p.name)
            number = p.stem.split('_')[0]
            if int(re.match(r"\d+", number).group()) >= 90:
                references.append(f"{first_heading(nb, p.stem)} <{p.stem}>")
            else:
                lessons.append(f"{number} · {first_heading(nb, p.stem)} <{p.stem}>")
        exercises = []
        for p in self.exercises:
            nb = self.stage_notebook(p, f"exercises/{p.name}")
            exercises.append(f"{first_heading(nb, p.stem)} <exercises/{p.stem}>")
        trees = [self.toctree("Lessons", lessons)]
        if exercises:
            trees.append(self.toctree("Exercises", exercises))
        teaching = self.teaching.exists()
        if teaching:
            (self.dest / "teaching.md").write_text(self.fix_links(self.teaching.read_text(), "docs/teaching.md",
                                                                  "teaching.md"))
            trees.append(self.toctree("For teachers", [f"{md_heading(self.teaching, 'Teaching guide')} <teaching>"]))
        (self.dest / "api.md").write_text(self.api_page())
        trees.append(self.toctree("Reference", ["API reference <api>", *references]))
        home_tocs = {"cell_type": "markdown", "id": "site-tocs", "metadata": {}, "source": "\n\n".join(trees)}
        self.stage_notebook(ROOT / "nbs" / "index.ipynb", "index.ipynb", extra_cells=[home_tocs])
        print(f"staged {len(lessons)} lessons, {len(exercises)} exercises, "
              f"teaching guide: {'yes' if teaching else 'no'}, API page -> {self.dest}")


def _norm(parts):
    "Resolve '..' and '.' in a relative path's parts"
    out = []
    for p in parts:
        if p == "..":
            if out:
                out.pop()
        elif p != ".":
            out.append(p)
    return out


if __name__ == "__main__":
    Stager(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "build" / "site" / "src").run()
