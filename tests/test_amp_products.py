"""minitorch.amp (Phase 8a) beyond 2-D matmul: attention's batched products and the convolutions run on
16-bit operands under autocast (fp32 accumulation, fp32 results and gradients), checked against float64
products of the 16-bit-rounded operands with recursive summation's bound for their K; the softmax between
the products, the bias and the layout kernels stay float32."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import amp, kernels, ops
from minitorch import functional as F  # noqa: N812 (the usual name)
from tests.half_support import half_device, reference_bits  # noqa: F401 (half_device is the device fixture)
from tests.phase3_support import write_solutions


def _rounded(x: np.ndarray, fmt: str) -> np.ndarray:
    """float32 values rounded to ``fmt`` by the independent reference, as float64."""
    bits = reference_bits(np.asarray(x, np.float32), fmt)
    if fmt == "bfloat16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def _assert_within(got: np.ndarray, exact: np.ndarray, magnitude: np.ndarray, k: int) -> None:
    """|got - exact| <= 2·K·2⁻²⁴·Σ|a||b| elementwise: fp32 accumulation of K products of 16-bit values
    (each exact in fp32), recursive summation's bound doubled for any order or fused adds."""
    bound = 2 * k * 2.0 ** -24 * magnitude
    excess = np.abs(got.astype(np.float64) - exact) - bound
    assert np.all(excess <= 0), f"{np.sum(excess > 0)} elements past the bound, worst by {excess.max():.3g}"


def _launched(name: str) -> int:
    return sum(n for (_, kernel), n in kernels.launch_counts().items() if kernel == name)


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
def test_bmm_under_autocast_multiplies_rounded_operands(device, fmt, ta, tb):
    rng = np.random.default_rng(0)
    batch, m, n, k = 3, 5, 7, 19  # no multiple of any tile
    a = rng.standard_normal((batch, k, m) if ta else (batch, m, k)).astype(np.float32)
    b = rng.standard_normal((batch, n, k) if tb else (batch, k, n)).astype(np.float32)
    kernels.reset_launch_counts()
    with amp.autocast(fmt):
        got = ops.bmm(minitorch.tensor(a, device), minitorch.tensor(b, device), transpose_a=ta, transpose_b=tb)
    assert got.dtype == minitorch.float32 and got.shape == (batch, m, n)
    ar, br = _rounded(a, fmt), _rounded(b, fmt)
    ar, br = (np.swapaxes(ar, 1, 2) if ta else ar), (np.swapaxes(br, 1, 2) if tb else br)
    _assert_within(got.numpy(), ar @ br, np.abs(ar) @ np.abs(br), k)
    exact32 = ((np.swapaxes(a, 1, 2) if ta else a).astype(np.float64) @ (np.swapaxes(b, 1, 2) if tb else b))
    assert np.max(np.abs(got.numpy() - exact32)) > 1e-4  # the operands were rounded, not multiplied in fp32
    if device == "emu":  # one tensor-core launch for the whole batch, none of Phase 7's fp32 bmm
        assert _launched("hgemm_f32") == 1 and _launched("bmm") == _launched("bmm_regtile") == 0


def test_small_products_run_on_rung_1_and_the_others_on_best(device):
    """Small products ask hgemm.py for rung 1 ("wmma": a warp a 16 x 16 tile), the others for "best" (rung 5's
    128 x 128 block tiles and its pipeline), batched or not. Small: on a GPU outputs of at most 2048 values (what
    an H100 ran faster on rung 1); on the emulator every product (rung 1 computes less and took less CPU time)."""
    if device == "cpu":
        pytest.skip("no launcher on cpu")
    asked = kernels.load_module("hgemm.py").VARIANTS_ASKED
    rng = np.random.default_rng(2)
    with amp.autocast("bfloat16"):
        emu = device == "emu"
        for (m, k, n), batch, expected in (((64, 9, 16), 3, "wmma"), ((64, 9, 64), 3, "wmma" if emu else "best"),
                                           ((129, 9, 128), 3, "wmma" if emu else "best"), ((64, 9, 32), 0, "wmma"),
                                           ((256, 512, 64), 0, "wmma" if emu else "best"),
                                           ((64, 513, 64), 0, "wmma" if emu else "best"),
                                           ((128, 9, 129), 0, "wmma" if emu else "best"), ((1, 300, 1), 0, "wmma")):
            shape_a, shape_b = ((batch, m, k), (batch, k, n)) if batch else ((m, k), (k, n))
            a, b = (minitorch.tensor(rng.standard_normal(s).astype(np.float32), device) for s in (shape_a, shape_b))
            asked.clear()
            ops.bmm(a, b) if batch else ops.matmul(a, b)
            assert asked == [expected], ((m, k, n), batch, asked)


@pytest.mark.parametrize("per_stream", [False, True], ids=["one-map-buffer", "map-buffers-per-stream"])
@pytest.mark.parametrize("setting", ["best", "wgmma", "mma"])
def test_a_product_on_a_graph_branch_runs_on_rung_6_only_with_map_buffers_per_stream(device, setting, per_stream,
                                                                                    monkeypatch):
    """Rung 6 writes its tensor maps into a buffer before each product: with one buffer per device (a hgemm.py
    without ``map_buffer(stream)``), on a side branch of a captured graph (concurrent weight gradients) a product
    could race one on the main stream for it. There "wgmma", and "best" (rung 6 on an sm_90 GPU for a long K),
    become rung 5 ("pipeline"); other rungs stay as asked. With a buffer per stream, every setting stays."""
    if device != "emu":
        pytest.skip("the branch is stood in for on the emulator (on cuda in_branch is the capture's state)")
    module = kernels.load_module("hgemm.py")
    if per_stream:
        monkeypatch.setattr(module, "map_buffer", lambda stream=None: None, raising=False)
    asked = module.VARIANTS_ASKED
    a, b = (minitorch.tensor(np.ones((64, 600), np.float32), device) for _ in range(2))
    b2 = minitorch.tensor(np.ones((65, 600), np.float32), device)  # another shape: no launch plan replayed
    previous = ops.set_hgemm_variant(setting)
    try:
        with amp.autocast("bfloat16"):
            asked.clear()
            ops.matmul(a, b, transpose_b=True)
            outside = list(asked)
            monkeypatch.setattr(minitorch.backend.get_backend(device), "in_branch", True)
            asked.clear()
            ops.matmul(a, b2, transpose_b=True)
    finally:
        ops.set_hgemm_variant(previous)
    assert outside == [setting]
    assert asked == [setting if setting == "mma" or per_stream else "pipeline"]


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_a_long_k_weight_gradient_is_split_into_pieces_and_summed(device, out_dtype):
    """dW = Xᵀ·dY with K = 2048 and a small output: one batched launch over 8 pieces of K (A and B read in place
    as stacks) and a column sum of the partial products, within the bound of the whole float32 sum; 16-bit
    operands with a 16-bit result are rounded once, after the sum."""
    rng = np.random.default_rng(3)
    k, m, n = 2048, 16, 24
    x, dy = rng.standard_normal((k, m)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    assert ops.linalg.split_k(m, n, k, True, False) == 8
    xt, dyt = minitorch.tensor(x, device), minitorch.tensor(dy, device)
    kernels.reset_launch_counts()
    if out_dtype == "float32":
        with amp.autocast("bfloat16"):
            got = ops.matmul(xt, dyt, transpose_a=True).numpy()
    else:
        got16 = ops.matmul(xt.to("bfloat16"), dyt.to("bfloat16"), transpose_a=True)
        assert got16.dtype == minitorch.bfloat16
        got = got16.float().numpy()
    xr, dyr = _rounded(x, "bfloat16"), _rounded(dy, "bfloat16")
    exact, magnitude = xr.T @ dyr, np.abs(xr).T @ np.abs(dyr)
    if out_dtype == "float32":
        _assert_within(got, exact, magnitude, k)
    else:  # the float32 sum's bound, then one rounding to bf16 (half a unit of 2^-8 relative)
        assert np.all(np.abs(got - exact) <= 2 * k * 2.0 ** -24 * magnitude + 2.0 ** -8 * np.abs(exact) + 1e-30)
    if device == "emu":
        assert sum(n for (_, f), n in kernels.launch_counts().items() if f.startswith("hgemm")) == 1
        assert _launched("bias_grad") == 1


def test_split_k_brings_every_nanogpt_weight_gradient_to_about_one_block_a_multiprocessor():
    """The capstone's weight gradients (K = B·T = 16,384 rows): 9, 27 and 36 output tiles of 128 x 128 split into
    16, 8 and 4 pieces (rung 6 took 150 us on an H100 for the unsplit 27- and 36-tile ones, rung 5 380 us); a
    product that is not Xᵀ·dY, or K short, or the setting 0, is not split; a bad setting is refused."""
    split = ops.linalg.split_k
    for (m, n), pieces in (((384, 384), 16), ((384, 1152), 8), ((384, 1536), 4), ((1536, 384), 4),
                           ((2048, 2048), 1)):
        assert split(m, n, 16384, True, False) == pieces, (m, n)
    assert split(384, 1152, 16384, False, False) == split(384, 1152, 16384, True, True) == 1
    assert split(384, 1152, 1024, True, False) == 1
    assert split(384, 1152, 2049, True, False) == 1  # an odd K: no piece count divides it
    previous = ops.set_split_k(0)
    try:
        assert split(384, 384, 16384, True, False) == 1
        ops.set_split_k(None)
        assert split(384, 384, 16384, True, False) == 16
        with pytest.raises(TypeError, match="number of blocks"):
            ops.set_split_k(-1)
    finally:
        ops.set_split_k(previous)


def test_a_split_product_of_several_output_tiles_sums_each_tile_of_each_piece(device):
    """A 130 x 129 output (4 tiles of rung 5, none whole) over K = 2048 in 4 pieces (the target lowered to 16
    blocks): a column sum of pieces laid out tile by tile, within the bound of the whole float32 sum."""
    if device == "cpu":
        pytest.skip("the split runs on the launchers")
    rng = np.random.default_rng(4)
    k, m, n = 2048, 130, 129
    x, dy = rng.standard_normal((k, m)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32)
    previous = ops.set_split_k(16)
    try:
        assert ops.linalg.split_k(m, n, k, True, False) == 4
        kernels.reset_launch_counts()
        with amp.autocast("bfloat16"):
            got = ops.matmul(minitorch.tensor(x, device), minitorch.tensor(dy, device), transpose_a=True).numpy()
    finally:
        ops.set_split_k(previous)
    xr, dyr = _rounded(x, "bfloat16"), _rounded(dy, "bfloat16")
    _assert_within(got, xr.T @ dyr, np.abs(xr).T @ np.abs(dyr), k)
    if device == "emu":
        assert _launched("bias_grad") == 1


def test_the_tied_head_rounds_the_table_once_for_its_forward_and_backward(device):
    """nanoGPT's head under bf16 autocast: logits = round(x) @ round(W)ᵀ + b, dx = round(dy) @ round(W), and the
    table's gradient dyᵀ @ x in float32, against float64 references; on the emulator three conversions (x, the
    table and dy: the table's rounded copy serves both products), none twice."""
    from minitorch.nn.transformer import TiedHead

    rng = np.random.default_rng(5)
    n, c, v = 6, 16, 7
    x = rng.standard_normal((n, c)).astype(np.float32)
    table = rng.standard_normal((v, c)).astype(np.float32)
    g = rng.standard_normal((n, v)).astype(np.float32)
    head = TiedHead(v, device=device)
    head.bias.copy_from(rng.standard_normal(v).astype(np.float32))
    xt = minitorch.tensor(x, device, requires_grad=True)
    wt = minitorch.tensor(table, device, requires_grad=True)
    kernels.reset_launch_counts()
    with amp.autocast("bfloat16"):
        y = head(xt, wt)
    y.backward(minitorch.tensor(g, device))
    xr, wr, gr = _rounded(x, "bfloat16"), _rounded(table, "bfloat16"), _rounded(g, "bfloat16")
    bias = head.bias.numpy().astype(np.float64)
    _assert_within(y.numpy() - bias, xr @ wr.T, np.abs(xr) @ np.abs(wr).T, c)
    _assert_within(xt.grad.numpy(), gr @ wr, np.abs(gr) @ np.abs(wr), v)
    np.testing.assert_allclose(wt.grad.numpy(), g.astype(np.float64).T @ x, rtol=1e-5, atol=1e-5)
    if device == "emu":
        assert _launched("float_to_bfloat16") == 3


def test_bmm_with_compute_dtype_float32_stays_float32_under_autocast(device):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 4, 5)).astype(np.float32)
    if device != "cpu":
        write_solutions(minitorch.kernels.workspace_dir(), ("phase7_gpt.ipynb",))
    with amp.autocast("bfloat16"):
        got = ops.bmm(minitorch.tensor(a, device), minitorch.tensor(b, device), compute_dtype="float32")
    np.testing.assert_allclose(got.numpy(), a.astype(np.float64) @ b, rtol=1e-5, atol=1e-5)


def test_attention_under_autocast_rounds_the_products_and_keeps_the_softmax_float32(device):
    """Causal attention (B=2, H=2, T=5, D=4) forward and backward under bf16 autocast against a float64
    reference that rounds exactly the operands of the products (Q, K, P, V and the gradients fed to the
    backward products) and nothing else: a softmax or mask in 16 bits would miss it by far more than
    the bound."""
    if device != "cpu":
        write_solutions(minitorch.kernels.workspace_dir(), ("phase7_gpt.ipynb",))
    rng = np.random.default_rng(2)
    batch, heads, t, d = 2, 2, 5, 4
    qkv32 = rng.standard_normal((batch, t, 3 * heads * d)).astype(np.float32)
    gy32 = rng.standard_normal((batch, t, heads * d)).astype(np.float32)
    qkv = minitorch.tensor(qkv32, device, requires_grad=True)
    with amp.autocast("bfloat16"):
        y = F.causal_self_attention(qkv, heads)
    y.backward(minitorch.tensor(gy32, device))  # outside the region: the forward's dtype is recorded
    assert y.dtype == qkv.grad.dtype == minitorch.float32

    r = lambda x: _rounded(x.astype(np.float32), "bfloat16")  # noqa: E731
    heads_of = lambda x: x.reshape(batch, t, heads, d).transpose(0, 2, 1, 3).reshape(batch * heads, t, d)  # noqa: E731
    q, k, v = (heads_of(qkv32[..., i * heads * d:(i + 1) * heads * d]) for i in range(3))
    scores = r(q) @ np.swapaxes(r(k), 1, 2)
    z = np.where(np.tril(np.ones((t, t), bool)), scores / np.sqrt(d), -np.inf)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expected = r(p) @ r(v)
    got = y.numpy().reshape(batch, t, heads, d).transpose(0, 2, 1, 3).reshape(batch * heads, t, d)
    # the softmax's inputs carry the first product's error: a few fp32 ulps of the scores, amplified by
    # at most a factor of a few through exp and the normalisation; 1e-5 is ~100 such ulps and 1/50 of
    # bf16's own rounding (2^-9 relative), so a 16-bit softmax or an unrounded operand fails it
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    g = heads_of(gy32)
    dv = np.swapaxes(r(p), 1, 2) @ r(g)
    dp = r(g) @ np.swapaxes(r(v), 1, 2)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True)) / np.sqrt(d)
    dq, dk = r(ds) @ r(k), np.swapaxes(r(ds), 1, 2) @ r(q)
    merge = lambda x: x.reshape(batch, heads, t, d).transpose(0, 2, 1, 3).reshape(batch, t, heads * d)  # noqa: E731
    expected_grad = np.concatenate([merge(dq), merge(dk), merge(dv)], axis=-1)
    np.testing.assert_allclose(qkv.grad.numpy(), expected_grad, rtol=0, atol=2e-5)


CONV_CASES = [  # (N, C, H, W, K, R, S, stride, pad): odd sizes, a stride, a 1 x 1 filter
    (2, 3, 9, 7, 5, 3, 3, 1, 1),
    (1, 2, 8, 11, 3, 5, 3, 2, 2),
    (3, 4, 5, 5, 6, 1, 1, 1, 0),
    (4, 2, 16, 16, 3, 3, 3, 1, 1),  # 1024 positions: a longer sum for the weight gradient
]


def _windows(x: np.ndarray, r: int, s: int, stride: int, pad: int) -> np.ndarray:
    padded = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return np.lib.stride_tricks.sliding_window_view(padded, (r, s), axis=(2, 3))[:, :, ::stride, ::stride]


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_convolution_under_autocast_multiplies_rounded_operands(device, case, fmt):
    """Forward, input gradient and weight gradient of a convolution under autocast (the autograd
    Function, backward run outside the region) against float64 sums of the rounded operands, each within
    the bound of its own K (C·R·S, K·R·S at most, N·P·Q); the bias is added in float32."""
    if device != "cpu":
        write_solutions(minitorch.kernels.workspace_dir(), ("phase6_cnn.ipynb",))
    n, c, h, wd, k, r, s, stride, pad = case
    rng = np.random.default_rng(3)
    x32 = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w32 = rng.standard_normal((k, c, r, s)).astype(np.float32)
    b32 = rng.standard_normal(k).astype(np.float32)
    x = minitorch.tensor(x32, device, requires_grad=True)
    w = minitorch.tensor(w32, device, requires_grad=True)
    b = minitorch.tensor(b32, device, requires_grad=True)
    kernels.reset_launch_counts()
    with amp.autocast(fmt):
        y = F.conv2d(x, w, b, stride=stride, padding=pad)
    p, q = y.shape[2:]
    dy32 = rng.standard_normal((n, k, p, q)).astype(np.float32)
    y.backward(minitorch.tensor(dy32, device))
    assert y.dtype == x.grad.dtype == w.grad.dtype == b.grad.dtype == minitorch.float32

    xr, wr, dyr = _rounded(x32, fmt), _rounded(w32, fmt), _rounded(dy32, fmt)
    win, win_abs = _windows(xr, r, s, stride, pad), _windows(np.abs(xr), r, s, stride, pad)
    _assert_within(y.numpy() - b32[None, :, None, None], np.einsum("ncpqrs,kcrs->nkpq", win, wr),
                   np.einsum("ncpqrs,kcrs->nkpq", win_abs, np.abs(wr)) + np.abs(b32)[None, :, None, None],
                   c * r * s + 1)
    _assert_within(w.grad.numpy(), np.einsum("ncpqrs,nkpq->kcrs", win, dyr),
                   np.einsum("ncpqrs,nkpq->kcrs", win_abs, np.abs(dyr)), n * p * q)
    # dx: the adjoint, through the transposed windows: autograd of the float64 forward of the rounded
    # operands (linear in x, so its gradient is exact in float64)
    dx, dx_abs = np.zeros((n, c, h + 2 * pad, wd + 2 * pad)), np.zeros((n, c, h + 2 * pad, wd + 2 * pad))
    for i in range(r):
        for j in range(s):
            sl = np.s_[:, :, i:i + stride * (p - 1) + 1:stride, j:j + stride * (q - 1) + 1:stride]
            dx[sl] += np.einsum("nkpq,kc->ncpq", dyr, wr[:, :, i, j])
            dx_abs[sl] += np.einsum("nkpq,kc->ncpq", np.abs(dyr), np.abs(wr[:, :, i, j]))
    crop = np.s_[:, :, pad:pad + h, pad:pad + wd]
    # col2im adds up to R·S partial products of K terms each in float32: bound of K·R·S + R·S terms
    _assert_within(x.grad.numpy(), dx[crop], dx_abs[crop], k * r * s + r * s)
    np.testing.assert_allclose(b.grad.numpy(), dy32.astype(np.float64).sum(axis=(0, 2, 3)), rtol=1e-5, atol=1e-4)
    exact_y = np.einsum("ncpqrs,kcrs->nkpq", _windows(x32.astype(np.float64), r, s, stride, pad), w32)
    assert np.max(np.abs(y.numpy() - b32[None, :, None, None] - exact_y)) > 1e-4  # rounded operands
    if device == "emu":  # the products on the tensor cores, none on Phase 6's fp32 convolution kernels
        assert _launched("hgemm_f32") == 3 and _launched("im2col") == 2 and _launched("col2im") == 1
        fp32_conv = [key for key, cnt in kernels.launch_counts().items() if cnt and key[1].startswith("conv2d")
                     and key[1] != "conv2d_bias_grad"]
        assert not fp32_conv, fp32_conv


@pytest.mark.parametrize("per_image", [True, False])
def test_a_convolutions_weight_gradient_sums_one_product_per_image(device, per_image, monkeypatch):
    """Under autocast the weight gradient's sum runs over every position of every image (K = N·P·Q) into a tiny
    output: one batched hgemm launch computes an image's product per matrix of the stack (grid z = N; im2col of
    the batch viewed as N·C channels gives the stack) and a column sum adds them, within the bound of the whole
    float32 sum. A gradient whose N partial products would be too many values runs as the one product."""
    if device == "cpu":
        pytest.skip("no launcher on cpu")
    write_solutions(minitorch.kernels.workspace_dir(), ("phase6_cnn.ipynb",))
    if not per_image:
        monkeypatch.setattr(ops.conv, "PER_IMAGE_MAX_VALUES", 5 * 3 * 2 * 3 * 3 - 1)
    n, c, h, wd, k = 5, 2, 9, 7, 3
    rng = np.random.default_rng(5)
    x32 = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    dy32 = rng.standard_normal((n, k, h, wd)).astype(np.float32)
    kernels.reset_launch_counts()
    with kernels.recording() as launches:
        dw = ops.conv2d_backward_weight(minitorch.tensor(x32, device), minitorch.tensor(dy32, device), (k, c, 3, 3),
                                        1, 1, compute_dtype="bfloat16").numpy()
    xr, dyr = _rounded(x32, "bfloat16"), _rounded(dy32, "bfloat16")
    win, win_abs = _windows(xr, 3, 3, 1, 1), _windows(np.abs(xr), 3, 3, 1, 1)
    _assert_within(dw, np.einsum("ncpqrs,nkpq->kcrs", win, dyr), np.einsum("ncpqrs,nkpq->kcrs", win_abs, np.abs(dyr)),
                   n * h * wd)
    [product] = [launch for launch in launches if launch.kernel.function.startswith("hgemm")]
    assert (product.grid + (1, 1))[2] == (n if per_image else 1), product.grid
    assert _launched("bias_grad") == (1 if per_image else 0) and _launched("im2col") == 1
    assert _launched("nchw_to_gemm") == (0 if per_image else 1)


def test_a_convolution_recorded_in_float32_stays_float32_under_a_later_autocast(device):
    if device != "cpu":  # Phase 6's fp32 launchers pick their rung by the card Phase 5's gemm.py names
        write_solutions(minitorch.kernels.workspace_dir(), ("phase5_fast.ipynb", "phase6_cnn.ipynb"))
    rng = np.random.default_rng(4)
    x32, w32 = rng.standard_normal((1, 2, 6, 6)).astype(np.float32), rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    x, w = minitorch.tensor(x32, device, requires_grad=True), minitorch.tensor(w32, device, requires_grad=True)
    y = F.conv2d(x, w, padding=1)
    with amp.autocast("bfloat16"):
        y.backward(minitorch.tensor(np.ones(y.shape, np.float32), device))
    dw = np.einsum("ncpqrs,nkpq->kcrs", _windows(x32.astype(np.float64), 3, 3, 1, 1), np.ones(y.shape))
    np.testing.assert_allclose(w.grad.numpy(), dw, rtol=1e-5, atol=1e-5)


def test_an_emu_array_indexed_along_its_first_axis_is_a_view():
    """a[i] of an emulated device array is the i-th sub-array, sharing memory (as CuPy's): how a batch of
    matrices is handed to a launcher one matrix at a time. Any other index would read values: refused."""
    from minitorch import emu

    a = emu.asarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    b = a[1]
    assert b.shape == (3, 4) and b.data.ptr == a.data.ptr + 12 * 4
    np.testing.assert_array_equal(b.get(), np.arange(12, 24, dtype=np.float32).reshape(3, 4))
    assert a[-2].data.ptr == a.data.ptr and a[np.int64(1)].data.ptr == b.data.ptr
    b.set(np.zeros((3, 4), np.float32))  # a write through the view lands in a
    np.testing.assert_array_equal(a.get()[1], 0)
    with pytest.raises(IndexError, match="out of bounds"):
        a[2]
    for bad in (slice(0, 1), (0, 1), True):
        with pytest.raises(TypeError, match="not supported"):
            a[bad]
