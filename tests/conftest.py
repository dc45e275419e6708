"Tests never reach the Hugging Face hub: set the offline switches before anything imports datasets"
import json
import os

import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")
if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n 2: one thread per worker (and its kernels, subprocesses), so two
    os.environ["OMP_NUM_THREADS"] = "1"    # workers on 2 cores never oversubscribe them (that slows torch many-fold)
    import torch
    torch.set_num_threads(1)


@pytest.fixture(scope="module")
def small_data(tmp_path_factory):
    "A local .jsonl corpus (24 speeches) and a 1,900-piece tokenizer trained on it"
    from nanot5_edu.data import load_corpus
    from nanot5_edu.tokenizer import train_tokenizer
    root = tmp_path_factory.mktemp("data")
    texts = list(load_corpus("sotu", "validation")["text"])
    (root / "speeches.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    train_tokenizer(texts, 1900, root / "tok")  # + 100 sentinels = 2,000 ids <= 2,048
    return [f"data.corpus={root / 'speeches.jsonl'}", f"data.tokenizer={root / 'tok'}"]


# A record of the run, for the README's test time and the lessons' CPU times (tools/check_claims.py traces README's
# figures to it): NANOT5_EDU_TEST_RECORD=nbs/results/test_run.json python -m pytest tests -n 2
_RECORD = os.environ.get("NANOT5_EDU_TEST_RECORD")
_run = {"durations": {}}


def pytest_sessionstart(session):
    import time
    _run["start"], _run["load_start"] = time.time(), os.getloadavg()


def pytest_runtest_logreport(report):
    if _RECORD and report.when == "call":
        _run["durations"][report.nodeid] = round(report.duration, 1)


def pytest_sessionfinish(session, exitstatus):
    if not _RECORD or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    import datetime, importlib.metadata, platform, re, time
    import torch
    versions = {"python": platform.python_version(),
                **{p: importlib.metadata.version(p) for p in ("torch", "transformers", "tokenizers", "datasets",
                                                               "accelerate", "torchdata", "sentencepiece")}}
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    counts = {k: len([r for r in reporter.stats.get(k, []) if getattr(r, "when", "call") in ("call", "setup")])
              for k in ("passed", "failed", "skipped", "error")}
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    notebooks = {re.search(r"\[(.+)\.ipynb\]", k).group(1): v for k, v in _run["durations"].items()
                 if "test_notebook[" in k}
    record = {"date": datetime.date.today().isoformat(), "exit_status": int(exitstatus), **counts,
              "wall_s": round(time.time() - _run["start"], 1), "wall_min": round((time.time() - _run["start"]) / 60, 1),
              "workers": getattr(session.config.option, "numprocesses", None) or 1,
              "cpu": cpu, "cores": os.cpu_count(), "load_average_start": [round(x, 2) for x in _run["load_start"]],
              "load_average_end": [round(x, 2) for x in os.getloadavg()], "torch": torch.__version__,
              "versions": versions, "notebook_s": dict(sorted(notebooks.items())), "test_s": _run["durations"]}
    with open(_RECORD, "w") as f:
        json.dump(record, f, indent=1)
