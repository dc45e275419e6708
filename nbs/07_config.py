# %% [markdown]
# # Config, FLOPs and memory: a run you can predict
# > Every knob in one config tree with presets, checked before any compute; the FLOPs of a step and the MFU they give (on a CPU too); the bytes of a step, so you know before launching whether a run fits a GPU and how long it takes

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# A run of T5-Base costs a GPU-day; a typo found after an hour, or an out-of-memory error after the data is loaded, is
# expensive. This lesson builds what lets you know a run before you launch it: one config tree whose presets read like
# the command line and whose errors come before any compute ([08](08_real_runs.ipynb)'s `train` takes it), the FLOPs of
# one step, checked against PyTorch's own count, and the model FLOPs utilisation (MFU) they give, and the memory of
# a step by part, checked against what autograd saves. The appendix compares fp16 (simulated on the CPU) with bf16
# and fp32, for GPUs without bf16.

# %%
#| default_exp config

# %%
#| export
from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib.util
import time
from dataclasses import dataclass, field

import torch
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nanot5_edu.layers import MODEL_PRESETS, ModelConfig
from nanot5_edu.optim import OPTIMIZERS, SCHEDULES
from nanot5_edu.tokenizer import DEMO_VOCAB_SIZE

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import copy, json, math, tempfile
from pathlib import Path
import numpy as np
import matplotlib.pyplot as plt
import datasets
from nanot5_edu.data import load_corpus, results_file
from nanot5_edu.model import T5
from nanot5_edu.optim import get_lr_scheduler, get_optimizer
from nanot5_edu.spans import SpanCorruptionCollator, pack_dataset
from nanot5_edu.tokenizer import train_tokenizer
datasets.disable_progress_bars()
torch.manual_seed(0)
# lesson 05's demo model, tokenizer and rows: the memory check and the appendix use them
corpus = load_corpus("sotu")
tokenizer = train_tokenizer(corpus["text"], DEMO_VOCAB_SIZE, Path(tempfile.mkdtemp()) / "tokenizer")
collate = SpanCorruptionCollator(tokenizer, inputs_length=128, seed=0)
rows = torch.tensor(pack_dataset(corpus, tokenizer, collate.raw_length)["input_ids"])
model = T5(dataclasses.replace(MODEL_PRESETS["tiny"], num_layers=1, num_decoder_layers=1))


# %% [markdown]
# ## One config tree
#
# Every knob lives in one dataclass tree with commented defaults. The presets: `cpu-demo` (the default:
# tiny model, embedded corpus, minutes rather than hours on 2 CPU cores: [05](05_pretraining.ipynb)), `t5-base` (T5-Base
# on C4 with nanoT5's schedule and lr at T5's batch of 128 rows a step, for an 80 GB GPU)
# and `t5-base-16h` (nanoT5's 16-hour budget at nanoT5's own speed; the estimates below are this code's), and for smaller GPUs `t5-base-24gb` (the same run in micro-batches
# of 32) and `colab-t4` (a T5-Small-sized model in fp16 for Colab's free T4). Their memory comes from
# `estimate_memory` and their time from `estimate_time`, both built in "Memory you can predict" below (the table
# there covers the `t5-base` family, the one after it every preset). One
# difference from nanoT5 is kept on purpose: every preset uses the LM-head init fix of
# [03b](03b_t5_model.ipynb) (`model.lm_head_init_fix=true`); nanoT5's published C4 loss of 1.953
# ([04](04_optimizers.ipynb)) comes from HF's std-1 head,
# so to match nanoT5's init add `model.lm_head_init_fix=false`. The
# command line overrides any field as `key=value` (`optim.lr=1e-3`), through OmegaConf, which checks types
# and keys; an unknown key fails with the closest valid names.

# %%
#| export
@dataclass
class DataConfig:
    corpus: str = "sotu"  # 'sotu', 'c4', C4 shards (a folder, or a glob such as /data/c4/en/c4-train.*.json.gz), or a path/glob of .txt/.jsonl/.parquet (00_data)
    streaming: bool = False  # stream local files too (c4 and C4 shard folders always stream)
    num_workers: int | None = None  # streamed corpora: DataLoader workers per process; None: cores left, at most 8
    tokenizer: str | None = None  # a tokenizer dir or hub name; None: train one on the corpus into the run dir
    vocab_size: int = DEMO_VOCAB_SIZE  # SentencePiece pieces when the tokenizer is trained here
    inputs_length: int = 128  # encoder tokens per example (T5: 512)
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0
    shuffle_buffer: int = 2048  # streamed corpora: packed rows shuffled (and corrupted) together, one block at a time
    objective: str = "span_corruption"  # span_corruption | prefix_lm | causal_lm | ul2 (09c_objectives)


@dataclass
class OptimConfig:
    name: str = "adamwscale"  # adamwscale | adamw | adafactor
    lr: float = 2e-2
    weight_decay: float = 0.0
    scheduler: str = "cosine"  # cosine | legacy | inverse_sqrt (knee at warmup_steps) | constant
    warmup_steps: int = 100
    final_lr: float = 1e-5  # cosine floor
    grad_clip: float = 1.0  # max global L2 norm; 0 = off
    batch_size: int = 16  # sequences per optimizer step, all processes together
    grad_acc: int = 1  # micro-batches per optimizer step (per process)


@dataclass
class TrainConfig:
    total_steps: int = 700
    seed: int = 2137
    precision: str = "bf16"  # bf16 (autocast, fp32 master weights) | fp16 (the same plus loss scaling: GPUs without bf16) | fp32
    compile: bool = False  # torch.compile the model (GPU; ~1 min cold start)
    peak_tflops: float | None = None  # the device's dense bf16 peak, for MFU on a GPU (or CPU) not in PEAK_TFLOPS
    max_minutes: float | None = None  # time budget (e.g. a Colab session): then checkpoint and stop; run again to resume


@dataclass
class EvalConfig:
    every_steps: int = 100  # (and once before the first step)
    batches: int = 8  # validation batches per evaluation
    batch_size: int = 64
    samples: int = 2  # greedy samples printed at each evaluation


@dataclass
class CheckpointConfig:
    every_steps: int = 350
    keep_last: int = 2
    resume: str = "auto"  # auto: continue from the run dir's latest checkpoint | never


@dataclass
class LoggingConfig:
    every_steps: int = 25
    run_dir: str = "runs/cpu-demo"
    progress_bar: bool = True
    tracker: str | None = None  # 'tensorboard' or 'wandb' (through accelerate), when installed


@dataclass
class Config:
    model_preset: str = "tiny"  # tiny | t5-v1_1-small | t5-v1_1-base (03_t5_layers)
    model: ModelConfig = field(default_factory=lambda: dataclasses.replace(MODEL_PRESETS["tiny"]))
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# %% [markdown]
# The presets are dotlists over the defaults, so they read like the command line:

# %%
#| export
RUN_PRESETS = {
    # the recipe with the highest encoder gain after 150 s on 2 CPU cores (one seed) (the sweep in this lesson's appendix, 07_config)
    "cpu-demo": ["model.num_layers=1", "model.num_decoder_layers=1", "optim.lr=4e-2", "train.total_steps=3000",
                 "eval.every_steps=250", "checkpoint.every_steps=500", "logging.every_steps=50"],
    "t5-base": ["model_preset=t5-v1_1-base", "data.corpus=c4", "data.tokenizer=google/t5-v1_1-base",
                "data.inputs_length=512", "optim.lr=2e-2", "optim.warmup_steps=10000", "optim.batch_size=128",
                "train.total_steps=65536", "train.compile=true", "eval.every_steps=5000", "eval.batches=500",
                "eval.batch_size=128", "checkpoint.every_steps=5000", "logging.every_steps=100",
                "logging.run_dir=runs/t5-base"],
    # nanoT5's 16-hour budget variant: batch 256 as 2 x 128, ~53k steps (its best SNI result)
    "t5-base-16h": ["model_preset=t5-v1_1-base", "data.corpus=c4", "data.tokenizer=google/t5-v1_1-base",
                    "data.inputs_length=512", "optim.batch_size=256", "optim.grad_acc=2", "optim.warmup_steps=6666",
                    "train.total_steps=53332", "train.compile=true", "eval.every_steps=5000", "eval.batches=1000",
                    "eval.batch_size=128", "checkpoint.every_steps=5000", "logging.every_steps=100",
                    "logging.run_dir=runs/t5-base-16h"],
    # Colab's free T4 (16 GB, no bf16): a T5-v1.1-Small-sized model (77M) on C4 streamed from the hub, fp16 with loss
    # scaling, 256-token inputs, micro-batch 64. Estimates, not measurements: ~8 GiB (estimate_memory); 0.17 s/step
    # at an assumed 30% MFU of the T4's 65 TFLOP/s fp16, so 10,000 steps in ~28 min (41 at 20% MFU); one data worker
    # (Colab's 2 vCPUs) needs to supply ~110k raw tokens/s. No compile: those 2 vCPUs would spend minutes compiling.
    "colab-t4": ["model_preset=t5-v1_1-small", "data.corpus=c4", "data.tokenizer=google/t5-v1_1-base",
                 "data.inputs_length=256", "optim.lr=2e-2", "optim.batch_size=64", "optim.warmup_steps=1000",
                 "train.total_steps=10000", "train.precision=fp16", "eval.every_steps=1000", "eval.batches=20",
                 "eval.batch_size=64", "checkpoint.every_steps=2000", "logging.every_steps=100",
                 "logging.run_dir=runs/colab-t4"],
}
# t5-base's micro-batch of 128 needs ~57 GiB by estimate_memory (an 80 GB card); 4 micro-batches of 32 (~17 GiB)
# should fit a 24 GB card (L4, A10, RTX 4090) or a 40 GB A100 by the estimate, with the same optimizer step
RUN_PRESETS["t5-base-24gb"] = RUN_PRESETS["t5-base"] + ["optim.grad_acc=4", "logging.run_dir=runs/t5-base-24gb"]


class ConfigError(ValueError):
    "A configuration that cannot run; the message names the key and the fix."


class TrainingError(RuntimeError):
    "Training cannot go on (e.g. a NaN loss); the message says where the last checkpoint is."


def _flat_keys(node, prefix=""):
    for k, v in node.items():
        yield from (_flat_keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"])


def make_config(preset: str = "cpu-demo", overrides: list[str] | tuple = (), config_class=Config,
                presets: dict[str, list[str]] = RUN_PRESETS) -> Config:
    "A preset with `key=value` overrides applied; unknown keys and bad values fail with the closest valid keys"
    if preset not in presets:
        raise ConfigError(f"Unknown preset {preset!r}: choose one of {', '.join(presets)}.")
    base = OmegaConf.structured(config_class())
    valid = list(_flat_keys(OmegaConf.to_container(base)))
    for item in overrides:
        if "=" not in item:
            raise ConfigError(f"Override {item!r} is not key=value (e.g. optim.lr=1e-3).")
    dotlist = list(presets[preset]) + list(overrides)
    model_preset = next((d.split("=", 1)[1] for d in reversed(dotlist) if d.startswith("model_preset=")), "tiny")
    if model_preset not in MODEL_PRESETS:
        raise ConfigError(f"Unknown model_preset {model_preset!r}: choose one of {', '.join(MODEL_PRESETS)}.")
    base.model = OmegaConf.structured(MODEL_PRESETS[model_preset])
    try:
        cfg = OmegaConf.merge(base, OmegaConf.from_dotlist(dotlist))
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None) or ""
        close = difflib.get_close_matches(key, valid, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(close)}?" if close and key not in valid else ""
        reason = str(e).splitlines()[0].split(". Did you mean")[0].rstrip(".")  # Python's own hint: ours is below
        raise ConfigError(f"Bad override {key or ''!r}: {reason}.{hint}") from None
    except yaml.YAMLError as e:  # a value YAML cannot read unquoted, e.g. data.corpus=*.jsonl (`*` starts an alias)
        bad = next(d for d in dotlist if not _reads_as_yaml(d))
        key, _, val = bad.partition("=")
        raise ConfigError(f"Bad override {bad!r}: YAML cannot read the value ({getattr(e, 'problem', e)}); quote it: "
                          f"{key}='\"{val}\"'.") from None
    return OmegaConf.to_object(cfg)


def _reads_as_yaml(item: str) -> bool:
    "Whether one key=value item parses (OmegaConf reads each value as YAML)"
    try:
        OmegaConf.from_dotlist([item])
        return True
    except yaml.YAMLError:
        return False


# %%
cfg = make_config("cpu-demo", ["optim.lr=1e-3", "model.num_layers=2"])
test_eq((cfg.optim.lr, cfg.model.num_layers, cfg.model.d_model), (1e-3, 2, 256))
test_eq(make_config("t5-base").model.d_model, 768)
test_fail(lambda: make_config("cpu-demo", ["optim.lrr=1e-3"]), contains="Did you mean optim.lr")
try: make_config("cpu-demo", ["optim.lrr=1e-3"])
except ConfigError as e: print(e); test_eq(str(e).count("Did you mean"), 1)
test_fail(lambda: make_config("cpu-demo", ["optim.lr=fast"]), contains="optim.lr")
test_fail(lambda: make_config("cpu-demo", ["train.total_step=5"]), contains="train.total_steps")
test_fail(lambda: make_config("gpt2"), contains="Unknown preset 'gpt2'")

# %% [markdown]
# Everything that can be checked without compute is checked first, so a typo costs a second, not an hour: `validate_config` checks the names of the optimizer and schedule, that the warmup fits in the run, that the batch divides into micro-batches and processes, that the GPU has bf16 if asked for it, and that a tracker is installed. Each error names the key, and most name a fix (the function and its checks are hidden here: they are plumbing, not ideas).

# %%
#| export
#| hide
ARCHITECTURES = ("encoder-decoder", "decoder-only")
OBJECTIVES = ("span_corruption", "prefix_lm", "causal_lm", "ul2")
# what 09c_objectives trains: an encoder needs inputs, so the encoder-decoder has no causal_lm
SETUPS = tuple((a, o) for a in ARCHITECTURES for o in OBJECTIVES if (a, o) != ("encoder-decoder", "causal_lm"))


def validate_config(cfg: Config, world_size: int = 1):
    "Raise ConfigError for settings that cannot run, before any data or model is built"
    o, t = cfg.optim, cfg.train
    if o.name not in OPTIMIZERS:
        raise ConfigError(f"optim.name={o.name!r} is unknown: choose one of {', '.join(OPTIMIZERS)}.")
    if o.scheduler not in SCHEDULES:
        raise ConfigError(f"optim.scheduler={o.scheduler!r} is unknown: choose one of {', '.join(SCHEDULES)}.")
    if not o.lr > 0:
        raise ConfigError(f"optim.lr={o.lr} must be > 0 (nanoT5 uses optim.lr=2e-2 with adamwscale).")
    if t.total_steps <= 0 or not 0 <= o.warmup_steps <= t.total_steps:
        raise ConfigError(f"Need 0 <= optim.warmup_steps ({o.warmup_steps}) <= train.total_steps ({t.total_steps}) "
                          "and total_steps > 0.")
    if o.batch_size % (o.grad_acc * world_size):
        raise ConfigError(f"optim.batch_size={o.batch_size} must divide by grad_acc ({o.grad_acc}) x processes "
                          f"({world_size}): e.g. optim.batch_size={o.grad_acc * world_size * max(1, o.batch_size // (o.grad_acc * world_size))}.")
    if t.precision not in ("bf16", "fp16", "fp32"):
        raise ConfigError(f"train.precision={t.precision!r}: use bf16, fp16 or fp32.")
    if t.precision == "bf16" and torch.cuda.is_available() and torch.cuda.get_device_capability() < (8, 0):
        name = torch.cuda.get_device_name()
        raise ConfigError(f"train.precision=bf16, but the {name} (compute capability "
                          f"{'.'.join(map(str, torch.cuda.get_device_capability()))}) has no bf16 tensor cores: bf16 would "
                          "be emulated, far slower than fp16 (not measured here). Use train.precision=fp16 (loss scaling; the colab-t4 "
                          "preset) or train.precision=fp32.")
    if cfg.checkpoint.resume not in ("auto", "never"):
        raise ConfigError(f"checkpoint.resume={cfg.checkpoint.resume!r}: use auto or never.")
    for key, section in (("eval", cfg.eval), ("checkpoint", cfg.checkpoint), ("logging", cfg.logging)):
        if section.every_steps <= 0:
            raise ConfigError(f"{key}.every_steps={section.every_steps} must be > 0: set it to a number of steps "
                              f"(the default is {type(section)().every_steps}).")
    arch, objective = cfg.model.architecture, cfg.data.objective
    if (arch, objective) not in SETUPS:
        valid = "; ".join(f"model.architecture={a} data.objective={o}" for a, o in SETUPS)
        raise ConfigError(f"model.architecture={arch} with data.objective={objective} is not a setup this course trains"
                          + (" (an encoder-decoder needs inputs, and causal_lm has none: use prefix_lm, T5's LM row)"
                             if (arch, objective) == ("encoder-decoder", "causal_lm") else "")
                          + f". Valid: {valid}.")
    tracker = cfg.logging.tracker
    if tracker and importlib.util.find_spec({"tensorboard": "tensorboard", "wandb": "wandb"}.get(tracker, tracker)) is None:
        raise ConfigError(f"logging.tracker={tracker!r} is not installed: `pip install {tracker}`, or drop the override "
                          "(metrics.jsonl and the loss plot are always written).")


# %%
#| hide
test_fail(lambda: validate_config(make_config("cpu-demo", ["optim.warmup_steps=5000"])), contains="optim.warmup_steps (5000)")
test_fail(lambda: validate_config(make_config("cpu-demo", ["optim.batch_size=30", "optim.grad_acc=4"])), contains="must divide")
test_fail(lambda: validate_config(make_config("cpu-demo", ["optim.name=lion"])), contains="optim.name='lion' is unknown")
test_fail(lambda: validate_config(make_config("cpu-demo", ["train.precision=fp8"])), contains="use bf16, fp16 or fp32")
test_fail(lambda: validate_config(make_config("cpu-demo", ["eval.every_steps=0"])), contains="eval.every_steps=0 must be > 0: set it")
test_fail(lambda: make_config("cpu-demo", ["data.corpus=*.jsonl"]), contains="quote it: data.corpus='\"*.jsonl\"'")
test_eq(make_config("cpu-demo", ['data.corpus="*.jsonl"']).data.corpus, "*.jsonl")
test_fail(lambda: validate_config(make_config("cpu-demo", ["optim.lr=0"])), contains="nanoT5 uses optim.lr=2e-2")
validate_config(make_config("cpu-demo", ["train.precision=fp16"]))
test_fail(lambda: validate_config(make_config("cpu-demo", ["data.objective=causal_lm"])), contains="Valid: model.architecture=")
validate_config(make_config("cpu-demo", ["model.architecture=decoder-only", "data.objective=causal_lm"]))
test_fail(lambda: validate_config(make_config("cpu-demo", ["logging.tracker=no_such_tracker"])), contains="is not installed")


# %% [markdown]
# ## FLOPs and MFU
#
# Model FLOPs utilisation = achieved FLOP/s ÷ the device's peak. The FLOPs of one step are 3× the forward
# (backward ≈ 2× forward): every matmul does 2 FLOPs per multiply-add, over encoder tokens (`B·L_in`) for
# the encoder and the cross-attention keys/values, and over decoder tokens (`B·L_tgt`) for the rest,
# plus the attention score and value products. For a T5-Base step at T5's batch of 128 rows (512 → 114 tokens) it
# gives 54.5 TFLOP. 128 rows is the batch of the runs whose losses and step times nanoT5's current README reports (an
# earlier README version reported a run at 144, and one version of its default config file holds 144: check the config of any run you compare with).

# %%
#| export
def flops_per_step(config: ModelConfig, batch_size: int, inputs_length: int, targets_length: int) -> float:
    "Training FLOPs (forward + backward = 3 x forward) of one step of T5 span corruption"
    d, inner, ff, V = config.d_model, config.num_heads * config.d_kv, config.d_ff, config.vocab_size
    attn_proj, ffn = 4 * d * inner, 3 * d * ff  # q, k, v, o; gated FF (wi_0, wi_1, wo)
    enc_tok, dec_tok = batch_size * inputs_length, batch_size * targets_length
    if config.architecture == "decoder-only":  # one stack over inputs + targets, the head on the targets (09c)
        L = inputs_length + targets_length
        stack = config.num_layers * (batch_size * L * (attn_proj + ffn) + 2 * batch_size * L ** 2 * inner)
        return 3 * 2 * (stack + dec_tok * d * V)
    enc = config.num_layers * (enc_tok * (attn_proj + ffn) + 2 * batch_size * inputs_length ** 2 * inner)
    dec = config.num_decoder_layers * (
        dec_tok * (attn_proj + 2 * d * inner + ffn)  # self-attention, cross q and o, FF
        + enc_tok * 2 * d * inner  # cross-attention k and v over the encoder output
        + 2 * batch_size * targets_length ** 2 * inner  # self-attention scores and values
        + 2 * batch_size * targets_length * inputs_length * inner)  # cross-attention scores and values
    head = dec_tok * d * V
    return 3 * 2 * (enc + dec + head)


# %%
nanot5_step = flops_per_step(MODEL_PRESETS["t5-v1_1-base"], 128, 512, 114)
test_close(nanot5_step / 1e12, 54.5, eps=54.5 * 0.02)
print(f"T5-Base step: {nanot5_step / 1e12:.1f} TFLOP; nanoT5's 0.56 s/step on an A100 = "
      f"{nanot5_step / 0.56 / 312e12:.1%} MFU")

# %% [markdown]
# MFU needs the device's peak: `peak_flops` looks the GPU up by its exact CUDA name in a table of dense bf16 peaks (fp16 for
# the T4 and V100, which have no bf16) from the vendors' published figures (`PEAK_TFLOPS`, hidden here; only the A100, H100
# SXM and H200 entries are checked against a cited source here, so check yours), and `train.peak_tflops` overrides it for a device not in the
# table.

# %%
#| export
#| hide
# Dense (no sparsity) bf16 tensor-core peaks in TFLOP/s, keyed by the exact names `torch.cuda.get_device_name`
# reports: a substring match would take an L40S for an L4, an A10G for an A10 and an H100 PCIe for an SXM.
# T4 and V100 have no bf16: their fp16 peak.
PEAK_TFLOPS = {
    "NVIDIA A100-SXM4-40GB": 312, "NVIDIA A100-SXM4-80GB": 312, "NVIDIA A100-PCIE-40GB": 312,
    "NVIDIA A100 80GB PCIe": 312,
    "NVIDIA H100 80GB HBM3": 989, "NVIDIA H100 PCIe": 756, "NVIDIA H100 NVL": 835,  # SXM / PCIe / NVL
    "NVIDIA H200": 989, "NVIDIA H200 NVL": 835, "NVIDIA GH200 480GB": 989,
    "NVIDIA A10": 125, "NVIDIA A10G": 70, "NVIDIA A40": 150, "NVIDIA L4": 121, "NVIDIA L40": 181, "NVIDIA L40S": 362,
    "NVIDIA RTX A6000": 155, "NVIDIA RTX 6000 Ada Generation": 364,
    "NVIDIA GeForce RTX 3090": 71, "NVIDIA GeForce RTX 4090": 165,
    "Tesla T4": 65, "Tesla V100-SXM2-16GB": 125, "Tesla V100-SXM2-32GB": 125, "Tesla V100-PCIE-16GB": 112,
    "Tesla V100-PCIE-32GB": 112,
}


def peak_flops_of(name: str) -> float | None:
    "Dense bf16 peak FLOP/s of a GPU from its exact CUDA name; None (and a hint) for a name not in PEAK_TFLOPS"
    tflops = PEAK_TFLOPS.get(name.strip())
    if tflops is None:
        print(f"MFU not reported: {name!r} is not in PEAK_TFLOPS; set train.peak_tflops=<dense bf16 TFLOP/s> to see it.")
    return None if tflops is None else tflops * 1e12


def peak_flops(device: torch.device, override_tflops: float | None = None) -> float | None:
    "Peak FLOP/s for MFU: `override_tflops` if given, else the GPU's table entry; None on CPU"
    if override_tflops:
        return override_tflops * 1e12
    return peak_flops_of(torch.cuda.get_device_name(device)) if device.type == "cuda" else None


# %%
#| hide
test_eq(peak_flops_of("NVIDIA H100 PCIe"), 756e12); test_eq(peak_flops_of("NVIDIA H100 80GB HBM3"), 989e12)
test_eq(peak_flops_of("NVIDIA L4"), 121e12); test_eq(peak_flops_of("NVIDIA L40S"), 362e12)
test_eq(peak_flops_of("NVIDIA A10"), 125e12); test_eq(peak_flops_of("NVIDIA A10G"), 70e12)
test_eq(peak_flops_of("NVIDIA B300 Ultra Mystery"), None)                      # unknown: None and a hint
test_eq(peak_flops(torch.device("cpu")), None); test_eq(peak_flops(torch.device("cpu"), 3.5), 3.5e12)

# %% [markdown]
# The formula counts by hand, so check it against PyTorch's own count: `FlopCounterMode` records the FLOPs of
# every matmul, and of the attention kernels it has formulas for, in a forward and backward pass of the model. On CPU
# self-attention runs as plain matmuls (the math path a learned bias takes, lesson [03](03_t5_layers.ipynb)), but
# cross-attention, which has no bias here, runs the CPU's fused flash kernel, which `FlopCounterMode` does not count
# (it does count CUDA's fused kernels). So the count misses cross-attention's two attention products, and the cell
# checks that this is the whole gap:

# %%
from torch.utils.flop_counter import FlopCounterMode
for name in ("tiny", "t5-v1_1-small"):
    config = MODEL_PRESETS[name]
    m, ids, labels = T5(config), torch.randint(3, 1000, (4, 128)), torch.randint(3, 1000, (4, 29))
    with FlopCounterMode(display=False) as counter:
        m(input_ids=ids, labels=labels).loss.backward()
    print(f"{name:14} FlopCounterMode / flops_per_step = {counter.get_total_flops() / flops_per_step(config, 4, 128, 29):.3f}")
    test_close(counter.get_total_flops() / flops_per_step(config, 4, 128, 29), 1.0, eps=0.02)
    cross = 3 * 2 * config.num_decoder_layers * 2 * 4 * 29 * 128 * config.num_heads * config.d_kv  # uncounted: fused kernel
    test_close(counter.get_total_flops(), flops_per_step(config, 4, 128, 29) - cross, eps=1e-6 * counter.get_total_flops())


# %% [markdown]
# On a CPU there is no spec-sheet peak, so measure one: the FLOP/s of a large square matmul, the best case for
# the same hardware, in bf16 and fp32. Pass it as `train.peak_tflops` and the loop reports MFU on a CPU too:

# %%
#| export
def matmul_peak_flops(dtype: torch.dtype = torch.bfloat16, n: int = 2048, repeats: int = 10) -> float:
    "Measured FLOP/s of an n x n matmul on the CPU: the peak to divide by for MFU where no spec sheet gives one"
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    a @ b  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * n ** 3 * repeats / (time.perf_counter() - start)


# %%
cpu_peak = {dtype: matmul_peak_flops(dtype) for dtype in (torch.bfloat16, torch.float32)}
print(", ".join(f"{str(d).split('.')[1]}: {f / 1e9:.0f} GFLOP/s" for d, f in cpu_peak.items()),
      f"on {torch.get_num_threads()} threads")


# %% [markdown]
# ## Memory you can predict
#
# FLOPs say how long a step takes; bytes say whether it runs at all. A training step holds five things at once:
# the **weights** (fp32, 4 bytes per parameter), their **gradients** (4 more), the **optimizer state** (AdamW and
# AdamWScale keep two fp32 moments: 8 more), the 16-bit **copies of the weights** autocast makes for the matmuls (2),
# and the **activations**: every tensor the forward pass saves for the backward pass, which grows with the
# micro-batch (`optim.batch_size / (optim.grad_acc × processes)`) × tokens × layers. The **logits** are
# activations too, but worth their own line: one row of `vocab_size` numbers per target token, kept in fp32 for
# the loss (the 16-bit logits, their fp32 copy, the log-softmax and one fp32 gradient), 32,128 wide for T5's vocabulary.
#
# The activations per token per layer follow from what autograd saves in our layers (counted below on a real
# step): for an encoder layer under autocast, each RMSNorm saves its fp32 input and normalised output
# (`4d + 4d` bytes, the residual stream stays fp32, as in HF's T5), each matmul a 16-bit copy of its input
# (autocast casts the normalised `x` once per matmul: three copies for q, k, v), the gated feed-forward four
# `d_ff`-wide 16-bit tensors, and attention its q, k, v and output. Attention is where devices differ: the
# CPU's SDPA with a relative-position bias runs the math path, which keeps q, k, v and the softmax
# probabilities in fp32 (`4 · heads · L` bytes per token, so `4 · heads · L²` per row: quadratic in the length); CUDA's memory-efficient
# kernel keeps only q, k, v, the output and one log-sum-exp per head. `estimate_memory` adds these up (for
# `device="cuda"` unless told otherwise); it is an estimate, checked below against what autograd saves and in
# `tests/` against the CPU's peak memory of a whole step; on a GPU, `benchmarks/gpu_check.sh` compares it with
# `torch.cuda.max_memory_allocated` (run once so far, on an H200: see the end of this section).

# %%
#| export
def estimate_memory(cfg: Config, world_size: int = 1, device: str = "cuda", residual: str = "fp32",
                    shape: tuple[int, int, int] | None = None, padding_mask: bool | None = None) -> dict:
    """Estimated bytes of one training step by part, for the micro-batch the config gives each process.
    `device`: 'cuda' (memory-efficient attention) or 'cpu' (SDPA's math path, fp32 probabilities);
    `residual`: 'fp32' (this model, as HF's T5) or '16bit' (what a model keeping the residual stream in bf16 would save);
    `shape`: (micro-batch, input length, target length) of a real batch, instead of what the config implies;
    `padding_mask`: batches carry padding masks (fine-tuning; None: a config with `sni` settings), so each stack's
    position bias + mask is one [micro, heads, L, L] tensor instead of [1, heads, L, L]"""
    from nanot5_edu.noise import compute_input_and_target_lengths
    m, a = cfg.model, 2 if cfg.train.precision in ("bf16", "fp16") else 4  # bytes of a matmul's activations
    if shape is None:
        L_in = cfg.data.inputs_length
        L_t = compute_input_and_target_lengths(L_in, cfg.data.noise_density, cfg.data.mean_noise_span_length)[1]
        shape = (max(1, cfg.optim.batch_size // (cfg.optim.grad_acc * world_size)), L_in, L_t)
    micro, L_in, L_t = shape
    d, inner, f, h, V = m.d_model, m.num_heads * m.d_kv, m.d_ff, m.num_heads, m.vocab_size
    attn_w, ff_w = 4 * d * inner, 3 * d * f
    matmul_params = (m.num_layers * (attn_w + ff_w) + m.num_decoder_layers * (2 * attn_w + ff_w)
                     + (0 if m.tie_word_embeddings else d * V))
    params = (matmul_params + V * d + (2 * m.num_layers + 3 * m.num_decoder_layers + 2) * d
              + 2 * h * m.relative_attention_num_buckets)
    r = 4 if residual == "fp32" else a
    norm = r * d + r * d + 4  # RMSNorm: its input (the residual stream), the normalised x, 1/rms
    def cast(n):  # matmul inputs: autocast casts the fp32 normalised x once per matmul; fp32 (or a 16-bit stream) shares it
        return n * a * d if a == 2 and r == 4 else a * d
    def attention(L_k):  # per query token: q (+ fp32 probabilities on the CPU's math path), output, o's input
        return (4 * inner + 4 * h * L_k if device == "cpu" else a * inner + 4 * h) + 2 * a * inner
    kv = 2 * 4 * inner if device == "cpu" else 2 * a * inner  # k and v, per key token
    wo_fp32 = cfg.train.precision == "fp16"  # under fp16 `wo` runs in fp32 (lesson 03): its input kept in fp32 too
    # wi_0 and wi_1 outputs, the GELU, the product (wo's input); under fp16 wo keeps an fp32 copy of it instead
    ffn = norm + cast(2) + (3 * a * f + 4 * f if wo_fp32 else 4 * a * f)
    encoder = norm + cast(3) + attention(L_in) + kv + ffn
    decoder = (norm + cast(3) + attention(L_t) + kv) + (norm + cast(1) + attention(L_in)) + ffn
    enc_tok, dec_tok = micro * L_in, micro * L_t
    activations = (m.num_layers * encoder * enc_tok + m.num_decoder_layers * (decoder * dec_tok + (cast(2) + kv) * enc_tok)
                   + enc_tok * 8 * d + dec_tok * (8 * d + cast(1)))  # embeddings and final norms, the head's input
    if padding_mask is None:
        padding_mask = hasattr(cfg, "sni")
    rows = micro if padding_mask else 1  # the stack's bias + mask, in the compute dtype, shared by its blocks
    bias = a * rows * h * (L_in ** 2 + L_t ** 2)
    optimizer = {"adamwscale": 8, "adamw": 8}.get(cfg.optim.name, 4) * params  # adafactor: factored, less (bound)
    wo_params = m.num_layers * d * f + m.num_decoder_layers * d * f
    out = {"micro_batch": micro, "parameters": params, "weights": 4 * params, "gradients": 4 * params,
           "optimizer_state": optimizer,
           "weight_copies_16bit": a * (matmul_params - (wo_params if wo_fp32 else 0)) if a == 2 else 0,
           "activations_per_token_per_layer": {"encoder": encoder, "decoder": decoder},
           "activations": activations, "attention_bias": bias,
           "logits": dec_tok * V * (3 * 4 + a)}  # 16-bit, fp32 copy, log-softmax, gradient
    out["total"] = sum(out[k] for k in ("weights", "gradients", "optimizer_state", "weight_copies_16bit",
                                        "activations", "attention_bias", "logits"))
    return out


def estimate_time(cfg: Config, peak_tflops: float, mfu: float = 0.3, world_size: int = 1) -> dict:
    "Seconds per optimizer step and hours for the run from `flops_per_step` at an assumed MFU of the device's peak"
    from nanot5_edu.noise import compute_input_and_target_lengths
    L_t = compute_input_and_target_lengths(cfg.data.inputs_length, cfg.data.noise_density,
                                           cfg.data.mean_noise_span_length)[1]
    step_s = flops_per_step(cfg.model, cfg.optim.batch_size, cfg.data.inputs_length, L_t) / (
        world_size * mfu * peak_tflops * 1e12)
    return {"step_s": step_s, "total_h": step_s * cfg.train.total_steps / 3600, "mfu": mfu}


# %% [markdown]
# The check: count what autograd saves in one forward pass of the demo model (a `saved_tensors_hooks` sees every
# tensor the backward pass will need; the 16-bit weight copies are left out, they are their own line) and
# compare with the estimate's activations plus the fp32 log-softmax the loss keeps:

# %%
def saved_bytes(model, batch, dtype):
    "Bytes of the distinct tensors autograd saves in one forward pass (parameters and their 16-bit copies excluded)"
    params, seen = {p.untyped_storage().data_ptr() for p in model.parameters()}, {}
    def pack(t):
        if t.untyped_storage().data_ptr() not in params and not (t.grad_fn and t.grad_fn.name() == "TBackward0"):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype, enabled=dtype != torch.float32):
        model(**batch).loss
    return sum(seen.values())

for precision, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    est = estimate_memory(make_config("cpu-demo", [f"train.precision={precision}"]), device="cpu")
    counted = saved_bytes(model, collate(rows[:16]), dtype)  # 05's demo model and batch: the cpu-demo shape
    expected = est["activations"] + 16 * 29 * model.config.vocab_size * 4  # + the loss's fp32 log-softmax
    print(f"{precision}: autograd saves {counted / 1e6:.1f} MB; estimate {expected / 1e6:.1f} MB "
          f"(ratio {counted / expected:.2f})")
    test_close(counted / expected, 1.0, eps=0.15)
test_eq(est["parameters"], model.num_parameters())

# %% [markdown]
# What fits where. The `t5-base` preset's step (micro-batch 128 of 512 → 114 tokens, bf16), and the same
# batch in 2 or 4 micro-batches (`optim.grad_acc`), by part, on a GPU (estimates, not measurements; GiB; the first
# column also holds the 16-bit weight copies):

# %%
print(f"{'grad_acc':>8} {'micro':>5} {'weights+grads+optim':>20} {'activations':>12} {'logits':>7} {'total':>6} "
      f"{'(16-bit residual)':>17}")
for grad_acc in (1, 2, 4):
    base_cfg = make_config("t5-base", [f"optim.grad_acc={grad_acc}"])
    e, e16 = estimate_memory(base_cfg), estimate_memory(base_cfg, residual="16bit")
    fixed = e["weights"] + e["gradients"] + e["optimizer_state"] + e["weight_copies_16bit"]
    print(f"{grad_acc:8d} {e['micro_batch']:5d} {fixed / 2**30:20.1f} {e['activations'] / 2**30:12.1f} "
          f"{e['logits'] / 2**30:7.1f} {e['total'] / 2**30:6.1f} {e16['total'] / 2**30:17.1f}")
    if grad_acc == 1: base_total, base_saved = e["total"], e["total"] - e16["total"]
    if grad_acc == 4: base4_total = e["total"]
test_close(base_total / 2**30, 57, eps=1); test_close(base4_total / 2**30, 17, eps=1); test_close(base_saved / 2**30, 11, eps=1)

# %% [markdown]
# At the preset's micro-batch of 128 the activations are most of the ≈ 57 GiB: by the estimate it fits an 80 GB card, not
# a 40 GB one; `grad_acc=4` (micro-batch 32, the same optimizer step) brings it to ≈ 17 GiB, under a 24 GB card's.
# Keeping the residual stream in 16 bits, as nanoT5's model does (one stored version of its `nanoT5/utils/t5_model.py`
# casts the embeddings to bf16 under a config flag, `is_bf16`, and the norms' outputs back to the stream's dtype; in
# PiotrNawrot/nanoT5#31 its author says these casts make it need less memory than HF's T5), would bring micro-batch 128
# from ≈ 57 to 45 GiB by this count (the last column: the norms' inputs and outputs in 16 bits, and one 16-bit input
# shared by q, k and v instead of three casts), still too much for a 40 GB card, while `grad_acc=2` (≈ 30 GiB by the
# estimate) is under it. The feed-forward's four `d_ff`-wide tensors, 16-bit already, stay the largest part. So this
# course offers `optim.grad_acc`, not a 16-bit residual (which would change the model's numerics and its match with
# HF's T5), as the way to fit a smaller card.
#
# These are estimates, and one GPU run has measured two of them (`benchmarks/gpu_check.sh` on an H200,
# `benchmarks/results/h200_2026-12-04/gpu_check.json`): the bf16 step's peak memory was 19.6 GiB at micro-batch 32
# and 68.5 GiB at micro-batch 128, both uncompiled, 1.13 and 1.21 times the estimate (the file's `peak_over_estimate`).
# So the estimate runs low at these sizes for uncompiled steps: read it as a floor and leave room (the one compiled
# step measured, at micro-batch 32, with a graph break since fixed, peaked at 0.92× the estimate). Both measured peaks (allocated memory; the CUDA context and the
# allocator's reserve add more) are below the memory of the cards named above (24 GB, 80 GB), the 24 GB one by little; both were measured on the H200,
# so neither fit was measured on the card itself (micro-batch 128 on an 80 GB card, micro-batch 32 on a 24 GB one); `grad_acc=2` on a 40 GB card was not measured either, and by the estimate has less room to spare than the 80 GB case. A run that still
# runs out of memory stops with a `TrainingError` that names the micro-batch, this estimate and the `optim.grad_acc`
# that the estimate says fits (the estimate ran low above, so leave room; the appendix "an out-of-memory error that
# names the fix").

# %% [markdown]
# Every preset at once: the memory of one step on a GPU (`estimate_memory`) and the time of the run (`estimate_time`)
# on one A100 (the 40 GB and 80 GB cards share the peak; presets estimated above 40 GiB need the 80 GB one, and since measured peaks ran above the estimate, so may
# presets estimated a little below it) at an assumed 30% MFU (about what our count gives for nanoT5's step time, above; this package's own bf16 steps
# measured 12.1–16.2% uncompiled and 12.7% compiled (with a graph break since fixed, not re-timed) on an H200, `benchmarks/results/h200_2026-12-04/gpu_check.log`;
# no A100 was measured; if an A100 behaves alike, the hours are an underestimate for this code). Estimates from the formulas above, not measurements:

# %%
a100 = PEAK_TFLOPS["NVIDIA A100-SXM4-40GB"]  # dense bf16 TFLOP/s, from the table above
print(f"Estimates, not measurements: one A100 (40 or 80 GB, the same {a100} bf16 TFLOP/s peak; the presets above 40 GiB need the 80 GB card) at an assumed 30% MFU")
print(f"{'preset':>13} {'micro-batch':>11} {'memory GiB':>10} {'ms/step':>8} {'steps':>6} {'hours':>6}")
for name in ("cpu-demo", "t5-base", "t5-base-16h", "t5-base-24gb", "colab-t4"):
    preset_cfg = make_config(name)
    mem, est_t = estimate_memory(preset_cfg), estimate_time(preset_cfg, a100, mfu=0.3)
    print(f"{name:>13} {mem['micro_batch']:11d} {mem['total'] / 2**30:10.1f} {est_t['step_s'] * 1e3:8.1f} "
          f"{preset_cfg.train.total_steps:6d} {est_t['total_h']:6.2f}")


# %% [markdown]
# ## What you learned
#
# - Every knob lives in one dataclass tree; presets are dotlists over its defaults, and `key=value` overrides go
#   through OmegaConf, so an unknown key or a bad value fails at once, with the closest valid names.
# - Whatever can be checked without compute is checked before any data or model is built (`validate_config`).
# - One training step costs 3 × the forward FLOPs; for a T5-Base step of 128 rows that is 54.5 TFLOP, and the hand count
#   agrees with `FlopCounterMode` on everything it counts (on CPU it misses cross-attention's fused kernel: the ratios
#   0.991 and 0.994; checked on `tiny` and `t5-v1_1-small` at 128 → 29 tokens, not at T5-Base's 512 → 114).
# - MFU = achieved FLOP/s ÷ the device's peak: nanoT5's 0.56 s/step on an A100 comes to 31% MFU by our count of a
#   128-row step (nanoT5 reports the step time, not an MFU); on a
#   CPU the peak is measured with a large matmul.
# - A step's memory is weights (4 bytes per parameter), gradients (4), AdamW's moments (8), 16-bit weight copies (2),
#   and activations and logits, which grow with the micro-batch × tokens × layers.
# - The `t5-base` micro-batch of 128 needs about 57 GiB by the estimate (68.5 GiB measured uncompiled on an H200); `optim.grad_acc=4` gives the same optimizer step
#   in about 17 GiB by the estimate (19.6 GiB measured uncompiled on an H200; the one compiled step measured, with a graph break since fixed, peaked below its estimate).
# - (Appendix) fp16 needs loss scaling; the demo model, with fp32 master weights and residual stream, stays far below
#   fp16's largest number in its `Linear` layers (attention's products not measured).
#
# ## Questions
#
# 1. Why are the presets dotlists (`"optim.lr=4e-2"`) rather than nested dictionaries?
# 2. **Predict, then check:** before reading the first config cell's output, what does
#    `make_config("cpu-demo", ["optim.lrr=1e-3"])` say? And
#    `["optim.lr=fast"]`?
# 3. Why does the backward pass cost about twice the forward pass?
# 4. In `flops_per_step`, which term dominates for the demo model (`model.config`: d_model 256, `vocab_size=8192`;
#    128 → 29 tokens)?
#    Which for T5-Base?
# 5. **Predict, then check:** before reading its cell's output, will `FlopCounterMode`'s count be a little above or a little below `flops_per_step`, and
#    what could the hand count include that the kernels do not run (or the reverse)?
# 6. Why does a CPU need a *measured* peak for MFU, and why is a large square matmul the right thing to measure?
# 7. Which of the five parts of a step's memory do not depend on the micro-batch?
# 8. **Predict, then check:** before reading its row in "What fits where", what total do you expect for `grad_acc=2`, from
#    the rows for 1 and 4? Which parts of the total change with `grad_acc`, and which do not?
# 9. Why does attention on the CPU (SDPA's math path) keep more bytes per token than CUDA's memory-efficient kernel,
#    and how does it grow with the input length?
# 10. The course fits smaller GPUs with `optim.grad_acc` rather than a 16-bit residual stream. What does each cost?
# 11. With `estimate_time`, how long would 65,536 steps of `t5-base` take on an H100 SXM (989 TFLOP/s) at 30% MFU?
# 12. (Appendix) What does loss scaling protect against, and what can it not fix?
#
# ## Try it
#
# 1. **Memory against length.** With `estimate_memory(make_config("t5-base", ["data.inputs_length=1024"]))` and
#    `device="cuda"` and `"cpu"`, compare the activations with those at 512: which grows linearly, which faster?
# 2. **Where a CPU's matmul peaks.** Run `matmul_peak_flops(torch.bfloat16, n)` for `n in (256, 512, 1024, 2048, 4096)`
#    and plot the GFLOP/s: from which size on does it level off, and what does that say about the demo model's
#    256-wide matmuls?
# 3. **The hand count at other shapes.** Repeat the `FlopCounterMode` check for the `tiny` model at inputs 512 → 114
#    and at inputs 64 → 14 (batch 1; `compute_input_and_target_lengths(64, 0.15, 3.0)`): does the ratio stay within 2%? Which terms grow with the square of the length?

# %% [markdown]
# ## Appendix: fp16 for GPUs without bf16
#
# A T4 or a V100 has no bf16 tensor cores (compute capability < 8.0): bf16 would be
# emulated, far slower than fp16 (not measured here), so `validate_config` refuses it there and names the two choices, fp16 and fp32.
# (Not an `auto` precision that picks for you: the run's `config.yaml` should say what it trained in, and a run
# resumed on another GPU should not change precision half-way without being told.)
# fp16 has 3 more mantissa bits than bf16 but 3 fewer exponent bits (5 against 8): its largest number is 65,504 and its
# smallest positive one about 6e-8, so smaller gradients are lost (below half of it they round to zero). Two remedies
# make it train. **Loss scaling**: the loss is multiplied by a large factor
# before `backward` so small gradients stay representable, and the gradients are divided by it before the update;
# when a gradient overflows to inf, the step is skipped and the factor halved (`torch.amp.GradScaler`, which
# `train.precision=fp16` gets from Accelerate on a GPU; on a CPU `make_accelerator` adds one). The loss itself is finite on such a step — only the gradients
# overflowed — so the NaN guard of `fit` ([08](08_real_runs.ipynb)), which reads losses, does not stop the run; the logged gradient norm of a
# skipped step is inf or NaN (`tests/test_precision_memory.py` forces skipped steps and checks both). **fp32 where it matters**: master weights, the residual stream and the loss stay fp32, as in
# bf16. Loss scaling cannot fix an *activation* above 65,504. T5's largest are the feed-forward's `wo` outputs, so
# under fp16 our `wo` runs in fp32 ([03](03_t5_layers.ipynb); HF's T5 keeps `wo` in fp32 and clamps hidden states
# only when the weights themselves are fp16: under autocast with fp32 weights, as here and in nanoT5, neither acts). nanoT5
# reports that all its fp16 runs of T5-Base diverged, across seeds (its README, "Things we tried and didn't work
# out"), without saying where. Whether the small models here stay in range elsewhere is a question to measure. (The
# simulation below rounds every `Linear`, `wo` included, so on `wo` it is stricter than `train.precision=fp16`,
# whose `wo` runs in fp32; it does not round attention's products, which real fp16 autocast computes in fp16, so there it
# is more lenient. The real fp16 autocast it is compared with runs the guarded path.)
#
# A CPU's fp16 autocast is not a GPU's (CPUs differ in fp16 support; not measured here), so we *simulate* fp16 autocast
# in fp32 arithmetic: every `Linear` rounds its input, its weight and its output to fp16 and back, in the forward
# pass and for the gradients in the backward pass, so values above 65,504 become inf and tiny gradients zero, as on
# a GPU. First, the simulation against real fp16 autocast on one small batch of the demo model (at its initial weights). On these values the two agree to within
# fp16's rounding noise, about as closely as fp32 does (the printed distances show it; a few roundings more or less
# are not what matters); what the simulation adds is fp16's *range*, checked on three numbers after it:

# %%
class RoundToFP16(torch.autograd.Function):
    "x rounded to fp16 and back to fp32 (±inf above 65,504); its gradient rounded the same way"
    @staticmethod
    def forward(ctx, x): return x.half().float()
    @staticmethod
    def backward(ctx, grad): return grad.half().float()


def simulate_fp16(model, peaks: dict | None = None):
    "Every Linear of `model` computes as under fp16 autocast (input, weight, output rounded); `peaks` gets max |.|"
    for name, linear in model.named_modules():
        if isinstance(linear, torch.nn.Linear):
            def forward(x, linear=linear, name=name):
                out = torch.nn.functional.linear(x, linear.weight)  # the exact product, to record its size
                if peaks is not None:
                    peaks[name] = max(peaks.get(name, 0.0), x.detach().abs().max().item(), out.detach().abs().max().item())
                return RoundToFP16.apply(torch.nn.functional.linear(RoundToFP16.apply(x), RoundToFP16.apply(linear.weight)))
            linear.forward = forward
    return model


import copy
small = {k: v[:2] for k, v in collate(rows[:2]).items()}
def loss_and_grads(m, autocast_dtype=None):
    m.zero_grad()
    with torch.autocast("cpu", dtype=autocast_dtype or torch.float32, enabled=autocast_dtype is not None):
        loss = m(**small).loss
    loss.backward()
    return loss.item(), torch.cat([p.grad.flatten() for p in m.parameters()])
real_loss, real_grad = loss_and_grads(model, torch.float16)                     # real fp16 autocast (slow on CPU)
sim_loss, sim_grad = loss_and_grads(simulate_fp16(copy.deepcopy(model)))
fp32_loss, fp32_grad = loss_and_grads(model)
model.zero_grad()
gap = lambda g: ((g.double() - real_grad.double()).norm() / real_grad.double().norm()).item()  # relative to fp16's
print(f"loss: fp16 autocast {real_loss:.5f}, simulated {sim_loss:.5f}, fp32 {fp32_loss:.5f}")
print(f"gradient's distance from fp16 autocast's (relative): simulated {gap(sim_grad):.1e}, fp32 {gap(fp32_grad):.1e}")
assert gap(sim_grad) < 5e-3; test_close(sim_loss, real_loss, eps=1e-3)   # equal up to fp16's rounding noise
edge = torch.tensor([70000.0, 1e-8, 1.0001])
print("fp16's range, simulated:", RoundToFP16.apply(edge).tolist(), "| real fp16:", edge.half().tolist())
test_eq(RoundToFP16.apply(edge), edge.half().float())             # inf above 65,504, zero below ~6e-8, 11-bit mantissa


# %% [markdown]
# Then training: the demo model (1 + 1 layers) for 200 steps from the same initial weights on the same batches, in
# fp32, in bf16 autocast and in simulated fp16 with a loss scaler, recording, in the fp16 run, the largest |input| or |output| of every
# `Linear` layer over the whole run (attention's products, inside SDPA, are not recorded). `results/fp16_cpu.json` keeps the result; where it is missing (a fresh Colab runtime),
# the fast path below re-runs a 30-step version.

# %%
def precision_run(kind: str, steps: int = 200, seed: int = 0) -> dict:
    "Train the demo model in 'fp32', 'bf16' (autocast) or 'fp16' (simulated, loss-scaled); losses, peaks, skipped steps"
    torch.manual_seed(seed)
    m, peaks = T5(dataclasses.replace(MODEL_PRESETS["tiny"], num_layers=1, num_decoder_layers=1)), {}
    if kind == "fp16":
        simulate_fp16(m, peaks)
    opt = get_optimizer("adamwscale", m.named_parameters(), lr=4e-2)
    sched = get_lr_scheduler("cosine", opt, total_steps=steps, warmup_steps=steps // 10)
    scaler = torch.amp.GradScaler("cpu", enabled=kind == "fp16")
    g, losses, skipped = torch.Generator().manual_seed(seed), [], 0
    corrupt = SpanCorruptionCollator(tokenizer, inputs_length=128, seed=seed)  # every run: the same rows and masks
    for _ in range(steps):
        batch = corrupt(rows[torch.randint(len(rows), (16,), generator=g)])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=kind == "bf16"):
            loss = m(**batch).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        grad_norm = torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        scale = scaler.get_scale()
        scaler.step(opt); scaler.update(); sched.step(); opt.zero_grad()
        skipped += kind == "fp16" and scaler.get_scale() < scale
        losses.append(loss.item())
    return {"kind": kind, "losses": losses, "skipped_steps": int(skipped), "max_abs": peaks,
            "final_scale": scaler.get_scale() if kind == "fp16" else None}


# %%
#| slow
fp16_runs = {kind: precision_run(kind) for kind in ("fp32", "bf16", "fp16")}
Path("results/fp16_cpu.json").write_text(json.dumps(fp16_runs, indent=1));

# %%
saved = results_file("fp16_cpu.json")  # results/ beside the notebook, else the repository's copy (00's appendix)
if saved.exists():
    fp16_runs = json.loads(saved.read_text())
else:
    print("re-running a 30-step version instead")
    fp16_runs = {kind: precision_run(kind, steps=30) for kind in ("fp32", "bf16", "fp16")}
steps = len(fp16_runs["fp32"]["losses"])
smooth = lambda xs: np.convolve(xs, np.ones(10) / 10, mode="valid")
fig, (ax, ax_peak) = plt.subplots(1, 2, figsize=(13, 3.5))
for kind, r in fp16_runs.items():
    ax.plot(smooth(r["losses"]), label=f"{kind}" + (" (simulated, loss-scaled)" if kind == "fp16" else ""))
ax.set_xlabel("step"); ax.set_ylabel("training loss (10-step mean)"); ax.legend(); ax.set_title("the demo model, same batches")
peaks = fp16_runs["fp16"]["max_abs"]
ax_peak.barh(range(len(peaks)), list(peaks.values())); ax_peak.set_yticks(range(len(peaks)), [n.replace("layer.", "").replace("block.", "") for n in peaks], fontsize=6)
ax_peak.axvline(65504, color="C3", ls="--", label="fp16 max 65,504"); ax_peak.set_xscale("log"); ax_peak.legend(fontsize=8)
ax_peak.set_xlabel("largest |input| or |output| over the run"); ax_peak.invert_yaxis(); plt.tight_layout(); plt.show()
last = slice(steps - steps // 6, steps)
for kind in ("bf16", "fp16"):
    diff = np.array(fp16_runs[kind]["losses"]) - np.array(fp16_runs["fp32"]["losses"])
    print(f"{kind} - fp32: mean loss difference over the last {steps // 6} steps {diff[last].mean():+.4f} "
          f"(mean |difference| {np.abs(diff[last]).mean():.4f}); largest over the run {np.abs(diff).max():.3f}")
print(f"fp16: {fp16_runs['fp16']['skipped_steps']} of {steps} steps skipped by the loss scaler; largest activation "
      f"{max(peaks.values()):,.0f} in {max(peaks, key=peaks.get)} ({max(peaks.values()) / 65504:.2%} of fp16's range)")
assert all(math.isfinite(l) for r in fp16_runs.values() for l in r["losses"])


# %% [markdown]
# What the saved run shows (200 steps, one seed): simulated fp16 follows fp32 as closely as bf16 does — over the
# last 33 steps the losses differ by +0.0009 on average (mean |difference| 0.0078; bf16: +0.0004 and 0.0095), and
# by at most 0.03 anywhere in the run (bf16: 0.04), which is small next to the loss itself (this run has
# no fp32 pair at another seed to set a noise floor). The loss scaler never skipped a step (its scale stayed at the initial 65,536), and the largest
# value any `Linear` layer saw as input or output, 114 (at the encoder's feed-forward `wo`), is 0.17% of fp16's range: in
# its `Linear` layers this model, with fp32 master weights, loss scaling and an fp32 residual stream, is far from
# overflowing (attention's products were not measured). That is a small model for
# 200 steps; T5-Base is 12 + 12 layers trained for 65,536 steps, and nanoT5's fp16 runs of it diverged (where in the
# model, it does not say). So fp16 is offered for GPUs without bf16 (the `colab-t4` preset, a T5-Small-sized model),
# with the NaN guard behind it, and bf16 stays the default wherever the GPU has it.

# %% [markdown]
# ## Appendix: an out-of-memory error that names the fix
#
# On a GPU, a micro-batch too big for the device stops the run with `torch.OutOfMemoryError` and a number of bytes.
# Lesson 08's `fit` runs each micro-batch's forward and backward inside `_explain_oom`, which re-raises it as a `TrainingError` that says what
# was tried (micro-batch, input length, precision), what `estimate_memory` predicted, and a new `optim.grad_acc`:
# the current one times the smallest factor (2, 4, … 64) that divides the micro-batch and whose smaller micro-batch the
# estimate puts under 90% of the device's memory (times 2 when none does, or when the device's memory is unknown). The same optimizer step, in more pieces (gradient accumulation, lesson
# [05](05_pretraining.ipynb)). The code is hidden here (it needs a GPU to show anything); it lives in
# `nanot5_edu.config`.

# %%
#| export
#| hide
@contextlib.contextmanager
def _explain_oom(cfg: Config, accelerator, batch: dict):
    "Re-raise a CUDA out-of-memory error as a TrainingError with the micro-batch, the estimate and the fix"
    try:
        yield
    except torch.OutOfMemoryError as e:
        world, o = accelerator.num_processes, cfg.optim
        (micro, L_in), L_t = batch["input_ids"].shape, batch["labels"].shape[1]
        est = estimate_memory(cfg, world, shape=(micro, L_in, L_t))
        have = torch.cuda.get_device_properties(accelerator.device).total_memory if torch.cuda.is_available() else None
        fits = next((g for g in (2, 4, 8, 16, 32, 64) if micro % g == 0 and have
                     and estimate_memory(cfg, world, shape=(micro // g, L_in, L_t))["total"] < 0.9 * have), 2)
        raise TrainingError(
            f"Out of memory at micro-batch {micro} ({L_in}-token inputs, "
            f"{cfg.train.precision}): estimate_memory puts the step at {est['total'] / 2**30:.1f} GiB "
            f"(activations {est['activations'] / 2**30:.1f}, logits {est['logits'] / 2**30:.1f})"
            + (f" on a {have / 2**30:.1f} GiB device" if have else "") + ". Split each step into more micro-batches: "
            f"optim.grad_acc={o.grad_acc * fits} (micro-batch {micro // fits}, the same optimizer step), "
            "or lower data.inputs_length.") from e


# %% [markdown]
# ## Appendix: how the `cpu-demo` preset was chosen
#
# The `cpu-demo` preset (the recipe of lesson 05's demo) came from an earlier sweep of 15 recipes at 150 s each, scored by the **encoder gain**: a held-out row's loss with the input of a row drawn across
# all speeches minus its loss with its own input (lesson 05's (c) − (a)). These runs predate splitting it into span
# and document gain; in lesson 05's 3,000-step demo 0.171 of its 0.198 was `document_gain`. Each recipe there is a change to the demo's first default (nanoT5's shape scaled
# down: 4 + 4 layers at lr 2e-2), pinned by
# [experiments/demo_sweep.py](https://github.com/nanot5-edu/nanot5_edu/blob/main/experiments/demo_sweep.py). Losses
# of different vocabulary sizes or input lengths are not comparable, and each point is one seed.

# %%
sweep = [json.loads(l) for l in results_file("demo_sweep.jsonl").read_text().splitlines()]  # nbs/results (00's appendix)
budgets = sorted({r["budget_s"] for r in sweep})
fig, axs = plt.subplots(1, 2, figsize=(12, 4))
for r in sweep:
    if r["budget_s"] != budgets[0]:
        continue
    axs[0].scatter(r["eval_loss"], r["encoder_gain"])
    axs[0].annotate(r["name"], (r["eval_loss"], r["encoder_gain"]), fontsize=8, xytext=(3, 3), textcoords="offset points")
    minutes = [c["step"] * r["calib_ms_per_step"] / 60_000 for c in r["curve"]]
    axs[1].plot(minutes, [c["encoder_gain"] for c in r["curve"]], ".-", label=r["name"])
axs[0].set_xlabel("held-out loss (nats/token; not comparable across vocabulary sizes)"); axs[0].set_ylabel("encoder gain (nats)")
axs[0].set_title(f"every recipe after {budgets[0]:.0f} s of training on 2 CPU cores")
axs[1].set_xlabel("minutes of training (step x measured ms/step)"); axs[1].set_ylabel("encoder gain (nats)")
axs[1].legend(fontsize=7, ncol=2); axs[1].set_title("encoder gain during each run")
plt.tight_layout(); plt.show()
print(f"{'recipe':16} {'overrides':75} {'calibrated ms/step':>18} {'steps':>6} {'loss':>6} {'gain':>6}")
for r in sorted(sweep, key=lambda r: (r["budget_s"], -r["encoder_gain"])):
    print(f"{r['name']:16} {' '.join(r['overrides']) or '(the old default)':75} {r['calib_ms_per_step']:18.0f} {r['steps']:6d} "
          f"{r['eval_loss']:6.3f} {r['encoder_gain']:6.3f}")

# %% [markdown]
# What the sweep says, at 150 s of training each by calibration (`steps` = 150 s ÷ the calibrated ms/step printed;
# the runs' own wall times, on a shared machine, differed). One seed per recipe, and the calibration of recipes with the
# same shape differs (162–191 ms a step for the four 1 + 1 runs of 128-token inputs), so gaps of a hundredth of a nat
# are not rankings:
#
# - **Fewer layers score higher.** 4 + 4 layers reach an encoder gain of 0.035, 2 + 2 layers 0.068, 1 + 1 layers
#   0.074. A smaller model also takes more steps in the same time (the `steps` column), so the sweep does not say
#   whether depth or the number of steps is what matters. A deeper encoder over a 1-layer decoder (2 + 1, 3 + 1)
#   scores lower (0.045, 0.023), not higher. (2 + 2 against 1 + 1 is within what one seed can tell; both score higher
#   than 4 + 4, one seed each.)
# - **The learning rate matters, up to a cliff.** With 1 + 1 layers: 1e-2 gives 0.030, 2e-2 0.074, 4e-2 **0.080**
#   (and the lowest loss of the runs with the default vocabulary and 128-token inputs), 8e-2 trains but never uses the encoder (loss
#   5.06, gain 0.000).
#   4e-2 is half the rate at which the encoder went unused; the demo's 3,000-step run (lesson 05) shows whether it holds over a longer schedule.
# - On the 2 + 2 model, batch 8 and batch 16 are within a hundredth of each other (0.062, 0.068). On the 4 + 4
#   model, batch 64 (79 steps in the budget) and plain AdamW at 1e-3 end with higher losses than the old default (5.073
#   and 5.048 against 4.929) and no higher gain. Inputs of 64 tokens give a lower loss (not comparable: shorter inputs
#   and targets) and no higher gain; a 2,000-piece vocabulary gives a lower loss per token (not comparable either) and
#   no higher gain.
# - **`torch.compile` does not pay on CPU** here: measured through the real loop on the chosen recipe
#   (`experiments/compile_pays.sh`, `results/compile_cpu.json`), compiled steps are no faster within the noise of one pair of runs (1.02×), and the 500-step
#   run takes 124 s instead of 98 s, compilation included.
#
# The encoder gains are small (the best is the chosen recipe's; the split into span and document gain, and the
# `span_gain` ≥ 0.1 goal of lessons 05 and 05b, came later); the demo uses `L1-lr4e-2`, the highest encoder gain (not separated from `L1`, the same recipe at lr 2e-2, by one seed; it also ran more steps).

# %%
#| hide
import nbdev; nbdev.nbdev_export()
