"""Remove terminal control sequences from the notebooks' saved stream outputs.

A widget cell run headless (nbdev-test --save) saves `clear_output` as "\\x1b[2K\\r" lines: noise in the lesson and on
the site. Colour codes are removed too. Rewrites only the notebooks that change.
    python tools/strip_escapes.py [NOTEBOOK ...]      (default: nbs/*.ipynb)
"""
import json
import re
import sys
from pathlib import Path

CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def strip(nb: dict) -> bool:
    changed = False
    for cell in nb.get("cells", []):
        outputs = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                text = out["text"] if isinstance(out["text"], str) else "".join(out["text"])
                clean = CONTROL.sub("", text).replace("\r\n", "\n")
                clean = "\n".join(line.rsplit("\r", 1)[-1] for line in clean.split("\n"))  # what a terminal shows
                if clean != text:
                    changed = True
                    if not clean.strip():
                        continue
                    out["text"] = clean.splitlines(keepends=True)
            outputs.append(out)
        if "outputs" in cell:
            cell["outputs"] = outputs
    return changed


if __name__ == "__main__":
    paths = [Path(p) for p in sys.argv[1:]] or sorted(Path("nbs").glob("*.ipynb"))
    for path in paths:
        nb = json.loads(path.read_text())
        if strip(nb):
            path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
            print(f"stripped control sequences from {path}")
