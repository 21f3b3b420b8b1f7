"""minitorch.amp (Phase 8a): autocast's products on 16-bit operands with fp32 results and fp32 gradients
to fp32 master weights, a small MLP trained under bf16 autocast against its fp32 run, and GradScaler
(a forced fp16 overflow skips the step and lowers the scale; good steps grow it)."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import amp, kernels, ops
from tests.half_support import half_device, reference_bits  # noqa: F401 (half_device is the device fixture)
from tests.phase3_support import write_solutions
from tests.solution_files import solution_files

# the forced overflows make NumPy warn on the cpu device
pytestmark = [pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]




@pytest.fixture(autouse=True)
def scaler_files(request):
    """The loss scaler's device side (scaler.cu/.py, Phase 8a's lab solution) next to the stand-ins, and
    Phase 7's clip.cu/.py (scale_by: a loss's backward scaled by a device value), Phase 5's Adam."""
    if "device" in request.fixturenames:
        workspace = request.getfixturevalue("workspace")
        request.getfixturevalue("device")
        for notebook, prefix in (("phase8a_tensor_cores.ipynb", "scaler."), ("phase7_gpt.ipynb", "clip."),
                                 ("phase5_fast.ipynb", "adam.")):
            for name, text in solution_files(notebook).items():
                if name.startswith(prefix):
                    (workspace / name).write_text(text)


def _rounded(x: np.ndarray, fmt: str) -> np.ndarray:
    """float32 values rounded to ``fmt`` (the independent reference), as float64."""
    bits = reference_bits(np.asarray(x, np.float32), fmt)
    if fmt == "bfloat16":
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def _launched() -> set[tuple[str, str]]:
    return {key for key, n in kernels.launch_counts().items() if n}


def _assert_product(got: np.ndarray, a: np.ndarray, b: np.ndarray, fmt: str) -> None:
    """got = the float32 product of the 16-bit-rounded operands: within 2·k·2⁻²⁴·Σ|a||b| (recursive
    summation's bound, doubled for any order or fused adds, as the grader's)."""
    ar, br = _rounded(a, fmt), _rounded(b, fmt)
    exact = ar @ br
    bound = 2 * a.shape[1] * 2.0 ** -24 * (np.abs(ar) @ np.abs(br))
    assert np.all(np.abs(got.astype(np.float64) - exact) <= bound), np.max(np.abs(got - exact) - bound)
    assert not np.array_equal(got, (a.astype(np.float64) @ b).astype(np.float32))  # the operands were rounded


@pytest.mark.parametrize("fmt", ["bfloat16", "float16"])
def test_autocast_products_run_on_16bit_operands_and_give_float32(device, fmt):
    rng = np.random.default_rng(0)
    a32, b32 = rng.standard_normal((9, 40)).astype(np.float32), rng.standard_normal((40, 6)).astype(np.float32)
    a, b = minitorch.tensor(a32, device), minitorch.tensor(b32, device)
    kernels.reset_launch_counts()
    with amp.autocast(fmt):
        c = a @ b
        s = ops.add(a, a)  # everything but products stays float32
        with amp.autocast(fmt, enabled=False):
            plain = a @ b
    assert c.dtype == minitorch.float32 and s.dtype == minitorch.float32 and plain.dtype == minitorch.float32
    _assert_product(c.numpy(), a32, b32, fmt)
    np.testing.assert_allclose(plain.numpy(), a32.astype(np.float64) @ b32, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(s.numpy(), a32 + a32)
    assert ops.autocast_dtype() is None  # left as found
    if device == "emu":
        launched = _launched()
        assert ("hgemm.cu", "hgemm_f32") in launched
        assert ("convert.cu", "float_to_half" if fmt == "float16" else "float_to_bfloat16") in launched


def test_backward_products_keep_the_forward_dtype_and_give_float32_gradients(device):
    rng = np.random.default_rng(1)
    x32, w32 = rng.standard_normal((8, 20)).astype(np.float32), rng.standard_normal((20, 5)).astype(np.float32)
    g32 = rng.standard_normal((8, 5)).astype(np.float32)
    x = minitorch.tensor(x32, device, requires_grad=True)
    w = minitorch.tensor(w32, device, requires_grad=True)
    with amp.autocast("bfloat16"):
        y = x @ w
    kernels.reset_launch_counts()
    y.backward(minitorch.tensor(g32, device))  # outside the region: still bf16 products, as recorded
    assert x.grad.dtype == w.grad.dtype == minitorch.float32
    _assert_product(x.grad.numpy(), g32, w32.T.copy(), "bfloat16")
    _assert_product(w.grad.numpy(), x32.T.copy(), g32, "bfloat16")
    if device == "emu":  # the forward's rounded operands are reused: only dY is converted
        assert kernels.launch_counts().get(("hgemm.cu", "hgemm_f32")) == 2
        assert kernels.launch_counts().get(("convert.cu", "float_to_bfloat16")) == 1
    x.grad = w.grad = None
    with amp.autocast("bfloat16"):  # a product recorded in float32 stays float32 under a later autocast
        y = ops.matmul(x, w, compute_dtype="float32")
    np.testing.assert_allclose(y.numpy(), x32.astype(np.float64) @ w32, rtol=1e-5, atol=1e-5)


def _train_mlp(device: str, dtype: str | None, steps: int) -> tuple[np.ndarray, minitorch.nn.Module]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (np.sin(x @ np.array([1.0, -2.0, 0.5, 1.5])) + 0.3 * x[:, 0] ** 2).astype(np.float32).reshape(64, 1)
    model = minitorch.nn.Sequential(minitorch.nn.Linear(4, 32, seed=1), minitorch.nn.ReLU(),
                                    minitorch.nn.Linear(32, 1, seed=2))
    opt = minitorch.optim.SGD(model.parameters(), lr=0.1)
    xt, yt = minitorch.tensor(x, device), minitorch.tensor(y, device)
    losses = []
    for _ in range(steps):
        with amp.autocast(dtype or "bfloat16", enabled=dtype is not None):
            loss = minitorch.functional.mse_loss(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), model


def test_mlp_trained_under_bf16_autocast_reaches_the_fp32_loss(device):
    """A 4-32-1 MLP, 100 full-batch SGD steps. bf16 rounds each product operand by at most 2^-9 relative;
    with fp32 accumulation, fp32 masters and fp32 gradients the trajectory stays within about 0.1% of
    the fp32 run's loss decrease (measured: 0.11% at most along the way, 0.01% at the end, on cpu and
    emu). The test allows 1% of the decrease: ten times the measured gap, and far less than what an
    autocast that loses updates to bf16 rounding of the weights or drops a gradient would give."""
    steps = 100
    fp32, _ = _train_mlp(device, None, steps)
    kernels.reset_launch_counts()
    bf16, model = _train_mlp(device, "bfloat16", steps)
    decrease = fp32[0] - fp32[-1]
    assert decrease > 0.5 * fp32[0]  # it trains
    assert abs(bf16[-1] - fp32[-1]) <= 0.01 * decrease, (bf16[-1], fp32[-1])
    assert np.max(np.abs(bf16 - fp32)) <= 0.01 * decrease
    assert np.any(bf16 != fp32)  # and bf16 was used
    assert all(p.dtype == minitorch.float32 for p in model.parameters())  # masters stay fp32
    if device == "emu":
        assert ("hgemm.cu", "hgemm_f32") in _launched()


# ---------------------------------------------------------------- GradScaler

def _linear(device: str) -> tuple[minitorch.nn.Linear, minitorch.Tensor]:
    layer = minitorch.nn.Linear(4, 1, seed=3)
    return layer.to(device), minitorch.tensor(np.zeros((8, 1), np.float32), device)


def test_an_fp16_overflow_skips_the_step_and_lowers_the_scale(device):
    layer, target = _linear(device)
    x = minitorch.tensor(np.full((8, 4), 300.0, np.float32), device)  # dL/dy·2^16 > 65504: fp16 overflows
    opt = minitorch.optim.SGD(layer.parameters(), lr=1e-6, momentum=0.9)
    scaler = amp.GradScaler()
    assert scaler.get_scale() == 2.0 ** 16
    before = [p.numpy() for p in layer.parameters()]
    with amp.autocast("float16"):
        loss = minitorch.functional.mse_loss(layer(x), target)
    scaler.scale(loss).backward()
    assert not np.all(np.isfinite(layer.weight.grad.numpy()))  # the overflow really happened
    assert scaler.step(opt) is False
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 15
    for p, b in zip(layer.parameters(), before, strict=True):
        assert np.array_equal(p.numpy(), b)  # skipped: nothing moved
        assert not np.any(opt.velocity[id(p)].numpy())  # the optimizer's state neither
    for _ in range(12):  # the scale backs off until the gradients fit, then the steps go through
        opt.zero_grad()
        with amp.autocast("float16"):
            loss = minitorch.functional.mse_loss(layer(x), target)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    assert scaler.get_scale() < 2.0 ** 15
    moved = [not np.array_equal(p.numpy(), b) for p, b in zip(layer.parameters(), before, strict=True)]
    assert all(moved) and all(np.all(np.isfinite(p.numpy())) for p in layer.parameters())


def test_the_scale_grows_after_growth_interval_good_steps(device):
    layer, target = _linear(device)
    x = minitorch.tensor(np.random.default_rng(4).standard_normal((8, 4)).astype(np.float32), device)
    opt = minitorch.optim.SGD(layer.parameters(), lr=0.01)
    scaler = amp.GradScaler(init_scale=2.0 ** 8, growth_interval=3)
    for step in range(1, 7):
        opt.zero_grad()
        with amp.autocast("float16"):
            loss = minitorch.functional.mse_loss(layer(x), target)
        scaler.scale(loss).backward()
        scaled = layer.weight.grad.numpy()
        scaler.unscale_(opt)  # unscaling by a power of two is exact
        assert np.array_equal(layer.weight.grad.numpy(), scaled / np.float32(scaler.get_scale()))
        assert scaler.step(opt) is True
        scaler.update()
        assert scaler.get_scale() == 2.0 ** (8 + step // 3)


def test_unscaled_gradients_equal_the_unscaled_run(device):
    layer, target = _linear(device)
    x = minitorch.tensor(np.random.default_rng(5).standard_normal((8, 4)).astype(np.float32), device)
    grads = []
    for scaler in (amp.GradScaler(enabled=False), amp.GradScaler(init_scale=2.0 ** 10)):
        layer.zero_grad()
        opt = minitorch.optim.SGD(layer.parameters(), lr=0.1)  # never stepped
        with amp.autocast("float16"):
            loss = minitorch.functional.mse_loss(layer(x), target)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        grads.append([p.grad.numpy() for p in layer.parameters()])
    for plain, unscaled in zip(*grads, strict=True):
        np.testing.assert_array_equal(plain, unscaled)  # every rounding scaled by a power of two: exact


def test_scaler_misuse_is_refused(device):
    layer, target = _linear(device)
    opt = minitorch.optim.SGD(layer.parameters(), lr=0.1)
    scaler = amp.GradScaler()
    with pytest.raises(TypeError, match="takes a Tensor"):
        scaler.scale(1.0)
    with pytest.raises(RuntimeError, match="no step"):
        scaler.update()
    loss = minitorch.functional.mse_loss(layer(minitorch.tensor(np.ones((8, 4), np.float32), device)), target)
    scaler.scale(loss).backward()
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="step was already called"):
        scaler.step(opt)
    scaler.update()
    state = scaler.state_dict()
    other = amp.GradScaler(init_scale=1.0)
    other.load_state_dict(state)
    assert other.get_scale() == scaler.get_scale() and other.state_dict() == state
    for bad in ({"init_scale": 0.0}, {"growth_factor": 1.0}, {"backoff_factor": 1.5}, {"growth_interval": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            amp.GradScaler(**bad)
    with pytest.raises(ValueError, match="dtype must be 'bfloat16' or 'float16', got 'float32'"):
        amp.autocast("float32")


def test_an_autocast_training_step_is_capturable(device):
    """Conversions and products are launches with no host round trip: a bf16 autocast step captured in a
    graph replays exactly what eager steps compute (a GradScaler step is not capturable: it reads the
    inf/NaN flag on the host)."""
    if device == "cpu":
        pytest.skip("the cpu device has no graphs")
    from minitorch import graph

    def make(seed: int):
        layer = minitorch.nn.Linear(4, 3, seed=seed)
        opt = minitorch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
        x = minitorch.tensor(np.random.default_rng(seed).standard_normal((5, 4)).astype(np.float32))
        y = minitorch.tensor(np.zeros((5, 3), np.float32))

        def step():
            opt.zero_grad()
            with amp.autocast("bfloat16"):
                loss = minitorch.functional.mse_loss(layer(x), y)
            loss.backward()
            opt.step()
            return loss

        return layer, step

    eager_layer, eager_step = make(7)
    eager = [eager_step().item() for _ in range(3)]
    layer, step = make(7)
    captured = graph.capture(step)
    replayed = []
    for _ in range(3):
        captured.replay()
        replayed.append(captured.output.item())
    np.testing.assert_array_equal(replayed, eager)
    for p, q in zip(layer.parameters(), eager_layer.parameters(), strict=True):
        np.testing.assert_array_equal(p.numpy(), q.numpy())

    scaled_layer, _ = make(8)
    scaler = amp.GradScaler()
    x, zero = minitorch.tensor(np.ones((5, 4), np.float32)), minitorch.tensor(np.zeros((5, 3), np.float32))

    def scaled_backward():  # the scaled loss's backward reads nothing from the host: capturable
        scaled_layer.zero_grad()
        with amp.autocast("float16"):
            loss = minitorch.functional.mse_loss(scaled_layer(x), zero)
        scaler.scale(loss).backward()
        return scaled_layer.weight.grad

    eager_grad = scaled_backward().numpy()
    captured = graph.capture(scaled_backward)
    captured.replay()
    np.testing.assert_array_equal(captured.output.numpy(), eager_grad)


def _scaled_training(device: str, captured: bool, batches: list[np.ndarray], optimizer: str):
    """Phase 8a's graded scaled step (grader/tests/phase8a_helpers.py), eager or captured and replayed: the scale,
    the parameters and the optimizer's state (momentum, or Adam's step count and m) after each step."""
    from grader.tests.phase8a_helpers import scaled_run

    def state(opt, params):
        return ([opt.velocity[id(p)].numpy() for p in params] if optimizer == "sgd"
                else [opt.step_count] + [opt.m[id(p)].numpy() for p in params])

    return [(scale, params, opt_state) for scale, _, params, opt_state in
            scaled_run(captured, batches, optimizer, device, state)]


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_captured_step_with_a_grad_scaler_skips_overflows_on_the_device(device, optimizer):
    """Batches of small values (the scaled gradients fit float16) and of large ones (x = 300: dL/dy·2¹² >
    65504, an overflow): the captured step, replayed, must skip exactly the overflowing steps (parameters,
    momentum or Adam's m and step count unchanged), halve the scale at each and double it after two good
    steps in a row, as the eager steps do, bit for bit: nothing is decided on the host."""
    if device == "cpu":
        pytest.skip("the cpu device has no graphs")
    rng = np.random.default_rng(12)
    small = [rng.standard_normal((8, 4)).astype(np.float32) for _ in range(4)]
    big = np.full((8, 4), 3000.0, np.float32)
    batches = [small[0], big, small[1], small[2], big, big, small[3]]
    eager = _scaled_training(device, False, batches, optimizer)
    replayed = _scaled_training(device, True, batches, optimizer)
    scales = [h[0] for h in eager]
    # overflow: halved; two good steps in a row: doubled (the interval is 2)
    assert scales == [2.0 ** 12, 2.0 ** 11, 2.0 ** 11, 2.0 ** 12, 2.0 ** 11, 2.0 ** 10, 2.0 ** 10], scales
    for i in (1, 4, 5):  # the overflowing steps changed nothing
        for before, after in zip(eager[i - 1][1] + eager[i - 1][2], eager[i][1] + eager[i][2], strict=True):
            np.testing.assert_array_equal(after, before)
    for i in (2, 3, 6):  # the good ones moved the parameters
        assert not np.array_equal(eager[i][1][0], eager[i - 1][1][0])
    for (s1, p1, o1), (s2, p2, o2) in zip(eager, replayed, strict=True):
        assert s1 == s2
        for a, b in zip(p1 + o1, p2 + o2, strict=True):
            np.testing.assert_array_equal(a, b)


def test_a_gpt_under_autocast_keeps_float32_everywhere_but_the_products(workspace):
    """The GPT's linear layers (3-D inputs viewed as rows) and attention's batched products run autocast's products;
    embeddings, LayerNorm, the attention softmax and the loss stay float32; the gradients are float32 and near the
    fp32 ones (cpu: cheap)."""
    write_solutions(workspace)
    model = minitorch.nn.GPT(20, 8, d_model=16, n_head=2, n_layer=1, seed=0).to("cpu")
    rng = np.random.default_rng(0)
    idx = minitorch.tensor(rng.integers(0, 20, (2, 8)), "cpu", dtype="int32")
    targets = minitorch.functional.class_indices(rng.integers(0, 20, 16), "cpu")
    results = []
    for enabled in (False, True):
        with amp.autocast("bfloat16", enabled=enabled):
            logits = model(idx)
            loss = minitorch.functional.cross_entropy(logits.reshape(16, 20), targets)
        assert logits.dtype == loss.dtype == minitorch.float32
        model.zero_grad()
        loss.backward()
        results.append((loss.item(), {n: p.grad.numpy() for n, p in model.named_parameters()}))
    (loss32, grads32), (loss16, grads16) = results
    # measured (attention's products in bf16 too): the losses 0.03% apart, the gradients at most 0.72% of their
    # largest element: the bounds are about thirty and seven times that
    assert loss16 != loss32 and abs(loss16 - loss32) < 1e-2 * loss32
    for name, g in grads16.items():
        assert g.dtype == np.float32
        assert np.max(np.abs(g - grads32[name])) <= 0.05 * np.max(np.abs(grads32[name])) + 1e-6, name


@pytest.mark.parametrize("loss_name", ["mse", "cross_entropy"])
def test_a_loss_scaled_by_a_device_value_backpropagates_without_a_read(device, loss_name, monkeypatch):
    """A loss times a value only the device knows (a GradScaler's scale): the loss's backward scales its
    gradient on the device (Phase 7's scale_by) instead of reading the value back, so it can be captured;
    the gradient is the float64 one within float32 rounding. Grading an earlier phase (before clip.py's
    phase) keeps the read: that phase is graded on its own kernels."""
    if device == "cpu":
        pytest.skip("the cpu device has no graphs and reads nothing back")
    from minitorch import graph

    if loss_name == "cross_entropy":
        for name, text in solution_files("phase6_cnn.ipynb").items():
            if name.startswith("softmax."):
                (minitorch.kernels.workspace_dir() / name).write_text(text)
    rng = np.random.default_rng(13)
    pred32 = rng.standard_normal((6, 5)).astype(np.float32)
    labels = rng.integers(0, 5, 6)
    target32 = rng.standard_normal((6, 5)).astype(np.float32)
    pred = minitorch.tensor(pred32, device, requires_grad=True)
    scale = minitorch.tensor(np.array([3.0], np.float32), device).reshape(())
    target = (minitorch.tensor(target32, device) if loss_name == "mse"
              else minitorch.functional.class_indices(labels, device))
    loss_fn = minitorch.functional.mse_loss if loss_name == "mse" else minitorch.functional.cross_entropy

    def backward():
        pred.grad = None
        (loss_fn(pred, target) * scale).backward()
        return pred.grad

    captured = graph.capture(backward)
    captured.replay()
    p64 = pred32.astype(np.float64)
    if loss_name == "mse":
        want = 3.0 * 2 * (p64 - target32) / p64.size
    else:
        e = np.exp(p64 - p64.max(axis=1, keepdims=True))
        want = 3.0 * (e / e.sum(axis=1, keepdims=True) - np.eye(5)[labels]) / 6
    np.testing.assert_allclose(captured.output.numpy(), want, rtol=1e-5, atol=1e-7)
    monkeypatch.setenv("MINITORCH_PHASE", "phase6")
    with pytest.raises(Exception, match="captur"):
        graph.capture(backward)


def test_a_linear_layer_under_autocast_works_with_launchers_from_before_the_fused_bias(device):
    """The stand-in hgemm.py takes no `bias` and convert.py has no to_16bit_column_sums (a learner's files from
    before the lab added them): a Linear layer under autocast then adds its bias and sums its gradient with
    add_bias and bias_grad, with the values of the product and the bias add as two Functions."""
    if device == "cpu":
        pytest.skip("the cpu device runs no launcher")
    layer = minitorch.nn.Linear(6, 5, seed=4).to(device)
    x_host = np.random.default_rng(15).standard_normal((9, 6)).astype(np.float32)
    previous = ops.set_hgemm_variant("pipeline")  # a rung that adds a bias, where the launcher takes one
    try:
        runs = []
        for fused in (True, False):
            x = minitorch.tensor(x_host, device)
            layer.zero_grad()
            kernels.reset_launch_counts()
            with amp.autocast("bfloat16"):
                y = layer(x) if fused else x @ layer.weight + layer.bias
            y.sum().backward()
            runs.append((y.numpy(), layer.weight.grad.numpy(), layer.bias.grad.numpy(), _launched()))
    finally:
        ops.set_hgemm_variant(previous)
    assert ("forward.cu", "add_bias") in runs[0][3] and ("backward.cu", "bias_grad") in runs[0][3]
    for got, want in zip(runs[0][:3], runs[1][:3], strict=True):
        assert got.tobytes() == want.tobytes()
