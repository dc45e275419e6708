"Run every notebook in nbs/ the way `nbdev-test` does (honouring tst_flags), one pytest case per notebook"
import os

import pytest
from nbdev.config import get_config
import nbdev.test as nbtest  # not `from nbdev.test import test_nb`: pytest would collect it as a test

cfg = get_config()
NBS = sorted(p for p in cfg.nbs_path.glob("*.ipynb") if not p.name.startswith(("_", ".")))
SKIP = cfg.tst_flags.split() if isinstance(cfg.tst_flags, str) else list(cfg.tst_flags)


def test_every_notebook_is_collected():
    names = {p.stem for p in NBS}
    for stem in ("index", "00_data"):
        assert stem in names, f"{stem}.ipynb missing from nbs/"


@pytest.mark.parametrize("nb", NBS, ids=[p.name for p in NBS])
def test_notebook(nb, monkeypatch):
    monkeypatch.chdir(nb.parent)  # nbdev-test runs each notebook from nbs/
    monkeypatch.setenv("IN_TEST", "1")
    ok, secs = nbtest.test_nb(nb, skip_flags=SKIP, basepath=cfg.config_path, cell_timeout=cfg.cell_timeout)
    assert ok, f"{nb.name} failed: traceback in captured stderr above"
