# %% [markdown]
# # The command line
# > `nanot5-edu`: one command with a subcommand per job (corpus statistics, pre-training, fine-tuning, evaluation)

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# The course's jobs — corpus statistics, pre-training, fine-tuning, evaluation — are also shell commands, so a
# run on a lab GPU or under `accelerate launch` ([08](08_real_runs.ipynb)) needs no notebook. The parser is plain
# `argparse` with subcommands; each subcommand imports its module only when called, so `nanot5-edu --help` answers
# without loading PyTorch.
#
# **What you will build**: `main`, the `nanot5-edu` command with four subcommands (`corpus-stats`, `pretrain`,
# `finetune`, `evaluate`); one argument style for the three jobs (flags for paths, `key=value` overrides,
# `--print-config` — for `pretrain`, validated and with memory and time estimates); exit statuses a scheduler can act on; and
# `saved_overrides`, which relaunches or resumes a run from its saved `config.yaml`. The lesson ends with a
# 20-step pre-training run from the command line, repeated from its saved config (equal logged losses, on CPU).

# %%
#| default_exp cli

# %%
#| export
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# %%
from fastcore.test import test_eq, test_fail  # the checks below: test_eq(a, b) fails loudly unless a == b
import contextlib, io, json, tempfile, yaml
import matplotlib.pyplot as plt


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
# ## One argument style
#
# The three training and scoring jobs take their arguments the same way:
#
# - **flags for paths**: `--config` (a saved run's `config.yaml`, or the run directory that holds it), and for
#   `finetune` and `evaluate` `--checkpoint` and `--data` (`evaluate` also `--out`);
# - **`key=value` overrides for everything in the config tree** of [07_config](07_config.ipynb) and, for
#   `finetune` / `evaluate`, the `sni.*` keys of [09_finetuning](09_finetuning.ipynb) (`optim.lr=1e-3`,
#   `sni.eval_on=unseen`), applied after the preset or the saved config, with the closest valid keys suggested
#   for a typo;
# - **`--print-config`** prints the resolved config as YAML and exits, so you see what a command would run
#   before it runs.
#
# Every run writes its resolved config to `RUN_DIR/config.yaml`. `saved_overrides` turns that file back into
# `key=value` items, so `--config RUN_DIR` rebuilds the same config, and overrides after it change it (a new `model_preset` is refused:
# the saved items fix every `model.*` key). Each value is
# written so that it reads back as itself: a plain string as it is, anything else (numbers, booleans, `null`, lists,
# a string such as `"true"` that would read back as a boolean) as JSON. Launched in the same run
# directory (the saved `logging.run_dir` as written: a relative one resolves against the current directory), the rebuilt config resumes the run (when the saved `checkpoint.resume` is `auto`, the default); with `logging.run_dir=NEW` it repeats
# the run elsewhere.

# %%
#| export
def _flat_items(node: dict, prefix: str = ""):
    for k, v in node.items():
        yield from _flat_items(v, f"{prefix}{k}.") if isinstance(v, dict) else [(f"{prefix}{k}", v)]


def saved_overrides(path: str | Path) -> list[str]:
    "A saved config.yaml (or the run directory holding it) as key=value items for `make_config`"
    import json, yaml
    from omegaconf import OmegaConf
    from nanot5_edu.config import ConfigError
    path = Path(path)
    path = path / "config.yaml" if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"--config {path}: no such file; give a run directory or the config.yaml in it.")
    def value(v):  # a string as it is when it reads back as itself (make_config reads model_preset raw), else JSON
        try:
            plain = isinstance(v, str) and OmegaConf.from_dotlist([f"v={v}"]).v == v
        except yaml.YAMLError:  # e.g. "*.jsonl": YAML cannot read it unquoted
            plain = False
        return v if plain else json.dumps(v)
    return [f"{k}={value(v)}" for k, v in _flat_items(OmegaConf.to_container(OmegaConf.load(path)))]


def _no_new_model_preset(saved: list[str], items: list[str], config: str) -> list[str]:
    "The saved items, unless the overrides name another model_preset: the saved model.* items would undo it"
    from nanot5_edu.config import ConfigError
    new = next((i.split("=", 1)[1] for i in reversed(items) if i.startswith("model_preset=")), None)
    if new is not None and f"model_preset={new}" not in saved and any(i.startswith("model.") for i in saved):
        raise ConfigError(f"model_preset={new} cannot change the model of the saved run {config} (its config fixes "
                          f"every model.* key): start from a preset (`nanot5-edu pretrain PRESET model_preset={new}`) "
                          "or override single model.* keys.")
    return saved


def _keep_flags(saved: list[str], args: argparse.Namespace) -> list[str]:
    "Drop the saved items that --checkpoint / --data replace (a flag beats the saved config)"
    drop = (("sni.checkpoint=", "model.") if getattr(args, "checkpoint", None) else ()) + \
           (("sni.data_dir=",) if getattr(args, "data", None) else ())
    return [item for item in saved if not item.startswith(drop)]


def config_yaml(cfg) -> str:
    "The resolved config as YAML: what `--print-config` shows and what a run saves as config.yaml"
    from omegaconf import OmegaConf
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


# GPUs people have: memory a process can use (GiB) and the name PEAK_TFLOPS knows them by
# approximate usable memory (GiB) of each card: nominal, not measured by this course
CARDS = {"Tesla T4": 14.7, "NVIDIA L4": 22.0, "NVIDIA A100-SXM4-40GB": 39.4, "NVIDIA A100-SXM4-80GB": 79.3,
         "NVIDIA H100 80GB HBM3": 79.2}


def resource_estimates(cfg, world_size: int = 1, mfu: float = 0.3) -> str:
    "Memory (estimate_memory) and time (flops_per_step at an assumed MFU) of a pre-training config, as YAML comments"
    from nanot5_edu.config import PEAK_TFLOPS, estimate_memory, estimate_time
    e, GiB = estimate_memory(cfg, world_size), 2 ** 30
    parts = ", ".join(f"{k.replace('_', ' ')} {e[k] / GiB:.1f}" for k in
                      ("weights", "gradients", "optimizer_state", "weight_copies_16bit", "activations", "attention_bias",
                       "logits"))
    lines = [f"ESTIMATES, not measurements, for {world_size} process(es) at micro-batch {e['micro_batch']}:",
             f"  GPU memory per process (estimate_memory): {e['total'] / GiB:.1f} GiB = {parts}",
             f"  time at an assumed {mfu:.0%} MFU (nanoT5's A100 step time comes to 31%), {cfg.train.total_steps:,} steps:"]
    for name, memory in CARDS.items():
        t = estimate_time(cfg, PEAK_TFLOPS[name], mfu, world_size)
        fits = "fits" if e["total"] / GiB < 0.9 * memory else "does NOT fit: raise optim.grad_acc"
        total = f"{t['total_h'] * 60:.0f} min" if t["total_h"] < 2 else f"{t['total_h']:.1f} h"
        lines.append(f"    {name:22} {memory:5.1f} GiB  {fits:34} {t['step_s']:7.3f} s/step  {total:>8}")
    lines.append("  measure them on your GPU: bash benchmarks/gpu_check.sh")
    return "".join(f"# {l}\n" for l in lines)


# %% [markdown]
# ## `pretrain`: the main job
#
# `nanot5-edu pretrain [PRESET] [key=value ...]` runs `train` from [08_real_runs](08_real_runs.ipynb) and ends by
# naming what it produced: the run directory, the final validation loss (for an in-memory corpus and the span-corruption objective, next to the unigram baselines it has to beat to show more than token frequencies;
# the 20-step run below has not beaten the per-position one yet),
# the loss plot and the Hugging Face export. `--config RUN_DIR` starts from a saved run's config instead of a
# preset.
#
# Its **exit status** tells a script or a scheduler what happened:
#
# | status | what happened | what to do |
# |---|---|---|
# | 0 | the run finished | — |
# | 2 | bad input, or a run that cannot go on (config or data error, NaN loss, a checkpoint that cannot be written, checkpoints to resume that are all damaged; a run directory with none starts fresh): one line on stderr | what the line says |
# | 3 | stopped early on request while `fit` runs (resume, evaluations, steps) — SIGTERM (a scheduler, `timeout` — which reports its own 124 unless given `--preserve-status` —, a spot instance), a first Ctrl-C, or `train.max_minutes` — after finishing the step and writing a checkpoint (at the last step the run simply finishes, 0; before `fit`, e.g. building the tokenizer, or after it, e.g. the export, a signal ends the process at once: 143 or 130) | run the printed `resume:` command (or the same command again) |
# | 130 / 143 (killed by SIGINT / SIGTERM) | a second Ctrl-C or SIGTERM: the process ends at once | the same command resumes from the last checkpoint |
#
# (Under `accelerate launch` the launcher's own status differs: see the appendix.)

# %%
#| export
def pretrain_cmd(args: argparse.Namespace) -> int:
    "Pre-train with a preset (or a saved config) and key=value overrides; print where everything went"
    from nanot5_edu.train import train
    from nanot5_edu.config import ConfigError, make_config, validate_config
    items = list(args.overrides)
    preset = items.pop(0) if items and "=" not in items[0] else None
    if preset and args.config:
        raise ConfigError(f"Give a preset ({preset}) or --config, not both: the saved config sets every key.")
    saved = _no_new_model_preset(saved_overrides(args.config), items, args.config) if args.config else []
    cfg = make_config(preset or "cpu-demo", [*saved, *items])
    if args.print_config:  # checked first: a config that cannot run is an error here too
        validate_config(cfg, int(os.environ.get("WORLD_SIZE", 1)))
        print(config_yaml(cfg) + resource_estimates(cfg, int(os.environ.get("WORLD_SIZE", 1))), end="")
        return 0
    summary = train(cfg)
    if not summary["main_process"]:  # other processes of a multi-process run stay quiet
        return 0
    print(f"\nrun directory:   {summary['run_dir']}  ({summary['steps']} steps, {summary['wall_s'] / 60:.1f} min)")
    if summary.get("final_eval_loss") is not None:
        print(f"validation loss: {summary['first_eval_loss']:.3f} at the first evaluation -> "
              f"{summary['final_eval_loss']:.3f} (token accuracy {summary['final_eval_accuracy']:.1%})")
    if summary.get("final_encoder_gain") is not None:
        ci = lambda k: "[{:.3f}, {:.3f}]".format(*summary[f"final_{k}_ci95"])
        print(f"encoder gain:    {summary['final_encoder_gain']:.3f} nats, 95% {ci('encoder_gain')} (loss with (c) another "
              f"document's input {summary['final_eval_loss_other_document']:.3f} minus (a) its own "
              f"{summary['final_eval_loss_own']:.3f})")
        print(f"  span gain:     {summary['final_span_gain']:.3f} nats, 95% {ci('span_gain')} (loss with (b) another "
              f"passage of the same document {summary['final_eval_loss_same_document']:.3f} minus (a))")
        print(f"  document gain: {summary['final_document_gain']:.3f} nats, 95% {ci('document_gain')} ((c) minus (b))")
        print(f"                 on {summary['final_eval_gain_rows']} held-out rows of {summary['final_eval_documents']} "
              "documents; intervals: bootstrap over documents")
    elif summary.get("final_eval_documents") is not None:
        print(f"encoder gain:    not measured: the held-out rows cover {summary['final_eval_documents']} document(s) and "
              f"{summary['final_eval_gain_rows']} rows have both another passage of their document and another document "
              "(a streamed corpus is evaluated on its first eval.batches x eval.batch_size rows: raise them)")
    if "unigram" in summary:
        print(f"baselines:       unigram entropy {summary['unigram']:.3f}, "
              f"per-position unigram {summary['per_position_unigram']:.3f}")
    print(f"loss plot:       {summary['loss_plot']}")
    loads_with = "" if str(summary["hf_export"]).startswith("none") else "  (T5ForConditionalGeneration.from_pretrained)"
    print(f"HF export:       {summary['hf_export']}{loads_with}")
    return 0


# %% [markdown]
# ## `finetune` and `evaluate`: Super-NaturalInstructions
#
# `nanot5-edu finetune [--checkpoint DIR] [--data DIR] [key=value ...]` fine-tunes with the `sni` preset of
# [09_finetuning](09_finetuning.ipynb) and scores the evaluation sets; `nanot5-edu evaluate --checkpoint DIR
# [--data DIR] [key=value ...]` only scores. Without `--data` both use the sni-mini miniature that ships with the
# package. Both print, per evaluation set ("seen tasks, new instances" and "unseen tasks"; `sni.eval_on` picks
# one), the model's Rouge-L, exact match and rank-classification accuracy, each followed by its baselines on the
# same instances (the task's majority answer; for Rouge-L and exact match also a copy of the input). `evaluate` reads the same `sni.*` keys as
# `finetune`'s own evaluation (`sni.seen_instances_per_task`, `sni.unseen_instances_per_task`,
# `sni.max_source_length`, `sni.max_target_length` as the generation length, `sni.eval_batch_size`, `sni.num_pos_examples`,
# `sni.data_dir`), and writes
# the JSON into a local checkpoint's directory (`sni_eval.json`: in a fine-tuned run's directory it replaces the
# fine-tune's own scores, so give `--out` to keep both), to the current directory for a hub name, or to `--out`.

# %%
#| export
def _print_scores(scores: dict):
    from nanot5_edu.finetune import EVAL_SETS, format_scores
    for name, s in scores.items():
        print(f"\n{EVAL_SETS[name]} ({s['overall']['instances']} instances):\n{format_scores(s)}")


def _finetune_config(args: argparse.Namespace, checkpoint: str | None):
    from nanot5_edu.finetune import make_finetune_config
    saved = _no_new_model_preset(_keep_flags(saved_overrides(args.config), args), args.overrides, args.config) \
        if args.config else []
    return make_finetune_config(checkpoint, args.data, [*saved, *args.overrides])


def finetune_cmd(args: argparse.Namespace) -> int:
    "Fine-tune a checkpoint on SNI train tasks, then evaluate it with its baselines"
    import json
    from nanot5_edu.finetune import finetune
    cfg = _finetune_config(args, args.checkpoint)
    if args.print_config:
        print(config_yaml(cfg), end="")
        return 0
    summary = finetune(cfg)
    if summary["main_process"]:
        _print_scores(json.loads((Path(summary["run_dir"]) / "sni_eval.json").read_text()))
        print(f"\nrun directory: {summary['run_dir']}\nHF export:     {summary['hf_export']}")
    return 0


def evaluate_cmd(args: argparse.Namespace) -> int:
    "Score a checkpoint on SNI's seen and/or unseen evaluation sets, next to the baselines"
    import json
    from omegaconf import OmegaConf
    from nanot5_edu.finetune import EVAL_SETS, evaluate_sni, load_model, load_sni
    from nanot5_edu.config import ConfigError
    sni = _finetune_config(args, None).sni  # the architecture comes with the weights: only the sni.* keys are read
    sni.checkpoint = args.checkpoint
    if sni.eval_on not in (*EVAL_SETS, "both"):
        raise ConfigError(f"sni.eval_on={sni.eval_on!r}: use seen, unseen or both.")
    if args.print_config:
        print(OmegaConf.to_yaml({"sni": OmegaConf.structured(sni)}), end="")
        return 0
    if args.out:
        out = Path(args.out)
    elif Path(args.checkpoint).is_dir():
        out = Path(args.checkpoint) / "sni_eval.json"
    else:
        out = Path("sni_eval.json")
        print(f"{args.checkpoint} is not a local directory (a hub name?): the scores go to {out.resolve()} "
              "(--out to choose).")
    model, tokenizer = load_model(args.checkpoint)
    sizes = {"seen": sni.seen_instances_per_task, "unseen": sni.unseen_instances_per_task}
    scores = {}
    for name in (EVAL_SETS if sni.eval_on == "both" else [sni.eval_on]):
        ds, _ = load_sni(sni.data_dir or None, name, sizes[name], tokenizer, sni.max_source_length, sni.num_pos_examples)
        scores[name] = evaluate_sni(model, tokenizer, ds, sni.eval_batch_size, sni.max_source_length,
                                    sni.max_target_length)
    out.write_text(json.dumps(scores, indent=1))
    _print_scores(scores)
    print(f"\nscores: {out}")
    return 0


# %% [markdown]
# ## The parser
#
# The preset names in `pretrain --help` come from `RUN_PRESETS` itself. Importing it loads PyTorch (seconds), so a
# small help formatter fills `{presets}` in only when that help page is shown: `nanot5-edu --help` does not load PyTorch.
#
# `parse_args` uses `parse_known_args` because plain `argparse` fills a `nargs="*"` positional from one unbroken
# run of words: `pretrain a=1 --config DIR b=2` would reject `b=2`. The leftovers that are not flags are added to
# the overrides, so `key=value` items may come anywhere.
#
# `main` turns what a job raised into an exit status: `RunStopped` (a stop on request, defined in `nanot5_edu.checkpoint`,
# which `_run_stopped` looks up only if a job has imported it) is 3 with a `resume:` line; a `ValueError` or
# `RuntimeError` whose class this package defines is 2 with one line; any other exception is re-raised.

# %%
#| export
class _PresetHelp(argparse.HelpFormatter):
    "Fills {presets} in a help string with the names in `nanot5_edu.config.RUN_PRESETS` when the help is shown"
    def _get_help_string(self, action):
        if "{presets}" not in (action.help or ""):
            return action.help
        from nanot5_edu.config import RUN_PRESETS
        return action.help.replace("{presets}", ", ".join(RUN_PRESETS))


def build_parser() -> argparse.ArgumentParser:
    "The `nanot5-edu` argument parser: one subparser per job"
    parser = argparse.ArgumentParser(prog="nanot5-edu", description="Pre-train and fine-tune T5 on limited compute.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("corpus-stats", help="document, byte and word counts of a corpus, per split")
    p.add_argument("spec", nargs="?", default="sotu", help="'sotu' (default) or a path/glob of .txt/.jsonl/.parquet")
    p.set_defaults(func=corpus_stats_cmd)

    def job(name, help, overrides_metavar="key=value", overrides_help="", checkpoint=None, data=False, out=False):
        p = sub.add_parser(name, help=help, description=help, formatter_class=_PresetHelp)
        if checkpoint:
            p.add_argument("--checkpoint", required=checkpoint == "required",
                           help="run dir, checkpoint dir, HF T5 dir or hub name" + ("" if checkpoint == "required"
                                                                                   else " (omit: random init)"))
        if data:
            p.add_argument("--data", help="a natural-instructions clone (tasks/, splits/default/); "
                                           "default: the packaged sni-mini")
        if out:
            p.add_argument("--out", help="the scores JSON (default: CHECKPOINT/sni_eval.json, ./sni_eval.json for "
                                         "a hub name)")
        p.add_argument("--config", help="a saved run's config.yaml, or its run directory: start from that config")
        p.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
        p.add_argument("overrides", nargs="*", metavar=overrides_metavar, help=overrides_help)
        return p

    job("pretrain", "pre-train T5 with span corruption (default preset: cpu-demo)", "[PRESET] key=value",
        "a preset ({presets}), then overrides such as optim.lr=1e-3 train.total_steps=100"
        ).set_defaults(func=pretrain_cmd)
    job("finetune", "fine-tune on Super-NaturalInstructions, then score seen and unseen tasks",
        overrides_help="e.g. train.total_steps=1000 optim.lr=1e-4 sni.eval_on=unseen sni.random_init=true",
        checkpoint="optional", data=True).set_defaults(func=finetune_cmd)
    job("evaluate", "Rouge-L / exact match / rank accuracy of a checkpoint on SNI, with baselines",
        overrides_help="sni.eval_on=seen|unseen|both (seen: held-out instances of the training tasks; unseen: the "
                       "test tasks, SNI's official setting), sni.seen_instances_per_task=10, "
                       "sni.unseen_instances_per_task=100, sni.max_source_length=1024, sni.max_target_length=128 "
                       "(generation length), sni.eval_batch_size=16",
        checkpoint="required", data=True, out=True).set_defaults(func=evaluate_cmd)
    return parser


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    "Parse a command line; key=value items may come before, between or after the flags"
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and (any(a.startswith("-") for a in extra) or not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides += extra
    return args


EXIT_DONE, EXIT_ERROR, EXIT_STOPPED = 0, 2, 3


def _run_stopped() -> tuple:
    "RunStopped when a job has loaded nanot5_edu.checkpoint (every job that can stop has), else nothing to catch"
    checkpoint = sys.modules.get("nanot5_edu.checkpoint")  # not imported here: `nanot5-edu --help` stays instant
    return (checkpoint.RunStopped,) if checkpoint else ()


def main(argv: list[str] | None = None) -> int:
    "Entry point of the `nanot5-edu` console script; returns its exit status (EXIT_DONE, EXIT_ERROR, EXIT_STOPPED)"
    args = parse_args(argv)
    try:
        return args.func(args)
    except _run_stopped() as e:  # SIGTERM, Ctrl-C or train.max_minutes: a checkpoint is written, the run can go on
        if e.main_process:
            launch = (f"accelerate launch --multi_gpu --num_processes {e.num_processes} -m nanot5_edu" if e.num_processes > 1
                      else "nanot5-edu")
            print(f"{e}\nresume: {launch} {args.command} --config {e.run_dir}", file=sys.stderr)
        return EXIT_STOPPED
    except (ValueError, RuntimeError) as e:
        if not type(e).__module__.startswith("nanot5_edu"):
            raise  # a bug, not bad input: keep the traceback
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR


# %% [markdown]
# ## Using it
#
# `pyproject.toml` makes `main` the console script (`nanot5-edu = "nanot5_edu.cli:main"`), whose generated wrapper
# calls `sys.exit(main())`: the number `main` returns is the shell's exit status. In a notebook, `main([...])` is the
# shell command `nanot5-edu ...`; `cli` also returns the exit code when argparse exits (after `--help`, or for
# arguments it cannot parse).

# %%
def cli(*argv):
    try:
        return main(list(argv))
    except SystemExit as e:
        return e.code

test_eq(cli("--help"), 0)

# %%
test_eq(cli("pretrain", "--help"), 0)

# %% [markdown]
# `corpus-stats` prints the same table as [00_data](00_data.ipynb) (`sotu`: the State of the Union speeches embedded
# through the `sotu` package). Bad input — every error class of this package
# (`CorpusError`, `TokenizerError`, `ConfigError`, `TrainingError`, …) — is one line on stderr and exit code 2,
# not a traceback; any other exception is a bug and keeps its traceback:

# %%
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out): rc = main(["corpus-stats", "sotu"])
test_eq(rc, 0)
print(out.getvalue())
test_eq("| documents | 225 | 24 |" in out.getvalue(), True)
with contextlib.redirect_stderr(err): rc = main(["corpus-stats", "wikipedia"])
print(f"exit status {rc}; stderr: {err.getvalue()}")
test_eq((rc, err.getvalue().startswith("error: Unknown corpus spec 'wikipedia'")), (2, True))

# %%
with contextlib.redirect_stderr(err := io.StringIO()): rc = main(["pretrain", "optim.lrr=1e-3"])
test_eq(rc, 2); print(err.getvalue())
test_eq("Did you mean optim.lr" in err.getvalue(), True)

# %% [markdown]
# `--print-config` shows what a command would run: here the `t5-base` preset with one override (the first lines):

# %%
with contextlib.redirect_stdout(out := io.StringIO()): rc = main(["pretrain", "t5-base", "optim.lr=1e-2", "--print-config"])
test_eq(rc, 0)
lines = out.getvalue().splitlines()
optim_at = next(i for i, l in enumerate(lines) if l.startswith("optim:"))
print("\n".join(lines[:6] + ["..."] + lines[optim_at:optim_at + 3]), "\n...")   # the model, and the overridden lr
resolved = yaml.safe_load(out.getvalue())
test_eq((resolved["model"]["d_model"], resolved["optim"]["lr"], resolved["train"]["total_steps"]), (768, 1e-2, 65536))

# %% [markdown]
# After the YAML come what the config will cost, as comment lines (so the output still reads as YAML): GPU memory
# from `estimate_memory` and time from `flops_per_step` at an assumed MFU ([07](07_config.ipynb)), for the GPUs
# people have. "fits" means the memory estimate is under 0.9 of the card's memory (`CARDS`: approximate usable GiB,
# nominal, not measured by this course). Both are estimates; on the H200 the times and the uncompiled memory came out
# optimistic:
#
# - time: the H200 run of `benchmarks/gpu_check.sh` that lesson 07 quotes measured this code's T5-Base bf16 steps at
#   12.1–16.2% MFU (`benchmarks/results/h200_2026-12-04/gpu_check.log`), so the times are likely underestimates. The
#   same log timed the colab-t4 preset on that H200 at 78–85 ms/step after warm-up, several times the estimate
#   printed below for a card of the same peak.
# - memory: the uncompiled peaks of this code's model there were up to 1.21 times the estimate (HF's T5, in the same
#   log, peaked higher), so a "fits" near the limit needs care
#   (the colab-t4 preset's own memory peak was not measured: the peak on the log's colab-t4 line is an earlier
#   section's, not reset in that run, and its estimate predates a later change to the fp16 formula).
#
# `benchmarks/gpu_check.sh` (in the repository, not in the installed package: clone it) measures memory and speed
# on your GPU for a T5-Base step and the colab-t4 preset, not for any printed config. The Colab preset:

# %%
with contextlib.redirect_stdout(out := io.StringIO()): rc = main(["pretrain", "colab-t4", "--print-config"])
test_eq(rc, 0)
print("\n".join(l for l in out.getvalue().splitlines() if l.startswith("#")))
t4_line = next(l for l in out.getvalue().splitlines() if "Tesla T4" in l)
test_eq(("fits" in t4_line, "NOT" in t4_line), (True, False))  # the colab-t4 preset fits a T4 by its own estimate

# %% [markdown]
# **A short run.** The CPU demo's preset cut to 20 steps, evaluated every 10, in a scratch folder (the printed
# paths are relative to it); the last lines are what this run prints at the end:

# %%
os.chdir(tempfile.mkdtemp())
run_dir = Path("short")
SHORT = ["train.total_steps=20", "optim.warmup_steps=5", "eval.every_steps=10", "eval.batches=2", "eval.samples=0",
         "checkpoint.every_steps=10", "logging.every_steps=10", "logging.progress_bar=false", f"logging.run_dir={run_dir}"]
test_eq(main(["pretrain", *SHORT]), 0)
test_eq(sorted(p.name for p in (run_dir / "checkpoints").iterdir()), ["step_00000010", "step_00000020"])

# %% [markdown]
# **Relaunching from the saved config.** `--config RUN_DIR` rebuilds the run's config from its `config.yaml` (the
# first check: it equals the config built from the same overrides), and overrides after it win. Relaunched in a
# new directory, the same config repeats the run: the logged training and held-out losses (`loss`, `eval_loss`) are equal (on CPU; a
# GPU repeat is not tested). (In the same directory it would
# resume from the last checkpoint instead, when the saved `checkpoint.resume` is `auto`, the default.)

# %%
from nanot5_edu.config import make_config
test_eq(make_config("cpu-demo", saved_overrides(run_dir)), make_config("cpu-demo", SHORT))
again = run_dir.parent / "again"
with contextlib.redirect_stdout(io.StringIO()):
    test_eq(main(["pretrain", "--config", str(run_dir), f"logging.run_dir={again}"]), 0)
plt.close("all")  # `pretrain` draws its loss plot (loss.png) on a figure: close it
losses = lambda d: [(r["step"], r.get("loss", r.get("eval_loss"))) for r in map(json.loads, (d / "metrics.jsonl").open())]
test_eq(losses(again), losses(run_dir))
losses(again)

# %% [markdown]
# ## What you learned
#
# - The course's four jobs are each one shell command, `nanot5-edu SUBCOMMAND`, and `main([...])` is the same
#   command in a notebook; modules are imported only by the subcommand that needs them.
# - One argument style: flags for paths, `key=value` overrides for every key of the config tree (typos get the
#   closest valid keys), and `--print-config` to see the resolved config before anything runs (for `pretrain`,
#   validated and with memory and time *estimates*).
# - The package's own errors are one line on stderr and exit status 2; a stop on request during training (SIGTERM, Ctrl-C,
#   `train.max_minutes`) writes a checkpoint and exits 3; anything else is a bug and keeps its traceback.
# - Every run saves its resolved `config.yaml`; `--config RUN_DIR` rebuilds that config, resuming in the same
#   directory and repeating the run (its logged losses equal, on CPU) in a new one.
# - `pretrain` ends by naming what it produced: run directory, validation loss (next to its baselines for an in-memory corpus and span corruption), loss
#   plot, Hugging Face export.
#
# ## Questions
#
# 1. Why does each subcommand import its module only when it runs? What would `nanot5-edu --help` cost if
#    `cli.py` imported `nanot5_edu.train` at the top?
# 2. Why `key=value` overrides of one config tree, rather than one `argparse` flag per setting?
# 3. **Predict, then run** the cell with `optim.lrr=1e-3`: does the run start? What is printed, and with
#    which exit status?
# 4. `pretrain --print-config` validates the config before printing it. Why is that better than printing whatever was
#    asked for?
# 5. **Predict, then run** the `colab-t4 --print-config` cell: does the preset fit a T4 by its own estimate,
#    and which card is fastest? Why are these lines labelled estimates, and what would make them measurements?
# 6. A cluster script runs `nanot5-edu pretrain …` and reads its exit status. What should it do after 0, 2
#    and 3, and why must 2 and 3 be different numbers?
# 7. Why is a preset together with `--config` an error, rather than letting one of them win?
# 8. **Predict, then run** the relaunch cell: are the relaunched run's logged losses equal to the first run's?
#    What has to be saved in `config.yaml` (and fixed by seeds) for that to hold?
# 9. `--config RUN_DIR` resumes when the run directory is the same, and repeats the run when
#    `logging.run_dir` points elsewhere. Why is resuming the right default for the same directory?
# 10. The 20-step run's validation loss falls from 9.42 to 5.84; the baselines are 5.91 (the plain unigram cross-entropy, printed as "unigram entropy") and
#     5.55 (per-position unigram). What has the model learned by step 20, and what has it not?
# 11. Why do the package's own errors print one line while any other exception keeps its traceback?
# 12. `corpus-stats c4` refuses with status 2. Why can it not count C4 the way it counts the speeches?
#
# ## Try it
#
# 1. **Will it fit?** (seconds). Run `main(["pretrain", "t5-base", "optim.batch_size=256", "optim.grad_acc=1",
#    "--print-config"])` and print the comment lines, as in the Colab cell. Look for which cards "do NOT fit",
#    what the message suggests, and how the estimate changes with `optim.grad_acc=4`.
# 2. **Stop and resume** (two minutes). In a terminal, run `nanot5-edu pretrain logging.run_dir=/tmp/stop
#    train.max_minutes=1`, then `echo $?`. Look for the status, the last lines on stderr, and what the printed
#    `resume:` command does when you run it (it reloads the saved config, `train.max_minutes=1` included: add
#    `train.max_minutes=null` to let it finish). (Sending the run a SIGTERM — `kill -TERM PID` — once steps are
#    logged stops it the same way.)
# 3. **Change one thing** (a minute). Relaunch the short run with `--config RUN_DIR logging.run_dir=NEW
#    optim.lr=3e-2` and compare the logged losses with the first run's. Predict first: which logged values can
#    still be equal, and why?

# %% [markdown]
# ## Appendix: an ambiguous command line
#
# A preset and a saved config together are ambiguous (the saved config sets every key), and so is a new
# `model_preset` on top of a saved config (its `model.*` items would set the old architecture back under the new
# name); both are refused:

# %%
with contextlib.redirect_stderr(err := io.StringIO()): rc = main(["pretrain", "t5-base", "--config", str(run_dir)])
test_eq(rc, 2); print(err.getvalue())
with contextlib.redirect_stderr(err2 := io.StringIO()): rc = main(["pretrain", "--config", str(run_dir), "model_preset=t5-v1_1-small"])
test_eq(rc, 2); assert "cannot change the model" in err2.getvalue(), err2.getvalue()

# %% [markdown]
# **Exit statuses under `accelerate launch`.** The launcher's own status differs: 1 when a process ended with any
# status but 0 (torchrun's report names each process's status: 3 for a stop), 143 when the launcher itself got the
# SIGTERM. The launcher passes a SIGTERM on to every process, which then stop as above (but with one process, a terminal Ctrl-C reaches it directly *and* again through accelerate's simple launcher, and
# a scheduler's signal to every process does the same with any number of processes: the second signal ends a process
# at once, without a checkpoint; read from accelerate's and torch's code, not measured — torchrun starts each of
# several processes in its own session, so a terminal Ctrl-C reaches them only through the launcher. So signal only
# the launcher, or run one process with `nanot5-edu` directly), and kills those that have
# not ended in time: 30 s later with several processes (torchrun's agent), only 5 s later with one (accelerate's
# simple launcher) — which may be too short for a large model's checkpoint (not measured here), so a one-process job is better sent SIGTERM directly.

# %%
#| hide
import nbdev; nbdev.nbdev_export()
