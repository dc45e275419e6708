"""The wheel carries the lessons' saved results: nbs/results/* is copied to nanot5_edu/results/ when the package is
built (everything else about the build is in pyproject.toml). `nanot5_edu.data.results_file` looks there after a
results/ folder beside the notebook, so a notebook opened on Colab with only the package installed reads them."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

RESULTS = Path(__file__).parent / "nbs" / "results"


class build_py_with_results(build_py):
    def run(self):
        super().run()
        if not self.editable_mode:  # an editable install reads the checkout's nbs/results directly
            target = Path(self.build_lib) / "nanot5_edu" / "results"
            target.mkdir(parents=True, exist_ok=True)
            for f in sorted(RESULTS.glob("*.json*")):
                shutil.copy2(f, target / f.name)


setup(cmdclass={"build_py": build_py_with_results})
