"""benchmarks/gpu_check.sh --cpu: the prepared GPU check runs end to end at tiny sizes and writes the JSON a person
with 10 minutes on a GPU will read. Catches a section broken by a change elsewhere (a renamed function, a config
key, the loop's log format) before that person finds it on the GPU, and a JSON missing the fields the table prints."""
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_cpu_form_writes_every_section(tmp_path):
    out = tmp_path / "check.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": "1"}
    run = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--cpu", "--out", str(out),
                          "--time-cap", "300"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["mode"] == "cpu" and result["errors"] == [], result["errors"]
    sections = result["sections"]
    rows = sections["precision"]["rows"]
    assert [r["precision"] for r in rows] == ["fp32", "bf16", "fp16", "bf16"]
    for r in rows:
        assert r["ms_per_step"] > 0 and r["estimate_gib"] > 0 and 0 < r["mfu"] < 1 and r["skipped_steps"] >= 0
    assert rows[3]["micro_batch"] == 2 * rows[0]["micro_batch"]  # the preset's larger micro-batch
    assert "skipped" in sections["compile"]  # no torch.compile on CPU (or in CI)
    t4 = sections["colab_t4"]
    assert t4["steps"] == 4 and len(t4["ms_per_step_logged"]) == 4 and 0 <= t4["data_wait_fraction"] <= 1
    assert t4["tokenizer"] == "trained here on the embedded corpus"
    hf = sections["hf"]
    assert [r["model"] for r in hf["train"]] == ["ours", "hf"] and hf["train_ours_over_hf_speed"] > 0
    assert hf["generate"]["ours"]["tokens"] > 1 and hf["generate"]["hf"]["s"] > 0
    assert "section" in run.stdout and "greedy generation" in run.stdout  # the table was printed
