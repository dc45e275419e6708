# %% [markdown]
# # Running as a module
# > `python -m nanot5_edu`: the command line as a module, which is what `accelerate launch -m nanot5_edu` starts in every process

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# `accelerate launch` starts one Python process per device and runs a script or a module in each. This cell
# becomes `nanot5_edu/__main__.py`, so `python -m nanot5_edu pretrain` is the same as `nanot5-edu pretrain`,
# and several GPUs are one command:
#
# ```bash
# accelerate launch --num_processes 4 -m nanot5_edu pretrain t5-base
# ```
#
# (With more than one GPU and no `accelerate config`, the launcher turns on `--multi_gpu` itself. Several CPU processes
# need `--multi_gpu` written out, as the repository's tests launch them: without a GPU (and no `accelerate config`) the
# command above starts one process.)
#
# (The cell below is marked `#| eval: false`: nbdev's test runner and docs build skip it. In Jupyter or Colab, "Run
# all" would run it, and `main()` would read the kernel's own arguments and stop with an argument error: skip that
# cell when you run the notebook by hand.)

# %%
#| default_exp __main__

# %%
#| export
#| eval: false
import sys

from nanot5_edu.cli import main

if __name__ == "__main__":
    sys.exit(main())

# %% [markdown]
# The check: the module runs the command line in a fresh interpreter.

# %%
import subprocess, sys as _sys
from fastcore.test import test_eq
r = subprocess.run([_sys.executable, "-m", "nanot5_edu", "--help"], capture_output=True, text=True)
test_eq(r.returncode, 0)
test_eq("pretrain" in r.stdout and "corpus-stats" in r.stdout, True)
print(r.stdout.splitlines()[0])

# %%
#| hide
import nbdev; nbdev.nbdev_export()
