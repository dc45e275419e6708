"""The command line's one argument style: --print-config shows the resolved config, --config rebuilds a saved one
(overrides and flags after it win), and the old evaluate flags name the override that replaces them."""
import contextlib
import io

import pytest
import yaml

from nanot5_edu.cli import config_yaml, main, saved_overrides
from nanot5_edu.finetune import make_finetune_config
from nanot5_edu.config import make_config


def run(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse: --help, or arguments it cannot parse
            rc = e.code
    return rc, out.getvalue(), err.getvalue()


def test_print_config_is_the_resolved_config():
    rc, out, _ = run("pretrain", "t5-base", "optim.lr=1e-2", "--print-config", "train.total_steps=20000")
    assert rc == 0
    resolved = config_yaml(make_config("t5-base", ["optim.lr=1e-2", "train.total_steps=20000"]))
    assert out.startswith(resolved)  # then the memory and time estimates, as YAML comments
    assert "ESTIMATES, not measurements" in out and all(l.startswith("# ") for l in out[len(resolved):].splitlines())


def test_config_relaunch_rebuilds_the_saved_config_and_overrides_win(tmp_path):
    cfg = make_config("t5-base", ["optim.lr=1e-3", "data.corpus=/data/my docs/*.jsonl", "logging.every_steps=7"])
    (tmp_path / "config.yaml").write_text(config_yaml(cfg))
    assert make_config("cpu-demo", saved_overrides(tmp_path)) == cfg  # a run dir or its config.yaml
    assert make_config("cpu-demo", saved_overrides(tmp_path / "config.yaml")) == cfg
    rc, out, _ = run("pretrain", "--config", str(tmp_path), "optim.lr=5e-3", "--print-config")
    assert rc == 0
    assert out.startswith(config_yaml(make_config("t5-base", ["optim.lr=5e-3", "data.corpus=/data/my docs/*.jsonl",
                                                               "logging.every_steps=7"])))
    rc, out, _ = run("pretrain", "--config", str(tmp_path), "model_preset=t5-v1_1-base", "--print-config")
    assert rc == 0 and out.startswith(config_yaml(cfg))  # the saved run's own preset: nothing changes
    rc, _, err = run("pretrain", "--config", str(tmp_path), "model_preset=t5-v1_1-small", "--print-config")
    assert rc == 2 and "model_preset=t5-v1_1-small cannot change the model" in err  # its model.* items would undo it


def test_config_errors_are_one_line():
    rc, _, err = run("pretrain", "t5-base", "--config", "runs/x")
    assert rc == 2 and "a preset (t5-base) or --config, not both" in err
    rc, _, err = run("pretrain", "--config", "/no/such/run")
    assert rc == 2 and "no such file" in err and "Traceback" not in err


def test_finetune_flags_beat_the_saved_config(tmp_path):
    saved = make_finetune_config(None, None, ["sni.data_dir=/old/sni", "optim.lr=1e-4", "sni.eval_on=seen"])
    (tmp_path / "config.yaml").write_text(config_yaml(saved))
    rc, out, _ = run("finetune", "--config", str(tmp_path), "--data", "/new/sni", "--print-config")
    assert rc == 0
    rc, _, err = run("finetune", "--config", str(tmp_path), "model_preset=t5-v1_1-small", "--print-config")
    assert rc == 2 and "cannot change the model" in err  # the saved model.* items would undo it
    sni, optim = yaml.safe_load(out)["sni"], yaml.safe_load(out)["optim"]
    assert (sni["data_dir"], sni["eval_on"], optim["lr"]) == ("/new/sni", "seen", 1e-4)


def test_evaluate_reads_sni_overrides():
    rc, out, _ = run("evaluate", "--checkpoint", "google/t5-v1_1-base", "sni.eval_on=unseen",
                     "sni.unseen_instances_per_task=7", "--print-config")
    assert rc == 0
    sni = yaml.safe_load(out)["sni"]
    assert (sni["eval_on"], sni["unseen_instances_per_task"], sni["checkpoint"]) == ("unseen", 7, "google/t5-v1_1-base")
    rc, _, err = run("evaluate", "--checkpoint", "x", "sni.eval_on=train")
    assert rc == 2 and "use seen, unseen or both" in err


def test_an_unknown_flag_is_refused_by_name():
    rc, _, err = run("evaluate", "--checkpoint", "x", "--eval-on", "3")
    assert rc == 2 and "unrecognized arguments: --eval-on" in err


def test_help_lists_the_presets():
    from nanot5_edu.config import RUN_PRESETS
    rc, out, _ = run("pretrain", "--help")
    assert rc == 0 and f"({', '.join(RUN_PRESETS)})" in " ".join(out.split())


def test_print_config_validates_the_config():
    "--print-config fails on a config that cannot run, as the run would (it used to print it happily)"
    rc, out, err = run("pretrain", "train.precision=bogus", "--print-config")
    assert rc == 2 and out == "", (rc, out)
    assert "train.precision='bogus': use bf16, fp16 or fp32." in err and "Traceback" not in err
