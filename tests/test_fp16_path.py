"""fp16 and the GPU path, proven on the CPU: the feed-forward overflow and its guard, masks within the compute dtype's
range (an all-padding row stays finite), the bias cast once per stack, the decoder's padding mask in fine-tuning, no
graph breaks and few compiled graphs under torch._dynamo, and the host syncs an fp16 step cannot avoid.
Each test names the bug it catches. (The loss scaler's resume and the data workers' death are in test_robust.py.)"""
import random

import pytest
import torch
import torch.nn.functional as F

from nanot5_edu.layers import GatedFeedForward
from nanot5_edu.model import T5
from nanot5_edu.layers import ModelConfig

TINY = ModelConfig(vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4)
DTYPES = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast(precision):
    dtype = DTYPES[precision]
    return torch.autocast("cpu", dtype=dtype or torch.float32, enabled=dtype is not None)


def batch(seed=0, B=4, L_in=32, L_t=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, 250, (B, L_in), generator=g), torch.randint(3, 250, (B, L_t), generator=g)


def set_guard(model, on: bool):
    for m in model.modules():
        if isinstance(m, GatedFeedForward):
            m.wo_in_fp32_under_fp16 = on


# Catches: `wo` run in fp16 under fp16 autocast (Colab's T4 preset), where an output beyond 65,504 is inf and the
# loss NaN; and a guard that changes the loss beyond 2% of fp32's.
def test_fp16_feed_forward_overflow_is_nan_without_the_guard_and_close_to_fp32_with_it():
    torch.manual_seed(0)
    model = T5(TINY)
    ids, labels = batch()
    ffs = [m for m in model.modules() if isinstance(m, GatedFeedForward)]
    seen = []
    hooks = [f.wo.register_forward_hook(lambda m, i, o: seen.append(o.abs().max())) for f in ffs]
    with torch.no_grad():
        model(ids, labels=labels)
        for f in ffs:
            f.wo.weight.mul_(1e5 / float(torch.stack(seen).max()))
        seen.clear()
        fp32 = model(ids, labels=labels).loss
    for h in hooks:
        h.remove()
    assert float(torch.stack(seen).max()) > 65504, "the case must overflow fp16"
    with torch.no_grad():
        with autocast("bf16"):
            bf16 = model(ids, labels=labels).loss
        with autocast("fp16"):
            guarded = model(ids, labels=labels).loss
            set_guard(model, False)
            unguarded = model(ids, labels=labels).loss
    set_guard(model, True)
    print(f"fp32 {fp32:.4f}, bf16 {bf16:.4f}, fp16 guarded {guarded:.4f}, fp16 unguarded {unguarded}")
    assert torch.isnan(unguarded)
    assert torch.isfinite(guarded) and abs(guarded / fp32 - 1) < 0.02
    assert abs(bf16 / fp32 - 1) < 0.02


def sdpa_masks(monkeypatch):
    "Record every attn_mask handed to SDPA by our attention"
    import nanot5_edu.layers as layers
    masks, original = [], F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, **kw):
        masks.append((attn_mask, q.dtype))
        return original(q, k, v, attn_mask=attn_mask, **kw)
    monkeypatch.setattr(layers.F, "scaled_dot_product_attention", recording)
    return masks


# Catches: masks built from float32's most negative value and cast to 16 bits (-inf), so that a row whose keys are
# all padding is all -inf: NaN on attention kernels that do not special-case it (the textbook softmax below is one).
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_an_all_padding_row_gives_finite_masks_loss_and_gradients(precision, monkeypatch):
    torch.manual_seed(0)
    model = T5(TINY)
    ids, labels = batch(B=3, L_in=16)
    mask = torch.ones_like(ids)
    mask[1] = 0            # every key of row 1 is padding
    mask[2, 9:] = 0
    labels[1] = -100
    dec_mask = torch.ones_like(labels)
    dec_mask[2, 5:] = 0
    masks = sdpa_masks(monkeypatch)
    with autocast(precision):
        out = model(ids, attention_mask=mask, labels=labels, decoder_attention_mask=dec_mask)
    out.loss.backward()
    assert torch.isfinite(out.loss)
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert masks
    for m, q_dtype in masks:
        assert m.dtype == q_dtype, "the mask must be in the compute dtype"
        assert torch.isfinite(m).all(), f"a mask entry is not finite in {m.dtype}"
        # the textbook softmax(scores + mask) over a fully masked row: finite only if the mask is
        scores = torch.randn(m.shape[-2], m.shape[-1]).to(m.dtype) * 100
        assert torch.isfinite(torch.softmax((scores + m).float(), dim=-1)).all()


# Catches: each layer casting the shared bias to the compute dtype itself (N 16-bit [B, H, L, L] copies kept for the
# backward pass instead of one per stack).
def test_the_bias_is_cast_once_per_stack(monkeypatch):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=256, d_model=32, d_kv=8, d_ff=64, num_layers=3, num_heads=4)
    model = T5(cfg)
    ids, labels = batch()
    mask = torch.ones_like(ids)
    mask[0, 20:] = 0
    masks = sdpa_masks(monkeypatch)
    with autocast("bf16"):
        model(ids, attention_mask=mask, labels=labels)
    encoder_self = [m for m, _ in masks[:3]]               # 3 encoder blocks
    decoder_self = [m for m, _ in masks[3:][0::2]]         # decoder: self, cross, self, cross, ...
    for group in (encoder_self, decoder_self):
        assert all(m is group[0] for m in group), "each block got its own copy of the bias"
        assert group[0].dtype == torch.bfloat16
    assert encoder_self[0].shape == (4, 4, 32, 32)         # padding: one [B, H, L, L] tensor for the stack


# Catches: fine-tuning batches without a decoder padding mask, or `fit` not passing it on to the model.
def test_fine_tuning_batches_carry_a_decoder_padding_mask_and_fit_passes_it(tmp_path, monkeypatch):
    from nanot5_edu.finetune import PaddingCollator
    from nanot5_edu.train import fit, make_accelerator
    from nanot5_edu.config import make_config
    examples = [([5, 6, 7, 1], [8, 9, 1]), ([5, 1], [8, 1])]
    b = PaddingCollator()(examples)
    assert b["decoder_attention_mask"].tolist() == [[1, 1, 1], [1, 1, 1]]  # start token + targets but the last
    b = PaddingCollator()([([5, 1], [8, 9, 10, 11, 1]), ([5, 1], [8, 1])])
    assert b["decoder_attention_mask"].tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]]

    class Stream:
        def __next__(self):
            return PaddingCollator()(examples)

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass
    seen, original = [], T5.forward

    def recording(self, *args, **kwargs):
        seen.append(kwargs.get("decoder_attention_mask"))
        return original(self, *args, **kwargs)
    monkeypatch.setattr(T5, "forward", recording)
    cfg = make_config("cpu-demo", ["model.num_layers=1", "model.d_model=32", "model.d_kv=8", "model.num_heads=4",
                                   "model.d_ff=64", "model.vocab_size=256", "optim.batch_size=2", "train.total_steps=2",
                                   "optim.warmup_steps=1", "eval.every_steps=100", "checkpoint.every_steps=100",
                                   "logging.every_steps=2", "logging.progress_bar=false", "eval.samples=0",
                                   "train.precision=fp32", f"logging.run_dir={tmp_path}"])
    tmp_path.mkdir(exist_ok=True)
    fit(cfg, make_accelerator(cfg), T5(cfg.model), None, Stream(), [PaddingCollator()(examples)])
    trained = [m for m in seen if m is not None]
    assert len(trained) == 2 and trained[0].shape == (2, 3), seen


def varied_batches(n, seed=0, buckets=True):
    from nanot5_edu.finetune import PaddingCollator
    rng, collate = random.Random(seed), PaddingCollator(buckets=buckets)
    for _ in range(n):
        yield collate([([rng.randrange(3, 250) for _ in range(rng.randrange(5, 300))],
                        [rng.randrange(3, 250) for _ in range(rng.randrange(1, 100))]) for _ in range(2)])


# Catches: a graph break in the model's forward (each break is a separate graph and a trip back to Python), in
# pre-training and fine-tuning inputs, per precision.
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_no_graph_breaks_in_pretraining_and_finetuning_forward(precision):
    import torch._dynamo as dynamo
    torch.manual_seed(0)
    model = T5(TINY)
    ids, labels = batch()
    ft = next(varied_batches(1))
    for inputs in ({"input_ids": ids, "labels": labels}, ft):
        def loss(inputs):
            with autocast(precision):
                return model(**inputs).loss
        dynamo.reset()
        explained = dynamo.explain(loss)(inputs)
        assert explained.graph_break_count == 0, explained.break_reasons


# Catches: fine-tuning under train.compile meeting a new shape at every batch (on an H200, 12 batches of 12 lengths
# took 75 s to compile and run against 21 s bucketed: benchmarks/results/h200_2026-12-04/fp16_path.json): lengths
# padded to powers of two leave a bounded set of shapes, and forward + backward over 12 varied batches compile no more
# graphs than there are shapes (torch 2.13: 3 for 7 shapes, dynamic lengths after the first; torch 2.4: one per shape).
def test_compiled_finetuning_sees_few_shapes_and_compiles_few_graphs():
    import torch._dynamo as dynamo
    torch.manual_seed(0)
    model = T5(TINY)
    dynamo.reset()
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    compiled = torch.compile(model, backend=counting)  # as fit calls it (default dynamic shapes)
    shapes = set()
    for b in varied_batches(12):
        shapes.add((b["input_ids"].shape[1], b["labels"].shape[1]))
        assert all(n & (n - 1) == 0 and n >= 8 for n in b["input_ids"].shape[1:] + b["labels"].shape[1:]), \
            "lengths must be powers of two >= 8"
        compiled(**b).loss.backward()
    print(f"{len(shapes)} shapes, {len(graphs)} graphs")
    assert len(graphs) <= len(shapes)
    assert len(shapes) <= 6 * 5  # sources 8..256 and targets 8..128 at most (both drawn below those)
    unbucketed = {(b["input_ids"].shape[1], b["labels"].shape[1]) for b in varied_batches(12, buckets=False)}
    assert len(unbucketed) > len(shapes)
