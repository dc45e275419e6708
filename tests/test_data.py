"Integration checks of the data entry points as a user meets them: a fresh interpreter and the console script"
import subprocess
import sys


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_load_corpus_offline_in_a_fresh_interpreter():
    r = run(sys.executable, "-c", "from nanot5_edu.data import load_corpus; "
            "t, v = load_corpus('sotu'), load_corpus('sotu', split='validation'); print(len(t), len(v), t.column_names)")
    assert r.returncode == 0, r.stderr
    n_train, n_valid, cols = r.stdout.split(maxsplit=2)
    assert (int(n_train), int(n_valid)) == (225, 24)
    assert "'text'" in cols


def test_cli_corpus_stats_prints_both_splits():
    r = run("nanot5-edu", "corpus-stats")
    assert r.returncode == 0, r.stderr
    assert "| documents | 225 | 24 |" in r.stdout


def test_cli_bad_spec_is_one_clear_line():
    r = run("nanot5-edu", "corpus-stats", "no/such/*.txt")
    assert r.returncode == 2
    assert r.stderr.startswith("error: No file matches 'no/such/*.txt'")
    assert "Traceback" not in r.stderr


# --- load_c4 decides from the environment only; load_corpus options are checked -------------------------------

import socket
import time

import pytest


def _no_network(monkeypatch):
    "Make any socket use fail loudly, so a test proves that none was opened"
    def refuse(*args, **kwargs):
        raise AssertionError("a network socket was opened")
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.mark.parametrize("var", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_load_c4_offline_fails_fast_without_a_socket(monkeypatch, var):
    import datasets
    from nanot5_edu.data import CorpusError, load_c4
    for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv(var, "1")
    _no_network(monkeypatch)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("datasets was asked for C4"))
    t0 = time.perf_counter()
    with pytest.raises(CorpusError, match=f"{var}=1 is set") as e:
        load_c4()
    assert time.perf_counter() - t0 < 1.0
    assert "load_corpus('path/to/*.jsonl')" in str(e.value)


def test_load_c4_online_does_not_probe_the_network_first(monkeypatch):
    import datasets
    from nanot5_edu.data import load_c4
    for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    _no_network(monkeypatch)
    calls = []

    class Streamed:
        def select_columns(self, cols):
            return ("selected", cols)

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return Streamed()
    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert load_c4("validation") == ("selected", ["text"])
    assert calls == [(("allenai/c4", "en"), {"split": "validation", "streaming": True})]


def test_load_c4_unreachable_hub_is_a_corpus_error(monkeypatch):
    import datasets
    from nanot5_edu.data import CorpusError, load_c4
    for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'allenai/c4' on the Hub (LocalEntryNotFoundError)")
    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(CorpusError, match="cannot be reached") as e:
        load_c4()
    assert "load_corpus('path/to/*.jsonl')" in str(e.value)


def test_load_corpus_options_are_checked_not_a_type_error(tmp_path):
    from nanot5_edu.data import CorpusError, load_corpus
    for spec in ("sotu", "c4"):
        with pytest.raises(CorpusError, match=rf"load_corpus\('{spec}'\) takes no options, got txt_doc_per_file"):
            load_corpus(spec, txt_doc_per_file=True)
    (tmp_path / "a.txt").write_text("one\n\ntwo\n\nthree")
    with pytest.raises(CorpusError, match=r"Unknown option\(s\) nope for local files: the options are txt_doc_per_file"):
        load_corpus(str(tmp_path / "a.txt"), nope=1)
    assert len(load_corpus(str(tmp_path / "a.txt"), txt_doc_per_file=False)) == 2   # the known option still works


def _hub_like_shard(shards):
    "Rows as the hub's C4 streams them: text, timestamp, url"
    for texts in shards:
        for i, text in enumerate(texts):
            yield {"text": text, "timestamp": "2019-04-25T12:00:00Z", "url": f"https://example.org/{i}"}


def test_hub_like_stream_with_unknown_features_packs(monkeypatch):
    """A streamed dataset whose features are unknown (column_names None, as a hub stream can be) packs into rows
    and feeds the data workers. Catches pack_dataset keeping the columns it cannot name (the batched map fails)."""
    import datasets
    from nanot5_edu.data import load_c4, load_corpus
    from nanot5_edu.spans import SpanCorruptionCollator, pack_dataset
    from nanot5_edu.tokenizer import load_tokenizer, train_tokenizer
    from nanot5_edu.stream import StreamingBatches
    texts = list(load_corpus("sotu", "validation")["text"])[:8]
    hub = datasets.IterableDataset.from_generator(_hub_like_shard, gen_kwargs={"shards": [texts[:4], texts[4:]]})
    assert hub.column_names is None and hub.num_shards == 2
    for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):
        monkeypatch.delenv(v, raising=False)
    _no_network(monkeypatch)
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: hub)
    streamed = load_c4("train")  # the hub path, with the stream above standing in for allenai/c4
    import tempfile
    tok = train_tokenizer(texts, 500, tempfile.mkdtemp())
    rows = [r for r in pack_dataset(streamed, tok, 141)]
    expected = pack_dataset(datasets.Dataset.from_dict({"text": texts}), tok, 141)["input_ids"]
    assert rows and [r["input_ids"] for r in rows] == expected and set(rows[0]) == {"input_ids"}
    monkeypatch.undo()  # DataLoader workers pass tensors over local (Unix) sockets
    stream = StreamingBatches(streamed, tok, SpanCorruptionCollator(tok, 128), micro_batch=4, seed=0, num_workers=1,
                              shuffle_buffer=16)
    assert next(stream)["input_ids"].shape == (4, 128)


def test_a_glob_of_c4_shard_files_is_a_corpus(tmp_path):
    """data.corpus='/data/c4/en/c4-train.*.json.gz' (C4 as downloaded) streams those shards, and the validation split
    the c4-validation shards beside them. Catches the glob being refused ("unsupported suffix '.gz'")."""
    import datasets
    from nanot5_edu.data import CorpusError, load_corpus, write_c4_shards
    from nanot5_edu.train import prepare_tokenizer
    from nanot5_edu.config import ConfigError, make_config
    texts = [f"Document {i}. It is about topic {i % 3}." for i in range(12)]
    write_c4_shards(texts, tmp_path / "en", num_shards=4)
    write_c4_shards(["held out one", "held out two"], tmp_path / "en", "validation", num_shards=2)
    train = load_corpus(str(tmp_path / "en" / "c4-train.*.json.gz"))
    assert isinstance(train, datasets.IterableDataset) and train.num_shards == 4
    assert sorted(r["text"] for r in train) == sorted(texts)
    assert [r["text"] for r in load_corpus(str(tmp_path / "en" / "c4-train.*.json.gz"), "validation")] == \
        ["held out one", "held out two"]
    two = load_corpus(str(tmp_path / "en" / "c4-train.0000[01]-of-00004.json.gz"))  # a few shards of many
    assert sorted(r["text"] for r in two) == sorted(t for i, t in enumerate(texts) if i % 4 < 2)
    with pytest.raises(CorpusError, match="No C4 validation shards match .*c4-validation"):
        load_corpus(str(tmp_path / "nowhere" / "c4-train.*.json.gz"), "validation")
    cfg = make_config("cpu-demo", [f"data.corpus={tmp_path / 'en' / 'c4-train.*.json.gz'}"])
    with pytest.raises(ConfigError, match="data.tokenizer=google/t5-v1_1-base"):  # streamed: bring a vocabulary
        prepare_tokenizer(cfg, tmp_path / "run")
