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
