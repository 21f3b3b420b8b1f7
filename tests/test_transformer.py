"""Phase 7's framework: gradient checks (float64, cpu) of every new op and of a whole block; the emulator's float32
results (the reference solution's kernels) against them at odd sizes; int32 id tensors; the transformer modules,
the GPT and its generation; global-norm clipping (also captured into a graph); the text helpers."""

from __future__ import annotations

import math

import numpy as np
import pytest

import minitorch
from minitorch import functional as F  # noqa: N812 (PyTorch's name)
from minitorch import graph, nn, ops, optim, text
from minitorch.gradcheck import gradcheck
from tests.gpt_steps import gpt_steps
from tests.phase3_support import write_solutions

NOTEBOOKS = ("phase1_memory.ipynb", "phase2_kernels.ipynb", "phase3a_forward.ipynb", "phase3b_backward.ipynb",
             "phase4_reductions.ipynb", "phase5_fast.ipynb", "phase6_cnn.ipynb", "phase7_gpt.ipynb")


@pytest.fixture
def solutions(workspace):
    return write_solutions(workspace, NOTEBOOKS)


def leaf(values, device="cpu"):
    if device == "cpu":
        return minitorch.tensor(np.asarray(values, np.float64), device="cpu", dtype="float64", requires_grad=True)
    return minitorch.tensor(np.asarray(values, np.float32), device=device, requires_grad=True)


def ids(values, device="cpu"):
    return minitorch.tensor(np.asarray(values), device=device, dtype="int32")


RNG = np.random.default_rng(7)
FIXED_IDS = np.array([[1, 2, 2, 0], [3, 3, 3, 1]])
# name: (function of the inputs, input shapes); every op of Phase 7 with autograd, at small odd sizes
OPS = {
    "gelu": (lambda x: F.gelu(x), [(3, 5)]),
    "layer_norm_2d": (lambda x, w, b: F.layer_norm(x, w, b), [(4, 5), (5,), (5,)]),
    "layer_norm_3d": (lambda x, w, b: F.layer_norm(x, w, b), [(2, 3, 7), (7,), (7,)]),
    "layer_norm_one_column": (lambda x, w, b: F.layer_norm(x, w, b), [(3, 1), (1,), (1,)]),
    "embedding_repeated_ids": (lambda w, device="cpu": F.embedding(ids(FIXED_IDS, device), w), [(5, 3)]),
    "bmm": (lambda a, b: F.bmm(a, b), [(2, 3, 4), (2, 4, 5)]),
    "bmm_one_element": (lambda a, b: F.bmm(a, b), [(1, 1, 1), (1, 1, 1)]),
    "causal_softmax": (lambda s: F.attention_softmax(s, 0.7), [(2, 5, 5)]),
    "causal_softmax_one_position": (lambda s: F.attention_softmax(s, 0.7), [(3, 1, 1)]),
    "full_softmax": (lambda s: F.attention_softmax(s, 1.3, causal=False), [(2, 3, 4)]),
    "split_heads": (lambda x: F.split_heads(x, 2), [(2, 3, 6)]),
    "merge_heads": (lambda y: F.merge_heads(y), [(2, 2, 3, 3)]),
    "attention": (lambda q: F.causal_self_attention(q, 2), [(2, 5, 12)]),
    "attention_one_position": (lambda q: F.causal_self_attention(q, 1), [(2, 1, 6)]),
    "attention_primes": (lambda q: F.causal_self_attention(q, 3), [(1, 7, 9)]),
}


def inputs_of(name: str) -> list[np.ndarray]:
    return [np.random.default_rng([len(name), i]).standard_normal(s) for i, s in enumerate(OPS[name][1])]


@pytest.mark.parametrize("name", list(OPS))
def test_cpu_float64_gradients_match_finite_differences(solutions, name):
    fn = OPS[name][0]
    errors = gradcheck(fn, [leaf(v) for v in inputs_of(name)])
    assert max(errors) < 1e-6, errors


@pytest.mark.parametrize("name", list(OPS))
def test_emulator_float32_matches_the_float64_reference(solutions, name):
    fn = OPS[name][0]
    values = inputs_of(name)
    kwargs = {"device": "emu"} if name.startswith("embedding") else {}
    got_in = [leaf(v, "emu") for v in values]
    ref_in = [leaf(v) for v in values]
    got, ref = fn(*got_in, **kwargs), fn(*ref_in)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    g = np.random.default_rng(1).standard_normal(ref.shape)
    got.backward(minitorch.tensor(g.astype(np.float32), device="emu"))
    ref.backward(minitorch.tensor(g, device="cpu", dtype="float64"))
    for a, b in zip(got_in, ref_in, strict=True):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_a_whole_block_matches_finite_differences(solutions):
    block = nn.TransformerBlock(8, 2, device="cpu", dtype="float64", seed=1)
    x = leaf(RNG.standard_normal((2, 5, 8)))
    errors = gradcheck(lambda x, *ps: block(x), [x, *block.parameters()])
    assert max(errors) < 1e-6, errors


def test_a_whole_gpt_matches_finite_differences(solutions):
    model = nn.GPT(7, 6, d_model=8, n_head=2, n_layer=2, device="cpu", dtype="float64", seed=0)
    idx = ids(np.random.default_rng(0).integers(0, 7, (2, 5)))
    assert max(gradcheck(lambda *ps: model(idx), list(model.parameters()))) < 1e-6


@pytest.mark.parametrize("b, t, h, d", [(1, 1, 1, 16), (2, 7, 2, 16), (1, 13, 2, 32), (1, 31, 1, 64)])
def test_attention_on_the_emulator_at_odd_sizes(solutions, b, t, h, d):
    """Sequences of 1 and of prime lengths, head dims 16/32/64: forward and backward against float64."""
    qkv = np.random.default_rng([b, t, h, d]).standard_normal((b, t, 3 * h * d))
    got_in, ref_in = leaf(qkv, "emu"), leaf(qkv)
    got, ref = F.causal_self_attention(got_in, h), F.causal_self_attention(ref_in, h)
    np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
    g = np.random.default_rng(2).standard_normal(ref.shape)
    got.backward(minitorch.tensor(g.astype(np.float32), device="emu"))
    ref.backward(minitorch.tensor(g, device="cpu", dtype="float64"))
    np.testing.assert_allclose(got_in.grad.numpy(), ref_in.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_gpt_on_the_emulator_matches_float64(solutions):
    """A vocabulary of 13 (no multiple of any tile), context 9, two layers: logits and every gradient."""
    config = dict(vocab_size=13, block_size=9, d_model=16, n_head=2, n_layer=2, seed=3)
    emu, ref = nn.GPT(**config, device="emu"), nn.GPT(**config, device="cpu", dtype="float64")
    x = np.random.default_rng(0).integers(0, 13, (3, 9))
    got, want = emu(ids(x, "emu")), ref(ids(x))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    g = np.random.default_rng(1).standard_normal(want.shape)
    got.backward(minitorch.tensor(g.astype(np.float32), device="emu"))
    want.backward(minitorch.tensor(g, device="cpu", dtype="float64"))
    for (name, p), (_, q) in zip(emu.named_parameters(), ref.named_parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


# ---------------------------------------------------------------- int32 ids


def test_id_tensors():
    t = minitorch.tensor(np.array([[1, 2], [3, 4]], np.int64), device="cpu", dtype="int32")
    assert t.dtype == np.int32 and t.shape == (2, 2)
    assert minitorch.tensor([0, 5], device="cpu", dtype="int32").numpy().tolist() == [0, 5]
    assert minitorch.from_numpy(np.arange(3, dtype=np.int32), "cpu").dtype == np.int32
    t.copy_from(np.array([[5, 6], [7, 8]], np.int32))
    assert t.numpy().tolist() == [[5, 6], [7, 8]]
    assert t.reshape(4).shape == (4,)
    with pytest.raises(TypeError, match="holds ids"):
        t.requires_grad = True
    with pytest.raises(TypeError, match="fill_ writes float32"):
        t.fill_(1)
    with pytest.raises(TypeError, match="`a` holds int32 ids"):
        ops.add(t, t)
    with pytest.raises(TypeError, match="made from integers, got a float64"):
        minitorch.tensor(np.array([0.5]), device="cpu", dtype="int32")
    with pytest.raises(ValueError, match="fit in int32"):
        minitorch.tensor(np.array([2**40]), device="cpu", dtype="int32")
    assert minitorch.tensor(np.array([2.0, 3.0]), device="cpu", dtype="int32").numpy().tolist() == [2, 3]


def test_embedding_errors_and_out_of_range_ids(solutions):
    w = leaf(np.ones((4, 3)))
    with pytest.raises(TypeError, match="int32 ids"):
        F.embedding(minitorch.tensor(np.zeros(2), device="cpu", dtype="float64"), w)
    out = F.embedding(ids([0, 4, -1]), w).numpy()
    assert np.all(out[0] == 1) and np.all(np.isnan(out[1:]))
    emu_out = F.embedding(ids([0, 4, -1], "emu"), leaf(np.ones((4, 3)), "emu")).numpy()
    assert np.all(emu_out[0] == 1) and np.all(np.isnan(emu_out[1:]))


# ---------------------------------------------------------------- modules


def test_module_list_names_and_indexing():
    layers = nn.ModuleList(nn.Linear(2, 2, device="cpu", seed=i) for i in range(3))
    assert len(layers) == 3 and layers[-1] is list(layers)[2]
    assert [n for n, _ in layers.named_parameters()] == [f"{i}.{p}" for i in range(3) for p in ("weight", "bias")]
    with pytest.raises(TypeError, match="not a minitorch|expected a minitorch nn.Module"):
        layers.append(3)  # type: ignore[arg-type]
    with pytest.raises(IndexError):
        layers[3]


def test_linear_reads_leading_dimensions_as_rows(solutions):
    layer = nn.Linear(4, 3, device="cpu", dtype="float64", seed=0)
    x = RNG.standard_normal((2, 5, 4))
    y = layer(minitorch.tensor(x, device="cpu", dtype="float64")).numpy()
    assert y.shape == (2, 5, 3)
    np.testing.assert_allclose(y, x @ layer.weight.numpy() + layer.bias.numpy())


def test_the_seeds_gpt_has_112577_parameters_named_as_the_grader_reads_them():
    model = nn.GPT(65, 64, d_model=64, n_head=4, n_layer=2, device="cpu")
    names = dict(model.named_parameters())
    assert sum(p.size for p in names.values()) == 112_577
    assert names["blocks.1.attn.c_attn.weight"].shape == (64, 192) and names["lm_head.weight"].shape == (64, 65)
    assert list(names)[:2] == ["wte.weight", "wpe.weight"] and "ln_f.bias" in names
    again = nn.GPT(65, 64, device="cpu")
    assert all(np.array_equal(p.numpy(), q.numpy()) for p, q in zip(model.parameters(), again.parameters(),
                                                                     strict=True))


def test_gpt_errors_and_generation(solutions, tmp_path):
    model = nn.GPT(11, 8, d_model=8, n_head=2, n_layer=1, device="cpu", seed=2)
    with pytest.raises(TypeError, match="int32 token ids"):
        model(minitorch.zeros((1, 4), device="cpu"))
    with pytest.raises(ValueError, match="block_size = 8"):
        model(ids(np.zeros((1, 9), np.int32)))
    with pytest.raises(ValueError, match="multiple of n_head"):
        nn.MultiHeadAttention(10, 3)
    out = model.generate(np.array([[3]]), 20, temperature=1.0, seed=5)
    assert out.shape == (1, 21) and out.dtype == np.int32 and out.numpy()[0, 0] == 3
    assert np.array_equal(out.numpy(), model.generate(np.array([[3]]), 20, seed=5).numpy())
    greedy = model.generate(np.array([3]), 5, temperature=0)
    logits = model(ids([[3]])).numpy()[0, -1]
    assert greedy.numpy()[0, 1] == int(np.argmax(logits))
    with pytest.raises(ValueError, match=r"ids must be in \[0, 11\)"):
        model.generate(np.array([[11]]), 1)
    maps = model.attention_maps(ids([[1, 2, 3, 4]]))
    assert len(maps) == 1 and maps[0].shape == (1, 2, 4, 4)
    np.testing.assert_allclose(maps[0].sum(-1), 1.0, rtol=1e-6)
    assert np.all(maps[0][..., np.triu_indices(4, 1)[0], np.triu_indices(4, 1)[1]] == 0)
    model.save(tmp_path / "gpt.npz")
    copy = nn.GPT(11, 8, d_model=8, n_head=2, n_layer=1, device="cpu", seed=9).load(tmp_path / "gpt.npz")
    np.testing.assert_array_equal(copy(ids([[1, 2]])).numpy(), model(ids([[1, 2]])).numpy())


def test_gpt_moves_to_another_device(solutions):
    model = nn.GPT(11, 8, d_model=8, n_head=2, n_layer=1, device="cpu", seed=2)
    want = model(ids([[1, 2, 3]])).numpy()
    model.to("emu")
    np.testing.assert_allclose(model(ids([[1, 2, 3]], "emu")).numpy(), want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- clipping and a captured training step


@pytest.mark.parametrize("device", ["cpu", "emu"])
@pytest.mark.parametrize("scale", [0.01, 10.0])
def test_clip_grad_norm_matches_float64(solutions, device, scale):
    grads = [np.random.default_rng([n, int(scale)]).standard_normal(n) * scale for n in (1, 7, 1000)]
    params = [minitorch.zeros(g.shape, device=device, requires_grad=True) for g in grads]
    for p, g in zip(params, grads, strict=True):
        p.grad = minitorch.tensor(g.astype(np.float32), device=device)
    norm = optim.clip_grad_norm_(params, 1.0)
    expected = math.sqrt(sum(float((g.astype(np.float32).astype(np.float64) ** 2).sum()) for g in grads))
    assert norm.item() == pytest.approx(expected, rel=1e-5)
    coef = min(1.0, 1.0 / (expected + 1e-6))
    for p, g in zip(params, grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g.astype(np.float32) * coef, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="max_norm must be a positive number"):
        optim.clip_grad_norm_(params, 0.0)
    with pytest.raises(ValueError, match="no parameter has a gradient"):
        optim.clip_grad_norm_([minitorch.zeros(2, device=device, requires_grad=True)], 1.0)


def test_captured_gpt_step_equals_eager_steps_on_the_emulator(solutions):
    vocab, t, b = 11, 8, 3
    models = [nn.GPT(vocab, t, d_model=16, n_head=2, n_layer=1, device="emu", seed=5) for _ in range(2)]
    opts = [optim.AdamW(m.parameters(), lr=3e-2, weight_decay=0.01) for m in models]
    step, feed = gpt_steps(models, opts, b, t, vocab, "emu")
    captured = graph.capture(lambda: step(1), device="emu")
    rng = np.random.default_rng(0)
    for _ in range(3):
        feed(rng)
        eager = step(0).item()
        captured.replay()
        assert captured.output.item() == pytest.approx(eager, rel=1e-5)
    # On a GPU the scatter-add of the embedding backward and the global norm of the clipping sum with
    # atomics, in an order that changes from run to run; Adam divides a gradient by its own size, so a
    # weight whose gradient is rounding noise can move by up to lr either way. The losses above (1e-5)
    # are the strict check; the weights must agree to well under one step of lr = 3e-2.
    for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-3, atol=2e-3)


# ---------------------------------------------------------------- text


def test_char_tokenizer_split_and_windows():
    tok = text.CharTokenizer.from_text("hello world")
    assert tok.chars == [" ", "d", "e", "h", "l", "o", "r", "w"] and tok.vocab_size == 8
    encoded = tok.encode("hello")
    assert encoded.dtype == np.int32 and tok.decode(encoded) == "hello"
    with pytest.raises(ValueError, match="'z' is not in the vocabulary"):
        tok.encode("z")
    with pytest.raises(ValueError, match=r"ids must be in \[0, 8\)"):
        tok.decode([8])
    data = np.arange(100, dtype=np.int32)
    train, val = text.train_val_split(data, 0.9)
    assert len(train) == 90 and val[0] == 90
    x, y = text.RandomWindows(train, 5, 4, seed=0).sample()
    assert x.shape == y.shape == (4, 5) and np.all(y == x + 1) and x.max() < 89
    again, _ = text.RandomWindows(train, 5, 4, seed=0).sample()
    assert np.array_equal(x, again)
    ex, ey = text.evaluation_windows(val, 3, 4)
    assert ex[0].tolist() == [90, 91, 92] and ex[-1].tolist() == [96, 97, 98] and np.all(ey == ex + 1)
    with pytest.raises(ValueError, match="hold no window"):
        text.evaluation_windows(val, 10, 2)


# ---------------------------------------------------------------- on a GPU (make test-gpu)


@pytest.mark.gpu
def test_gpt_on_cuda_matches_float64_and_its_captured_step_replays_eager_steps(solutions):
    config = dict(vocab_size=13, block_size=9, d_model=16, n_head=2, n_layer=2, seed=3)
    gpu, ref = nn.GPT(**config, device="cuda"), nn.GPT(**config, device="cpu", dtype="float64")
    x = np.random.default_rng(0).integers(0, 13, (3, 9))
    got, want = gpu(ids(x, "cuda")), ref(ids(x))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    g = np.random.default_rng(1).standard_normal(want.shape)
    got.backward(minitorch.tensor(g.astype(np.float32), device="cuda"))
    want.backward(minitorch.tensor(g, device="cpu", dtype="float64"))
    for (name, p), (_, q) in zip(gpu.named_parameters(), ref.named_parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)

    vocab, t, b = 11, 8, 3
    models = [nn.GPT(vocab, t, d_model=16, n_head=2, n_layer=1, device="cuda", seed=5) for _ in range(2)]
    opts = [optim.AdamW(m.parameters(), lr=3e-2, weight_decay=0.01) for m in models]
    xs = [minitorch.zeros((b, t), device="cuda", dtype="int32") for _ in range(2)]
    ys = [minitorch.zeros((b, t), device="cuda", dtype="int32") for _ in range(2)]

    def step(i: int) -> minitorch.Tensor:
        loss = F.cross_entropy(models[i](xs[i]).reshape(b * t, vocab), ys[i].reshape(b * t))
        opts[i].zero_grad()
        loss.backward()
        optim.clip_grad_norm_(models[i].parameters(), 0.5)
        opts[i].step()
        return loss

    captured = graph.capture(lambda: step(1), device="cuda")
    rng = np.random.default_rng(0)
    for _ in range(3):
        xb, yb = rng.integers(0, vocab, (b, t)).astype(np.int32), rng.integers(0, vocab, (b, t)).astype(np.int32)
        for i in range(2):
            xs[i].copy_from(xb)
            ys[i].copy_from(yb)
        eager = step(0).item()
        captured.replay()
        assert captured.output.item() == pytest.approx(eager, rel=1e-5)
    # On a GPU the scatter-add of the embedding backward and the global norm of the clipping sum with
    # atomics, in an order that changes from run to run; Adam divides a gradient by its own size, so a
    # weight whose gradient is rounding noise can move by up to lr either way. The losses above (1e-5)
    # are the strict check; the weights must agree to well under one step of lr = 3e-2.
    for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-3, atol=2e-3)


# ---------------------------------------------------------------- weight tying


def test_a_tied_gpt_matches_finite_differences_and_shares_one_table(solutions):
    model = nn.GPT(7, 6, d_model=8, n_head=2, n_layer=1, device="cpu", dtype="float64", seed=0, tie_weights=True)
    names = [name for name, _ in model.named_parameters()]
    assert "lm_head.weight" not in names and "lm_head.bias" in names and names.count("wte.weight") == 1
    assert model.config["tie_weights"] is True
    idx = ids(np.random.default_rng(0).integers(0, 7, (2, 5)))
    assert max(gradcheck(lambda *ps: model(idx), list(model.parameters()))) < 1e-6


def test_a_tied_gpt_draws_both_tables_at_one_scale():
    """Tied, the token table starts N(0, 1/C) (unit-variance logits) and so does the position table: at N(0, 1)
    beside it, the input would be nearly all position (the reduced Lab 7 model trained worse tied than untied)."""
    c = 64
    tied = nn.GPT(65, 64, d_model=c, n_head=4, n_layer=1, device="cpu", seed=0, tie_weights=True)
    untied = nn.GPT(65, 64, d_model=c, n_head=4, n_layer=1, device="cpu", seed=0)
    for table in ("wte", "wpe"):
        assert getattr(tied, table).weight.numpy().std() == pytest.approx(c ** -0.5, rel=0.05)
        assert getattr(untied, table).weight.numpy().std() == pytest.approx(1.0, rel=0.05)


def test_a_tied_table_gets_the_sum_of_both_gradients(solutions):
    """The table's gradient is the embedding's scatter-add plus the head's dyᵀ·x: each alone is wrong."""
    model = nn.GPT(7, 6, d_model=8, n_head=2, n_layer=1, device="cpu", dtype="float64", seed=2, tie_weights=True)
    idx = ids(np.random.default_rng(1).integers(0, 7, (2, 6)))
    g = np.random.default_rng(2).standard_normal((2, 6, 7))
    model(idx).backward(minitorch.tensor(g, device="cpu", dtype="float64"))
    total = model.wte.weight.grad.numpy()
    # the head's share, from the input of the head (ln_f's output) recomputed on the host
    with minitorch.no_grad():
        x = model._embed(idx)
        for block in model.blocks:
            x = block(x)
        h = model.ln_f(x).numpy().reshape(-1, 8)
    head_share = g.reshape(-1, 7).T @ h
    assert np.abs(total - head_share).max() > 1e-3  # the embedding's share is not nothing
    np.testing.assert_allclose(model.lm_head.bias.grad.numpy(), g.sum(axis=(0, 1)), rtol=1e-12)


def test_a_tied_gpt_on_the_emulator_matches_float64(solutions):
    config = dict(vocab_size=13, block_size=9, d_model=16, n_head=2, n_layer=1, seed=3, tie_weights=True)
    emu, ref = nn.GPT(**config, device="emu"), nn.GPT(**config, device="cpu", dtype="float64")
    x = np.random.default_rng(0).integers(0, 13, (3, 9))
    got, want = emu(ids(x, "emu")), ref(ids(x))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    g = np.random.default_rng(1).standard_normal(want.shape)
    got.backward(minitorch.tensor(g.astype(np.float32), device="emu"))
    want.backward(minitorch.tensor(g, device="cpu", dtype="float64"))
    for (name, p), (_, q) in zip(emu.named_parameters(), ref.named_parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)


@pytest.mark.parametrize("tied", [False, True], ids=["untied (older saved models)", "tied"])
def test_the_graders_float64_forward_reads_tied_and_untied_models(tied):
    """grader/tests/test_phase7_gpt.py's own NumPy forward gives the model's float64 logits from its state dict,
    whether the head is tied (no lm_head.weight) or not (records without tie_weights)."""
    from grader.checks import GradeError
    from grader.tests import test_phase7_gpt as deliverable

    model = nn.GPT(11, 8, d_model=16, n_head=2, n_layer=2, device="cpu", dtype="float64", seed=4, tie_weights=tied)
    assert ("tie_weights" in model.config) == tied  # an untied model's record is what it always was
    config = deliverable.config_of({"config": model.config})
    params = {k: np.asarray(v, np.float64) for k, v in model.state_dict().items()}
    deliverable.check_parameters(config, params)
    x = np.random.default_rng(5).integers(0, 11, (3, 8))
    np.testing.assert_allclose(deliverable.logits_of(params, config, x), model(ids(x)).numpy(), rtol=1e-10, atol=1e-12)
    if tied:  # a record that says tied beside a file with a head of its own is refused, not guessed
        with pytest.raises(GradeError, match="says the head is tied"):
            deliverable.check_parameters(config, {**params, "lm_head.weight": np.zeros((16, 11))})
    else:
        with pytest.raises(GradeError, match="lacks lm_head.weight"):
            deliverable.check_parameters(config, {k: v for k, v in params.items() if k != "lm_head.weight"})


# ---------------------------------------------------------------- dropout


def test_dropout_is_philox_bit_for_bit_on_the_emulator_and_regenerates_its_mask(solutions):
    from minitorch import philox

    x = np.random.default_rng(3).standard_normal((7, 143)).astype(np.float32)
    layers = {d: nn.Dropout(0.3, seed=99, device=d) for d in ("cpu", "emu")}
    outs, grads = {}, {}
    for d, layer in layers.items():
        xt = minitorch.tensor(x, device=d, requires_grad=True)
        first = layer(xt)
        second = layer(minitorch.tensor(x, device=d))  # a second forward before the first's backward
        first.backward(minitorch.tensor(np.ones_like(x), device=d))
        outs[d], grads[d] = (first.numpy(), second.numpy()), xt.grad.numpy()
        assert layer.steps == 2
    keep = [philox.uniform(x.size, 99, step << 16).reshape(x.shape) >= np.float32(0.3) for step in (1, 2)]
    scale = np.float32(1 / 0.7)
    for d in layers:
        for out, k in zip(outs[d], keep, strict=True):
            np.testing.assert_array_equal(out, np.where(k, x * scale, np.float32(0)), err_msg=d)
        np.testing.assert_array_equal(grads[d], np.where(keep[0], scale, np.float32(0)), err_msg=d)
    assert 0.6 < keep[0].mean() < 0.8 and not np.array_equal(keep[0], keep[1])
    layer = layers["emu"].eval()
    xt = minitorch.tensor(x, device="emu")
    assert layer(xt) is xt and layer.steps == 2  # eval: the identity, no draw


def test_a_gpt_with_dropout_on_the_emulator_matches_float64_with_the_same_masks(solutions):
    """The cpu path draws the masks from minitorch.philox, the emulator from the learner's kernel: the same
    model trained one step on each agrees, and switching to eval removes the dropout."""
    config = dict(vocab_size=13, block_size=9, d_model=16, n_head=2, n_layer=1, seed=3, dropout=0.25,
                  tie_weights=True)
    emu, ref = nn.GPT(**config, device="emu"), nn.GPT(**config, device="cpu", dtype="float64")
    x = np.random.default_rng(0).integers(0, 13, (3, 9))
    got, want = emu(ids(x, "emu")), ref(ids(x))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)
    g = np.random.default_rng(1).standard_normal(want.shape)
    got.backward(minitorch.tensor(g.astype(np.float32), device="emu"))
    want.backward(minitorch.tensor(g, device="cpu", dtype="float64"))
    for (name, p), (_, q) in zip(emu.named_parameters(), ref.named_parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-3, atol=1e-4, err_msg=name)
    plain = nn.GPT(**{**config, "dropout": 0.0}, device="cpu", dtype="float64")
    assert not np.allclose(want.numpy(), plain(ids(x)).numpy())  # dropout did something
    np.testing.assert_allclose(ref.eval()(ids(x)).numpy(), plain(ids(x)).numpy(), rtol=1e-12)


# ---------------------------------------------------------------- parameter groups and the schedule


def adamw_reference(params, grads_per_step, groups, schedule, betas=(0.9, 0.999), eps=1e-8):
    """torch.optim.AdamW with LambdaLR, in float64 NumPy: decay p *= 1 - lr wd, then the Adam step."""
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    for t, grads in enumerate(grads_per_step, start=1):
        lr = schedule.lr(t)
        for i, (p, g) in enumerate(zip(params, grads, strict=True)):
            p *= 1 - lr * groups[i]
            m[i] = betas[0] * m[i] + (1 - betas[0]) * g
            v[i] = betas[1] * v[i] + (1 - betas[1]) * g * g
            p -= lr * (m[i] / (1 - betas[0] ** t)) / (np.sqrt(v[i] / (1 - betas[1] ** t)) + eps)
    return params


@pytest.mark.parametrize("device", ["cpu", "emu"])
def test_adamw_with_groups_and_a_warmup_cosine_schedule_matches_float64(solutions, device):
    schedule = optim.WarmupCosine(max_lr=0.05, min_lr=0.005, warmup=2, total=5)
    rng = np.random.default_rng(4)
    shapes, decays = [(5, 3), (3,), (7,)], [0.1, 0.0, 0.1]
    start = [rng.standard_normal(s) for s in shapes]
    grads = [[rng.standard_normal(s) for s in shapes] for _ in range(7)]  # past total: min_lr
    params = [minitorch.tensor(a.astype(np.float32), device=device, requires_grad=True) for a in start]
    opt = optim.AdamW([{"params": [params[0], params[2]], "weight_decay": 0.1}, {"params": [params[1]],
                      "weight_decay": 0.0}], schedule=schedule)
    for t, step_grads in enumerate(grads, start=1):
        for p, g in zip(params, step_grads, strict=True):
            p.grad = minitorch.tensor(g.astype(np.float32), device=device)
        opt.step()
        assert opt.last_lr == pytest.approx(schedule.lr(t), rel=1e-6)
    want = adamw_reference([a.copy() for a in start], grads, decays, schedule)
    for p, w in zip(params, want, strict=True):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-5, atol=1e-6)


def test_gpt_parameter_groups_decay_only_the_linear_matrices():
    model = nn.GPT(11, 8, d_model=16, n_head=2, n_layer=2, device="cpu", seed=0, tie_weights=True)
    decay, rest = model.optimizer_groups(0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    assert decay["weight_decay"] == 0.1 and rest["weight_decay"] == 0.0
    assert sorted(names[id(p)] for p in decay["params"]) == sorted(
        f"blocks.{i}.{n}.weight" for i in range(2) for n in ("attn.c_attn", "attn.c_proj", "fc", "proj"))
    assert {names[id(p)] for p in rest["params"]} >= {"wte.weight", "wpe.weight", "ln_f.weight", "lm_head.bias"}
    assert len(decay["params"]) + len(rest["params"]) == len(list(model.parameters()))
    with pytest.raises(ValueError, match="repeats parameters"):
        optim.AdamW([decay, {"params": decay["params"][:1]}])
    with pytest.raises(ValueError, match="one weight_decay"):
        optim.AdamW([decay, {"params": rest["params"], "weight_decay": 0.2}],
                    schedule=optim.WarmupCosine(1e-3, 1e-4, 1, 10))


def test_a_captured_recipe_step_equals_eager_steps_on_the_emulator(solutions):
    """Tying, dropout, parameter groups and the schedule in a captured step: each replay draws the next masks
    and the next rate, as the eager steps do."""
    vocab, t, b = 11, 8, 3
    schedule = optim.WarmupCosine(max_lr=3e-2, min_lr=3e-3, warmup=1, total=3)
    models = [nn.GPT(vocab, t, d_model=16, n_head=2, n_layer=1, device="emu", seed=5, tie_weights=True,
                     dropout=0.2) for _ in range(2)]
    opts = [optim.AdamW(m.optimizer_groups(0.1), schedule=schedule) for m in models]
    xs = [minitorch.zeros((b, t), device="emu", dtype="int32") for _ in range(2)]
    ys = [minitorch.zeros((b, t), device="emu", dtype="int32") for _ in range(2)]

    def step(i: int) -> minitorch.Tensor:
        loss = F.cross_entropy(models[i](xs[i]).reshape(b * t, vocab), ys[i].reshape(b * t))
        opts[i].zero_grad()
        loss.backward()
        optim.clip_grad_norm_(models[i].parameters(), 0.5)
        opts[i].step()
        return loss

    captured = graph.capture(lambda: step(1), device="emu")
    rng = np.random.default_rng(0)
    for k in range(4):
        x, y = rng.integers(0, vocab, (b, t)).astype(np.int32), rng.integers(0, vocab, (b, t)).astype(np.int32)
        for i in range(2):
            xs[i].copy_from(x)
            ys[i].copy_from(y)
        eager = step(0).item()
        captured.replay()
        assert captured.output.item() == pytest.approx(eager, rel=1e-5)
        assert opts[1].last_lr == pytest.approx(schedule.lr(k + 1), rel=1e-6)
    for p, q in zip(models[0].parameters(), models[1].parameters(), strict=True):
        np.testing.assert_allclose(q.numpy(), p.numpy(), rtol=1e-3, atol=2e-3)
