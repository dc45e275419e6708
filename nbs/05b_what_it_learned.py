# %% [markdown]
# # What the demo learned: its fills, and when span filling emerges
# > What the CPU demo of lesson 05 writes in the blanks and where its gain comes from, blank by blank and by kind of token; a cloze probe; then how span filling grows with compute: a recipe screen, a curve against FLOPs and an extrapolation

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# Lesson [05](05_pretraining.ipynb) trained the CPU demo and measured it: an encoder gain of 0.198 nats, of which
# what the row's own passage adds beyond knowing the speech (`span_gain`: the words around each blank, and more) is only 0.027 and knowing which speech it is (`document_gain`)
# 0.171. This lesson looks behind those averages: first what the model writes in the blanks and where its gain comes
# from, blank by blank and by kind of token, then a cloze probe; second, when the skill emerges: six recipes given the
# same 5 minutes, span filling against training compute, and an extrapolation, labelled as one. It adds nothing to the
# package.
#
# It needs from 05 the demo run (the cell below finds 05's finished run in `../runs/cpu-demo-notebook` and reads
# its logged evaluations back, re-exporting it, with nothing trained or evaluated again; where there is none, on a fresh Colab runtime for instance, it trains it: 3,000 steps, minutes on a
# CPU), the evaluation and `fill_in` of `nanot5_edu.pretrain`, and 05's three encoder inputs for each held-out
# target: (a) its row's own input, (b) another passage of the same speech, (c) a row of another speech, with
# `span_gain` = (b) − (a) and `document_gain` = (c) − (b) in nats per target token. The sweeps' saved results (in `nbs/results`) are
# found by `results_file` wherever the notebook runs.

# %%
import json
import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from nanot5_edu.data import results_file                        # 00: saved results, wherever this runs
from nanot5_edu.tokenizer import load_tokenizer, sentinel_ids   # 01
from nanot5_edu.model import T5                                 # 03b
from nanot5_edu.pretrain import (GAINS, fill_in, gain_by_token_kind, gain_table, generate_spans,  # 05
                                 split_at_sentinels)
from nanot5_edu.config import make_config  # 07 builds it
from nanot5_edu.train import train, validation_batches  # 08 builds them

# %%
#| hide
from fastcore.test import test_eq, test_close
import random
import datasets
datasets.disable_progress_bars()
random.seed(0); np.random.seed(0); torch.manual_seed(0);

# %%
#| slow
# lesson 05's demo run: read back (nothing trained or evaluated again) if ../runs/cpu-demo-notebook holds it, else trained (3,000 steps)
demo = train(make_config("cpu-demo", ["logging.run_dir=../runs/cpu-demo-notebook", "logging.progress_bar=false"]))
print({g: round(demo[f"final_{g}"], 3) for g in GAINS})

# %% [markdown]
# ## Seeing it fill blanks
#
# Eight held-out rows from eight different speeches, drawn and corrupted as in lesson 05's evaluation (rows of the
# first evaluation batch, one per speech). For each blank: what was there; the log-probability the demo model gives
# the true span (summed over its tokens) when its encoder reads (a) the row's own input, (b) the other passage of
# the same speech, (c) another speech's row — the three inputs behind `span_gain` and `document_gain`, one blank
# at a time; its greedy fill from its own input; and its five most likely first tokens for the blank
# (teacher-forced: the decoder has read the true target up to the blank), with their probabilities.

# %%
#| slow
demo_model = T5.from_hf(demo["hf_export"]).eval()
demo_tok = load_tokenizer(demo["hf_export"])
demo_cfg = make_config("cpu-demo")
demo_batches = validation_batches(demo_cfg, demo_tok)  # the run's own evaluation rows
demo_autocast = lambda: torch.autocast("cpu", dtype=torch.bfloat16)  # as in the run

@torch.no_grad()
def blank_scores(model, tokenizer, input_ids, labels, top=5) -> dict[int, tuple[float, list]]:
    "Per blank k: log p(true span | input) summed over its tokens, and the top first tokens [(token, p)]"
    logp = model(input_ids[None], labels=labels[None]).logits[0].float().log_softmax(-1)
    index, out, k = {s: k for k, s in enumerate(sentinel_ids(tokenizer))}, {}, None
    for j, t in enumerate(labels.tolist()):
        if t == tokenizer.eos_token_id or t < 0:
            break
        if t in index:
            k = index[t]
            p, ids = logp[j + 1].exp().topk(top)
            out[k] = [0.0, [(tokenizer.decode([i]), round(float(q), 3)) for q, i in zip(p, ids)]]
        elif k is not None:
            out[k][0] += float(logp[j, t])
    return out

b, seen, shown = demo_batches[0], set(), 0
for i in range(len(b["input_ids"])):
    if shown == 8 or int(b["document"][i]) in seen or not b["gain_row"][i]:
        continue
    seen.add(int(b["document"][i])); shown += 1
    truth = split_at_sentinels(b["labels"][i].tolist(), demo_tok)
    greedy = generate_spans(demo_model, demo_tok, b["input_ids"][i:i + 1])
    scores = [blank_scores(demo_model, demo_tok, b[key][i], b["labels"][i])
              for key in ("input_ids", "same_document_input_ids", "other_document_input_ids")]
    print(f"[speech {int(b['document'][i])}] " + demo_tok.decode(b["input_ids"][i]).replace("</s>", "")[:240] + " …")
    for k in sorted(truth):
        (a, top5), (same, _), (other, _) = (s[k] for s in scores)
        print(f"  <extra_id_{k}> {truth[k]!r:24} log p (a) {a:6.2f} (b) {same:6.2f} (c) {other:6.2f}  "
              f"greedy {greedy.get(k, '')!r:14} top 5: " + ", ".join(f"{t!r} {q:.2f}" for t, q in top5))

# %% [markdown]
# What to look for: a blank whose true span is much likelier under (a) than under both (b) and (c) is one the model filled from
# the words around it (if (c) is as high as (a), it is (b)'s passage that misleads, not (a)'s that helps); one where (a) and (b) are level but (c) is lower is one where knowing the speech was enough.
# A single blank's gap is noisy (in the saved output about half the blanks even score higher under (b) than under (a)), so no one
# blank shows span filling. In the saved output many blanks score about the same under all three inputs; of those that do not, the second kind
# is clearly more common than the first (read by eye: the lesson sets no threshold; count them). In the passage of speech 6 on a treaty with Great Britain,
# "formally colonized" has log-probability −19.9 with its own input and −19.8 with the neighbouring passage, but
# −24.8 with another speech's: for this blank, knowing the speech was enough (one blank: an illustration, not evidence). The
# greedy fills are the other half of the story: nearly every blank gets "the" or "of the" (the last blank of each row
# gets a longer run of frequent words, often a repeated "the United States and …"), and the top-5 first tokens are the same few
# frequent words ("the", "of", ",", "and", "to", ".", and in speech 20 the piece "s") at 2–9% each, whatever the blank. The
# model's best guess for a blank is still "a frequent word"; the context shifts the probabilities of the right
# answer a little, without changing the guess.

# %% [markdown]
# **Where the gain comes from, by kind of target token.** `gain_by_token_kind` (05's appendix) splits the three losses over the
# run's own evaluation rows into sentinels and EOS (where each span ends: the model is never told how long each span was; its input is the only place that shows
# where the text resumes, though not how many tokens were cut, and the target's own statistics let it guess), span
# tokens that also occur elsewhere in the row's input (a model could copy them), and the other span tokens. The
# "all" row is the run's final evaluation again (the same rows and masks, from the exported weights):

# %%
#| slow
demo_kinds = gain_by_token_kind(demo_model, demo_tok, demo_batches, demo_autocast)
print(gain_table(demo_kinds))
for g in GAINS:
    test_close(demo_kinds["all"][g], demo[f"final_{g}"], eps=2e-3)

# %% [markdown]
# The "all" row repeats the run's final evaluation (4.324, 4.351, 4.522). Sentinels and EOS (27.6% of the targets)
# gain nothing measurable from the input here (span and document gain −0.001 each, encoder gain −0.002). That is not forced: the model is never told how long
# each span is, but its own input shows where the text resumes after each sentinel, so an input can say where a span ends;
# this model predicts them about as well from another passage's input (loss 0.769, 0.769 and 0.767 under the three inputs). Both kinds of span token
# gain about the same from the row's own context: 0.038 nats for tokens that also stand elsewhere in the input and
# 0.036 for the rest (point estimates: this split has no intervals; the untrained model's noise in lesson 05 is a
# rough yardstick). So there is **no sign of copying** by this test: a model that copied words it can see in its
# input would show a larger `span_gain` on the first kind than on the second (a weak test: frequent words also stand
# in the other passage's input, so copying them would cancel out of the gain). Knowing the speech is worth more for the
# span tokens that are not in the input, which are also the harder ones (`document_gain` 0.288 against 0.178; loss
# 7.179 against 3.934).

# %% [markdown]
# **A cloze probe whose answer stands earlier in the passage.** Thirty short passages, written for this probe, each with
# one blank whose answer — a name, a place or a number — stands earlier in the same passage. Each is scored by
# the log-probability of the true fill with the passage's own text as encoder input, and with the next
# passage's text instead (the last item takes the first's): a model that reads its context should make the true
# fill likelier with its own passage. The score is the share of items where it does; chance is 50%. The demo
# model against the same architecture at its random initialisation, and — where the Hugging Face hub is
# reachable — Google's `t5-v1_1-small` (77M parameters, counted in lesson 03b; pre-trained on C4 only, by Google's list of what v1.1 changed, cited in lesson 03), loaded with
# `T5.from_hf`.

# %%
CLOZE = [
    ("Senator Harlan of Ohio introduced the bill in March. We owe its passage to Senator <extra_id_0>.", "Harlan"),
    ("Our treaty with Peru was signed this spring. Our friendship with <extra_id_0> has never been stronger.", "Peru"),
    ("In 1946 the Congress created the Atomic Energy Commission. Since <extra_id_0> it has served the Nation well.", "1946"),
    ("The Mississippi flooded again last summer. Levees along the <extra_id_0> must be rebuilt.", "Mississippi"),
    ("I have asked Secretary Morgan to lead this effort. Secretary <extra_id_0> will report to the Congress in the fall.", "Morgan"),
    ("We sent 12 ships to the Pacific this year. Those <extra_id_0> ships have kept the sea lanes open.", "12"),
    ("The people of Alaska have waited long for statehood. I urge the Congress to admit <extra_id_0> as a State.", "Alaska"),
    ("Farm income fell by 9 percent last year. A fall of <extra_id_0> percent is a hardship for every family on the land.", "9"),
    ("General Carver commands our forces in Europe. I have full confidence in General <extra_id_0>.", "Carver"),
    ("The Panama Canal carries the commerce of the world. We will keep the <extra_id_0> Canal open to all nations.", "Panama"),
    ("Our debt to Britain was settled in 1923. Since <extra_id_0> our two nations have traded freely.", "1923"),
    ("The State of Texas has suffered a long drought. Relief for <extra_id_0> is my first request to you.", "Texas"),
    ("Mr. Whitney built the first of these mills. The mills of Mr. <extra_id_0> now employ thousands.", "Whitney"),
    ("We have 48 hospitals for our veterans. Each of these <extra_id_0> hospitals needs more doctors.", "48"),
    ("The Columbia River dam is now complete. Power from the <extra_id_0> will light a million homes.", "Columbia"),
    ("Mexico has asked for our help after the earthquake. We will stand by the people of <extra_id_0>.", "Mexico"),
    ("Judge Lawrence was confirmed last week. Judge <extra_id_0> will serve on the Supreme Court with distinction.", "Lawrence"),
    ("The new highway will run 600 miles across the plains. Those <extra_id_0> miles will join east and west.", "600"),
    ("Our embassy in Japan was reopened in the spring. Trade with <extra_id_0> has doubled since then.", "Japan"),
    ("The port of Baltimore handled record cargo this year. The workers of <extra_id_0> deserve our thanks.", "Baltimore"),
    ("Governor Ellis of Kansas asked for federal aid. I have granted the request of Governor <extra_id_0>.", "Ellis"),
    ("The census counted 131 million Americans. A Nation of <extra_id_0> million people needs more schools.", "131"),
    ("The Hudson must be cleaned of the waste that fouls it. A clean <extra_id_0> is within our reach.", "Hudson"),
    ("We have signed a trade agreement with Canada. Our commerce with <extra_id_0> will grow every year.", "Canada"),
    ("Admiral Dewey won the battle at Manila. The Nation honors Admiral <extra_id_0>.", "Dewey"),
    ("Wheat sold for 2 dollars a bushel this fall. At <extra_id_0> dollars a bushel, the farmer can pay his debts.", "2"),
    ("The Philippines will become independent in July. The people of the <extra_id_0> have earned their freedom.", "Philippines"),
    ("The mine disaster in Virginia took 40 lives. The families of the <extra_id_0> men have our sympathy.", "40"),
    ("Dr. Palmer leads our work against polio. The laboratory of Dr. <extra_id_0> has made great progress.", "Palmer"),
    ("Our exports to China rose sharply this year. The market of <extra_id_0> is open to American goods.", "China"),
]


@torch.no_grad()
def fill_log_prob(model, tokenizer, text: str, fill: str) -> float:
    "log p(fill | text) for the blank <extra_id_0>, summed over the fill's tokens"
    ids = tokenizer(text, return_tensors="pt").input_ids
    labels = tokenizer("<extra_id_0> " + fill, return_tensors="pt").input_ids
    logp = model(ids, labels=labels).logits[0].float().log_softmax(-1)
    return sum(float(logp[j, labels[0, j]]) for j in range(1, labels.shape[1] - 1))  # the fill: not sentinel, EOS


def cloze_score(model, tokenizer, items=CLOZE) -> tuple[float, list[float]]:
    "Share of items whose true fill is likelier with their own passage than with the next item's (ties: half)"
    model.eval()
    margins = [fill_log_prob(model, tokenizer, text, fill) - fill_log_prob(model, tokenizer, items[(i + 1) % len(items)][0], fill)
               for i, (text, fill) in enumerate(items)]
    return float(np.mean([1.0 if m > 0 else 0.5 if m == 0 else 0.0 for m in margins])), margins


test_eq(len(CLOZE), 30)
test_eq(all(fill in text.split("<extra_id_0>")[0] for text, fill in CLOZE), True)  # the answer stands earlier

# %%
#| slow
torch.manual_seed(0)
random_init = T5(demo_model.config)
for name, model in (("demo model", demo_model), ("random init, same architecture", random_init)):
    share, margins = cloze_score(model, demo_tok)
    wins = sum(m > 0 for m in margins)
    tail = sum(math.comb(len(CLOZE), k) for k in range(wins, len(CLOZE) + 1)) / 2 ** len(CLOZE)
    print(f"{name:32} true fill likelier with its own passage: {share:.0%} of {len(CLOZE)} ({wins} items; "
          f"{wins} or more by chance: p = {tail:.3f}) (mean log-prob margin {np.mean(margins):+.2f} nats)")

# %%
#| slow
try:
    small, small_tok = T5.from_hf("google/t5-v1_1-small"), load_tokenizer("google/t5-v1_1-small")
except Exception as e:  # offline, or no cached copy
    print(f"skipped google/t5-v1_1-small: the Hugging Face hub is not reachable here ({type(e).__name__})")
else:
    share, margins = cloze_score(small, small_tok)
    print(f"{'google/t5-v1_1-small':32} true fill likelier with its own passage: {share:.0%} of {len(CLOZE)} "
          f"(mean log-prob margin {np.mean(margins):+.2f} nats)")

# %% [markdown]
# The demo model makes the true fill likelier with its own passage on 67% of the 30 items (the mean margin is
# +0.66 nats); the same architecture at its random initialisation scores 50%, chance. The cell now also prints the
# count of items and the probability of that count or more by chance alone (a binomial tail); the saved output
# predates that print, so it is not shown here. On a probe of 30 items this is weak evidence: the model reads a little
# of its passage, consistent with its encoder gain (the probe swaps in an unrelated passage, so it does not separate reading the blank's surroundings from knowing the passage's topic). `google/t5-v1_1-small` could not be loaded where this output
# was saved (no network); run the cell where the hub is reachable to see what a model pre-trained on C4 scores.

# %% [markdown]
# Type your own: mark blanks with `<extra_id_0>`, `<extra_id_1>`, … and press enter (needs a live kernel and the
# demo model above). Sampling (`top_k`) shows the range of fills the model considers likely.

# %%
#| slow
import ipywidgets as widgets
box = widgets.Text(value="The <extra_id_0> of the United States shall <extra_id_1> to the Congress.",
                   layout=widgets.Layout(width="90%"), continuous_update=False)
k_slider = widgets.IntSlider(0, 0, 50, description="top_k (0: greedy)")
def show_fill(text, top_k):
    try:
        print(fill_in(demo_model, demo_tok, text, demo_cfg.data.inputs_length, top_k=top_k or None))
    except ValueError as e:
        print("error:", e)
widgets.interact(show_fill, text=box, top_k=k_slider)

# %% [markdown]
# ## When does the skill emerge?
#
# The demo's `span_gain` is 0.027 nats after 3,000 steps: span filling has started, but it is small next to
# `document_gain`. Two questions: would another recipe given the same time teach more span filling, and how much
# compute does the skill need?
#
# ### Which recipe teaches span filling?
#
# Six recipes, each a change to the `cpu-demo` preset that keeps T5's objective (noise density 0.15, mean span 3):
# the demo itself; deeper encoders (4 + 1 layers; 4 + 1 layers at half the width, which takes about as many steps
# as the demo); 2 + 2 layers; and longer inputs with the same tokens per step (256 tokens × batch 8, 512 × 4: more
# context around each blank). Every recipe gets the **same 5 minutes of training on idle cores, by calibration** (a step
# budget; the runs' own wall times, evaluations included, are in the results file, taken on a loaded machine whose
# load was not recorded, so they are not training times on idle cores): a calibration
# loop timed each recipe's step (`results/span_sweep_calibration.json`, 2 threads), and
# `total_steps` is 300 s divided by that, so each cosine schedule ends on time (the warmup is the demo's 100 steps or a
# tenth of the run, whichever is fewer) ([experiments/span_sweep.py](https://github.com/nanot5-edu/nanot5_edu/blob/main/experiments/span_sweep.py),
# `results/span_sweep.jsonl`). Each is scored by `span_gain` on its own held-out rows (512 rows across all
# validation speeches), with the document-bootstrap interval. One seed each, three for the two leaders: a screen.
# Losses are not comparable across input lengths (each length is scored on its own rows and masks, and its tokens
# have more context).

# %%
span_runs = [json.loads(l) for l in results_file("span_sweep.jsonl").read_text().splitlines()]
screen = sorted((r for r in span_runs if r["budget_s"] == 300), key=lambda r: -r["span_gain"])
print(f"{'recipe':10} {'seed':>4} {'change to cpu-demo':58} {'ms/step':>7} {'steps':>5} {'loss':>6}  {'span_gain [95%]':>22}  {'document_gain':>13}")
for r in screen:
    lo, hi = r["span_gain_ci95"]
    print(f"{r['name']:10} {r['seed']:4d} {' '.join(r['overrides']) or '(none)':58} {r['calib_ms_per_step']:7.0f} {r['steps']:5d} "
          f"{r['eval_loss']:6.3f}  {r['span_gain']:6.3f} [{lo:6.3f}, {hi:6.3f}]  {r['document_gain']:13.3f}")
for name in sorted({r["name"] for r in screen}):
    runs = [r["span_gain"] for r in screen if r["name"] == name]
    if len(runs) > 1:
        print(f"{name}: span_gain over {len(runs)} seeds: mean {np.mean(runs):.3f}, range {min(runs):.3f}–{max(runs):.3f}")

# %% [markdown]
# What the screen shows, after 5 minutes each (one seed, three for the demo recipe and for 2 + 2 layers, the two
# best first seeds; 95% intervals over speeches):
#
# - **No other recipe reached the demo recipe's mean on any seed, and the screen settles no ranking among the others**: seed spread is known only for two recipes, and one seed cannot
#   settle a single-seed recipe. The demo
#   recipe (1 + 1) gives `span_gain` 0.016, 0.014 and 0.008 over three seeds (mean 0.013); 2 + 2 layers 0.011, 0.004
#   and 0.009 (mean 0.008); 256-token inputs 0.009 [0.006, 0.011] (one seed). Seed-to-seed spread (0.008–0.016 for
#   one recipe) is as large as most differences between recipes, so these three are not separated. (Some single-seed
#   intervals do not overlap — 256-token against 512-token inputs, for one — but neither do two of the demo
#   recipe's own seeds, so an interval over speeches is not the yardstick for a recipe.)
# - **Depth did not buy span filling at this budget** (at the demo's lr, 4e-2, tuned for the 1 + 1 model only). A 4-layer encoder (4 + 1) took 669 steps in the 5 minutes
#   against the demo's 1,610 and reached 0.001, with its interval around zero. The narrow 4 + 1 model (d_model
#   128) took as many steps as the demo (1,632) and reached only 0.002 [−0.001, 0.005]: more steps at fewer
#   parameters did not help either.
# - **Longer inputs did not help.** 512-token inputs (batch 4, so the same tokens per step) reached 0.001
#   [−0.000, 0.002], around zero; 256 tokens 0.009. A model that barely reads the context it has may have no use for more; this
#   screen does not test why.
# - `document_gain` follows roughly the same order (comparing first seeds, only 2 + 2 and 256 tokens swap places; 0.099–0.122 for the demo's three seeds, 0.030–0.096 for the rest): at this budget every
#   recipe's `document_gain` is larger than its `span_gain` and clears zero no later, and the ones that learn less of one learn
#   less of the other.
#
# So the goal lesson 05 set for the CPU demo — `span_gain` ≥ 0.1 nats with held-out loss ≤ 4.5 — is **not reached
# by any recipe tried**: the demo's own, run for its 3,000 steps, gives 0.027 (held-out loss 4.324 ✓).

# %% [markdown]
# ### Span filling against compute
#
# Every evaluation of every run with the split gains — the ten 5-minute runs (six recipes, three seeds for two of
# them) and the demo's 3,000 steps — against
# the training FLOPs spent so far (`flops_per_step` × step, log axis). Within one run the points are not
# independent experiments (each run's cosine schedule shapes its own curve); the end points of the demo recipe at
# two budgets (the 5-minute screen's 1,610 steps and the demo's 3,000, each with a complete schedule) are the cleanest evidence of how the skill grows
# with compute.

# %%
demo_run = json.loads(results_file("demo_run.json").read_text())
curves = [(f"{r['name']} (5 min)", [c["flops"] for c in r["curve"]], r["curve"]) for r in span_runs]
curves.append(("cpu-demo, 3,000 steps", [e["step"] * demo_run["flops_per_step"] for e in demo_run["evals"]], demo_run["evals"]))
fig, axs = plt.subplots(1, 2, figsize=(13, 4), sharex=True)
for label, flops, curve in curves:
    at = [i for i, f in enumerate(flops) if f > 0]
    style = dict(color="k", lw=2, marker="o") if label.startswith("cpu-demo") else dict(lw=1, marker=".")
    for ax, g in zip(axs, ("span_gain", "document_gain")):
        ax.plot([flops[i] for i in at], [curve[i][g] for i in at], label=label, **style)
for ax, g in zip(axs, ("span_gain", "document_gain")):
    ax.set_xscale("log"); ax.set_xlabel("training FLOPs so far"); ax.set_ylabel(f"{g} (nats)"); ax.axhline(0, color="gray", lw=0.5)
axs[0].axhline(0.1, color="C3", ls="--", lw=1, label="span_gain 0.1"); axs[0].legend(fontsize=7)
plt.tight_layout(); plt.show()
# the demo recipe with a complete schedule at two budgets: 5 minutes (the screen) and 3,000 steps (the demo)
five = next(r for r in span_runs if r["name"] == "demo" and r["budget_s"] == 300)
points = [(five["steps"] * five["flops_per_step"], five["span_gain"]),
          (demo_run["evals"][-1]["step"] * demo_run["flops_per_step"], demo_run["evals"][-1]["span_gain"])]
per_doubling = (points[1][1] - points[0][1]) / np.log2(points[1][0] / points[0][0])
doublings = (0.1 - points[1][1]) / per_doubling
print(f"demo recipe, complete schedules: span_gain {points[0][1]:.3f} at {points[0][0]:.2e} FLOPs, "
      f"{points[1][1]:.3f} at {points[1][0]:.2e} FLOPs: +{per_doubling:.3f} nats per doubling of compute")
print(f"EXTRAPOLATION (a straight line in log-compute through two points, not a measurement): span_gain 0.1 after "
      f"{doublings:.1f} more doublings, about {2 ** doublings:.0f}x the demo's compute "
      f"({2 ** doublings * points[1][0]:.1e} FLOPs)")

# %% [markdown]
# Read the left panel against the right one: once either gain is clear of zero, `document_gain` is well above
# `span_gain`, and `span_gain` grows slowly and steadily along the demo's run (with pauses between steps 1,000 and
# 1,250 and between 1,750 and 2,000, and flat over
# the last 500 steps, where the cosine schedule has brought the learning rate near its floor). The demo recipe's two complete
# schedules give +0.012 nats per doubling of compute (0.016 after the screen's 1,610 steps, 0.027 after the demo's
# 3,000). A straight line in log-compute through those two points — **an extrapolation, not a measurement**: one
# seed each (the 1,610-step point is the demo seed's; the screen's other two seeds there scored lower, and lines
# through them reach 0.1 far sooner, so the multiple below is the most distant of the three), and nothing says the growth stays linear (it could speed up once the model learns to copy from its
# input, or flatten) — reaches 0.1 at about 82× the demo's compute, printed above in FLOPs. On the demo's CPU that is
# many hours. In FLOPs it is little for a GPU, but how long it would take there this lesson cannot say: a model this
# small uses a GPU's peak poorly, and no such run has been timed (the GPU cell below would measure it). That is the
# scale of the question: span filling, on this trend, needs far more compute than the demo's 3,000 CPU steps.

# %% [markdown]
# **A first test of the line: the same recipe, twice as long.** The demo's command with `train.total_steps=6000`
# (its cosine schedule stretched to the new length, evaluated every 500 steps on the same 512 rows), saved by
# `experiments/save_demo_run.py` as `results/demo_long.json`. The line above predicts `span_gain` ≈ 0.038 at twice
# the demo's compute. Both runs' gains along training, with their 95% intervals over documents:

# %%
long_run = json.loads(results_file("demo_long.json").read_text())
fig, axs = plt.subplots(1, 2, figsize=(13, 4))
for run, label in ((demo_run, "cpu-demo, 3,000 steps"), (long_run, f"same recipe, {long_run['evals'][-1]['step']:,} steps")):
    steps = [e["step"] for e in run["evals"]]
    for ax, g in zip(axs, ("span_gain", "document_gain")):
        line, = ax.plot(steps, [e[g] for e in run["evals"]], "o-", label=label)
        ax.fill_between(steps, *zip(*[e[g + "_ci95"] for e in run["evals"]]), color=line.get_color(), alpha=0.2)
for ax, g in zip(axs, ("span_gain", "document_gain")):
    ax.set_xlabel("step"); ax.set_ylabel(f"{g} (nats)"); ax.axhline(0, color="gray", lw=0.5)
axs[0].legend(fontsize=8); plt.tight_layout(); plt.show()
ci = lambda e, g: f"{e[g]:.3f} [{e[g + '_ci95'][0]:.3f}, {e[g + '_ci95'][1]:.3f}]"
for run in (demo_run, long_run):
    end = run["evals"][-1]
    print(f"{end['step']:5,} steps, {end['step'] * run['flops_per_step']:.2e} FLOPs: held-out loss {end['eval_loss']:.3f}, "
          f"span_gain {ci(end, 'span_gain')}, document_gain {ci(end, 'document_gain')}")
end = long_run["evals"][-1]
predicted = points[1][1] + per_doubling * np.log2(end["step"] * long_run["flops_per_step"] / points[1][0])
print(f"the straight line through the two complete-schedule points (1,610 and 3,000 steps) predicted span_gain "
      f"{predicted:.3f} here")

# %% [markdown]
# Twice the compute gave `span_gain` 0.039 [0.031, 0.046]; the line predicted 0.038,
# well inside that interval; `document_gain` rose from 0.171 to 0.224 and the held-out loss fell from 4.324 to 4.208. At 3,000 steps the
# longer run, its learning rate still high, stood at 0.024 — close to the demo's 0.027 at its end — so its extra
# `span_gain` came in its second 3,000 steps. One seed and one doubling: the result agrees with log-linear growth
# over that doubling, but its interval also fits much steeper and flatter lines, so it does not narrow the
# extrapolation to 0.1 (6.4 more doublings).

# %% [markdown]
# On a GPU the same recipe runs at a larger batch, and the question becomes how long the skill takes to
# emerge there. This cell (`#| gpu`: it trains only on a machine with CUDA, and elsewhere says what it skipped) trains the demo recipe at batch 128
# with bf16 and `torch.compile`, and prints the minutes at which `span_gain` first reaches 0.1 nats, with the three gains at the end. The
# lr (4e-2) was chosen at batch 16 (lesson 07's appendix; the warmup, 100 steps, was not swept) and neither is re-tuned here. 30,000 steps of batch 128 are about the
# compute the line above asks for (the cell prints the multiple of the demo's): the run tests whether a batch-128
# recipe gets there at that compute (a miss would not refute the line, which was drawn at batch 16). It
# has not been run on a GPU yet, and the saved notebook holds no output for it (on a CPU it prints a skip message
# with that multiple).

# %%
#| gpu
if not torch.cuda.is_available():  # the flag only affects nbdev-test: on a CPU runtime this would train for hours
    print("No CUDA device: skipped the 30,000-step GPU run of the demo recipe (batch 128, bf16, torch.compile): "
          f"{30_000 * 128 / (3_000 * 16):.0f}× the demo's compute.")
else:
    gpu_run = train(make_config("cpu-demo", ["optim.batch_size=128", "train.total_steps=30000", "train.compile=true",
                                             "eval.every_steps=1000", "logging.every_steps=500",
                                             "logging.run_dir=../runs/cpu-demo-gpu", "checkpoint.resume=never"]))
    gpu_lines = [json.loads(l) for l in (Path(gpu_run["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    gpu_evals = [m for m in gpu_lines if m.get("span_gain") is not None]
    crossed = next((e for e in gpu_evals if e["span_gain"] >= 0.1), None)
    gpu_ms = np.mean([m["ms_per_step"] for m in gpu_lines if "ms_per_step" in m])
    print(f"{gpu_run['wall_s'] / 60:.1f} min in all; span_gain >= 0.1 " +
          (f"at step {crossed['step']}, after {crossed['step'] * gpu_ms / 60_000:.1f} min of training" if crossed
           else "at no evaluation") + f"; final encoder gain {gpu_run['final_encoder_gain']:.3f} = span gain "
      f"{gpu_run['final_span_gain']:.3f} + document gain {gpu_run['final_document_gain']:.3f}")

# %% [markdown]
# ## What you learned
#
# - The gains are averages over every target token. Blank by blank, the log-probability of the true span under the three
#   inputs shows which blanks the model fills from the words around them ((a) well above (b) and (c)) and which from knowing
#   the speech ((a) and (b) level, (c) lower). Many of the demo's blanks score about the same under all three inputs,
#   the others are at least as often of the second kind as of the first, and its greedy fills are
#   frequent words ("the", "of the") whatever the blank.
# - Split by kind of target token, sentinels and EOS gained nothing measurable from the input (though an input can say
#   where a span ends), and span tokens that also stand in the input gain no more from the context than the others
#   (0.038 against 0.036 nats): no sign that the demo copies.
# - A cloze probe whose answer stands earlier in the passage: the demo makes the true fill likelier with its own passage on 67%
#   of 30 items (the same architecture at its random initialisation: 50%, chance): weak evidence, which fits reading a
#   little of its context or only knowing the passage's topic (the probe compares against an unrelated passage, so it
#   cannot separate the two).
# - At an equal 5-minute budget no other recipe tried (deeper, narrower, longer inputs) reached the demo recipe's mean
#   `span_gain` on any seed, seed spread is as large as most differences, and every recipe's `document_gain` is well
#   above its `span_gain`.
# - `span_gain` grows slowly with compute: +0.012 nats per doubling between the demo recipe's two complete schedules
#   (1,610 and 3,000 steps); a straight line through those two points, an extrapolation and not a measurement,
#   reaches 0.1 at about 82× the demo's compute. The same recipe run twice as long (6,000 steps) reached 0.039 where the line predicted 0.038:
#   one test passed, one seed.
#
# ## Questions
#
# 1. A model shows `span_gain` ≈ 0 and a large `document_gain`. What has it learned, and what would its fills
#    look like?
# 2. In "Seeing it fill blanks", what pattern of (a), (b) and (c) would a blank show that the model filled by reading
#    the words around it? Find the blank in the saved output that comes closest to it.
# 3. **Predict, then run:** the top-5 first tokens for every blank are the same few words at 2–9% each. Change the
#    fill cell to print `generate_spans(..., top_k=20, seed=s)` for three seeds instead of the greedy fill. Will the
#    sampled fills fit their sentences better than "the"?
# 4. Sentinels and EOS gained nothing from the encoder input in the demo. What in the input *could* help predict
#    them (where does a span end?), what share of the targets are they, and what does that do to the "all" row's gains?
# 5. If the model had learned to copy words it can see in its input, which row of the token-kind table would change,
#    and how?
# 6. **Predict, then run:** score the cloze probe with `random_init` and a different seed for its initialisation
#    (`torch.manual_seed(1)`). Will it still come out at 50%? Why would an untrained model not always score exactly
#    chance on 30 items?
# 7. **Predict, then run:** the cloze cell prints the chance probability of the demo's count or more (a binomial tail
#    over 30 items). How small do you expect it, why is a result like this weak evidence, and how would you make the
#    probe a stronger test?
# 8. **Predict, then run:** in the recipe screen, sort the rows by `document_gain` instead of `span_gain`. Will the
#    order of the recipes change much?
# 9. Longer inputs with the same tokens per step (256 × 8, 512 × 4) did not raise `span_gain`. Why might more context
#    around each blank not help this model, and why are their held-out losses not comparable with the demo's?
# 10. The recipe sweep gives every recipe the same wall-clock budget, not the same number of steps. Why does that
#     favour smaller models, and is that the right comparison for the demo?
# 11. The extrapolation in "Span filling against compute" uses only the end points of complete schedules, not the
#     points along one run's curve. Why? And why is a straight line in log-compute through two points a weak basis
#     for "about 82× the demo's compute"?
#
# ## Try it
#
# 1. **Which gain comes first?** In a terminal, run
#    `nanot5-edu pretrain cpu-demo train.total_steps=500 eval.every_steps=100 logging.run_dir=runs/try05b` (a sixth of
#    the demo's steps) and read `span_gain` and `document_gain` at each evaluation in `runs/try05b/metrics.jsonl`:
#    which rises first, and are their intervals clear of zero by step 500?
# 2. **A control for the cloze probe.** Write ten items of the same kind whose answer does *not* stand in the passage
#    (`"We thank the people of <extra_id_0> for their help."`, `"Peru"`) and score them with `cloze_score(demo_model,
#    demo_tok, items)` (seconds). Look at the share and the mean margin next to the probe's 67% and +0.66 nats: how much
#    of the probe's result needs the answer to be in the passage?
# 3. **Your own blanks.** With the widget (or `fill_in`), blank a name in a sentence that names it earlier
#    (`"Senator Harlan spoke first, and then Senator <extra_id_0> spoke."`), greedy and at `top_k` 20 and 50 with a few
#    seeds. Look for whether the name ever comes back, and what kind of word the sampled fills are.
#
# Next: lesson [05c](05c_optimizer_grid.ipynb) re-runs nanoT5's optimizer comparison (AdamWScale, Adafactor, AdamW) at a CPU's scale, scored with this lesson's gains.
