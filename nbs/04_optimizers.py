# %% [markdown]
# # Optimizers: one learning rate for tensors of every size
# > Why plain AdamW struggles with T5, nanoT5's one-line fix (`AdamWScale`), its implementation and checks, learning-rate schedules, and the fast `foreach` update

# %% [markdown]
# On Colab (or any fresh environment) install the package first; where it is installed this does nothing.

# %%
import importlib.util, subprocess, sys
if importlib.util.find_spec("nanot5_edu") is None:  # the README's install line
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/nanot5-edu/nanot5_edu"], check=True)

# %% [markdown]
# T5 was trained with Adafactor. nanoT5 (arXiv [2309.02373](https://arxiv.org/abs/2309.02373);
# [github.com/PiotrNawrot/nanoT5](https://github.com/PiotrNawrot/nanoT5)) found that T5 pre-training with plain AdamW
# diverged and, through several ablations of the differences between the two optimizers, that one matters:
# Adafactor scales each tensor's step by the tensor's own size, its RMS. AdamW with that one change — **AdamWScale**
# — and a cosine schedule reached a lower C4 loss than Adafactor in nanoT5's runs (1.953 vs 1.993, one number each, no seed spread reported).
#
# This lesson follows that path: **the problem** (Adam's step ignores a weight's size; T5's tensors differ in size
# by two orders of magnitude) → **the measurement** (how much of itself each tensor moves per step under plain
# AdamW) → **the one-line fix** → its **implementation**, checked by hand and against `torch.optim.AdamW` → the
# **schedules**. "Going further" writes the same update as a few multi-tensor ops (`foreach`; `benchmarks/optim.py` times both) and adds the baselines; lesson
# [05c](05c_optimizer_grid.ipynb), once pre-training and its evaluation are built (05), re-runs nanoT5's comparison of
# the three on a CPU. It uses the model of [03b_t5_model](03b_t5_model.ipynb) and the data of
# [02b_span_batches](02b_span_batches.ipynb).

# %%
#| default_exp optim

# %%
#| export
from __future__ import annotations

import math

import torch
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

# %%
#| hide
from fastcore.test import test_eq, test_fail, test_close
import copy, json, random
import numpy as np
import matplotlib.pyplot as plt
import ipywidgets as widgets
from nanot5_edu.model import T5
from nanot5_edu.layers import get_config, ModelConfig
from nanot5_edu.data import results_file

random.seed(0); np.random.seed(0); torch.manual_seed(0);


# %% [markdown]
# ## The problem: Adam's step does not know the weight's size
#
# Adam moves each weight by `lr · m̂/√v̂`, where m̂ is a running mean of the weight's gradient and √v̂ its running
# root mean square. The ratio has no units: ±1 at the first step, near 1 while the gradient keeps its sign, smaller
# when the gradient is noisy. It is not capped at 1 — when one large gradient follows many small ones, m̂ grows
# faster than √v̂: after a long run of zero gradients, one gradient gives (1−β1)/√(1−β2) ≈ 3.16 with β = (0.9, 0.999)
# (the check below prints it), and gradients that keep growing can give more — but it never depends on how large the
# weight is. So a tensor θ moves by a **fraction of itself**
#
# `|Δθ| / |θ| = lr · RMS(m̂/√v̂) / RMS(θ)`,  with `RMS(θ) = ‖θ‖₂ / √numel(θ)`:
#
# small weights move by a large fraction of themselves. T5-Base's tensors at init, with the fraction plain AdamW
# moves each by in a first step taken at lr 2e-2 (`lr / RMS(θ)`; 2e-2 is nanoT5's peak lr, and its warmup starts at half
# that, so a plain-AdamW run on nanoT5's schedule would take a first step half as large):

# %%
def kind(name):
    for k in ("shared", "lm_head", "relative_attention_bias", ".q.", ".k.", ".v.", ".o.", "wi_0", "wi_1", "wo", "layer_norm"):
        if k in name: return k.strip(".")
    return "other"

rms_of = lambda t: (t.detach().norm() / math.sqrt(t.numel())).item()  # RMS(θ) = ‖θ‖₂ / √numel(θ)
torch.manual_seed(0)
rms_by_kind = {fix: {} for fix in (False, True)}  # lm_head_init_fix: HF's std-1 LM head, or 03b's fix
for fix in rms_by_kind:
    for n, p in T5(get_config("t5-v1_1-base", lm_head_init_fix=fix)).named_parameters():
        rms_by_kind[fix].setdefault(kind(n), []).append(rms_of(p))
rms0 = {k: float(np.mean(v)) for k, v in rms_by_kind[False].items()}
rms0["lm_head, 03b's init fix"] = float(np.mean(rms_by_kind[True]["lm_head"]))
print("| tensor kind | RMS(θ) at init | plain AdamW, lr 2e-2, step 1: lr / RMS(θ) |\n|---|---|---|")
for k, r in rms0.items(): print(f"| {k} | {r:.4f} | {2e-2 / r:.3f} |")
test_close(rms0["q"], 4.5e-3, eps=2e-4); test_close(rms0["shared"], 1.0, eps=0.05); test_close(rms0["wo"], 0.022, eps=1e-3)

# %% [markdown]
# At one learning rate, a first step moves the embedding (`shared`; at most: in a real batch only the rows of its
# tokens get a gradient, as the measurement below shows), the norms and HF's std-1 LM head by 2% of themselves, most
# matrices by about half of themselves, and `q` by 4.4 times itself. (`q` is smallest because T5
# folds attention's `1/√d_kv` into its init, [03b](03b_t5_model.ipynb).) A check of the formula: one step of
# `torch.optim.AdamW` on a small T5 with random gradients moves every tensor by `lr / RMS(θ)` of itself:

# %%
cfg = ModelConfig(vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
torch.manual_seed(0); small = T5(cfg)
before = {n: p.detach().clone() for n, p in small.named_parameters()}
opt = torch.optim.AdamW(small.parameters(), lr=1e-3, weight_decay=0.0)
for p in small.parameters(): p.grad = torch.randn_like(p)
opt.step()
moved = {n: rms_of(p - before[n]) / rms_of(before[n]) for n, p in small.named_parameters()}
for n in moved: test_close(moved[n] * rms_of(before[n]) / 1e-3, 1.0, eps=1e-4)  # |Δθ|/|θ| = lr / RMS(θ)
def adam_ratio(grads, b1=0.9, b2=0.999):
    "m̂/√v̂ of one weight after these gradients (eps left out)"
    m = v = 0.0
    for t, g in enumerate(grads, start=1):
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
    return (m / (1 - b1 ** t)) / math.sqrt(v / (1 - b2 ** t))
print(f"m̂/√v̂ after 10,000 zero gradients and one of 1: {adam_ratio([0.0] * 10_000 + [1.0]):.2f}; "
      f"(1 − β1)/√(1 − β2) = {0.1 / math.sqrt(0.001):.2f}")
{n: f"moved {moved[n]:.4f} of itself; lr / RMS(θ) = {1e-3 / rms_of(before[n]):.4f}" for n in list(moved)[:5]}


# %% [markdown]
# ## The measurement: how much of itself each tensor moves while training
#
# One step at init says little about training, where m̂/√v̂ shrinks as the gradients turn noisy. So we train a
# small T5 — `tiny` cut to 1 encoder + 1 decoder layer, on the embedded corpus (State of the Union speeches), batch
# 16, inputs of 128 tokens, cosine schedule (built below, in "Learning-rate schedules": its warmup, over the first 15% of
# steps, starts at half the peak lr), gradient clipping at 1.0, bf16 autocast, 200 steps, seed 0 — and record `|Δθ| / (lr·|θ|)` for
# every tensor at every step (lr: that step's scheduled lr): 1 means the tensor moved by lr of its own size. Plain
# AdamW ran at lr 1e-3, the lowest loss of a one-seed sweep (of 300-step runs) of 3 rates (1e-3, 3e-3, 1e-2; 1e-3 and 3e-3 not separated) that lesson [05c](05c_optimizer_grid.ipynb) tries — the lowest rate tried, so a smaller one, not tried, might do better;
# the runs were made, and saved, by a slow cell of 05c with its training loop. Here we read the saved numbers:

# %%
#| hide
def show_updates(optimizers, by_kind=False):
    "Plot the saved |Δθ| / (lr·|θ|) of every tensor at every step for `optimizers`; print a summary per optimizer"
    rel = json.loads(results_file("relative_updates.json").read_text())  # nbs/results, or the repository's copy (00)
    names = rel["tensors"]
    colors = dict(zip(dict.fromkeys(kind(n) for n in names), plt.cm.tab20.colors))
    fig, axs = plt.subplots(1, len(optimizers), figsize=(1.5 + 4.5 * len(optimizers), 4), sharey=True, squeeze=False)
    for ax, opt_name in zip(axs[0], optimizers):
        r = rel["runs"][opt_name]; u = np.array(r["updates"])
        for j, n in enumerate(names):
            ax.plot(np.arange(1, len(u) + 1), u[:, j], color=colors[kind(n)], lw=0.8, label=kind(n))
        ax.axhline(1, color="k", ls="--", lw=1); ax.set_yscale("log"); ax.set_xlabel("step")
        ax.set_title(f"{opt_name}, lr {r['lr']:g}")
    axs[0][0].set_ylabel("|Δθ| / (lr · |θ|), per tensor")
    legend = {l.get_label(): l for l in axs[0][0].lines}
    fig.legend(legend.values(), legend.keys(), loc="center right", fontsize=8)
    fig.subplots_adjust(right=1 - 1.5 / fig.get_figwidth()); plt.show()
    print(f"{rel['steps']} steps, {rel['schedule']} schedule, seed {rel['seed']}; per tensor, |Δθ| / (lr·|θ|):\n")
    print("| optimizer | step 1: smallest | step 1: largest | last 50 steps (mean per tensor): smallest | median "
          "| largest | largest / smallest | largest at any step |\n|---|---|---|---|---|---|---|---|")
    late = {}
    for opt_name in optimizers:
        u = np.array(rel["runs"][opt_name]["updates"]); late[opt_name] = u[-50:].mean(0)
        print(f"| {opt_name} | {u[0].min():.3f} | {u[0].max():.3f} | {late[opt_name].min():.3f} "
              f"| {np.median(late[opt_name]):.3f} | {late[opt_name].max():.3f} "
              f"| {late[opt_name].max() / late[opt_name].min():.1f} | {u.max():.3f} |")
    if by_kind:
        for opt_name in optimizers:
            first = {}
            for j, n in enumerate(names): first.setdefault(kind(n), []).append(rel["runs"][opt_name]["updates"][0][j])
            print(f"\n{opt_name}, step 1, by tensor kind: "
                  + ", ".join(f"{k} {min(v):.1f}" + (f"–{max(v):.1f}" if max(v) - min(v) >= 0.05 else "") for k, v in first.items()))
    return rel, late


# %%
rel, late = show_updates(["adamw"], by_kind=True)
test_eq(late["adamw"].max() / late["adamw"].min() > 50, True)


# %% [markdown]
# With plain AdamW the fraction depends on the tensor. At step 1 the `q` matrices moved by ≈90 × lr (1 / their
# RMS of 0.011 in this model, the init std printed in lesson 03b), the other matrices and the bias tables by
# 12.7–31.7 × lr, the norms by 1 × lr and the embedding by 0.3 × lr (only the rows of tokens in the batch get a
# gradient). Training narrows the gap but does not close it: over the last 50 steps the tensors of this small model span 0.175–16.9 × lr, a factor of
# 96.3 (the embedding sets the low end, just below the norms: tensors of RMS ≈ 1 move least, the small
# `q` matrices most). A single learning rate gives these tensors very different fractional steps: whatever lr moves the norms by a useful fraction of themselves moves
# `q` by about 90 times that fraction at step 1, and still tens of times late in the run (the plot above;
# `results/relative_updates.json` holds every step).

# %% [markdown]
# ## The fix: scale each tensor's step by its RMS
#
# Multiply each tensor's step by `RMS(θ)` and the division cancels: the fraction becomes `lr · RMS(m̂/√v̂)`, whatever
# the tensor's size. That is Adafactor's `scale_parameter`, and nanoT5's one change to AdamW:
#
# **`α ← α · max(1e-3, RMS(θ))`**
#
# (the floor lets a tensor at or near zero move at all). A tensor's *effective* learning rate becomes
# `lr · max(1e-3, RMS(θ))`. Below we measure that the fractions come within a factor of 2.5 of each other late in the run (96.3 for plain AdamW); that this is *why* AdamWScale
# trains where plain AdamW diverges is nanoT5's finding by ablation at T5-Base scale, not something this lesson
# proves (the comparison of [05c](05c_optimizer_grid.ipynb), at one small scale, finds AdamWScale ahead of plain AdamW but
# could not reproduce plain AdamW's divergence).
#
# ## AdamWScale, implemented
#
# The update for a tensor θ with gradient g at step t (the `AdamWScale` class of nanoT5's repository,
# [`nanoT5/utils/copied_utils.py`](https://github.com/PiotrNawrot/nanoT5/blob/main/nanoT5/utils/copied_utils.py)):
#
# - `m ← β1·m + (1−β1)·g`, `v ← β2·v + (1−β2)·g²`, `denom = √v + eps` (eps on the *un-corrected* √v)
# - `α = lr · √(1−β2^t) / (1−β1^t)` — bias correction folded into the step size
# - **`α ← α · max(1e-3, RMS(θ))`**, over the whole tensor, before the update
# - `θ ← θ − α · m / denom`, then, only when `weight_decay > 0`, `θ ← θ − lr · wd · θ`
#
# The class loops over tensors: the spec in code. (The default, `foreach=True`, runs the same math in a few
# multi-tensor ops; it is added, and checked against this loop, in "Going further".)

# %%
#| export
class AdamWScale(Optimizer):
    "AdamW whose per-tensor step is scaled by max(1e-3, RMS(param)), as in nanoT5 (Adafactor's parameter scaling)"

    def __init__(self, params, lr: float = 1e-2, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6,
                 weight_decay: float = 0.0, foreach: bool = True):
        if not lr > 0:
            raise ValueError(f"lr={lr} must be > 0.")
        if not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"betas={betas} must be in [0, 1).")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=foreach))

    @staticmethod
    def rms(p: torch.Tensor) -> torch.Tensor:
        return p.norm(2) / math.sqrt(p.numel())

    def _step_loop(self, group, params):
        beta1, beta2 = group["betas"]
        for p in params:
            state = self.state[p]
            state["step"] += 1
            m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
            m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
            denom = v.sqrt().add_(group["eps"])
            step_size = group["lr"] * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
            step_size = step_size * self.rms(p).clamp(min=1e-3)
            p.sub_(step_size * m / denom)
            if group["weight_decay"] > 0:
                p.add_(p, alpha=-group["lr"] * group["weight_decay"])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in params:
                if p.grad.is_sparse:
                    raise RuntimeError("AdamWScale does not support sparse gradients.")
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            if params:
                (self._step_foreach if group["foreach"] else self._step_loop)(group, params)
        return loss


# %% [markdown]
# **A hand-computed check.** One tensor, three steps, every quantity written out with plain Python floats:

# %%
theta0 = [0.5, -1.0, 2.0, 0.25]
grads = [[0.1, -0.2, 0.3, 0.0], [-0.05, 0.1, 0.2, 0.4], [0.3, 0.3, -0.1, 0.05]]
lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-6
theta, m, v = list(theta0), [0.0] * 4, [0.0] * 4
for t, g in enumerate(grads, start=1):
    rms = math.sqrt(sum(x * x for x in theta) / 4)
    m = [b1 * mi + (1 - b1) * gi for mi, gi in zip(m, g)]
    v = [b2 * vi + (1 - b2) * gi * gi for vi, gi in zip(v, g)]
    alpha = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * max(1e-3, rms)
    theta = [th - alpha * mi / (math.sqrt(vi) + eps) for th, mi, vi in zip(theta, m, v)]

p = torch.nn.Parameter(torch.tensor(theta0, dtype=torch.float64))
opt = AdamWScale([p], lr=lr, foreach=False)
for g in grads:
    p.grad = torch.tensor(g, dtype=torch.float64); opt.step()
test_close(p.detach().tolist(), theta, eps=1e-12)
theta

# %% [markdown]
# With `RMS(θ)` = 1 (a tensor of ±1 entries), AdamWScale's step *is* AdamW's with eps on the un-corrected √v (for this step: RMS(θ) changes once θ moves) — a check
# against `torch.optim.AdamW` when eps is negligible:

# %%
p1 = torch.nn.Parameter(torch.tensor([1.0, -1.0, 1.0, -1.0]))
p2 = torch.nn.Parameter(p1.detach().clone())
o1, o2 = AdamWScale([p1], lr=1e-3, eps=1e-12, foreach=False), torch.optim.AdamW([p2], lr=1e-3, eps=1e-12, weight_decay=0.0)
p1.grad = p2.grad = torch.tensor([0.3, 0.1, -0.2, 0.05]); o1.step(); o2.step()
test_close(p1, p2, eps=1e-7)


# %% [markdown]
# Each tensor's effective learning rate, `lr · max(1e-3, RMS(θ))`: on T5-Base at init and lr 2e-2, 2e-2 for the
# embedding and the norms, ≈9e-5 for `q`, 4.4e-4 to 7.2e-4 for the other matrices (and for the LM head with 03b's
# init fix):

# %%
#| export
def effective_lrs(model: torch.nn.Module, lr: float) -> dict[str, float]:
    "Per-tensor effective AdamWScale learning rate lr * max(1e-3, RMS(param))"
    return {n: lr * max(1e-3, AdamWScale.rms(p.detach()).item()) for n, p in model.named_parameters()}


# %%
eff = effective_lrs(small, 2e-2)
test_eq(all(math.isclose(eff[n], 2e-2 * max(1e-3, rms_of(p)), rel_tol=1e-6) for n, p in small.named_parameters()), True)
{k: f"{2e-2 * max(1e-3, r):.1e}" for k, r in rms0.items()}  # T5-Base at init (the table of the problem section)

# %% [markdown]
# **Does it equalise the fractions?** The same training run with AdamWScale and with Adafactor, at lr 4e-2 (plain
# AdamW at 4e-2 trains far worse, [05c](05c_optimizer_grid.ipynb)), beside plain AdamW's run at 1e-3 again:

# %%
rel, late = show_updates(["adamw", "adamwscale", "adafactor"])
for opt_name in ("adamwscale", "adafactor"):  # at most lr (1e-3: fp32 rounding of the late, small steps)
    test_eq(np.max(rel["runs"][opt_name]["updates"]) <= 1 + 1e-3, True)
test_eq(late["adamw"].max() / late["adamw"].min() > 10 * late["adamwscale"].max() / late["adamwscale"].min(), True)

# %% [markdown]
# With AdamWScale no tensor moved by more than 0.965 × lr of its size in any step (a tensor's RMS change: a single
# weight can still move by more than lr × RMS(θ), when its m̂/√v̂ exceeds 1), and over the last 50 steps the tensors
# span 0.13–0.32 × lr: a factor of 2.5 instead of 96.3 (the two runs also differ in lr, as lesson [05c](05c_optimizer_grid.ipynb) set them; at step 1, where the lr drops
# out, the same contrast shows), and below lr (m̂/√v̂ falls below 1 when the gradients change
# sign, as the first section says, and AdamWScale adds eps to the uncorrected √v, which shrinks early steps more
# than torch's AdamW does; this run isolates neither as the reason). Adafactor (no momentum in nanoT5's
# setting, and update clipping to `RMS(update) ≤ 1`, which caps a step but cannot raise one; its fast-forgetting
# second moment may matter more, not isolated here) stays closest to lr: 0.72–0.99 × lr, a factor of 1.4. One
# learning rate now means a similar fractional step for every tensor (within a factor of 2.5 late in the run).

# %% [markdown]
# ## Learning-rate schedules
#
# - **cosine** (nanoT5's default): linear warmup from **0.5·lr** (not 0) to lr over `W` steps, then cosine
#   down to a floor of 1e-5 at the last step `S`: `lr(s) = 1e-5 + (lr − 1e-5)·(1 + cos(π(s−W)/(S−W)))/2`.
# - **legacy** (T5's inverse square root; ignores `lr` and warmup): `min(1e-2, s^-½)` until `n1 = ⌈0.9·S⌉`,
#   then linear to 0 over the last 10%.
# - **inverse_sqrt**: the same shape with its knee where you want it — `lr·√(W / max(s, W))` until `n1`, then
#   linear to 0. With lr = 1e-2 and W = 10⁴ it *is* legacy; a short run needs a smaller `W` for the
#   schedule to decay at all (legacy over 1,000 steps is a constant 1e-2 and a final ramp).
# - **constant**: lr throughout (fine-tuning).
#
# Each is a pure function of the step, wrapped in a `LambdaLR`, so its only state is the step count, which the checkpoint saves beside the optimizer's.

# %%
#| export
SCHEDULES = ("cosine", "legacy", "inverse_sqrt", "constant")


def cosine_lr(step: int, lr: float, total_steps: int, warmup_steps: int, final_lr: float = 1e-5) -> float:
    "nanoT5's cosine: warmup 0.5*lr → lr, then cosine to final_lr at total_steps"
    if step < warmup_steps:
        return lr * (0.5 + 0.5 * step / warmup_steps)
    progress = min(step - warmup_steps, total_steps - warmup_steps) / max(1, total_steps - warmup_steps)
    return final_lr + (lr - final_lr) * (1 + math.cos(math.pi * progress)) / 2


def legacy_lr(step: int, total_steps: int) -> float:
    "T5's inverse square root (capped at 1e-2), then linear decay to 0 over the last 10% of steps"
    n1 = math.ceil(0.9 * total_steps)
    if step < n1:
        return min(1e-2, step ** -0.5) if step > 0 else 1e-2
    peak = min(1e-2, n1 ** -0.5)
    ramp = (step - n1) / (total_steps - n1) if total_steps > n1 else 1.0  # a run too short for a ramp ends at 0
    return peak * max(0.0, 1 - ramp)


def inverse_sqrt_lr(step: int, lr: float, total_steps: int, knee_steps: int) -> float:
    "lr until `knee_steps`, then lr*sqrt(knee/step), then linear decay to 0 over the last 10% (legacy's shape)"
    n1 = math.ceil(0.9 * total_steps)
    at = lambda s: lr * math.sqrt(knee_steps / max(s, knee_steps, 1))
    ramp = (step - n1) / (total_steps - n1) if total_steps > n1 else 1.0  # a run too short for a ramp ends at 0
    return at(step) if step < n1 else at(n1) * max(0.0, 1 - ramp)


def get_lr_scheduler(name: str,  # 'cosine', 'legacy', 'inverse_sqrt' (knee at warmup_steps) or 'constant'
                     optimizer: Optimizer, total_steps: int, warmup_steps: int = 0,
                     final_lr: float = 1e-5) -> LambdaLR:
    "A torch scheduler giving the named schedule, stepped once per optimizer step"
    if name not in SCHEDULES:
        raise ValueError(f"Unknown lr scheduler {name!r}: choose one of {', '.join(SCHEDULES)}.")
    if total_steps <= 0:
        raise ValueError(f"total_steps={total_steps} must be > 0.")
    if not 0 <= warmup_steps <= total_steps:
        raise ValueError(f"warmup_steps={warmup_steps} must be in [0, total_steps={total_steps}].")
    base = optimizer.param_groups[0]["lr"]
    if not base > 0:
        raise ValueError(f"The optimizer's lr={base} must be > 0.")
    if name == "cosine":
        fn = lambda s: cosine_lr(s, base, total_steps, warmup_steps, final_lr) / base
    elif name == "legacy":
        fn = lambda s: legacy_lr(s, total_steps) / base
    elif name == "inverse_sqrt":
        fn = lambda s: inverse_sqrt_lr(s, base, total_steps, warmup_steps) / base
    else:
        fn = lambda s: 1.0
    return LambdaLR(optimizer, fn)


# %%
def lrs(name, total=1000, warmup=100, lr=2e-2):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched, out = get_lr_scheduler(name, opt, total, warmup), []
    for _ in range(total + 1):
        out.append(opt.param_groups[0]["lr"]); opt.step(); sched.step()
    return out

cos = lrs("cosine")
test_close(cos[0], 1e-2, eps=1e-12); test_close(cos[100], 2e-2, eps=1e-12); test_close(cos[1000], 1e-5, eps=1e-12)
leg = lrs("legacy", total=65_536)
test_close(leg[0], 1e-2, eps=1e-12); test_close(leg[58_983], 0.00412, eps=1e-5); test_close(leg[65_536], 0.0, eps=1e-12)
test_eq(set(lrs("constant", 10, 0)), {2e-2})
test_close(lrs("inverse_sqrt", 65_536, 10_000, lr=1e-2), leg, eps=1e-12)   # legacy is inverse_sqrt at 1e-2, knee 10^4
short = lrs("inverse_sqrt", 1000, 150, lr=1e-2)
test_close(short[600], 1e-2 * (150 / 600) ** 0.5, eps=1e-12)               # it decays in a short run too
test_eq(lrs("inverse_sqrt", 3, 1, lr=1e-2)[-1], 0.0); test_eq(lrs("legacy", 3, 0)[-1], 0.0)  # tiny runs end at 0 too
opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-2)
test_fail(lambda: get_lr_scheduler("cosine", opt, 100, 200), contains="warmup_steps=200 must be in [0, total_steps=100]")
test_fail(lambda: get_lr_scheduler("linear", opt, 100), contains="Unknown lr scheduler 'linear'")
test_fail(lambda: AdamWScale([torch.nn.Parameter(torch.zeros(1))], lr=-1), contains="must be > 0")

# %%
fig, axs = plt.subplots(1, 2, figsize=(10, 3))
axs[0].plot(lrs("cosine", 65_536, 10_000)); axs[0].set_title("cosine, lr 2e-2, warmup 10k, 65,536 steps")
axs[1].plot(leg); axs[1].set_title("legacy inverse sqrt, 65,536 steps")
for ax in axs: ax.set_xlabel("step"); ax.set_ylabel("lr")
plt.tight_layout(); plt.show()


# %% [markdown]
# With a live kernel, explore the cosine schedule:

# %%
def plot_cosine(lr, warmup, total):
    plt.figure(figsize=(6, 2.5)); plt.plot(lrs("cosine", total, min(warmup, total), lr))
    plt.xlabel("step"); plt.ylabel("lr"); plt.show()

widgets.interactive(plot_cosine, lr=widgets.FloatLogSlider(2e-2, base=10, min=-4, max=-1),
                    warmup=widgets.IntSlider(100, 0, 2000, 50), total=widgets.IntSlider(1000, 100, 5000, 100))


# %% [markdown]
# ## Going further
#
# ### `foreach`: the same update in a few multi-tensor ops
#
# The loop above launches several small operations per tensor. `torch._foreach_*` ops apply one operation to a
# list of tensors at once: fewer, larger launches. Like the loop, it keeps each tensor's α on the device, so the CPU
# never waits for a value to come back from a GPU. This is the default (`foreach=True`):

# %%
#| export
def _step_foreach(self: AdamWScale, group, params):
    "AdamWScale's update with `torch._foreach_*` ops: `_step_loop`'s math over all tensors at once"
    beta1, beta2 = group["betas"]
    grads = [p.grad for p in params]
    ms = [self.state[p]["exp_avg"] for p in params]
    vs = [self.state[p]["exp_avg_sq"] for p in params]
    for p in params:
        self.state[p]["step"] += 1
    # α per tensor stays on the device: reading the RMS values back (.tolist()) would make the CPU wait for
    # the GPU to finish the step before it could queue the next one
    alphas = torch._foreach_norm(params)                                   # ‖θ‖₂, before the update
    torch._foreach_mul_(alphas, [1 / math.sqrt(p.numel()) for p in params])  # RMS(θ)
    torch._foreach_clamp_min_(alphas, 1e-3)                                # max(1e-3, RMS(θ))
    torch._foreach_mul_(alphas, [group["lr"] * math.sqrt(1 - beta2 ** self.state[p]["step"])
                                 / (1 - beta1 ** self.state[p]["step"]) for p in params])  # α
    torch._foreach_lerp_(ms, grads, 1 - beta1)
    torch._foreach_mul_(vs, beta2)
    torch._foreach_addcmul_(vs, grads, grads, value=1 - beta2)
    denoms = torch._foreach_sqrt(vs)
    torch._foreach_add_(denoms, group["eps"])
    torch._foreach_div_(denoms, alphas)  # denom/α, as torch.optim.Adam does with capturable=True
    torch._foreach_addcdiv_(params, ms, denoms, value=-1)  # θ ← θ − m/(denom/α) = θ − α·m/denom
    if group["weight_decay"] > 0:
        torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])


AdamWScale._step_foreach = _step_foreach

# %% [markdown]
# It must give the hand computation above, agree with the loop on a real model's parameters (all shapes, several
# steps), and a state dict saved mid-way must continue identically:

# %%
p = torch.nn.Parameter(torch.tensor(theta0, dtype=torch.float64))
opt = AdamWScale([p], lr=lr, foreach=True)
for g in grads:
    p.grad = torch.tensor(g, dtype=torch.float64); opt.step()
test_close(p.detach().tolist(), theta, eps=1e-12)

def run_steps(model, opt, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g) * 0.01
        opt.step()

cfg = ModelConfig(vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
torch.manual_seed(0); base = T5(cfg)
loop_model, foreach_model = copy.deepcopy(base), copy.deepcopy(base)
run_steps(loop_model, AdamWScale(loop_model.parameters(), lr=2e-2, foreach=False), 5)
run_steps(foreach_model, AdamWScale(foreach_model.parameters(), lr=2e-2, foreach=True), 5)
for a, b in zip(loop_model.parameters(), foreach_model.parameters()):
    test_close(a, b, eps=1e-6)

straight, resumed = copy.deepcopy(base), copy.deepcopy(base)
opt = AdamWScale(straight.parameters(), lr=2e-2); run_steps(straight, opt, 6)
opt1 = AdamWScale(resumed.parameters(), lr=2e-2); run_steps(resumed, opt1, 3)
state = copy.deepcopy(opt1.state_dict())
opt2 = AdamWScale(resumed.parameters(), lr=2e-2); opt2.load_state_dict(state)
g = torch.Generator().manual_seed(0)
for _ in range(3): [torch.randn(p.shape, generator=g) for p in resumed.parameters()]  # skip the first 3 draws
for _ in range(3):
    for p in resumed.parameters(): p.grad = torch.randn(p.shape, generator=g) * 0.01
    opt2.step()
for a, b in zip(straight.parameters(), resumed.parameters()):
    test_eq(torch.equal(a, b), True)

# %% [markdown]
# ### The baselines: Adafactor and AdamW, and parameter groups
#
# For Adafactor we use **`transformers.optimization.Adafactor`**, as nanoT5 did: fixed learning rate
# (`relative_step=False`), `scale_parameter=True` (the RMS scaling above), no momentum, update clipping at 1, β2
# decay `t^-0.8`. (`torch.optim.Adafactor` always caps the step at `min(lr, 1/√t)`: a different optimizer.) Plain
# AdamW is `torch.optim.AdamW` (foreach, eps 1e-6 like AdamWScale); nanoT5 used `transformers`' own AdamW, since
# removed from the library, which puts eps on the un-corrected √v as AdamWScale does. `get_optimizer` builds any of the three;
# weight decay, when asked for, skips biases and norms (nanoT5's rule).

# %%
#| export
OPTIMIZERS = ("adamwscale", "adamw", "adafactor")
NO_DECAY = ("bias", "LayerNorm", "layernorm", "layer_norm", "ln")


def param_groups(named_params, weight_decay: float) -> list[dict]:
    "Two groups: decayed weights, and biases/norms without decay (nanoT5's name rule)"
    named_params = list(named_params)
    no_decay = [p for n, p in named_params if any(k in n for k in NO_DECAY)]
    decay = [p for n, p in named_params if not any(k in n for k in NO_DECAY)]
    return [g for g in ({"params": decay, "weight_decay": weight_decay},
                        {"params": no_decay, "weight_decay": 0.0}) if g["params"]]


def get_optimizer(name: str,  # 'adamwscale', 'adamw' or 'adafactor'
                  params,  # parameters, or (name, parameter) pairs (needed to exempt norms from weight decay)
                  lr: float,
                  weight_decay: float = 0.0, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-6) -> Optimizer:
    "Build one of the three optimizers compared in nanoT5"
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}: choose one of {', '.join(OPTIMIZERS)}.")
    if not lr > 0:
        raise ValueError(f"lr={lr} must be > 0 (nanoT5: 2e-2 for adamwscale).")
    params = list(params)
    if params and isinstance(params[0], tuple):
        params = param_groups(params, weight_decay)
    if name == "adamwscale":
        return AdamWScale(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=True)
    from transformers.optimization import Adafactor
    return Adafactor(params, lr=lr, relative_step=False, scale_parameter=True, warmup_init=False,
                     weight_decay=weight_decay)


# %%
m = T5(cfg)
test_eq(type(get_optimizer("adafactor", m.parameters(), 1e-2)).__name__, "Adafactor")
groups = get_optimizer("adamw", m.named_parameters(), 1e-3, weight_decay=0.1).param_groups
test_eq([g["weight_decay"] for g in groups], [0.1, 0.0])
# norms, and (by nanoT5's substring rule) the relative_attention_bias tables, are not decayed
test_eq(len(groups[1]["params"]), sum("layer_norm" in n or "attention_bias" in n for n, _ in m.named_parameters()))
test_fail(lambda: get_optimizer("sgd", m.parameters(), 1e-2), contains="Unknown optimizer 'sgd'")
test_fail(lambda: get_optimizer("adamwscale", m.parameters(), 0), contains="must be > 0")

# %% [markdown]
# ## What you learned
#
# - Adam moves a weight by `lr · m̂/√v̂`: lr at the first step, usually less, sometimes more (≈3.16 × lr for one
#   gradient after a long run of zeros), whatever the weight's size. So a tensor moves by `lr · RMS(m̂/√v̂) / RMS(θ)` of itself.
# - T5's tensors differ in RMS by two orders of magnitude at init (`q` smallest); under plain AdamW the fractional
#   steps of the small model trained here still differed by a factor of 96.3 over the last 50 of 200 steps (the
#   embedding, of RMS ≈ 1, at the low end).
# - AdamWScale scales each tensor's step by `max(1e-3, RMS(θ))`, as Adafactor does: the fractions then agreed
#   within a factor of 2.5 over the last 50 steps, and no tensor moved by more than lr of itself in a step.
# - Check an optimizer against a hand computation in plain floats, and against a library where the two must agree.
# - A schedule's knee belongs at a *fraction* of the run: T5's legacy schedule is flat in a short run.
# - `foreach` runs the same update as multi-tensor ops over all tensors (fewer, larger operations than the loop); like
#   the loop, it reads no value back to the CPU.
# - The baselines come from libraries: Adafactor set as nanoT5 set it (`transformers`' Adafactor, not torch's), and
#   torch's AdamW in place of `transformers`' removed one (eps on the corrected √v̂); weight decay skips biases and norms.
#
# ## Questions
#
# 1. Why is `|m̂/√v̂|` 1 for every weight at the first step (when `|g| ≫ eps`)? What makes it exceed 1 later?
# 2. A tensor has `RMS(θ) = 0.005`. At lr 2e-2, what fraction of itself does plain AdamW move it at step 1? AdamWScale?
# 3. Why does `q` start with the smallest RMS? What would its first-step fraction be without T5's `1/√d_kv` folded in?
# 4. What is the floor in `max(1e-3, RMS(θ))` for? What would happen to a tensor initialised at zero without it?
# 5. Why does the check against `torch.optim.AdamW` use eps 1e-12 and a tensor of ±1 entries?
# 6. **Predict, then run:** in the one-step AdamW check (the problem section), use `1e-9 * torch.randn_like(p)` as
#    the gradients. Does every tensor still move by `lr / RMS(θ)`?
# 7. **Predict, then run:** in the hand-computed check, multiply `theta0` by 10. How much farther does θ move in
#    three steps? How much farther would it with plain AdamW?
# 8. At the same lr, AdamWScale's late fractional steps are 0.13–0.32 × lr and Adafactor's 0.72–0.99 × lr. Which
#    differences in nanoT5's Adafactor setting could explain it, which one cannot (clipping), and what run would
#    isolate them?
# 9. AdamWScale's weight decay `θ ← θ − lr · wd · θ` is not scaled by RMS. Does it remove the same fraction of every
#    tensor?
# 10. **Predict, then run:** `lrs("legacy", total=1000)[::100]` (the schedules' check cell defines `lrs`). What
#     does T5's schedule do in 1,000 steps, and what must a short run use instead to decay like nanoT5's?
# 11. `get_optimizer` exempts every parameter whose name contains "bias" from weight decay. Which T5 tensors does
#     that catch?
# 12. `_step_foreach` divides `denom` by α instead of multiplying the update by α. Why?
#
# ## Try it
#
# 1. **The fix at its first step** (seconds): in the one-step check of the problem section, build
#    `AdamWScale(small.parameters(), lr=1e-3)` instead of `torch.optim.AdamW`. Predict the fraction of itself each
#    tensor moves, then print `moved[n] / 1e-3` for every tensor. Look for any tensor that does not move by lr, and
#    what would make one (the floor; a gradient that is zero on part of a tensor).
# 2. **The measurement in miniature** (short: a tiny model): train `small` for 50 steps on one fixed batch of random
#    tokens (`x = torch.randint(3, 256, (8, 32))`, `y = torch.randint(3, 256, (8, 8))`, `small(x, labels=y).loss`),
#    once with `torch.optim.AdamW` and once with `AdamWScale`, both at lr 1e-3, recording each tensor's
#    `|Δθ| / (lr·|θ|)` at every step (the measurement's formula). Look at the largest / smallest tensor over the last
#    10 steps for each optimizer.
# 3. **Schedules for a short run** (seconds): `lrs("cosine", 300, 45, lr=4e-2)`, `lrs("inverse_sqrt", 300, 45,
#    lr=4e-2)` and `lrs("legacy", 300)`: plot them, and sum each over the 300 steps (the total of the step sizes a run
#    gets). Look for which decays where, and how much less step legacy gives a short run.
#
# Next: lesson [05](05_pretraining.ipynb) pre-trains the demo model with AdamWScale and this schedule; lesson
# [05c](05c_optimizer_grid.ipynb), after it, re-runs nanoT5's comparison of AdamWScale, Adafactor and AdamW on a CPU.

# %%
#| hide
import nbdev; nbdev.nbdev_export()
