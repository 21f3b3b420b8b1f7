"""Phase 6's `best()` (the given part of the lab's conv.py) runs, where autotune() has not measured the shape
(`default_variant`), for every shape and pass the chapter measured on a GPU, the rung those measurements found
fastest: the committed `phase6_conv-*.json`, not a
guess (before, the forward ran the tiled kernel on the ResNet layer, where the GEMM is 0.238x cuDNN
against its 0.153x)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from tests.solution_files import solution_files

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"
PASSES = {"forward": "forward", "backward_input": "input", "backward_weight": "weight"}


def conv_module() -> types.ModuleType:
    module = types.ModuleType("conv_solution")
    exec(compile(solution_files("phase6_cnn.ipynb")["conv.py"], "conv.py", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("path", sorted(RESULTS.glob("phase6_conv-*.json")), ids=lambda p: p.stem)
def test_best_runs_the_fastest_measured_rung(path, monkeypatch):
    cv = conv_module()
    monkeypatch.setattr(cv.backend, "get_device", lambda: "cuda")  # the GPU's rule (the emulator has its own)
    rows = [r for r in json.loads(path.read_text())["results"] if r["kind"] == "conv" and r["pass"] in PASSES]
    cases = {(r["shape"], r["pass"]) for r in rows}
    assert cases, f"{path.name} has no convolution measurements"
    checked, unmeasured = 0, []
    for shape_name, pass_ in sorted(cases):
        rungs = {r["variant"]: r for r in rows if (r["shape"], r["pass"]) == (shape_name, pass_)
                 and r["variant"] in cv.KINDS[PASSES[pass_]]}
        one = next(iter(rungs.values()))
        shape = cv.conv_shape((one["n"], one["c"], one["h"], one["w"]), (one["k"], one["c"], 3, 3), 1, 1)
        fastest = max(rungs, key=lambda v: rungs[v]["gflops"])
        chosen = cv.default_variant(PASSES[pass_], shape, 1)
        if chosen not in rungs:
            # a rung newer than this file (implicit GEMM, Winograd): measured by the next benchmark run
            unmeasured.append(f"{shape_name} {pass_}: {chosen}")
            continue
        checked += 1
        # a rung within 3% of the fastest is a tie: timings of that size move from run to run
        assert rungs[chosen]["gflops"] >= 0.97 * rungs[fastest]["gflops"], (
            f"{shape_name} {pass_}: best() runs {chosen} ({rungs[chosen]['ratio']:.3f}x cuDNN) where {fastest} "
            f"measured {rungs[fastest]['ratio']:.3f}x")
    assert checked or not unmeasured, f"{path.name}: best() runs rungs this file never measured: {unmeasured}"


def test_the_emulator_runs_rung_7_on_small_layers_and_the_gpu_does_not(monkeypatch):
    """default_variant on the emulator: every pass of MNIST's two layers on regtile (rung 7), which the emulator
    runs 2 to 10 times faster than the next rung (benchmarks/results/phase6_conv_regtile-*.json), but the input's
    gradient of the 1-channel layer (rung 7 would fill 1 of its 8 channels; direct wins); a layer above BIG_FLOPS
    and a pass rung 7 cannot compute (the input's gradient at stride 2) keep the GPU's rule; on a GPU nothing
    changes. regtile_chunks covers the N*P*Q positions exactly once on both."""
    cv = conv_module()
    mnist = [cv.conv_shape((64, 1, 28, 28), (8, 1, 3, 3), 1, 1), cv.conv_shape((64, 8, 14, 14), (16, 8, 3, 3), 1, 1)]
    resnet = cv.conv_shape((64, 64, 56, 56), (64, 64, 3, 3), 1, 1)
    strided = cv.conv_shape((2, 3, 9, 9), (4, 3, 3, 3), 2, 1)
    for device in ("emu", "cuda"):
        monkeypatch.setattr(cv.backend, "get_device", lambda device=device: device)
        for shape in mnist:
            for kind in ("forward", "input", "weight"):
                chosen = cv.default_variant(kind, shape, 1)
                one_channel = kind == "input" and shape[1] == 1  # 1 of its 8 channels: not where it wins
                assert (chosen == "regtile") == (device == "emu" and not one_channel), (device, kind, shape, chosen)
        assert cv.default_variant("forward", resnet, 1) == "winograd4"
        assert cv.default_variant("input", strided, 2) != "regtile"
        for shape in [*mnist, resnet, cv.conv_shape((1, 1, 1, 1), (1, 1, 1, 1), 1, 0)]:
            n, c, h, w, k, r, s, p, q = shape
            chunk, chunks = cv.regtile_chunks(shape)
            assert chunk * chunks >= n * p * q > chunk * (chunks - 1) and chunks <= 65535, (device, shape)


def test_best_runs_the_tuned_rung_of_this_device_and_shape(workspace):
    """autotune()'s table (conv_tuning.json: device -> pass -> shape -> rung) decides, per device and shape; a
    tuned rung that cannot compute the shape (Winograd for a 5 x 5 filter), another device's entry, or an
    untuned shape fall back to default_variant()."""
    from minitorch import backend

    previous = backend.get_device()
    backend.set_device("emu")  # off the GPU (the tuning key is the device's own name, no gemm.py needed)
    try:
        _tuned_rung_on_emu(workspace)
    finally:
        backend.set_device(previous)


def _tuned_rung_on_emu(workspace):
    from minitorch import backend

    cv = conv_module()
    device = cv.device_name()
    assert device == backend.get_device() == "emu"
    resnet = cv.conv_shape((64, 64, 56, 56), (64, 64, 3, 3), 1, 1)
    five = cv.conv_shape((2, 3, 9, 9), (4, 3, 5, 5), 1, 2)
    table = {device: {"forward": {cv.shape_key(resnet, 1): "winograd", cv.shape_key(five, 1): "winograd"},
                      "weight": {cv.shape_key(resnet, 1): "direct"}},
             "another GPU": {"input": {cv.shape_key(resnet, 1): "im2col"}}}
    (workspace / cv.TUNING_FILE).write_text(json.dumps(table))
    assert cv.best("forward", resnet, 1) == "winograd"
    assert cv.best("weight", resnet, 1) == "direct"
    assert cv.best("input", resnet, 1) == cv.default_variant("input", resnet, 1) == "winograd4"
    # a small layer on the emulator: rung 7 (on a GPU, rung 3)
    assert cv.best("forward", five, 1) == cv.default_variant("forward", five, 1) == "regtile"
    assert not cv.applicable("forward", "winograd", five, 1)


def test_autotune_stores_the_fastest_checked_rung_and_best_runs_it(workspace):
    """autotune() on the emulator with a given timer (on a GPU: CUDA events): every applicable rung of every pass
    checked and timed, the fastest stored under this device and shape, and best() runs it from then on; a rung
    that cannot compute the shape (Winograd at stride 2) is never timed."""
    from minitorch import backend

    for notebook in ("phase1_memory.ipynb", "phase5_fast.ipynb", "phase6_cnn.ipynb"):
        for name, text in solution_files(notebook).items():
            (workspace / name).write_text(text)
    previous = backend.get_device()
    backend.set_device("emu")
    try:
        _autotune_on_emu(workspace)
    finally:
        backend.set_device(previous)


def _autotune_on_emu(workspace):
    cv = conv_module()
    preferred = {"winograd": 1e-6, "direct": 2e-6, "tiled": 3e-6}  # Winograd, else direct, fastest
    timed = []

    def timer(fn):
        fn()
        variant = fn.__defaults__[0]
        timed.append(variant)
        return preferred.get(variant, 5e-6)

    layers = [(1, 2, 6, 7, 3, 3, 3, 1, 1), (1, 2, 7, 7, 3, 3, 3, 2, 0)]
    table = cv.autotune(layers, verbose=False, timer=timer)
    entries = table[cv.device_name()]
    s1 = cv.conv_shape((1, 2, 6, 7), (3, 2, 3, 3), 1, 1)
    s2 = cv.conv_shape((1, 2, 7, 7), (3, 2, 3, 3), 2, 0)
    assert entries["forward"][cv.shape_key(s1, 1)] == "winograd"
    assert entries["forward"][cv.shape_key(s2, 2)] == "direct"   # no Winograd at stride 2
    assert entries["weight"][cv.shape_key(s1, 1)] == "direct"
    assert entries["input"][cv.shape_key(s1, 1)] == "winograd"  # the input gradient at stride 1 too
    assert timed.count("winograd") == 2 and timed.count("igemm") == 6
    assert json.loads((workspace / cv.TUNING_FILE).read_text()) == table
    assert cv.best("forward", s1, 1) == "winograd" != cv.default_variant("forward", s1, 1)


@pytest.mark.parametrize("device", ["cuda", "emu"])
def test_bias_gradient_chunks_cover_each_channel_once(device, monkeypatch):
    """bias_plan's (chunk, splits, threads): chunks of a multiple of 4 values (float4 loads), splits of them that
    cover a channel's N·P·Q values exactly once (no chunk empty, none missing), a block of at most 1024 threads
    (block_sum's scratch); on a GPU a small channel is one block (one launch: MNIST's second layer), a large one
    several (the ResNet layer's 200,704 values)."""
    cv = conv_module()
    monkeypatch.setattr(cv.backend, "get_device", lambda: device)
    for n, k, pq in [(64, 16, 196), (64, 8, 784), (64, 64, 3136), (1, 1, 1), (2, 1031, 2), (3, 7, 15), (0, 3, 9),
                     (5, 3, 4097)]:
        chunk, splits, threads = cv.bias_plan(n, k, pq)
        total = n * pq
        assert chunk % 4 == 0 and 1 <= splits <= 65535 and 32 <= threads <= 1024 and threads % 32 == 0
        assert chunk * splits >= total and (splits == 1 or chunk * (splits - 1) < total), (n, k, pq)
    if device == "cuda":
        assert cv.bias_plan(64, 16, 196)[1:] == (1, cv.BIAS_THREADS)
        assert cv.bias_plan(64, 64, 3136)[1] > 1
