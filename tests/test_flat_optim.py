"""AdamW and clipping over one flat parameter buffer (``optim.AdamW(..., flat=True)``): the parameters and
their gradients become views of flat buffers, backward copies a new gradient into the view, and a step is
one ``adam_update`` launch per weight decay (one ``scale_by`` and one ``adam_update`` when scheduled), the
clipping three launches, whatever the number of parameters. Against float64 NumPy and against the
per-parameter optimizer; captured into a graph, against eager steps."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import graph, kernels, nn, ops, optim
from tests.gpt_steps import gpt_steps
from tests.phase3_support import write_solutions

NOTEBOOKS = ("phase1_memory.ipynb", "phase2_kernels.ipynb", "phase3a_forward.ipynb", "phase3b_backward.ipynb",
             "phase4_reductions.ipynb", "phase5_fast.ipynb", "phase6_cnn.ipynb", "phase7_gpt.ipynb")
DEVICES = ["cpu", "emu", pytest.param("cuda", marks=pytest.mark.gpu)]
SHAPES, DECAYS = [(5, 3), (3,), (7,), (2, 33)], [0.1, 0.0, 0.1, 0.0]


@pytest.fixture
def solutions(workspace):
    return write_solutions(workspace, NOTEBOOKS)


def adamw_reference(params, grads_per_step, decays, lrs, betas=(0.9, 0.999), eps=1e-8):
    """torch.optim.AdamW in float64 NumPy, rate lrs[t - 1] at step t: p *= 1 - lr wd, then the Adam step."""
    m, v = [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params]
    for t, grads in enumerate(grads_per_step, start=1):
        lr = lrs[t - 1]
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            p *= 1 - lr * decays[i]
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            p -= lr * (m[i] / (1 - betas[0] ** t)) / (np.sqrt(v[i] / (1 - betas[1] ** t)) + eps)
    return params


def make_params(device, start):
    dtype = "float64" if device == "cpu" else "float32"
    return [minitorch.tensor(a, device=device, dtype=dtype, requires_grad=True) for a in start]


def groups_of(params):
    return [{"params": [params[0], params[2]], "weight_decay": 0.1},
            {"params": [params[1], params[3]], "weight_decay": 0.0}]


def optimizer_launches() -> dict[str, int]:
    counts = kernels.launch_counts()
    return {f: n for (file, f), n in counts.items() if n and file in ("adam.cu", "clip.cu", "recipe.cu")}


@pytest.mark.parametrize("scheduled", [False, True], ids=["constant rate", "warmup-cosine"])
@pytest.mark.parametrize("device", DEVICES)
def test_flat_adamw_equals_the_per_parameter_step_and_float64(solutions, device, scheduled):
    """Two weight decays, odd sizes (views at 64-element offsets, zero gaps between them): the flat step gives the
    per-parameter step's values bit for bit (the same kernel on the same numbers), both the float64 reference's;
    a step launches adam_step, [lr_schedule], and one update per decay (scheduled: scale_by + one update)."""
    schedule = optim.WarmupCosine(max_lr=0.05, min_lr=0.005, warmup=2, total=5) if scheduled else None
    rng = np.random.default_rng(4)
    start = [rng.standard_normal(s) for s in SHAPES]
    grads = [[rng.standard_normal(s) for s in SHAPES] for _ in range(6)]
    flat_params, plain_params = make_params(device, start), make_params(device, start)
    flat = optim.AdamW(groups_of(flat_params), lr=0.02, schedule=schedule, flat=True)
    plain = optim.AdamW(groups_of(plain_params), lr=0.02, schedule=schedule)
    assert flat.flat is not None and flat.flat.decay_stop == 64 + 64  # (5, 3) and (7,), each rounded up to 64
    for step_grads in grads:
        for params in (flat_params, plain_params):
            for p, g in zip(params, step_grads, strict=True):
                p.grad = minitorch.tensor(g, device=device, dtype=p.dtype)
        kernels.reset_launch_counts()
        flat.step()
        if device != "cpu":
            want = {"adam_step": 1, "adam_update": 1, "scale_by": 1, "lr_schedule": 1} if scheduled else {
                "adam_step": 1, "adam_update": 2}
            assert optimizer_launches() == want
        plain.step()
    lrs = [schedule.lr(t) if schedule else 0.02 for t in range(1, len(grads) + 1)]
    want = adamw_reference([a.copy() for a in start], grads, DECAYS, lrs)
    tol = dict(rtol=1e-12, atol=1e-14) if device == "cpu" else dict(rtol=1e-5, atol=1e-6)
    for p, q, w in zip(flat_params, plain_params, want, strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
        np.testing.assert_allclose(p.numpy(), w, **tol)
    # the parameters are views of the buffer: what the step wrote there is what they hold
    buffer = minitorch.backend.get_backend(device).asnumpy(flat.flat.data)
    for p, off in zip(flat.flat.params, flat.flat.offsets, strict=True):
        np.testing.assert_array_equal(buffer[off:off + p.size].reshape(p.shape), p.numpy())
    gaps = np.ones(buffer.size, bool)
    for p, off in zip(flat.flat.params, flat.flat.offsets, strict=True):
        gaps[off:off + p.size] = False
    assert gaps.any() and not buffer[gaps].any()  # the padding stays zero
    state, plain_state = flat.state_dict(), plain.state_dict()
    for key in ("m", "v"):
        for a, b in zip(state[key], plain_state[key], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("device", DEVICES)
def test_flat_clipping_is_three_launches_and_the_float64_norm(solutions, device):
    rng = np.random.default_rng(6)
    params = make_params(device, [rng.standard_normal(s) for s in SHAPES])
    opt = optim.AdamW(groups_of(params), flat=True)  # noqa: F841 (the buffer lives as long as its optimizer)
    grads = [rng.standard_normal(s) * 3 for s in SHAPES]
    for p, g in zip(params, grads, strict=True):
        p.grad = minitorch.tensor(g, device=device, dtype=p.dtype)
    norm64 = np.sqrt(sum(float((g ** 2).sum()) for g in grads))
    kernels.reset_launch_counts()
    norm = optim.clip_grad_norm_(reversed(params), 1.0)  # any order of the same parameters
    if device != "cpu":
        assert optimizer_launches() == {"sum_squares": 1, "clip_coefficient": 1, "scale_by": 1}
    tol = 1e-12 if device == "cpu" else 1e-5
    assert norm.item() == pytest.approx(norm64, rel=tol)
    for p, g in zip(params, grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g * (1.0 / (norm64 + 1e-6)), rtol=tol * 10, atol=1e-7)
    # a subset of a flat optimizer's parameters is clipped on its own, gradient by gradient
    kernels.reset_launch_counts()
    sub = optim.clip_grad_norm_(params[:2], 1e-3)
    sub64 = np.sqrt(sum(float((g ** 2).sum()) for g in grads[:2])) / (norm64 + 1e-6)
    assert sub.item() == pytest.approx(sub64, rel=tol)
    if device != "cpu":
        assert optimizer_launches()["sum_squares"] == 2


def test_backward_accumulates_into_the_flat_views_and_moved_parameters_are_refused(solutions):
    """backprop assigns .grad (a new tensor, or grad + g when accumulating): the value lands in the view, the
    tensor stays the view. A parameter without a gradient is zero-filled, not stale. A model moved after the
    optimizer was made is refused by name; load_state_dict writes into the views."""
    model = nn.Linear(5, 3, device="emu", seed=1)
    unused = minitorch.tensor(np.ones(4, np.float32), device="emu", requires_grad=True)
    opt = optim.AdamW([*model.parameters(), unused], lr=0.1, weight_decay=0.0, flat=True)
    views = [p._grad_view for p in opt.params]
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    for _ in range(2):  # no zero_grad: the second backward adds to the first
        model(minitorch.tensor(x, device="emu")).sum().backward()
    for p, view in zip(model.parameters(), views, strict=False):
        assert p.grad is view
    assert model.weight.shape == (5, 3)  # y = x W + b
    np.testing.assert_allclose(model.weight.grad.numpy(), 2 * np.tile(x.sum(0)[:, None], (1, 3)), rtol=1e-6)
    np.testing.assert_allclose(model.bias.grad.numpy(), [4, 4, 4], rtol=1e-6)
    views[-1].copy_from(np.full(4, 7, np.float32))  # stale values in the unused parameter's view
    opt.step()
    np.testing.assert_array_equal(unused.numpy(), np.ones(4, np.float32))  # a zero gradient: Adam moves it 0
    np.testing.assert_array_equal(unused.grad.numpy(), np.zeros(4, np.float32))
    model.load_state_dict({k: np.full_like(v, 0.5) for k, v in model.state_dict().items()})
    opt.flat.check_bound("load_state_dict")  # written in place: the parameters are still views of the buffer
    flat = minitorch.backend.get_backend("emu").asnumpy(opt.flat.data)
    np.testing.assert_array_equal(flat[:model.weight.size], 0.5)
    model.to("cpu")
    with pytest.raises(RuntimeError, match=r"parameter 0 .* no longer lives in the flat buffer"):
        opt.step()


def test_flat_errors_name_what_came():
    a = minitorch.tensor(np.ones(3, np.float32), device="cpu", requires_grad=True)
    b = minitorch.tensor(np.ones(3), device="cpu", dtype="float64", requires_grad=True)
    with pytest.raises(ValueError, match=r"one device in one dtype; parameter 0 is float32 on 'cpu', parameter 1 "
                                         r"\(shape \(3,\)\) float64"):
        optim.AdamW([a, b], flat=True)
    first = optim.AdamW([a], flat=True)
    with pytest.raises(ValueError, match=r"parameter 0 \(shape \(3,\)\) already lives in the flat buffer"):
        optim.Adam([a], flat=True)
    with pytest.raises(TypeError, match="flat must be True or False"):
        optim.AdamW([b], flat=1)
    del first  # a buffer lives as long as its optimizer: then another may take the parameter
    assert [id(p) for p in optim.Adam([a], flat=True).flat.params] == [id(a)]


@pytest.mark.parametrize("device, concurrent", [("emu", False), pytest.param("cuda", False, marks=pytest.mark.gpu),
                                                 pytest.param("cuda", True, marks=pytest.mark.gpu)])
def test_a_captured_gpt_step_with_the_flat_buffer_equals_eager_per_parameter_steps(solutions, device, concurrent):
    """The lab's recipe (tied head, dropout, two decay groups, the schedule, clipping) captured with the flat
    buffer: every replay equals an eager step of the per-parameter optimizer on another copy of the model, and
    the graph holds fewer launches (the copies into the views added, the per-parameter updates gone). On cuda
    also with the weights' gradients on a side branch of the graph (ops.set_concurrent_weight_grads): the copy
    of such a gradient into its view must wait for the branch."""
    previous = ops.set_concurrent_weight_grads(concurrent)
    try:
        _captured_flat_step(device)
    finally:
        ops.set_concurrent_weight_grads(previous)


def _captured_flat_step(device: str) -> None:
    vocab, t, b = 11, 8, 3
    schedule = optim.WarmupCosine(max_lr=3e-2, min_lr=3e-3, warmup=1, total=3)
    models = [nn.GPT(vocab, t, d_model=16, n_head=2, n_layer=1, device=device, seed=5, tie_weights=True,
                     dropout=0.2) for _ in range(3)]
    opts = [optim.AdamW(m.optimizer_groups(0.1), schedule=schedule, flat=flat)
            for m, flat in zip(models, (False, False, True), strict=True)]
    step, feed = gpt_steps(models, opts, b, t, vocab, device)
    plain_graph = graph.capture(lambda: step(1), device=device)
    flat_graph = graph.capture(lambda: step(2), device=device)
    n_params = len(list(models[2].parameters()))
    # per parameter: a sum_squares, a scale_by and an adam_update each (+ scale_by per decaying matrix); flat: one
    # copy of each gradient into its view, and the optimizer's launches no longer grow with the parameters
    assert flat_graph.launches < plain_graph.launches - n_params
    rng = np.random.default_rng(0)
    for _ in range(4):
        feed(rng)
        eager = step(0).item()
        plain_graph.replay()
        flat_graph.replay()
        assert flat_graph.output.item() == pytest.approx(eager, rel=1e-5)
        assert plain_graph.output.item() == pytest.approx(eager, rel=1e-5)
    # The emulator runs the same arithmetic in nearly the same order: the flat step's global norm sums the
    # gradients in another order, so its weights differ from the eager ones by an ulp (1e-8 here). A GPU's
    # atomics (the embedding's scatter-add, the clipping's sum) add in a varying order. The key part of c_attn's
    # bias has a gradient of 0 up to rounding (softmax ignores a constant added to a row of scores): noise that
    # an ulp of the weights changes whole and Adam turns into steps of up to lr, so that part is left out
    # (an H100 gave 8e-4 there; the emulator, with its row softmax (attention.py's kernels there), 7e-5).
    tol = dict(rtol=1e-5, atol=1e-6) if device == "emu" else dict(rtol=1e-3, atol=1e-4)
    for (name, p), q in zip(models[0].named_parameters(), models[2].parameters(), strict=True):
        want, got = p.numpy(), q.numpy()
        if name.endswith("attn.c_attn.bias"):
            c = want.size // 3
            want, got = np.delete(want, np.s_[c:2 * c]), np.delete(got, np.s_[c:2 * c])
        np.testing.assert_allclose(got, want, err_msg=name, **tol)
