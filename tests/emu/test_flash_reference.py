"""The benchmark's harness (benchmarks/phase8b_flash.py) on the emulator, with the lab's reference flash.cu
(solutions/phase8b_flash.ipynb): the backward in the two tilings its tuner may choose besides the lab's, against
a float64 NumPy attention of the 16-bit inputs (``phase8b_flash.reference``), at T = 65, causal.

The bound (``phase8b_flash.within_bound``): |out - ref| <= 3 u mag + u |ref|, u the 16-bit type's unit
roundoff, mag the same product on magnitudes: the kernels round P (and dS) to 16 bits before their products and
round their outputs, everything else is fp32. Every rung and the backward in the lab's tiling are graded by
`grader check phase8b --solutions` (make test); known-bad variants by tests/grader/test_grader_fixtures_phase8b.py.
"""

from __future__ import annotations

import math
import sys
from functools import cache

import numpy as np

from minitorch import emu
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import phase8b_flash as fl  # noqa: E402

SOURCE = fl.source()
RNG = np.random.default_rng(25)
LENGTHS = (1, 7, 65)
BH = 2  # two heads: a wrong head offset shows
NO_DROPOUT = (np.uint32(0), np.float32(1.0), np.uint64(0))  # + step (and the forward's step_used): unread


@cache
def module(names: tuple[str, ...], code: str = SOURCE) -> emu.RawModule:
    return emu.RawModule(code=code, name_expressions=list(names), filename="flash.cu")


def rand_inputs(t: int, d: int, dtype: str, n: int = 4) -> list[np.ndarray]:
    """Standard normal (BH, T, D) arrays as 16-bit patterns."""
    return [fl.to_bits(RNG.standard_normal((BH, t, d)), dtype) for _ in range(n)]


def forward(rung: int, dtype: str, q, k, v, causal: bool, code: str = SOURCE, tiles: tuple | None = None):
    bh, t, d = q.shape
    name = fl.fwd_kernel(rung, dtype, d, tiles)
    kern = module((name,), code).get_function(name)
    br, threads, smem = fl.fwd_geometry(rung, d, tiles)
    o = emu.asarray(np.full(q.shape, 0x7FFF, np.uint16))  # NaN: every element must be written
    lse = emu.asarray(np.full((bh, t), np.nan, np.float32))
    if smem > 48 * 1024:
        kern.max_dynamic_shared_size_bytes = smem
    kern((math.ceil(t / br), bh), (threads,), (emu.asarray(q), emu.asarray(k), emu.asarray(v), o, lse, np.int32(t),
                                               np.float32(fl.LOG2E / math.sqrt(d)), np.int32(causal), *NO_DROPOUT,
                                               emu.zeros((1,), np.int64), emu.zeros((1,), np.int64)),
         shared_mem=smem)
    return o.get(), lse.get()


def backward(dtype: str, q, k, v, o, lse, do, causal: bool, tiles: tuple | None = None, code: str = SOURCE):
    bh, t, d = q.shape
    names = fl.bwd_kernels(dtype, d, tiles)
    mod = module(names, code)
    dot, main, conv = (mod.get_function(n) for n in names)
    delta, dqacc = emu.zeros((bh, t)), emu.asarray(np.full((bh, t, d), np.nan, np.float32))
    dq, dk, dv = (emu.asarray(np.full(q.shape, 0x7FFF, np.uint16)) for _ in range(3))
    rows, n = bh * t, bh * t * d
    args = [emu.asarray(x) for x in (q, k, v, o, lse, do)]
    dot((math.ceil(rows / 8),), (256,), (args[3], args[5], delta, dqacc, np.int32(rows)))
    bc, threads, smem = fl.bwd_geometry(d, tiles)
    if smem > 48 * 1024:
        main.max_dynamic_shared_size_bytes = smem
    main((math.ceil(t / bc), bh), (threads,), (*args[:3], args[5], args[4], delta, dqacc, dk, dv, np.int32(t),
                                               np.float32(fl.LOG2E / math.sqrt(d)), np.float32(1 / math.sqrt(d)),
                                               np.int32(causal), *NO_DROPOUT, emu.zeros((1,), np.int64)),
         shared_mem=smem)
    conv((math.ceil(n / 256),), (256,), (dqacc, dq, np.float32(1 / math.sqrt(d)), np.int64(n)))
    return dq.get(), dk.get(), dv.get()


def check_forward(rung: int, dtype: str, t: int, d: int, causal: bool, code: str = SOURCE,
                  tiles: tuple | None = None) -> tuple[bool, str]:
    q, k, v = rand_inputs(t, d, dtype, 3)
    o, lse = forward(rung, dtype, q, k, v, causal, code, tiles)
    ref = fl.reference(*(fl.from_bits(x, dtype) for x in (q, k, v)), causal)
    ok, units = fl.within_bound(fl.from_bits(o, dtype), ref["o"], ref["o_mag"], dtype)
    ok_lse = fl.lse_ok(lse, ref["lse"])
    return ok and ok_lse, f"rung {rung} {dtype} T={t} D={d} causal={causal}: O {units:.2f} u-units, lse ok {ok_lse}"


def test_backward_in_the_other_tilings_the_benchmark_may_choose() -> None:
    """dQ's work split both ways: several warps an m-tile (8 warps, 64 rows), several m-tiles a warp (128 rows)."""
    check_backward("bf16", [(65, 64, True, tiles) for tiles in fl.BWD_CANDIDATES[64][1:]])


def backward_errors(dtype: str, t: int, d: int, causal: bool, tiles: tuple | None = None,
                    code: str = SOURCE) -> dict[str, tuple[bool, float]]:
    """{gradient: (within the bound?, error in u-units)} of the backward at one case."""
    q, k, v, do = rand_inputs(t, d, dtype)
    o, lse = forward(5, dtype, q, k, v, causal)
    grads = backward(dtype, q, k, v, o, lse, do, causal, tiles, code)
    ref = fl.reference(*(fl.from_bits(x, dtype) for x in (q, k, v)), causal, fl.from_bits(do, dtype))
    return {name: fl.within_bound(fl.from_bits(got, dtype), ref[name], ref[name + "_mag"], dtype)
            for name, got in zip(("dq", "dk", "dv"), grads, strict=True)}


def check_backward(dtype: str, cases: list[tuple]) -> None:
    for t, d, causal, tiles in cases:
        for name, (ok, units) in backward_errors(dtype, t, d, causal, tiles).items():
            assert ok, f"{name} {dtype} T={t} D={d} causal={causal} tiles {tiles}: {units:.2f} u-units"
