"""Graded tests of Phase 8b, FlashAttention: flash.cu / flash.py.

Run by `grader check phase8b`, on the active device (cuda or emu), with fresh random inputs (seed printed in the
report), outputs poisoned before every launch, and checks that the learner's kernels computed the results.

Every forward rung and the backward are compared with a float64 NumPy attention of the same 16-bit inputs at
sequence lengths that are multiples of no tile (1, 7, 65, 200; 1000 and 4097 on a GPU), head dims 64 and 128, causal
and not, fp16 and bf16, with and without dropout. The bound (`within_bound`): the kernels round P (and dS) to
16 bits before their products and round their outputs, everything else is fp32, so |out - ref| <= 3 u mag +
u |ref|, u the 16-bit unit roundoff (2^-8 bf16, 2^-11 fp16), mag the same product on magnitudes (P|V| for O,
|P|^T|dO| for dV, |dS'|^T|Q| and |dS'||K| for dK and dQ). The logsumexp: 1e-5 (1 + |lse|).

Dropout's mask is an independent NumPy evaluation of Phase 5's Philox (`minitorch.philox`): score (query i,
key j) of head h is kept iff word j % 4 of the block for counter (j / 4, i, h, offset) under key (seed_lo,
seed_hi) is >= floor(p 2^32). The mask is read back from the kernel exactly (Q = K = 0, V the identity). The
offset comes from device memory (`step`, a one-element int64 array: a model advances it on the device, so a
captured step draws new masks on every replay), at offsets other than 0; the forward must record it in
`step_used`, and the backward, given that record, must regenerate the forward's mask.

Performance (GPU only): the best forward and the backward as ratios to PyTorch's FlashAttention-2 backend
(`sdpa_kernel(SDPBackend.FLASH_ATTENTION)`) on the same tensors, in the same run.
"""

from __future__ import annotations

import ast
import math
from functools import partial
from typing import Any

import numpy as np
import pytest

from grader import checks
from grader.checks import GradeError, launch_checked
from minitorch import backend, kernels, philox

ON_GPU = backend.get_device() == "cuda"
FORMATS = ("bfloat16", "float16")
STORAGE = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(np.uint16)}
UNIT = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
BOUND_C = 3.0
LSE_TOL = 1e-5
RUNGS = {"scalar": "flash_fwd_1_scalar", "mma": "flash_fwd_2_mma", "ldmatrix": "flash_fwd_3_ldmatrix",
         "cp_async": "flash_fwd_4_cp_async", "tuned": "flash_fwd_5_tuned", "lean": "flash_fwd_6_lean",
         "split_kv": "flash_fwd_7_split_kv", "wgmma": "flash_fwd_8_wgmma"}
# rung 8 is its own file, built for sm_90a: on any other device the grader's plugin skips its checks before they
# start (NOT MEASURED, never blocking, as Phase 8a's rung 6)
WGMMA_FILE = "flash_wgmma.cu"
RUNG_FILES = {variant: WGMMA_FILE if variant == "wgmma" else "flash.cu" for variant in RUNGS}
# sequence lengths that fill no tile (16, 32, 64, 128); 200: several key tiles (a running max that moves after
# the first, dQ shared by two key blocks of the backward); the emulator runs CUDA C on the CPU: the long ones on a
# GPU only
LENGTHS = (1, 7, 65, 200) + ((1000,) if ON_GPU else ())
LONG = 4097  # the longest odd length: the best rung and the backward, on a GPU
HEADS = 3  # three (batch x head) slices: a wrong head offset shows


def flash_module():
    return kernels.load_module("flash.py")


def rung(variant: str, *extra: Any) -> Any:
    """A pytest.param naming the rung's kernel (reported when the test crashes or hangs)."""
    marks = [pytest.mark.kernel(RUNG_FILES[variant], RUNGS[variant])]
    if variant == "wgmma":
        marks.append(pytest.mark.needs_arch("sm_90a"))
    return pytest.param(variant, *extra, marks=marks, id="-".join(str(v) for v in (variant, *extra)))


def launched(variant: str) -> bool:
    """Did the rung's kernel run since the last reset_launches()?"""
    return any(n for (file, function), n in kernels.launch_counts().items()
               if file == RUNG_FILES[variant] and function.split("<")[0] == RUNGS[variant])


# ---------------------------------------------------------------- the references


def to_16bit_host(x: np.ndarray, dtype: str) -> np.ndarray:
    """float -> the 16-bit format's host array, round to nearest even (finite inputs)."""
    if dtype == "float16":
        return np.asarray(x, np.float32).astype(np.float16)
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def widen(x16: np.ndarray, dtype: str) -> np.ndarray:
    x16 = np.asarray(x16)
    if dtype == "float16":
        return x16.view(np.float16).astype(np.float64)
    return (x16.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def dropout_keep(heads: int, t: int, p: float, seed: int, offset: int = 0) -> np.ndarray:
    """(heads, T, T): 1/(1-p) (as float32) where score (i, j) is kept, 0 where dropped (minitorch.philox)."""
    if p == 0:
        return np.ones((heads, t, t))
    h, i, j4 = np.meshgrid(np.arange(heads), np.arange(t), np.arange((t + 3) // 4), indexing="ij")
    counters = np.stack([j4.ravel(), i.ravel(), h.ravel(), np.full(h.size, offset)], axis=1).astype(np.uint32)
    words = philox.philox4x32(counters, (seed & 0xFFFFFFFF, seed >> 32)).reshape(heads, t, -1)[:, :, :t]
    threshold = min(math.floor(p * 2.0 ** 32), 2 ** 32 - 1)
    return np.where(words >= threshold, float(np.float32(1.0 / (1.0 - p))), 0.0)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, do: np.ndarray | None = None,
              keep: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """float64 attention of (n, T, D) arrays, the magnitudes of its products (for the bound) and, given dO, its
    gradients; `keep`: dropout's scaled mask."""
    t, d = q.shape[1], q.shape[2]
    scale = 1.0 / math.sqrt(d)
    s = q @ k.transpose(0, 2, 1) * scale
    if causal:
        s = np.where(np.triu(np.ones((t, t), bool), 1)[None], -np.inf, s)
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    total = e.sum(-1, keepdims=True)
    p = e / total
    pz = p if keep is None else p * keep
    o = pz @ v
    out = {"o": o, "lse": (mx + np.log(total))[..., 0], "o_mag": pz @ np.abs(v)}
    if do is not None:
        dp = do @ v.transpose(0, 2, 1)
        if keep is not None:
            dp = dp * keep
        delta = (do * o).sum(-1, keepdims=True)
        ds = p * (dp - delta)
        ds_mag = p * (np.abs(dp) + np.abs(delta) + (np.abs(do) * np.abs(o)).sum(-1, keepdims=True))
        out.update(dv=pz.transpose(0, 2, 1) @ do, dv_mag=pz.transpose(0, 2, 1) @ np.abs(do),
                   dq=ds @ k * scale, dq_mag=ds_mag @ np.abs(k) * scale,
                   dk=ds.transpose(0, 2, 1) @ q * scale, dk_mag=ds_mag.transpose(0, 2, 1) @ np.abs(q) * scale)
    return out


def assert_within_bound(got16: np.ndarray, ref: np.ndarray, mag: np.ndarray, dtype: str, what: str,
                        causal: bool = False) -> None:
    u = UNIT[dtype]
    got = widen(got16, dtype)
    err = np.abs(got - ref)
    slack = u * np.abs(ref) + (2.0 ** -24 if dtype == "float16" else 0.0)
    bad = ~(err <= BOUND_C * u * mag + slack)  # NaN is bad
    if not bad.any():
        return
    h, r, c = (int(i) for i in np.argwhere(bad)[0])
    lines = [f"{what}: {int(bad.sum())} of {bad.size} values differ from float64 attention (of the same 16-bit "
             f"inputs) by more than {BOUND_C:g} u |P||V| + u |ref| (u = {u:g})",
             f"  first: head {h}, row {r}, column {c}: expected {ref[h, r, c]!r}, got {got[h, r, c]!r}"]
    unwritten = int(np.isnan(got).sum())
    if unwritten:
        lines.append(f"  {unwritten} values are NaN: never written (the output was poisoned), or a row whose "
                     f"softmax divided 0 by 0 (a running max never updated, a row of masked keys)")
    rows = np.flatnonzero(bad.any(axis=(0, 2)))
    t = got.shape[1]
    if causal:
        lines.append(f"  wrong rows {rows.min()}..{rows.max()} of {t}: check the causal mask (key j is seen by "
                     f"query i iff j <= i) on the tiles that touch the diagonal")
    elif rows.size == t and t % 16:
        lines.append(f"  every row of T = {t} (a multiple of no tile) is wrong: the sequence's tail? keys past T "
                     f"must be masked inside the kernel")
    raise GradeError("\n".join(lines))


def inputs(t: int, d: int, dtype: str, *salt: object, n: int = 3) -> list[np.ndarray]:
    r = checks.rng("flash", t, d, dtype, *salt)
    return [to_16bit_host(r.standard_normal((HEADS if t <= 1000 else 1, t, d)), dtype) for _ in range(n)]


def step_array(value: int) -> Any:
    """A one-element int64 device array: dropout's step (the Philox offset) as a model keeps it."""
    return backend.asarray(np.array([value], np.int64))


def run_forward(variant: str, q16, k16, v16, dtype: str, causal: bool, dropout_p: float = 0.0, seed: int = 0,
                offset: int | None = None, steps: list | None = None):
    """forward() into poisoned outputs: (o, lse) as host arrays; the rung's kernel must run. With `offset`, the
    offset in device memory (step = [offset]); step_used must then hold it, and is appended to `steps`."""
    fl = flash_module()
    q, k, v = (backend.asarray(x) for x in (q16, k16, v16))
    o = checks.poison(q16.shape, STORAGE[dtype])
    lse = checks.poison(q16.shape[:2])
    what = f"forward(variant={variant!r}, {dtype}, T={q16.shape[1]}, D={q16.shape[2]}, causal={causal}" + (
        f", dropout_p={dropout_p}" + (f", step=[{offset}]" if offset is not None else "") + ")" if dropout_p
        else ")")
    counters = {} if offset is None else {"step": step_array(offset), "step_used": step_array(-1)}
    checks.reset_launches()
    launch_checked(what, partial(fl.forward, q, k, v, o, lse, dtype, causal=causal, variant=variant,
                                 dropout_p=dropout_p, seed=seed, **counters))
    # "best": rung 5, or rung 8 on an sm_90 GPU without dropout
    allowed = [variant] if variant != "best" else ["tuned"] + (["wgmma"] if not dropout_p else [])
    if not any(launched(v) for v in allowed):
        raise GradeError(f"{what}: no launch of " + " or ".join(f"`{RUNGS[v]}` from {RUNG_FILES[v]}"
                                                                for v in allowed) + " was recorded")
    if counters:
        used = int(checks.to_host(counters["step_used"])[0])
        if used != offset:
            raise GradeError(f"{what}: step_used[0] = {used}, expected {offset}: the forward records the step it "
                             f"read (step[0]) in step_used[0], which the backward is given to regenerate the "
                             f"same mask")
        if steps is not None:
            steps.append(counters["step_used"])
    return checks.to_host(o), checks.to_host(lse), what


def check_forward(variant: str, t: int, d: int, dtype: str, causal: bool, dropout_p: float = 0.0) -> None:
    q16, k16, v16 = inputs(t, d, dtype, variant, causal, dropout_p)
    offset = 3 * t + 1 if dropout_p else None  # from device memory, never 0
    o, lse, what = run_forward(variant, q16, k16, v16, dtype, causal, dropout_p, seed=t + d, offset=offset)
    keep = dropout_keep(q16.shape[0], t, dropout_p, t + d, offset) if dropout_p else None
    ref = reference(*(widen(x, dtype) for x in (q16, k16, v16)), causal, keep=keep)
    assert_within_bound(o, ref["o"], ref["o_mag"], dtype, what + ": O", causal)
    bad = ~(np.abs(lse - ref["lse"]) <= LSE_TOL * (1 + np.abs(ref["lse"])))
    if bad.any():
        h, r = (int(i) for i in np.argwhere(bad)[0])
        raise GradeError(f"{what}: the logsumexp of {int(bad.sum())} rows is wrong; first head {h} row {r}: "
                         f"expected {ref['lse'][h, r]!r} (natural log: m + log l), got {lse[h, r]!r}")


def check_backward(t: int, d: int, dtype: str, causal: bool, dropout_p: float = 0.0) -> None:
    fl = flash_module()
    q16, k16, v16, do16 = inputs(t, d, dtype, "backward", causal, dropout_p, n=4)
    seed, offset = 1000 + t, (7 * t + 2 if dropout_p else None)
    used: list = []
    o16, lse, _ = run_forward("best", q16, k16, v16, dtype, causal, dropout_p, seed, offset, used)
    q, k, v, do, o = (backend.asarray(x) for x in (q16, k16, v16, do16, o16))
    grads = [checks.poison(q16.shape, STORAGE[dtype]) for _ in range(3)]
    what = f"backward({dtype}, T={t}, D={d}, causal={causal}" + (
        f", dropout_p={dropout_p}, step=the forward's step_used [{offset}])" if dropout_p else ")")
    counters = {"step": used[0]} if used else {}
    checks.reset_launches()
    launch_checked(what, partial(fl.backward, q, k, v, o, backend.asarray(lse), do, *grads, dtype, causal=causal,
                                 dropout_p=dropout_p, seed=seed, **counters))
    if not any(n for (file, function), n in kernels.launch_counts().items()
               if file == "flash.cu" and function.startswith("flash_bwd_mma")):
        raise GradeError(f"{what}: no launch of `flash_bwd_mma` from flash.cu was recorded")
    keep = dropout_keep(q16.shape[0], t, dropout_p, seed, offset) if dropout_p else None
    ref = reference(*(widen(x, dtype) for x in (q16, k16, v16)), causal, widen(do16, dtype), keep)
    for name, got in zip(("dq", "dk", "dv"), grads, strict=True):
        try:
            assert_within_bound(checks.to_host(got), ref[name], ref[name + "_mag"], dtype, f"{what}: {name}",
                                causal)
        except GradeError as e:
            hint = {"dq": "dQ gets a share from every key tile: added (atomicAdd into the fp32 buffer, zeroed "
                          "first), not stored",
                    "dv": "dV = (P o Z)^T dO: P from the logsumexp, Z the forward's dropout mask",
                    "dk": "dK = dS^T Q scale, dS = P o (Z o dP - Delta)"}[name]
            if dropout_p:
                hint += ("; with dropout: the mask must be the forward's, element for element (same Philox counter: "
                         "the offset the backward reads from its `step`, the forward's step_used)")
            raise GradeError(f"{e}\n  what to check: {hint}") from None


# ---------------------------------------------------------------- the forward ladder


@pytest.mark.parametrize("variant", [rung(v) for v in RUNGS])
@pytest.mark.hint("the online softmax: a running max m and sum l per row, the output rescaled by exp2(m_old - "
                  "m_new) whenever m moves; keys past T masked inside the kernel; causal: key j seen by query i "
                  "iff j <= i, also at a tile's edge")
def test_forward_rung_values(variant):
    for dtype in FORMATS:
        for t in LENGTHS:
            for causal in (False, True):
                check_forward(variant, t, 64, dtype, causal)
    for t in (65,) + ((1000,) if ON_GPU else ()):
        for causal in (False, True):
            check_forward(variant, t, 128, "bfloat16", causal)
    check_forward(variant, 7, 128, "float16", True)


@pytest.mark.kernel("flash.cu", "flash_fwd_5_tuned")
@pytest.mark.hint("keys past T masked inside the kernel; causal blocks skip the key tiles above the diagonal")
def test_long_sequences():
    if not ON_GPU:
        pytest.skip(f"T = {LONG} on a GPU only (the emulator checks the same paths at T = 200)")
    for dtype in FORMATS:
        for causal in (False, True):
            check_forward("best", LONG, 64, dtype, causal)
    check_forward("best", LONG, 128, "bfloat16", True)
    check_forward("tuned", LONG, 128, "bfloat16", False)  # rung 5 itself, where "best" is rung 8
    for causal in (False, True):
        check_backward(LONG, 64, "bfloat16", causal)


@pytest.mark.kernel("flash.cu", "flash_fwd_5_tuned")
@pytest.mark.hint("dropout: l sums every probability; P.V sees the kept ones times 1/(1-p); kept iff word key % 4 "
                  "of Philox block (key / 4, query, head, offset) under (seed_lo, seed_hi) is >= floor(p 2^32); "
                  "offset = step[0], read from device memory, and recorded in step_used[0]")
def test_forward_with_dropout():
    for dtype in FORMATS:
        for t, causal in ((7, False), (65, True)) + (((1000, True),) if ON_GPU else ()):
            check_forward("best", t, 64, dtype, causal, dropout_p=0.2)
    check_forward("best", 65, 128, "bfloat16", False, dropout_p=0.5)


@pytest.mark.kernel("flash.cu", "flash_fwd_5_tuned")
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.hint("the mask is a function of (head, query, key) through Phase 5's Philox: counter (key / 4, "
                  "query, head, offset), key (seed_lo, seed_hi), word key % 4, kept iff >= floor(p 2^32)")
def test_dropout_mask_bit_for_bit(d):
    """Q = K = 0 makes every probability of a row equal; V the identity (T = D) makes O the scaled mask itself:
    which elements the kernel dropped is read back exactly and compared with minitorch.philox's words."""
    t = d
    heads, p, seed = 2, 0.3, 0x1234_5678_9ABC_DEF0 + d
    zeros = to_16bit_host(np.zeros((heads, t, d)), "bfloat16")
    eye = to_16bit_host(np.broadcast_to(np.eye(t, d), (heads, t, d)), "bfloat16")
    # no step (offset 0); then the offset from device memory, as a model's counter gives it (mod 2^32)
    for causal, offset, step in ((False, 0, None), (True, 0, None), (False, 2**32 + 6, 2**32 + 6)):
        o, _, what = run_forward("best", zeros, zeros, eye, "bfloat16", causal, p, seed, step)
        offset %= 2**32
        kept = widen(o, "bfloat16") != 0
        want = dropout_keep(heads, t, p, seed, offset) > 0
        if causal:
            want &= np.tril(np.ones((t, t), bool))[None]
        if not (kept == want).all():
            h, i, j = (int(x) for x in np.argwhere(kept != want)[0])
            raise GradeError(f"{what}: {int((kept != want).sum())} of {kept.size} dropout decisions differ from "
                             f"minitorch.philox's; first head {h}, query {i}, key {j}: "
                             f"{'kept' if kept[h, i, j] else 'dropped'}, expected "
                             f"{'kept' if want[h, i, j] else 'dropped'}")


# ---------------------------------------------------------------- the backward


@pytest.mark.kernel("flash.cu", "flash_bwd_mma")
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.hint("P recomputed from the logsumexp; Delta = rowsum(dO o O); dV += P^T dO, dK += dS^T Q, dQ added "
                  "by every key tile (atomics into the fp32 buffer that the Delta kernel zeroes)")
def test_backward_values(d):
    lengths = LENGTHS if d == 64 else (7, 65) + ((1000,) if ON_GPU else ())
    for t in lengths:
        for causal in (False, True):
            check_backward(t, d, "bfloat16", causal)
    for causal in (False, True):
        check_backward(65, d, "float16", causal)


@pytest.mark.kernel("flash.cu", "flash_bwd_mma")
@pytest.mark.hint("the backward regenerates the forward's mask from the same Philox counters (never stored): "
                  "dV += (P o Z)^T dO and dS = P o (Z o dP - Delta)")
def test_backward_with_dropout():
    for dtype in FORMATS:
        for t, causal in ((7, True), (65, False)) + (((1000, True),) if ON_GPU else ()):
            check_backward(t, 64, dtype, causal, dropout_p=0.25)
    check_backward(65, 128, "bfloat16", True, dropout_p=0.1)


@pytest.mark.parametrize("variant", [rung("cp_async"), rung("tuned")])
@pytest.mark.hint("a barrier between the copies into shared memory and their reads, and another before a buffer "
                  "is overwritten; with cp.async, cp.async.wait_group before that barrier (check mode names the "
                  "race and its lines)", on="fault")
def test_no_shared_memory_race(variant):
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase8b --device emu)")
    from minitorch import emu

    with emu.check_mode():
        check_forward(variant, 130, 64, "bfloat16", True)  # 3 key tiles: the double buffer turns


@pytest.mark.kernel("flash.cu", "flash_bwd_mma")
@pytest.mark.hint("the backward's query tiles are double-buffered: wait for the copies, then a barrier, before "
                  "reading; dS^T is complete (a barrier) before dQ reads it", on="fault")
def test_backward_has_no_shared_memory_race():
    if backend.get_device() != "emu":
        pytest.skip("races are found by the emulator's check mode (grader check phase8b --device emu)")
    from minitorch import emu

    with emu.check_mode():
        check_backward(130, 64, "bfloat16", True)


# ---------------------------------------------------------------- the launcher


@pytest.mark.hint("flash.py checks its arguments, and names what it expected and what it got, before launching")
def test_launcher_rejects_bad_arguments():
    fl = flash_module()
    f16, b16 = np.dtype(np.float16), np.dtype(np.uint16)

    def arrays(shape=(2, 5, 64), dtype=f16):
        return [backend.asarray(np.zeros(shape, dtype)) for _ in range(4)]

    lse = backend.asarray(np.zeros((2, 5), np.float32))
    q, k, v, o = arrays()
    checks.expect_error("forward with an unknown format", lambda: fl.forward(q, k, v, o, lse, "float8"),
                        ValueError, "float8")
    checks.expect_error("forward of float16 arrays said to be bfloat16",
                        lambda: fl.forward(q, k, v, o, lse, "bfloat16"), TypeError, "uint16", "float16")
    checks.expect_error("forward with an unknown variant",
                        lambda: fl.forward(q, k, v, o, lse, "float16", variant="fastest"), ValueError, "fastest")
    q32 = arrays((2, 5, 32))
    checks.expect_error("forward with D = 32", lambda: fl.forward(*q32, lse, "float16"), ValueError, "32")
    checks.expect_error("forward with k of another length",
                        lambda: fl.forward(q, backend.asarray(np.zeros((2, 6, 64), f16)), v, o, lse, "float16"),
                        ValueError, "(2, 6, 64)", "(2, 5, 64)")
    checks.expect_error("forward with lse of another shape",
                        lambda: fl.forward(q, k, v, o, backend.asarray(np.zeros((2, 6), np.float32)), "float16"),
                        ValueError, "(2, 6)")
    checks.expect_error("forward with a NumPy q", lambda: fl.forward(np.zeros((2, 5, 64), f16), k, v, o, lse,
                                                                     "float16"), TypeError, "numpy")
    checks.expect_error("forward with dropout_p = 1", lambda: fl.forward(q, k, v, o, lse, "float16", dropout_p=1.0),
                        ValueError, "dropout_p")
    checks.expect_error("dropout in rung 2", lambda: fl.forward(q, k, v, o, lse, "float16", variant="mma",
                                                                dropout_p=0.1), ValueError, "mma")
    if fl.has_sm90():
        checks.expect_error("dropout in rung 8", lambda: fl.forward(q, k, v, o, lse, "float16", variant="wgmma",
                                                                    dropout_p=0.1), ValueError, "wgmma")
    else:
        checks.expect_error("rung 8 off Hopper", lambda: fl.forward(q, k, v, o, lse, "float16", variant="wgmma"),
                            NotImplementedError, "sm_90")
    bq, bk, bv, bo = arrays(dtype=b16)
    checks.expect_error("backward with a float16 dq among bfloat16 arrays",
                        lambda: fl.backward(bq, bk, bv, bo, lse, bq, q, bk, bv, "bfloat16"), TypeError, "float16")


@pytest.mark.kernel("flash.cu", "flash_fwd_5_tuned")
@pytest.mark.hint("the launcher launches your kernels and lets them write O, the logsumexp and the gradients: "
                  "nothing computed on the host, no PyTorch")
def test_results_come_from_your_kernels():
    fl = flash_module()
    source = (kernels.workspace_dir() / "flash.py").read_text()
    borrowed = sorted({name for node in ast.walk(ast.parse(source))
                       for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                                    [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                       if name.split(".")[0] in ("torch", "jax", "tensorflow", "flash_attn", "xformers")})
    if borrowed or "scaled_dot_product_attention" in source:
        raise GradeError(f"flash.py imports {', '.join(borrowed) or 'scaled_dot_product_attention'}: the "
                         f"attention must be computed by your kernels in flash.cu")
    for dtype in FORMATS:
        q16, k16, v16, do16 = inputs(70, 64, dtype, "replay", n=4)
        q, k, v, do = (backend.asarray(x) for x in (q16, k16, v16, do16))
        o, lse = checks.poison(q16.shape, STORAGE[dtype]), checks.poison(q16.shape[:2])
        checks.assert_computed_on_device(f"forward({dtype}, causal=True)",
                                         partial(fl.forward, q, k, v, o, lse, dtype, causal=True),
                                         inputs=(q, k, v), outputs=(o, lse), rtol=0, atol=0)
        grads = [checks.poison(q16.shape, STORAGE[dtype]) for _ in range(3)]
        checks.assert_computed_on_device(f"backward({dtype}, causal=True)",
                                         partial(fl.backward, q, k, v, o, lse, do, *grads, dtype, causal=True),
                                         inputs=(q, k, v, o, lse, do), outputs=tuple(grads),
                                         rtol=1e-2, atol=1e-2)


# ---------------------------------------------------------------- performance (GPU only)

PERF_SHAPES = [(16, 16, 4096, 128), (16, 32, 4096, 64)]  # B, H, T, D: the sizes


def _torch():
    if not checks.gpu_available():
        pytest.skip("not measured (no GPU)")
    try:
        import torch
        from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
    except ImportError:
        pytest.skip("not measured: PyTorch (the FlashAttention-2 reference) is not installed")
    return torch


def _tensors(torch, b, h, t, d, dtype):
    """Random (B*H, T, D) 16-bit tensors q, k, v, dO, as torch tensors and as CuPy views of their bits."""
    import cupy

    tdt = {"bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    g = torch.Generator(device="cuda").manual_seed(8)
    xs = [torch.randn(b * h, t, d, device="cuda", generator=g).to(tdt) for _ in range(4)]
    views = [cupy.from_dlpack(x.view(torch.int16)).view(STORAGE[dtype]) for x in xs]
    return xs, views


def _sdpa(torch, xs, b, h, t, d, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v, do = (x.view(b, h, t, d) for x in xs)

    def forward():
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return sdpa(q, k, v, is_causal=causal)

    qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = sdpa(qg, kg, vg, is_causal=causal)

    def backward():
        return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    return forward, backward


# both head dims, both formats, causal and not, each pair once (a Latin square: four timings a pass, not eight)
PERF_CASES = [(*PERF_SHAPES[0], "bfloat16", False), (*PERF_SHAPES[0], "float16", True),
              (*PERF_SHAPES[1], "bfloat16", True), (*PERF_SHAPES[1], "float16", False)]


def _case_ids():
    return [f"{b}x{h}x{t}x{d}-{dtype}-{'causal' if c else 'full'}" for b, h, t, d, dtype, c in PERF_CASES]


@pytest.mark.perf
@pytest.mark.kernel("flash.cu", "flash_fwd_5_tuned")
@pytest.mark.parametrize("b, h, t, d, dtype, causal", PERF_CASES, ids=_case_ids())
@pytest.mark.hint("see the chapter's ladder: two m-tiles a warp (each K/V fragment feeds two MMAs), swizzled "
                  "tiles read by ldmatrix, K/V double-buffered, causal tiles above the diagonal skipped; on an "
                  "sm_90 GPU 'best' is rung 8 (wgmma) once written")
def test_perf_best_forward_against_flash_attention_2(b, h, t, d, dtype, causal, record_property):
    torch = _torch()
    check_forward("best", 65, d, dtype, causal)  # right before it is fast
    fl = flash_module()
    xs, (q, k, v, _) = _tensors(torch, b, h, t, d, dtype)
    import cupy

    o, lse = cupy.empty_like(q), cupy.empty((b * h, t), np.float32)
    forward, _ = _sdpa(torch, xs, b, h, t, d, causal)
    checks.perf_ratio(f"forward 'best' ({dtype}, {b}x{h}x{t}x{d}, causal={causal})",
                      lambda: fl.forward(q, k, v, o, lse, dtype, causal=causal), forward,
                      4 * b * h * t * t * d * (0.5 if causal else 1.0), "phase8b.forward_best", record_property,
                      unit="GFLOP/s", reference_name="PyTorch FlashAttention-2")


@pytest.mark.perf
@pytest.mark.kernel("flash.cu", "flash_bwd_mma")
@pytest.mark.parametrize("b, h, t, d, dtype, causal", PERF_CASES, ids=_case_ids())
@pytest.mark.hint("the backward: Q/dO tiles double-buffered, P and dS straight from accumulators to A "
                  "fragments, dQ by float2 atomics, 8 warps a block")
def test_perf_backward_against_flash_attention_2(b, h, t, d, dtype, causal, record_property):
    torch = _torch()
    fl = flash_module()
    xs, (q, k, v, do) = _tensors(torch, b, h, t, d, dtype)
    import cupy

    o, lse = cupy.empty_like(q), cupy.empty((b * h, t), np.float32)
    fl.forward(q, k, v, o, lse, dtype, causal=causal)
    grads = [cupy.empty_like(q) for _ in range(3)]
    _, backward = _sdpa(torch, xs, b, h, t, d, causal)
    checks.perf_ratio(f"backward ({dtype}, {b}x{h}x{t}x{d}, causal={causal})",
                      lambda: fl.backward(q, k, v, o, lse, do, *grads, dtype, causal=causal), backward,
                      2.5 * 4 * b * h * t * t * d * (0.5 if causal else 1.0), "phase8b.backward", record_property,
                      unit="GFLOP/s", reference_name="PyTorch FlashAttention-2")
