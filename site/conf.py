# Sphinx configuration of the course website (Jupyter Book 1's engine: Sphinx + myst-nb + sphinx-book-theme).
# Built by `bash tools/site.sh`; the sources are staged by site/stage.py from nbs/, exercises/ and docs/.
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # autodoc imports nanot5_edu from this tree
REPO = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"].rstrip("/")

project = "nanot5_edu"
author = "nanot5_edu authors"
copyright = "nanot5_edu authors, Apache-2.0"
html_title = "nanot5_edu"

extensions = [
    "myst_nb",               # notebooks and MyST markdown
    "sphinx.ext.autodoc",    # the API page: signatures and docstrings of what nanot5_edu exports
    "sphinx_copybutton",     # a copy button on every code cell
]

# notebooks: saved outputs only, never executed
nb_execution_mode = "off"
nb_ipywidgets_js = {}        # no widget JS from a CDN (saved widgets carry no state; stage.py replaces them)
nb_merge_streams = True
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist", "html_image"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]  # lessons may skip a heading level; that is a style choice, not a break

# API page: import the real package (it is installed) and show signatures as written
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": True}
add_module_names = False
default_role = "code"  # docstrings write `name` as Markdown code: show it as code, not reST's italics

exclude_patterns = ["_build", "**.ipynb_checkpoints"]
root_doc = "index"

html_theme = "sphinx_book_theme"
html_static_path = ["_static"]
html_css_files = ["course.css"]
html_copy_source = False
html_show_sourcelink = False
html_last_updated_fmt = None
html_context = {"default_mode": "auto"}  # light/dark as the reader's system says (and no console error on a first visit)
html_theme_options = {
    "repository_url": REPO,
    "repository_branch": "main",
    "use_repository_button": True,
    "use_download_button": False,
    "use_fullscreen_button": False,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
    "show_toc_level": 2,
    "navigation_with_keys": False,
}

# math: MathJax 3 served from the site itself (the files of the PyPI package sphinx-mathjax-offline), so the math
# renders with no CDN; copied here rather than loading that package as an extension, which would force a serial build
mathjax_path = "mathjax/tex-chtml.js"


def _copy_mathjax(app, exc):
    import importlib.util
    from sphinx.util.fileutil import copy_asset
    if exc is None:
        pkg = Path(importlib.util.find_spec("sphinx-mathjax-offline").origin).parent
        copy_asset(str(pkg / "static" / "mathjax"), str(Path(app.outdir) / "_static" / "mathjax"))


def setup(app):
    app.connect("build-finished", _copy_mathjax)
