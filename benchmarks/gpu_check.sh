#!/usr/bin/env bash
# One prepared GPU check, <= 10 minutes on one GPU (a total time cap; every section records its own errors):
# step time, MFU and peak memory vs estimate_memory for fp32 / bf16 / fp16, torch.compile on and off, the colab-t4
# preset's first 200 steps through the real loop with its data wait, and ours vs HF T5 (train step, generation).
# Writes gpu_check.json (--out) after every section and prints a table. Needs only this repository: no internet
# (a local C4-format folder is written from the embedded corpus unless --c4 DIR is given).
#   bash benchmarks/gpu_check.sh                      # on a machine with CUDA, from anywhere
#   bash benchmarks/gpu_check.sh --cpu                # tiny sizes on the CPU (what tests/test_gpu_check.py runs)
#   bash benchmarks/gpu_check.sh --time-cap 300 --c4 /data/c4/en --tokenizer google/t5-v1_1-base --out my.json
set -uo pipefail
exec python "$(dirname "$0")/gpu_check.py" "$@"
