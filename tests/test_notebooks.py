"""Run every notebook in nbs/ the way `nbdev-test` does (honouring tst_flags), one pytest case per notebook.
The notebooks that read saved results (those calling `results_file`: 04, 05b, 05c, 07, 09, 09b) run as opened from their Colab badge instead: copied alone into an
empty folder (no nbs/ beside them) with only the installed package, so `results_file` must find the results without
a results/ folder beside them: in the package (here the editable install's checkout; tests/test_wheel.py checks a
built wheel's copy), with the network fallback pointed at a URL that does not exist. The others read no file of the repository; 00 checks results_file inside nbs/."""
import shutil
from pathlib import Path

import pytest
from nbdev.config import get_config
import nbdev.test as nbtest  # not `from nbdev.test import test_nb`: pytest would collect it as a test

cfg = get_config()
NBS = sorted(p for p in cfg.nbs_path.glob("*.ipynb") if not p.name.startswith(("_", ".")))
SKIP = cfg.tst_flags.split() if isinstance(cfg.tst_flags, str) else list(cfg.tst_flags)
# every notebook that calls results_file (but 00, which defines it and checks it inside nbs/)
READ_RESULTS = {p.name for p in NBS if "results_file(" in p.read_text() and not p.name.startswith("00_")}


def test_every_notebook_is_collected():
    names = {p.stem for p in NBS}
    for stem in ("index", "00_data"):
        assert stem in names, f"{stem}.ipynb missing from nbs/"
    assert {"04_optimizers.ipynb", "05c_optimizer_grid.ipynb"} <= READ_RESULTS, "the results readers were not found"


@pytest.mark.parametrize("nb", NBS, ids=[p.name for p in NBS])
def test_notebook(nb, monkeypatch, tmp_path):
    monkeypatch.setenv("IN_TEST", "1")
    elsewhere = nb.name in READ_RESULTS
    if elsewhere:  # as on Colab: alone in an empty folder, the package installed
        (tmp_path / "colab").mkdir()
        nb = Path(shutil.copy(nb, tmp_path / "colab" / nb.name))
        # the package carries the results (a checkout's nbs/results here; a wheel's copy in test_wheel.py): a URL
        # that cannot be fetched proves the notebook did not need the network
        monkeypatch.setenv("NANOT5_EDU_RESULTS_URL", (tmp_path / "no_such_repository").as_uri())
        monkeypatch.setenv("NANOT5_EDU_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(nb.parent)  # nbdev-test runs each notebook from its folder
    ok, secs = nbtest.test_nb(nb, skip_flags=SKIP, basepath=None if elsewhere else cfg.config_path,
                              cell_timeout=cfg.cell_timeout)
    assert ok, f"{nb.name} failed: traceback in captured stderr above"
    if elsewhere:  # it read the package's copies, not a results folder of its own, nor fetched ones
        assert not (tmp_path / "cache").exists() and not (nb.parent / "results").exists()
