"""The package as Colab gets it: a built wheel, installed in a fresh virtual environment with no repository around
it, carries the lessons' saved results, and a results-reading lesson runs from an empty folder with the network
fallback unreachable. (Every lesson's fast cells that way: `bash tools/colab_check.sh`, by hand: too slow for CI.)
Catches: results that only exist in a checkout (a Colab notebook would fetch them from a repository address, or fail)."""
import os
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "nbs" / "results"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out),
                        str(ROOT)], capture_output=True, text=True, timeout=600, cwd=out)
    assert r.returncode == 0, r.stderr[-3000:]
    return next(out.glob("nanot5_edu-*.whl"))


def test_the_wheel_carries_every_saved_result(wheel):
    with zipfile.ZipFile(wheel) as z:
        packaged = {Path(n).name: z.read(n) for n in z.namelist() if n.startswith("nanot5_edu/results/")}
        assert any(n.startswith("nanot5_edu/sni-mini/tasks/") for n in z.namelist())
    expected = {p.name: p.read_bytes() for p in RESULTS.glob("*.json*")}
    assert expected and packaged == expected


def venv_with(wheel: Path, where: Path) -> Path:
    """A virtual environment holding only the wheel; this interpreter's site-packages (torch and the other
    dependencies, offline) are added as plain paths, so no editable install of the checkout is visible"""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    purelib = Path(subprocess.check_output([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                           text=True).strip())
    outside = [p for p in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
               if Path(p).is_dir()]
    (purelib / "dependencies.pth").write_text("".join(p + "\n" for p in outside))  # paths only: no .pth runs from them
    with zipfile.ZipFile(wheel) as z:  # installing a pure-Python wheel is unpacking it into site-packages
        z.extractall(purelib)
    return python


def test_a_results_reading_lesson_runs_from_the_wheel_in_an_empty_folder(wheel, tmp_path):
    python = venv_with(wheel, tmp_path / "venv")
    where = subprocess.check_output([str(python), "-c", "import nanot5_edu; print(nanot5_edu.__file__)"], text=True,
                                    cwd=tmp_path).strip()
    assert str(tmp_path / "venv") in where, f"nanot5_edu imported from {where}, not the wheel"
    colab = tmp_path / "colab"
    colab.mkdir()
    nb = colab / "09b_what_pretraining_buys.ipynb"
    nb.write_bytes((ROOT / "nbs" / nb.name).read_bytes())
    env = {**os.environ, "IN_TEST": "1", "NANOT5_EDU_RESULTS_URL": (tmp_path / "no_such_repository").as_uri(),
           "NANOT5_EDU_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    run = ("import sys, nbdev.test as t; ok, _ = t.test_nb(sys.argv[1], skip_flags=['slow', 'gpu'], basepath=None); "
           "import nanot5_edu.data as d; print('results from', d._packaged_results('sni_experiment.json')); "
           "sys.exit(0 if ok else 1)")
    r = subprocess.run([str(python), "-c", run, str(nb)], capture_output=True, text=True, env=env, cwd=colab, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    assert f"results from {tmp_path / 'venv'}" in r.stdout
    assert not (colab / "results").exists() and not (tmp_path / "cache").exists()
