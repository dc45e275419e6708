"""Tokenizer benchmark: encode the whole embedded corpus (both splits).

Ours: `nanot5_edu.tokenizer.encode_batch` (the Rust tokenizer's batch path, parallel over documents).
Reference: a plain per-document `sentencepiece` loop over the same spiece.model.
Prints tokens/s for both, the ratio, and the tokenizer training time.  Run: python benchmarks/tokenizer.py
"""
import os
import tempfile
import time

os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")
import sentencepiece as spm
import torch

from nanot5_edu.data import load_corpus
from nanot5_edu.tokenizer import DEMO_VOCAB_SIZE, encode_batch, train_tokenizer


def best_of(fn, repeats=3):
    "Smallest wall time of `repeats` calls, and the last result"
    times = []
    for _ in range(repeats):
        t = time.perf_counter(); out = fn(); times.append(time.perf_counter() - t)
    return min(times), out


texts = [t for split in ("train", "validation") for t in load_corpus("sotu", split)["text"]]
out = tempfile.mkdtemp()
t0 = time.perf_counter()
tok = train_tokenizer(load_corpus("sotu")["text"], DEMO_VOCAB_SIZE, out)
train_s = time.perf_counter() - t0
sp = spm.SentencePieceProcessor(model_file=f"{out}/spiece.model")

t_ours, ids = best_of(lambda: encode_batch(tok, texts, add_eos=False))
t_ref, ref = best_of(lambda: [sp.encode(t) for t in texts])
n = sum(map(len, ids))
same = sum(a == b for a, b in zip(ids, ref))
print(f"corpus: {len(texts)} documents, {sum(len(t.encode()) for t in texts) / 1e6:.1f} MB, {n:,} tokens; "
      f"{torch.get_num_threads()} threads")
print(f"tokenizer training (vocab {DEMO_VOCAB_SIZE}+100): {train_s:.1f} s")
print(f"{'path':42} {'tokens/s':>12}")
print(f"{'ours: encode_batch (HF fast, batched)':42} {n / t_ours:12,.0f}")
print(f"{'reference: per-document sentencepiece loop':42} {sum(map(len, ref)) / t_ref:12,.0f}")
print(f"ratio ours/reference: {t_ref / t_ours:.2f}x   (goal: ours >= 1,000,000 tokens/s)")
print(f"identical ids on {same}/{len(texts)} documents (HF's unigram Viterbi breaks rare ties differently)")
