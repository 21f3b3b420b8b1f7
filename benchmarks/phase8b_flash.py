"""Phase 8b benchmark: the FlashAttention ladder (forward rungs 1-8 and the backward) against PyTorch's SDPA.

The kernels are Lab 8b's reference ``flash.cu`` (rungs 1-7 and the backward: the ``%%kernel flash.cu`` cell of
``solutions/phase8b_flash.ipynb``, one source for the lab, this benchmark and the emulator's tests) and
``flash_wgmma.cu`` (rung 8, Hopper's wgmma: the ``%%kernel flash_wgmma.cu --arch=sm_90a`` cell of the same
notebook, compiled for sm_90a only on an sm_90 GPU; elsewhere its rows say why it was not measured), compiled by
CuPy's RawModule (NVRTC, one module a rung and tile, in parallel) and launched through the driver on torch's
stream (``phase8a_hgemm.Driver``). Inputs and outputs are (B*H, T, D) contiguous 16-bit tensors; the logsumexp is
(B*H, T) fp32.

Validation, in the same run, before any timing:
- odd sequence lengths (T = 1, 7, 65, 1000, 4097; D = 64 and 128; causal and not; fp16 and bf16), every rung and the
  backward, against a float64 NumPy attention of the 16-bit inputs (``reference``), with the bound of
  ``within_bound``;
- at each benchmark size: every rung and the backward on two sampled heads (the first and the last) against
  float64, and on all heads against PyTorch's FlashAttention-2 output (largest difference recorded).

The bound: the kernels round P (and dS) to the 16-bit type before their products, and round their outputs;
everything else is fp32. So ``|out - ref| <= C u mag + u |ref|`` with u the unit roundoff (2^-8 bf16, 2^-11
fp16), ``mag`` the same product on magnitudes (``P |V|`` for O, ``|P|^T |dO|`` for dV, ``|dS'|^T |Q|`` and
``|dS'| |K|`` for dK and dQ, where ``|dS'| = P (|dP| + |Delta| + sum|dO O|)`` also covers Delta computed from
the rounded O), and C = 3: one rounding of each P or dS term, one of the row sum's terms, and margin.
The logsumexp: ``|lse - ref| <= 1e-5 (1 + |ref|)`` (fp32 sums and exp2).

Timing: CUDA events, L2 flushed, median (``common.time_gpu``), at B*H*T*D = 16*16*4096*128 and 16*32*4096*64,
causal and not, fp16 and bf16, next to ``scaled_dot_product_attention`` under
``sdpa_kernel(SDPBackend.FLASH_ATTENTION)`` (FlashAttention-2) and ``SDPBackend.CUDNN_ATTENTION``, forward and
backward (ours: the Delta kernel, the main kernel and dQ's conversion; PyTorch's: ``autograd.grad`` of the
SDPA output). FLOPs: 4 B H T^2 D forward (halved when causal), 2.5 times that backward.

Tiles: rungs 5-7 and the backward from a few candidates each, rung 8's key tile BN from 64 and 128, each timed at
the benchmark size (bf16, not causal) and the fastest kept (``rung5_tuning`` in the JSON).

Writes ``benchmarks/results/phase8b_flash-<gpu>.json`` (or ``--out``): rows (kernel, pass, dtype, shape,
causal) with ``tflops``, ``fa2_tflops``, ``cudnn_tflops`` and the two ratios.

Usage (on a GPU machine): ``python benchmarks/phase8b_flash.py [--quick] [--out FILE]``; the Nsight Compute
target: ``--profile fwd [--rung 8]`` (one rung launched twice at 16x16x4096x128 bf16, nothing else).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from common import gpu_name, kernel_resources, solution_sources, time_gpu, write_results


def source(file: str = "flash.cu") -> str:
    """flash.cu (or flash_wgmma.cu) as the lab's reference solution writes it."""
    return solution_sources("phase8b_flash.ipynb")[file]

RUNG_NAMES = {1: "scalar", 2: "mma", 3: "mma_ldmatrix_swizzled", 4: "mma_cp_async", 5: "mma_tuned",
              6: "mma_lean_softmax", 7: "mma_split_kv_pipeline", 8: "wgmma"}
CTYPE = {"bf16": "bf16", "fp16": "fp16"}
UNIT = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11}
BOUND_C = 3.0
LSE_TOL = 1e-5
LOG2E = 1.4426950408889634

RUNGS = tuple(RUNG_NAMES)
KERNEL_SUFFIX = {1: "scalar", 2: "mma", 3: "ldmatrix", 4: "cp_async", 5: "tuned", 6: "lean", 7: "split_kv",
                 8: "wgmma"}
# Rung 8 (flash_wgmma.cu): wgmma exists only on sm_90 GPUs, compiled for sm_90a; its candidates are the keys a
# tile (BN), the first flash.py's WGMMA_BN. The mma.sync ladder's last rung computes the O and logsumexp that the
# backward's checks differentiate (it runs on every GPU).
WGMMA_RUNG, WGMMA_FILE, WGMMA_ARCH = 8, "flash_wgmma.cu", "sm_90"
WGMMA_CANDIDATES = {64: [64, 128], 128: [128, 64]}
MMA_LAST = 7
# forward mma rungs: (WARPS, MT, BC, LAYOUT, LDM, PIPE, LONGEST_FIRST, LEAN)
FWD_MMA = {2: (4, 1, 64, "PLAIN", False, 1, False, False),
           3: (4, 1, 64, "SWIZZLED", True, 1, False, False),
           4: (4, 1, 64, "SWIZZLED", True, 2, False, False)}
TUNED = (5, 6, 7)  # rungs whose tiles are chosen on the card
# rung 5-7 candidates (WARPS, MT, BC), swizzled + ldmatrix + double-buffered + longest first (+ the lean
# softmax from rung 6, + K and V pipelined apart in rung 7); the first is the default, Flash.tune() times them
# at the benchmark size and keeps the fastest for each rung and head dim
RUNG5_CANDIDATES = {64: [(4, 2, 64), (8, 1, 64), (4, 1, 128), (8, 2, 64)],
                    128: [(8, 1, 64), (4, 2, 64), (4, 1, 128), (8, 1, 128), (4, 2, 32)]}
# backward candidates (WARPS, BR) by head dim (BC = 16 WARPS keys a block, BR query rows a step); the first is
# the default, Flash.tune() keeps the fastest
BWD_CANDIDATES = {64: [(4, 64), (8, 64), (4, 128)], 128: [(4, 32), (8, 32), (4, 64)]}
SHAPES = [(16, 16, 4096, 128), (16, 32, 4096, 64)]
VALIDATION_LENGTHS = (1, 7, 65, 1000, 4097)  # the sequence lengths (multiples of no tile)


def fwd_config(rung: int, d: int, tiles: tuple | None = None) -> tuple:
    """Rungs 2-7: (WARPS, MT, BC, LAYOUT, LDM, PIPE, LONGEST_FIRST, LEAN)."""
    if rung in FWD_MMA:
        return FWD_MMA[rung]
    w, mt, bc = tiles or RUNG5_CANDIDATES[d][0]
    return (w, mt, bc, "SWIZZLED", True, 3 if rung == 7 else 2, True, rung >= 6)


def fwd_kernel(rung: int, dtype: str, d: int, tiles: tuple | None = None, dropout: bool = False) -> str:
    """The kernel of forward rung `rung` (rungs 5-7: with `tiles` = (WARPS, MT, BC), default the first; rung 8:
    `tiles` = BN; `dropout`: rung 5's instantiation that drops out)."""
    t = CTYPE[dtype]
    if rung == 1:
        return f"flash_fwd_1_scalar<{t}, {d}>"
    if rung == WGMMA_RUNG:
        return f"flash_fwd_8_wgmma<{t}, {d}, {tiles or WGMMA_CANDIDATES[d][0]}>"
    if rung in FWD_MMA:
        return f"flash_fwd_{rung}_{KERNEL_SUFFIX[rung]}<{t}, {d}>"
    w, mt, bc = tiles or RUNG5_CANDIDATES[d][0]
    drop = ", true" if dropout else (", false" if rung == 5 else "")
    return f"flash_fwd_{rung}_{KERNEL_SUFFIX[rung]}<{t}, {d}, {w}, {mt}, {bc}{drop}>"


def fwd_geometry(rung: int, d: int, tiles: tuple | None = None) -> tuple[int, int, int]:
    """(query rows a block, threads, dynamic shared memory bytes)."""
    if rung == 1:
        return 64, 64, 0
    if rung == WGMMA_RUNG:  # two warpgroups of 64 rows; Q, two stages of K and V, 1 KiB to align the slabs
        bn = tiles or WGMMA_CANDIDATES[d][0]
        return 128, 256, 2 * d * (128 + 4 * bn) + 1024
    w, mt, bc, _, _, pipe, _, _ = fwd_config(rung, d, tiles)
    br = 16 * w * mt
    return br, 32 * w, 2 * d * (br + 2 * min(pipe, 2) * bc)


def bwd_kernels(dtype: str, d: int, tiles: tuple | None = None, dropout: bool = False) -> tuple[str, str, str]:
    t = CTYPE[dtype]
    w, br = tiles or BWD_CANDIDATES[d][0]
    return (f"flash_bwd_dot_do_o<{t}, {d}>", f"flash_bwd_mma<{t}, {d}, {w}, {br}, SWIZZLED, {str(dropout).lower()}>",
            f"flash_bwd_dq_convert<{t}>")


def bwd_geometry(d: int, tiles: tuple | None = None) -> tuple[int, int, int]:
    """(keys a block, threads, dynamic shared memory bytes) of the main backward kernel."""
    w, br = tiles or BWD_CANDIDATES[d][0]
    bc = 16 * w
    return bc, 32 * w, 2 * (2 * bc * d + 4 * br * d + bc * br) + 16 * br  # Q, dO, lse, Delta double-buffered


def flops(bh: int, t: int, d: int, causal: bool, backward: bool = False) -> float:
    f = 4.0 * bh * t * t * d * (0.5 if causal else 1.0)
    return f * 2.5 if backward else f


# ---------------------------------------------------------------------------------------------------
# float64 reference (NumPy), shared with tests/emu/test_flash_reference.py
def round_bf16(x: np.ndarray) -> np.ndarray:
    """float -> bfloat16 bit patterns (uint16), round to nearest even (finite inputs)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def to_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.asarray(x, np.float16).view(np.uint16) if dtype == "fp16" else round_bf16(x)


def from_bits(b: np.ndarray, dtype: str) -> np.ndarray:
    b = np.asarray(b, np.uint16)
    if dtype == "fp16":
        return b.view(np.float16).astype(np.float64)
    return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool, do: np.ndarray | None = None) -> dict:
    """float64 attention of (n, T, D) arrays (the 16-bit inputs' values), its magnitudes for the error
    bound and, given dO, its gradients."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    t, d = q.shape[1], q.shape[2]
    scale = 1.0 / math.sqrt(d)
    s = q @ k.transpose(0, 2, 1) * scale
    if causal:
        s = np.where(np.triu(np.ones((t, t), bool), 1)[None], -np.inf, s)
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    lsum = e.sum(-1, keepdims=True)
    p = e / lsum
    o = p @ v
    out = {"o": o, "lse": (mx + np.log(lsum))[..., 0], "o_mag": p @ np.abs(v)}
    if do is not None:
        do = np.asarray(do, np.float64)
        pt = p.transpose(0, 2, 1)
        dp = do @ v.transpose(0, 2, 1)
        delta = (do * o).sum(-1, keepdims=True)
        ds = p * (dp - delta)
        ds_mag = p * (np.abs(dp) + np.abs(delta) + (np.abs(do) * np.abs(o)).sum(-1, keepdims=True))
        out.update(dv=pt @ do, dv_mag=pt @ np.abs(do), dq=ds @ k * scale, dq_mag=ds_mag @ np.abs(k) * scale,
                   dk=ds.transpose(0, 2, 1) @ q * scale, dk_mag=ds_mag.transpose(0, 2, 1) @ np.abs(q) * scale)
    return out


def within_bound(got: np.ndarray, ref: np.ndarray, mag: np.ndarray, dtype: str) -> tuple[bool, float]:
    """Is |got - ref| <= C u mag + u |ref| (+ fp16's smallest subnormal) everywhere? And the largest error in
    units of u mag (the accumulation's share, the output rounding taken off)."""
    u = UNIT[dtype]
    err = np.abs(np.asarray(got, np.float64) - ref)
    slack = u * np.abs(ref) + (2.0 ** -24 if dtype == "fp16" else 0.0)
    ok = bool(np.isfinite(got).all()) and bool((err <= BOUND_C * u * mag + slack).all())
    units = float(np.max(np.clip(err - slack, 0, None) / np.maximum(u * mag, 1e-300))) if err.size else 0.0
    return ok, units


def lse_ok(got: np.ndarray, ref: np.ndarray) -> bool:
    return bool(np.isfinite(got).all()) and bool((np.abs(got - ref) <= LSE_TOL * (1 + np.abs(ref))).all())


# ---------------------------------------------------------------------------------------------------
def NO_DROPOUT(forward: bool = True) -> list:  # noqa: N802
    """The dropout arguments every forward kernel (threshold, scale, seed, step, step_used) and the backward
    (threshold, scale, seed, step) take: threshold 0 keeps everything; the step pointers are null (only the
    kernels instantiated with DROP read or write them)."""
    import ctypes

    return [ctypes.c_uint32(0), ctypes.c_float(1.0), ctypes.c_uint64(0)] + [ctypes.c_uint64(0)] * (2 if forward
                                                                                                 else 1)


class Flash:
    """The compiled kernels and launchers for them (torch tensors on the GPU)."""

    def __init__(self, rungs=RUNGS, dims=(64, 128), candidates: dict[int, list[tuple]] | None = None,
                 backward: bool = True, wgmma_candidates: dict[int, list[int]] | None = None,
                 fast_math: bool = True):
        """Compiles `rungs` at head dims `dims` (rungs 5-7: every tile candidate, or `candidates[d]`; rung 8, on an
        sm_90 GPU only: every BN of `wgmma_candidates`, default WGMMA_CANDIDATES) and, with `backward`, the
        backward's candidates; `fast_math`: with --use_fast_math (the ladder's measurements; the lab's flash.py
        builds without)."""
        import cupy
        import torch
        from phase8a_hgemm import Driver

        from minitorch.backend import toolkit_include_options

        props = torch.cuda.get_device_properties(0)
        arch = f"sm_{props.major}{props.minor}"
        self.driver = Driver()
        cands = candidates or RUNG5_CANDIDATES
        self.wgmma_candidates = wgmma_candidates or WGMMA_CANDIDATES
        self.tiles = {r: {d: cands[d][0] for d in dims} for r in TUNED}
        self.bwd_tiles = {d: BWD_CANDIDATES[d][0] for d in dims}
        # rungs left out on this card, with the reason (rung 8 off Hopper): reported, not failures
        self.skipped: dict[int, str] = {}
        if WGMMA_RUNG in rungs:
            if arch == WGMMA_ARCH:
                self.tiles[WGMMA_RUNG] = {d: self.wgmma_candidates[d][0] for d in dims}
            else:
                self.skipped[WGMMA_RUNG] = (f"not measured: rung 8 (wgmma, sm_90a) needs an sm_90 GPU "
                                            f"(H100, H200); this one is {arch}")
        names: dict[tuple, list[str]] = {}
        for d in dims:
            for dtype in ("bf16", "fp16"):
                for rung in rungs:
                    if rung in self.skipped:
                        continue
                    tiles = (cands[d] if rung in TUNED else self.wgmma_candidates[d] if rung == WGMMA_RUNG
                             else [None])
                    for cand in tiles:
                        names.setdefault((rung, d, cand), []).append(fwd_kernel(rung, dtype, d, cand))
                for cand in BWD_CANDIDATES[d] if backward else []:
                    names.setdefault(("bwd", d, cand), []).extend(bwd_kernels(dtype, d, cand))
        base = ("--std=c++17", "-lineinfo") + (("--use_fast_math",) if fast_math else ())
        opts = base + (f"--gpu-architecture={arch}",) + toolkit_include_options()
        # rung 8 with the same options, for sm_90a (the architecture with wgmma; flash.py builds it so too)
        self.options = {"flash.cu": list(opts[:len(base) + 1]), WGMMA_FILE: list(base) + ["--gpu-architecture=sm_90a"]}
        wgmma_opts = tuple(self.options[WGMMA_FILE]) + toolkit_include_options()
        code = source()
        wgmma_code = source(WGMMA_FILE) if WGMMA_RUNG in rungs and WGMMA_RUNG not in self.skipped else ""

        def build(key):
            start = time.perf_counter()
            try:
                wg = key[0] == WGMMA_RUNG
                mod = cupy.RawModule(code=wgmma_code if wg else code, options=wgmma_opts if wg else opts,
                                     name_expressions=names[key])
                return key, {n: mod.get_function(n) for n in names[key]}, time.perf_counter() - start, None
            except Exception as e:  # one module failing must not hide the others' numbers
                return key, {}, time.perf_counter() - start, f"{type(e).__name__}: {str(e)[-3000:]}"

        start = time.perf_counter()
        with ThreadPoolExecutor(max(1, min(16, len(names)))) as pool:
            built = list(pool.map(build, list(names)))
        self.funcs, self.errors = {}, {}
        for key, funcs, _seconds, err in built:
            self.funcs.update(funcs)
            if err:
                self.errors[str(key)] = err
                print(f"COMPILE FAILED {key}: {err}", flush=True)
        print(f"compiled {len(self.funcs)} kernels in {time.perf_counter() - start:.0f} s", flush=True)

    def ptr(self, name: str) -> int:
        f = self.funcs[name]
        return f.kernel.ptr if hasattr(f, "kernel") else f.ptr

    def resources(self) -> dict:
        """Registers, local (spill) bytes and static shared memory of every kernel, read from the driver."""
        return kernel_resources(self.driver, {name: self.ptr(name) for name in self.funcs})

    def has(self, name: str) -> bool:
        return name in self.funcs

    def compiled(self, rung: int, dtype: str, d: int) -> bool:
        """Is forward rung `rung` built for `dtype` and `d`, in the tiles the timings use?"""
        return self.has(fwd_kernel(rung, dtype, d, self.tiles.get(rung, {}).get(d)))

    def _launch(self, name, grid, threads, smem, args, keep):
        func = self.ptr(name)
        self.driver.set_smem(func, smem)
        launch = self.driver.launcher(func, grid, threads, smem, args)
        launch.keep += tuple(keep)
        return launch

    def forward(self, rung: int, q, k, v, o, lse, causal: bool):
        """A zero-argument launch of rung `rung`: o, lse = attention(q, k, v) ((BH, T, D) tensors)."""
        import ctypes

        bh, t, d = q.shape
        tiles = self.tiles.get(rung, {}).get(d)
        name = fwd_kernel(rung, {"torch.bfloat16": "bf16", "torch.float16": "fp16"}[str(q.dtype)], d, tiles)
        br, threads, smem = fwd_geometry(rung, d, tiles)
        args = [ctypes.c_uint64(x.data_ptr()) for x in (q, k, v, o, lse)] + [
            ctypes.c_int(t), ctypes.c_float(LOG2E / math.sqrt(d)), ctypes.c_int(int(causal))]
        if rung != WGMMA_RUNG:  # rung 8 takes no dropout arguments
            args += NO_DROPOUT()
        return self._launch(name, (math.ceil(t / br), bh), threads, smem, args, (q, k, v, o, lse))

    def backward(self, q, k, v, o, lse, do, dq, dk, dv, causal: bool):
        """A zero-argument launch of the three backward kernels (scratch: Delta and dQ's fp32 buffer)."""
        import ctypes

        import torch

        bh, t, d = q.shape
        dtype = {"torch.bfloat16": "bf16", "torch.float16": "fp16"}[str(q.dtype)]
        dot, main, conv = bwd_kernels(dtype, d, self.bwd_tiles[d])
        delta = torch.empty(bh, t, device=q.device)
        dqacc = torch.empty(bh, t, d, device=q.device)
        rows, n = bh * t, bh * t * d
        p = lambda x: ctypes.c_uint64(x.data_ptr())  # noqa: E731
        l1 = self._launch(dot, (math.ceil(rows / 8), 1), 256, 0,
                          [p(o), p(do), p(delta), p(dqacc), ctypes.c_int(rows)], (o, do, delta, dqacc))
        bc, threads, smem = bwd_geometry(d, self.bwd_tiles[d])
        l2 = self._launch(main, (math.ceil(t / bc), bh), threads, smem,
                          [p(q), p(k), p(v), p(do), p(lse), p(delta), p(dqacc), p(dk), p(dv), ctypes.c_int(t),
                           ctypes.c_float(LOG2E / math.sqrt(d)), ctypes.c_float(1 / math.sqrt(d)),
                           ctypes.c_int(int(causal))] + NO_DROPOUT(forward=False),
                          (q, k, v, do, lse, delta, dqacc, dk, dv))
        l3 = self._launch(conv, (math.ceil(n / 256), 1), 256, 0,
                          [p(dqacc), p(dq), ctypes.c_float(1 / math.sqrt(d)), ctypes.c_longlong(n)], (dqacc, dq))

        def launch():
            l1()
            l2()
            l3()
        return launch


# ---------------------------------------------------------------------------------------------------
def inputs(bh: int, t: int, d: int, dtype, seed: int, grad: bool = False):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    xs = [torch.randn(bh, t, d, device="cuda", generator=g).to(dtype) for _ in range(4 if grad else 3)]
    return xs


def check_heads(flash: Flash, rung, q, k, v, do, causal, dtype: str, heads, ref: dict | None = None) -> dict:
    """Rung `rung` (or "bwd") on all heads, compared with float64 on `heads` (`ref`: their reference with
    gradients, computed here if not given): {ok, units, ...}."""
    import torch

    bh, t, d = q.shape
    o = torch.full_like(q, float("nan"))
    lse = torch.full((bh, t), float("nan"), device=q.device)
    fwd_rung = MMA_LAST if rung == "bwd" else rung
    flash.forward(fwd_rung, q, k, v, o, lse, causal)()
    sel = lambda x: x[heads].double().cpu().numpy()  # noqa: E731
    if ref is None:
        ref = reference(sel(q), sel(k), sel(v), causal, sel(do))
    if rung != "bwd":
        torch.cuda.synchronize()
        ok, units = within_bound(sel(o), ref["o"], ref["o_mag"], dtype)
        ok_lse = lse_ok(sel(lse), ref["lse"])
        result = {"ok": ok and ok_lse, "units": units, "lse_ok": ok_lse, "o": o, "lse": lse}
    else:
        dq, dk, dv = (torch.full_like(q, float("nan")) for _ in range(3))
        flash.backward(q, k, v, o, lse, do, dq, dk, dv, causal)()
        torch.cuda.synchronize()
        units, ok = {}, True
        for name, got in (("dq", dq), ("dk", dk), ("dv", dv)):
            good, units[name] = within_bound(sel(got), ref[name], ref[name + "_mag"], dtype)
            ok &= good
        result = {"ok": ok, "units": units, "grads": (dq, dk, dv)}
    return result


def validate_small(flash: Flash, rungs, dims, lengths=VALIDATION_LENGTHS) -> list[str]:
    """Every rung and the backward at odd sequence lengths (3 heads; 1 past 1000), both dtypes, causal and not,
    against float64 (rung 8 in each of its key tiles, on an sm_90 GPU; a rung this card skips is left out); the
    failures, described (a rung that did not compile is one)."""
    import torch

    failures = []
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    for d in dims:
        for t in lengths:
            nh = 3 if t <= 1000 else 1
            for dtype in ("bf16", "fp16"):
                q, k, v, do = inputs(nh, t, d, tdt[dtype], seed=t + d, grad=True)
                host = [x.double().cpu().numpy() for x in (q, k, v, do)]
                for causal in (False, True):
                    ref = reference(*host[:3], causal, host[3])  # once for every rung
                    for rung in [r for r in rungs if r not in flash.skipped] + ["bwd"]:
                        kept = flash.tiles.get(rung, {}).get(d)
                        for tiles in flash.wgmma_candidates[d] if rung == WGMMA_RUNG else [kept]:
                            case = f"{rung}{f' BN={tiles}' if rung == WGMMA_RUNG else ''} {dtype} T={t} D={d} " \
                                   f"causal={causal}"
                            if rung != "bwd" and not flash.has(fwd_kernel(rung, dtype, d, tiles)):
                                failures.append(f"{case}: not compiled")
                                continue
                            if rung == WGMMA_RUNG:
                                flash.tiles[rung][d] = tiles
                            try:
                                r = check_heads(flash, rung, q, k, v, do, causal, dtype, list(range(nh)), ref)
                            finally:
                                if rung == WGMMA_RUNG:
                                    flash.tiles[rung][d] = kept
                            if not r["ok"]:
                                failures.append(f"{case}: units {r['units']}")
    print(f"small sizes: {len(failures)} failures" + ("".join("\n  " + f for f in failures[:40])), flush=True)
    return failures


def sdpa_fns(q, k, v, do, causal, backend):
    """(forward, backward) launches of torch's SDPA with `backend` on (B, H, T, D) views."""
    import torch
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    def fwd():
        with sdpa_kernel(backend):
            return sdpa(q, k, v, is_causal=causal)

    qg, kg, vg = (x.detach().requires_grad_(True) for x in (q, k, v))
    with sdpa_kernel(backend):
        out = sdpa(qg, kg, vg, is_causal=causal)

    def bwd():
        return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
    return fwd, bwd, out


def benchmark(flash: Flash, shapes, dtypes, rungs, log, save=lambda rows: None) -> list[dict]:
    import torch
    from torch.nn.attention import SDPBackend

    from grader.checks import time_cuda

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rows = []
    for b, h, t, d in shapes:
        bh = b * h
        for dtype in dtypes:
            q, k, v, do = inputs(bh, t, d, tdt[dtype], seed=7, grad=True)
            q4, k4, v4, do4 = (x.view(b, h, t, d) for x in (q, k, v, do))
            for causal in (False, True):
                shape = f"{b}x{h}x{t}x{d}"
                base = {"shape": shape, "b": b, "h": h, "t": t, "d": d, "dtype": dtype, "causal": causal}
                ref_times, fa2_out = {}, None
                for label, backend in (("fa2", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION)):
                    try:
                        f, bw, out = sdpa_fns(q4, k4, v4, do4, causal, backend)
                        ref_times[label] = (time_gpu(f, max_seconds=0.3), time_gpu(bw, max_seconds=0.3))
                        if label == "fa2":
                            fa2_out = out.detach().view(bh, t, d)
                    except Exception as e:  # a backend this torch or card lacks
                        ref_times[label] = (None, None)
                        log(f"{label} unavailable: {type(e).__name__}: {str(e)[:200]}")
                ff, fb = flops(bh, t, d, causal), flops(bh, t, d, causal, True)
                tf = {k_: (ff / v_[0] / 1e12 if v_[0] else None, fb / v_[1] / 1e12 if v_[1] else None)
                      for k_, v_ in ref_times.items()}
                line = []
                heads = [0, bh - 1]
                ref = reference(*(x[heads].double().cpu().numpy() for x in (q, k, v)), causal,
                                do[heads].double().cpu().numpy())
                for rung in list(rungs) + ["bwd"]:
                    name = (f"{rung}_{RUNG_NAMES[rung]}" if rung != "bwd" else "bwd")
                    if rung in flash.skipped:
                        rows.append({**base, "kernel": name, "pass": "forward", "tflops": None,
                                     "note": flash.skipped[rung]})
                        continue
                    fr = MMA_LAST if rung == "bwd" else rung
                    if not flash.compiled(fr, dtype, d) or (rung == "bwd" and not flash.has(bwd_kernels(dtype, d, flash.bwd_tiles[d])[1])):
                        rows.append({**base, "kernel": name, "tflops": None, "note": "not compiled"})
                        continue
                    chk = check_heads(flash, rung, q, k, v, do, causal, dtype, heads, ref)
                    row = {**base, "kernel": name, "pass": "backward" if rung == "bwd" else "forward",
                           "valid": chk["ok"], "error_units": chk["units"]}
                    if rung != "bwd" and fa2_out is not None:
                        row["max_diff_vs_fa2"] = float((chk["o"].float() - fa2_out.float()).abs().max())
                    if not chk["ok"]:
                        rows.append({**row, "tflops": None, "note": "not timed: failed validation"})
                        line.append(f"{rung}:INVALID")
                        continue
                    if rung == "bwd":
                        o, lse = torch.empty_like(q), torch.empty(bh, t, device="cuda")
                        flash.forward(MMA_LAST, q, k, v, o, lse, causal)()
                        dq, dk, dv = (torch.empty_like(q) for _ in range(3))
                        fn = flash.backward(q, k, v, o, lse, do, dq, dk, dv, causal)
                        fl, refs = fb, {k_: v_[1] for k_, v_ in tf.items()}
                    else:
                        o, lse = torch.empty_like(q), torch.empty(bh, t, device="cuda")
                        fn = flash.forward(rung, q, k, v, o, lse, causal)
                        fl, refs = ff, {k_: v_[0] for k_, v_ in tf.items()}
                    if rung == 1:
                        sec = time_cuda(fn, warmup=1, min_reps=2, max_reps=3, max_time_s=0.1)
                    else:
                        sec = time_gpu(fn, max_seconds=0.3)
                    tflops = fl / sec / 1e12
                    row.update(seconds=sec, tflops=tflops, fa2_tflops=refs["fa2"], cudnn_tflops=refs["cudnn"],
                               ratio_fa2=tflops / refs["fa2"] if refs["fa2"] else None,
                               ratio_cudnn=tflops / refs["cudnn"] if refs["cudnn"] else None)
                    rows.append(row)
                    line.append(f"{rung}:{tflops:5.0f}" + (f" ({tflops / refs['fa2']:.2f})" if refs["fa2"] else ""))
                fa2 = tf.get("fa2", (None, None))
                cud = tf.get("cudnn", (None, None))
                log(f"{shape} {dtype} causal={int(causal)} FA2 {fa2[0] or 0:.0f}/{fa2[1] or 0:.0f} "
                    f"cuDNN {cud[0] or 0:.0f}/{cud[1] or 0:.0f} TFLOP/s | " + " ".join(line))
                save(rows)
    return rows


def tune(flash: Flash, log) -> dict:
    """Times each tile candidate of rungs 5-7, rung 8's key tiles (BN) and the backward's tiles at the benchmark
    size (bf16, not causal) and keeps the fastest for each rung and head dim."""
    import torch

    out = {}
    for b, h, t, d in SHAPES:
        q, k, v = inputs(b * h, t, d, torch.bfloat16, seed=3)
        o, lse = torch.empty_like(q), torch.empty(b * h, t, device="cuda")
        for rung in TUNED:
            if d not in flash.tiles[rung]:
                continue
            times = {}
            for cand in RUNG5_CANDIDATES[d]:
                if not flash.has(fwd_kernel(rung, "bf16", d, cand)):
                    continue
                flash.tiles[rung][d] = cand
                times[str(cand)] = time_gpu(flash.forward(rung, q, k, v, o, lse, False), max_seconds=0.2)
            if not times:
                continue
            best = min(times, key=times.get)
            flash.tiles[rung][d] = tuple(int(x) for x in best.strip("()").split(","))
            out[f"{rung}_d{d}"] = {"seconds": times, "chosen": best}
            log(f"rung {rung} D={d}: " + ", ".join(f"{c} {flops(b * h, t, d, False) / s / 1e12:.0f}"
                                                   for c, s in times.items()) + f" TFLOP/s -> {best}")
        if d in flash.tiles.get(WGMMA_RUNG, {}):
            times = {}
            for bn in flash.wgmma_candidates[d]:
                if flash.has(fwd_kernel(WGMMA_RUNG, "bf16", d, bn)):
                    flash.tiles[WGMMA_RUNG][d] = bn
                    times[str(bn)] = time_gpu(flash.forward(WGMMA_RUNG, q, k, v, o, lse, False), max_seconds=0.2)
            if times:
                best = min(times, key=times.get)
                flash.tiles[WGMMA_RUNG][d] = int(best)
                out[f"{WGMMA_RUNG}_d{d}"] = {"seconds": times, "chosen": best, "tile": "BN (keys a tile)"}
                log(f"rung {WGMMA_RUNG} D={d}: " + ", ".join(
                    f"BN={c} {flops(b * h, t, d, False) / s / 1e12:.0f}" for c, s in times.items())
                    + f" TFLOP/s -> BN={best}")
        do = torch.randn_like(q)
        flash.forward(MMA_LAST, q, k, v, o, lse, False)()
        dq, dk, dv = (torch.empty_like(q) for _ in range(3))
        times = {}
        for cand in BWD_CANDIDATES[d]:
            if not flash.has(bwd_kernels("bf16", d, cand)[1]):
                continue
            flash.bwd_tiles[d] = cand
            times[str(cand)] = time_gpu(flash.backward(q, k, v, o, lse, do, dq, dk, dv, False), max_seconds=0.2)
        if times:
            best = min(times, key=times.get)
            flash.bwd_tiles[d] = tuple(int(x) for x in best.strip("()").split(","))
            out[f"bwd_d{d}"] = {"seconds": times, "chosen": best}
            log(f"backward D={d}: " + ", ".join(f"{c} {flops(b * h, t, d, False, True) / s / 1e12:.0f}"
                                                for c, s in times.items()) + f" TFLOP/s -> {best}")
    return out


def profile(which: str, tiles: str | None, bwd_tiles: str | None, rung: int = MMA_LAST) -> None:
    """Forward rung `rung` (`which` = "fwd"; `tiles`: its WARPS,MT,BC, or rung 8's BN) or rung 7 then the
    backward ("bwd"), launched twice at 16x16x4096x128 bf16, not causal: the target of ncu --launch-skip 1."""
    import torch

    if which == "bwd":
        rung = MMA_LAST
    if tiles:
        parsed = tuple(int(x) for x in tiles.split(","))
        tiles_of = {128: [parsed[0]]} if rung == WGMMA_RUNG else {128: [parsed]}
    else:
        tiles_of = None
    flash = Flash((rung,), (128,), candidates=tiles_of if rung in TUNED else None,
                  wgmma_candidates=tiles_of if rung == WGMMA_RUNG else None, backward=which == "bwd")
    if rung in flash.skipped:
        raise SystemExit(flash.skipped[rung])
    if flash.errors:
        raise SystemExit(f"compile failed: {flash.errors}")
    if bwd_tiles:
        flash.bwd_tiles[128] = tuple(int(x) for x in bwd_tiles.split(","))
    b, h, t, d = SHAPES[0]
    q, k, v, do = inputs(b * h, t, d, torch.bfloat16, seed=5, grad=True)
    o, lse = torch.empty_like(q), torch.empty(b * h, t, device="cuda")
    fwd = flash.forward(rung, q, k, v, o, lse, False)
    if which == "bwd":
        dq, dk, dv = (torch.empty_like(q) for _ in range(3))
        bwd = flash.backward(q, k, v, o, lse, do, dq, dk, dv, False)
    for _ in range(2):
        fwd()
        if which == "bwd":
            bwd()
    torch.cuda.synchronize()


def compare_fast_math(out: str, log, reps: int = 3) -> int:
    """Rung 8 built with and without --use_fast_math (the ladder's options and flash.py's), timed interleaved
    with FlashAttention-2 at D = 128 (bf16 and fp16, causal and not; `reps` rounds, alternating the order) after
    a check of each against float64 on two heads: is the difference between two runs the options or the card?"""
    import json

    import torch
    from torch.nn.attention import SDPBackend

    builds = {label: Flash((WGMMA_RUNG,), (128,), backward=False, wgmma_candidates={128: [WGMMA_CANDIDATES[128][0]]},
                           fast_math=label == "fast_math") for label in ("fast_math", "no_fast_math")}
    for label, flash in builds.items():
        if WGMMA_RUNG in flash.skipped or flash.errors:
            log(f"{label}: {flash.skipped or flash.errors}")
            return 1
    b, h, t, d = SHAPES[0]
    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rows, bad = [], 0
    for dtype in ("bf16", "fp16"):
        q, k, v, do = inputs(b * h, t, d, tdt[dtype], seed=11, grad=True)
        q4, k4, v4, do4 = (x.view(b, h, t, d) for x in (q, k, v, do))
        for causal in (False, True):
            fa2 = sdpa_fns(q4, k4, v4, do4, causal, SDPBackend.FLASH_ATTENTION)[0]
            ref = reference(*(x[[0, b * h - 1]].double().cpu().numpy() for x in (q, k, v)), causal)
            fns, row = {"fa2": fa2}, {"dtype": dtype, "causal": causal, "shape": f"{b}x{h}x{t}x{d}"}
            for label, flash in builds.items():
                chk = check_heads(flash, WGMMA_RUNG, q, k, v, None, causal, dtype, [0, b * h - 1], ref)
                row[f"{label}_valid"] = chk["ok"]
                bad += not chk["ok"]
                o, lse = torch.empty_like(q), torch.empty(b * h, t, device="cuda")
                fns[label] = flash.forward(WGMMA_RUNG, q, k, v, o, lse, causal)
            seconds = {label: [] for label in fns}
            for i in range(reps):
                for label in (list(fns) if i % 2 == 0 else list(fns)[::-1]):
                    seconds[label].append(time_gpu(fns[label], max_seconds=0.2))
            fl = flops(b * h, t, d, causal)
            for label, secs in seconds.items():
                row[f"{label}_seconds"] = secs
                row[f"{label}_tflops"] = fl / float(np.median(secs)) / 1e12
            for label in builds:
                row[f"{label}_ratio_fa2"] = row[f"{label}_tflops"] / row["fa2_tflops"]
            rows.append(row)
            log(f"{dtype} causal={int(causal)}: " + ", ".join(f"{k_} {row[k_ + '_tflops']:.0f}" for k_ in fns)
                + " TFLOP/s (medians of the rounds)")
    from common import software

    Path(out).write_text(json.dumps({"benchmark": "phase8b_flash_wgmma_options", "device": gpu_name(),
                                     "date": time.strftime("%Y-%m-%d"), "software": software(),
                                     "torch": torch.__version__, "what": compare_fast_math.__doc__,
                                     "options": {k_: f.options[WGMMA_FILE] for k_, f in builds.items()},
                                     "rounds": reps, "results": rows}, indent=1) + "\n")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="D = 128, bf16 only")
    parser.add_argument("--out", help="the JSON file (default benchmarks/results/phase8b_flash-<gpu>.json)")
    parser.add_argument("--profile", choices=("fwd", "bwd"),
                        help="launch a forward rung (or rung 7 and the backward) twice at 16x16x4096x128 bf16 and "
                        "stop: for ncu")
    parser.add_argument("--rung", type=int, default=MMA_LAST, choices=RUNGS,
                        help="--profile fwd: the rung (default 7; 8 needs an sm_90 GPU)")
    parser.add_argument("--tiles", help="--profile: the rung's tiles, WARPS,MT,BC (rungs 5-7) or BN (rung 8); "
                        "default the first candidate")
    parser.add_argument("--bwd-tiles", help="--profile: the backward's tiles WARPS,BR (default: the first candidate)")
    parser.add_argument("--compare-fast-math", metavar="FILE",
                        help="only rung 8 with and without --use_fast_math, timed interleaved with FA2 at D = 128: "
                        "the JSON to FILE")
    args = parser.parse_args()
    t0 = time.perf_counter()
    if args.compare_fast_math:
        return compare_fast_math(args.compare_fast_math, lambda msg: print(f"[{time.perf_counter() - t0:5.0f}s] "
                                                                             f"{msg}", flush=True))
    if args.profile:
        profile(args.profile, args.tiles, args.bwd_tiles, args.rung)
        return 0

    def log(msg):
        print(f"[{time.perf_counter() - t0:5.0f}s] {msg}", flush=True)

    rungs = RUNGS
    flash = Flash(rungs)
    device = gpu_name()
    log(f"device: {device}")
    resources = flash.resources()
    for name, r in resources.items():
        log(f"  {name}: {r}")
    for rung, why in flash.skipped.items():
        log(f"rung {rung}: {why}")
    tuning = tune(flash, log)  # first: the small sizes are then validated with the tiles the timings use
    log("tuned")
    failures = validate_small(flash, rungs, (64, 128))
    log("validated at the odd lengths")
    shapes = SHAPES[:1] if args.quick else SHAPES
    dtypes = ("bf16",) if args.quick else ("bf16", "fp16")
    import torch

    extra = dict(torch=torch.__version__,
                 validation={"small_failures": failures, "bound_c": BOUND_C, "lse_tol": LSE_TOL},
                 compile_errors=flash.errors, compile_options=flash.options,
                 skipped={f"{r}_{RUNG_NAMES[r]}": why for r, why in flash.skipped.items()}, rung5_tuning=tuning,
                 kernels={f"{r}_{RUNG_NAMES[r]}": fwd_kernel(r, "bf16", 128, flash.tiles.get(r, {}).get(128))
                          for r in rungs if r not in flash.skipped}
                 | {"bwd": list(bwd_kernels("bf16", 128, flash.bwd_tiles[128]))},
                 kernels_d64={f"{r}_{RUNG_NAMES[r]}": fwd_kernel(r, "bf16", 64, flash.tiles.get(r, {}).get(64))
                              for r in rungs if r not in flash.skipped}
                 | {"bwd": list(bwd_kernels("bf16", 64, flash.bwd_tiles[64]))}, resources=resources)

    def save(rows):
        if args.out:
            import json

            from common import software
            Path(args.out).write_text(json.dumps({"benchmark": "phase8b_flash", "device": device,
                                                  "date": time.strftime("%Y-%m-%d"), "software": software(),
                                                  **extra, "results": rows}, indent=1) + "\n")
        else:
            write_results("phase8b_flash", device, rows, **extra)

    save([])
    benchmark(flash, shapes, dtypes, rungs, log, save)
    log("done")
    return 1 if failures or flash.errors else 0


if __name__ == "__main__":
    sys.exit(main())
