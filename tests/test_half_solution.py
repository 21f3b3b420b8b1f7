"""The framework's 16-bit tensors and autocast on the Phase 8a lab's own solution files (convert.cu/.py,
hgemm.cu/.py from solutions/phase8a_tensor_cores.ipynb), not the stand-ins of test_half.py: the
conversions bit for bit against the float64 reference, 16-bit and autocast products at sizes no tile
divides, and a short bf16 autocast training run against fp32. Emu at small sizes; cuda under -m gpu."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import amp, kernels, ops
from tests.half_support import assert_same_bits, float32_patterns, reference_bits
from tests.phase3_support import PHASE3_NOTEBOOKS, write_solutions

NOTEBOOK = "phase8a_tensor_cores.ipynb"
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]


@pytest.fixture(params=["emu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request, workspace, monkeypatch):
    write_solutions(workspace, PHASE3_NOTEBOOKS + ("phase4_reductions.ipynb", NOTEBOOK))
    monkeypatch.delenv("MINITORCH_PHASE", raising=False)
    previous = minitorch.get_device()
    minitorch.set_device(request.param)
    yield request.param
    minitorch.set_device(previous)


def _launched(file: str) -> bool:
    return any(n for (f, _), n in kernels.launch_counts().items() if f == file)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
def test_the_labs_conversions_serve_the_tensors(device, fmt):
    x = float32_patterns(seed=11)
    kernels.reset_launch_counts()
    t = minitorch.tensor(x, device).to(fmt)
    assert_same_bits(t.bits(), x, fmt)
    assert _launched("convert.cu")
    every = np.arange(2 ** 16, dtype=np.uint16)
    wide = minitorch.from_bits(every, fmt, device).float().numpy()
    expected = (every.view(np.float16).astype(np.float32) if fmt == "float16"
                else (every.astype(np.uint32) << np.uint32(16)).view(np.float32))
    nan = np.isnan(expected)
    assert np.array_equal(np.isnan(wide), nan) and np.array_equal(wide[~nan].view(np.uint32),
                                                                  expected[~nan].view(np.uint32))


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize(("ta", "tb"), [(False, False), (True, False), (False, True)])
def test_the_labs_hgemm_serves_matmul_and_autocast(device, fmt, ta, tb):
    m, n, k = (37, 29, 45) if device == "emu" else (300, 260, 520)
    rng = np.random.default_rng(12)
    a32 = rng.standard_normal((k, m) if ta else (m, k)).astype(np.float32)
    b32 = rng.standard_normal((n, k) if tb else (k, n)).astype(np.float32)
    a, b = minitorch.tensor(a32, device), minitorch.tensor(b32, device)

    def rounded(v: np.ndarray) -> np.ndarray:
        bits = reference_bits(v, fmt)
        return (bits.view(np.float16).astype(np.float64) if fmt == "float16"
                else (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64))

    ar, br = rounded(a32), rounded(b32)
    ar, br = (ar.T if ta else ar), (br.T if tb else br)
    exact, scale = ar @ br, np.abs(ar) @ np.abs(br)
    kernels.reset_launch_counts()
    with amp.autocast(fmt):
        c = ops.matmul(a, b, transpose_a=ta, transpose_b=tb)
    # the lab's tensor-core files: on Hopper, a product whose stored rows are multiples of 8 goes to rung 6
    assert c.dtype == minitorch.float32 and (_launched("hgemm.cu") or _launched("hgemm_wgmma.cu"))
    # the grader's bound (2·K·2⁻²⁴·Σ|a||b|): it holds whatever order and width the tensor cores add in
    bound = 2 * k * 2.0 ** -24 * scale
    assert np.all(np.abs(c.numpy() - exact) <= bound + 1e-30)
    c16 = ops.matmul(a.to(fmt), b.to(fmt), transpose_a=ta, transpose_b=tb)  # 16-bit out: one more rounding
    assert c16.dtype == fmt
    ulp = 2.0 ** (-10 if fmt == "float16" else -7)
    assert np.all(np.abs(c16.numpy().astype(np.float64) - exact) <= ulp * np.abs(exact) + bound + 1e-30)


def test_a_bf16_autocast_run_follows_the_fp32_run(device):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((48, 6)).astype(np.float32)
    y = np.tanh(x @ rng.standard_normal((6, 2))).astype(np.float32)
    runs = []
    for enabled in (False, True):
        model = minitorch.nn.Sequential(minitorch.nn.Linear(6, 24, seed=1), minitorch.nn.ReLU(),
                                        minitorch.nn.Linear(24, 2, seed=2))
        opt = minitorch.optim.SGD(model.parameters(), lr=0.1)
        xt, yt = minitorch.tensor(x, device), minitorch.tensor(y, device)
        losses = []
        for _ in range(40):
            with amp.autocast("bfloat16", enabled=enabled):
                loss = minitorch.functional.mse_loss(model(xt), yt)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        runs.append(np.array(losses))
    fp32, bf16 = runs
    decrease = fp32[0] - fp32[-1]
    assert decrease > 0.3 * fp32[0]
    assert np.max(np.abs(bf16 - fp32)) <= 0.01 * decrease  # as test_amp's MLP (measured there: 0.11%)
    assert np.any(bf16 != fp32)


def _autocast_pass(layer, x_host: np.ndarray, device: str, forward, grad) -> tuple:
    """forward(x) of a fresh x under bf16 autocast, then its backward from ``grad``: (y, x.grad, the layer's weight
    and bias gradients, the forward's add_bias launches)."""
    x = minitorch.tensor(x_host, device, requires_grad=True)
    layer.zero_grad()
    kernels.reset_launch_counts()
    with amp.autocast("bfloat16"):
        y = forward(x)
    adds = sum(n for (_, fn), n in kernels.launch_counts().items() if fn == "add_bias")
    y.backward(grad)
    return y, x.grad.numpy(), layer.weight.grad.numpy(), layer.bias.grad.numpy(), adds


@pytest.mark.parametrize("variant", [None, "pipeline"], ids=["default", "rung 5"])
def test_linear_under_autocast_adds_its_bias_in_the_product(device, variant):
    """A Linear layer under autocast is one product whose epilogue adds the bias (autograd.LinearBias; on rungs 5
    and 6 of the lab's hgemm, elsewhere add_bias after it): output and gradients bit for bit those of the
    product and the bias add as two Functions, and no add_bias launch where the product's rung adds it."""
    m, k, n = (70, 40, 36) if device == "emu" else (1000, 384, 1152)
    rng = np.random.default_rng(14)
    x_host = rng.standard_normal((m, k)).astype(np.float32)
    grad_host = rng.standard_normal((m, n)).astype(np.float32)
    layer = minitorch.nn.Linear(k, n, seed=3, device=device)
    grad = minitorch.tensor(grad_host, device)
    previous = ops.set_hgemm_variant(variant)
    try:
        fused_run = _autocast_pass(layer, x_host, device, layer, grad)
        plain_run = _autocast_pass(layer, x_host, device, lambda x: x @ layer.weight + layer.bias, grad)
    finally:
        ops.set_hgemm_variant(previous)
    fused_run, plain_run = ((r[0].numpy(), *r[1:]) for r in (fused_run, plain_run))
    for name, got, want in zip(("y", "x.grad", "weight.grad"), fused_run[:3], plain_run[:3], strict=False):
        assert got.tobytes() == want.tobytes(), name
    # the bias gradient: column sums, added by atomics across chunks of rows on a GPU (their order varies),
    # (and in another order than bias_grad's where the column-sum kernel cuts the rows otherwise)
    np.testing.assert_allclose(fused_run[3], plain_run[3], rtol=1e-5, atol=1e-5 * float(np.abs(plain_run[3]).max()))
    assert plain_run[4] == 1
    epilogue = variant == "pipeline" or (device == "cuda" and variant is None)
    assert fused_run[4] == (0 if epilogue else 1)
    expected = (x_host.astype(np.float64) @ layer.weight.numpy().astype(np.float64)
                + layer.bias.numpy().astype(np.float64))
    assert np.max(np.abs(fused_run[0] - expected)) <= 0.05 * np.max(np.abs(expected))  # bf16 operands


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize(("rows", "cols", "offset"), [(37, 29, 0), (70, 36, 0), (33, 12, 1)],
                         ids=["odd", "quads", "view-past-a-boundary"])
def test_column_sums_of_a_16bit_matrix(device, fmt, rows, cols, offset):
    """ops.column_sums_16bit (the lab's column_sums_16bit): the float32 column sums of the 16-bit values, against
    float64 sums of the same values; a matrix that starts 2 bytes past an 8-byte boundary takes the element path."""
    rng = np.random.default_rng(rows * cols + offset)
    flat = minitorch.tensor(rng.standard_normal(rows * cols + offset).astype(np.float32), device).to(fmt)
    t = minitorch.Tensor(flat.data[offset:].reshape(rows, cols), device)
    kernels.reset_launch_counts()
    sums = ops.column_sums_16bit(t)
    assert kernels.launch_count("convert.cu", f"{'half' if fmt == 'float16' else 'bfloat16'}_column_sums") == 1
    values = t.float().numpy().astype(np.float64)
    np.testing.assert_allclose(sums.numpy(), values.sum(axis=0), rtol=1e-5,
                               atol=1e-5 * np.abs(values).sum(axis=0).max())
    assert sums.dtype == np.float32 and sums.shape == (cols,)


@pytest.mark.parametrize("fmt", ["float16", "bfloat16"])
@pytest.mark.parametrize("n", [1003, 4096], ids=["elements", "quads"])
def test_gelu_in_16_bits_is_gelu_rounded_once(device, workspace, fmt, n):
    """ops.gelu(x, out_dtype) (the lab's gelu_16bit) is Phase 7's gelu then the conversion, bit for bit; and
    gelu_backward of a 16-bit gradient is the float32 backward of its widened values, rounded once."""
    write_solutions(workspace, ("phase7_gpt.ipynb",))  # Phase 7's gelu.cu, the float32 reference
    rng = np.random.default_rng(n)
    x = minitorch.tensor((rng.standard_normal(n) * 3).astype(np.float32), device)
    g16 = minitorch.tensor(rng.standard_normal(n).astype(np.float32), device).to(fmt)
    kernels.reset_launch_counts()
    y16 = ops.gelu(x, fmt)
    dx16 = ops.gelu_backward(x, g16)
    assert kernels.launch_count("convert.cu", f"gelu_to_{'half' if fmt == 'float16' else 'bfloat16'}") == 1
    assert kernels.launch_count("convert.cu", f"gelu_backward_{'half' if fmt == 'float16' else 'bfloat16'}") == 1
    assert y16.dtype == dx16.dtype == minitorch.dtypes.resolve(fmt)
    assert y16.bits().tobytes() == ops.convert(ops.gelu(x), fmt).bits().tobytes()
    want = ops.convert(ops.gelu_backward(x, ops.convert(g16, "float32")), fmt)
    assert dx16.bits().tobytes() == want.bits().tobytes()
    # and against float64 (the tanh formula), within the 16-bit rounding
    v = x.numpy().astype(np.float64)
    u = np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)
    np.testing.assert_allclose(y16.float().numpy(), 0.5 * v * (1 + np.tanh(u)), rtol=2 ** -7, atol=1e-3)


@pytest.mark.parametrize("variant", [None, "pipeline"], ids=["default", "rung 5"])
def test_linear_kept_rounded_is_the_float32_output_rounded(device, variant):
    """Linear(..., keep_rounded=True) under autocast: y in bfloat16, the bits of the float32 output rounded once
    (the bias added to the float32 sums in the epilogue, or by add_bias before the conversion); its gradient
    comes in bfloat16 and gives the gradients of the float32 layer fed the same rounded gradient (the bias's:
    the float32 column sums of it)."""
    m, k, n = (70, 40, 36) if device == "emu" else (1000, 384, 1152)
    rng = np.random.default_rng(15)
    x_host = rng.standard_normal((m, k)).astype(np.float32)
    grad16 = minitorch.tensor(rng.standard_normal((m, n)).astype(np.float32), device).to("bfloat16")
    layer = minitorch.nn.Linear(k, n, seed=4, device=device)
    previous = ops.set_hgemm_variant(variant)
    try:
        y16, *kept = _autocast_pass(layer, x_host, device, lambda x: layer(x, keep_rounded=True), grad16)
        y32, *plain = _autocast_pass(layer, x_host, device, layer, grad16.float())
    finally:
        ops.set_hgemm_variant(previous)
    assert y16.dtype == minitorch.dtypes.bfloat16 and y32.dtype == np.float32
    assert y16.bits().tobytes() == y32.to("bfloat16").bits().tobytes()
    for name, got, want in zip(("x.grad", "weight.grad"), kept[:2], plain[:2], strict=True):
        assert got.tobytes() == want.tobytes(), name
    np.testing.assert_allclose(kept[2], plain[2], rtol=1e-5, atol=1e-5 * float(np.abs(plain[2]).max()))


def test_a_split_weight_gradient_runs_its_pieces_in_one_launch_and_sums_them(device):
    """dW = Xᵀ·dY over a long K, split into pieces (ops.linalg.split_k): one launch of the lab's hgemm for the whole
    stack (on an H100 rung 6, its tensor maps over the stack seen as one matrix) and one of its sum_pieces, within
    the bound of the whole float32 sum of the rounded operands."""
    k, m, n = (2048, 16, 24) if device == "emu" else (16384, 384, 1152)
    rng = np.random.default_rng(16)
    x = rng.standard_normal((k, m)).astype(np.float32)
    dy = rng.standard_normal((k, n)).astype(np.float32)
    pieces = ops.linalg.split_k(m, n, k, True, False)
    assert pieces > 1
    x16, dy16 = minitorch.tensor(x, device).to("bfloat16"), minitorch.tensor(dy, device).to("bfloat16")
    kernels.reset_launch_counts()
    got = ops.matmul(x16, dy16, transpose_a=True, out_dtype="float32").numpy()
    counts = kernels.launch_counts()
    products = {f: c for (_, f), c in counts.items() if f.startswith("hgemm_") and f != "hgemm_sum_pieces"}
    assert sum(products.values()) == 1, products
    if device == "cuda":  # an H100: the stack on rung 6
        assert any(f.startswith("hgemm_6_wgmma") for f in products), products
    assert counts.get(("hgemm.cu", "hgemm_sum_pieces")) == 1
    xr = x16.float().numpy().astype(np.float64)
    dyr = dy16.float().numpy().astype(np.float64)
    bound = 2 * k * 2.0 ** -24 * (np.abs(xr).T @ np.abs(dyr))
    assert np.all(np.abs(got - xr.T @ dyr) <= bound)
