"Render nbs/index.ipynb to README.md without Quarto: nbdev's own doc filter, then plain GitHub Markdown"
from pathlib import Path

import yaml
from fastcore.nbio import read_nb
from nbdev.processors import FilterDefaults

ROOT = Path(__file__).resolve().parent.parent


def render(nb_path: Path = ROOT / "nbs" / "index.ipynb") -> str:
    "README text: title + description, markdown cells as they are, code cells as fenced blocks with text outputs"
    nb = read_nb(nb_path)
    FilterDefaults()(nb)  # drops `#| hide` cells, strips `#|` directives, lifts the title into frontmatter
    out = []
    for c in nb.cells:
        if c.cell_type == "raw":
            fm = yaml.safe_load(c.source.strip().strip("-")) or {}
            out.append(f"# {fm.get('title', '')}\n\n> {fm.get('description', '')}")
        elif c.cell_type == "markdown":
            out.append(c.source.strip())
        elif c.cell_type == "code" and c.source.strip():
            out.append(f"```python\n{c.source.strip()}\n```")
            for o in c.get("outputs", []):
                txt = o.get("text") or o.get("data", {}).get("text/plain")
                if txt:
                    out.append("```\n" + "".join(txt).rstrip("\n") + "\n```")
    return "\n\n".join(out) + "\n"


if __name__ == "__main__":
    import sys
    if sys.argv[1:]:  # it takes no arguments: --help (or anything) prints what it does and writes nothing
        sys.exit(print(__doc__ + "\nUsage: python tools/mkreadme.py  (writes README.md)") or (0 if sys.argv[1:] in (["-h"], ["--help"]) else 2))
    (ROOT / "README.md").write_text(render())
