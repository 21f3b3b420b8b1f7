"""Phase 8a benchmark: the HGEMM ladder (tensor cores) against cuBLAS, in one harness.

In the manner of llm.c's dev/cuda: numbered kernel variants beside one launcher, each first validated, then
timed. The kernels are ``benchmarks/kernels/hgemm.cu`` (rungs 1-5, and the mma.sync ceiling) and the lab's own
rung 6, ``hgemm_wgmma.cu`` of solutions/phase8a_tensor_cores.ipynb (sm_90a only), its two tensor maps taken by
value here (``phase8a_wgmma.rung6_source``), with ``benchmarks/kernels/wgmma_peak.cu`` (the wgmma ceiling)
appended; compiled by CuPy's RawModule (NVRTC) and launched through the driver (``cuLaunchKernel`` by ctypes:
rung 6 takes the two 128-byte ``CUtensorMap``, made here by ``cuTensorMapEncodeTiled``, as one parameter).

Rungs: 1 WMMA, one warp a 16x16 tile; 2 WMMA with shared-memory block tiles; 3 mma.sync + ldmatrix;
4 the same with swizzled shared memory; 5 swizzled + a 4-stage cp.async pipeline; 6 wgmma fed by TMA and
mbarriers, producer/consumer warpgroups, persistent. bf16 and fp16 inputs, fp32 accumulation, fp32 or
16-bit output; ``ta``: A is stored K x M (C = A^T B), ``tb``: B is stored N x K (C = A B^T).

Validation: every rung, both input types, both output types and (for every rung) the four layouts, at
sizes that are multiples of no tile (K = 1, tall-skinny, short-wide, odd leading dimensions), on a
NaN-poisoned output with a NaN guard past its end, against a float64 product of the 16-bit inputs. The
bound: ``c sqrt(K) 2^-24 sum|a||b|`` for the fp32 accumulation (zero-mean random inputs: the rounding
errors of the K additions add like a random walk), plus the output's rounding (2^-8 relative for bf16,
2^-11 for fp16). The largest measured error in units of ``sqrt(K) 2^-24 sum|a||b|`` is recorded for
each rung, and for cuBLAS (``torch.matmul``) on the same inputs.

Rung 5's tiles are chosen on the card first: each of ``RUNG5_CONFIGS`` is timed at 4096^3 (bf16) and the
fastest serves the rest of the run (recorded under ``rung5_tuning``).

Timing: CUDA events, L2 flushed before each repetition, median (the grader's ``time_cuda``), next to
``torch.matmul`` (cuBLAS, same dtypes and layout) measured in the same run, at 4096^3 and at the GPT's
training shapes (the course GPT: d_model 64, B*T = 4096; and d_model 768 at B*T = 4096), forward and
backward (dX = dY W^T is a ``tb`` product, dW = X^T dY a ``ta`` one). Also the ceilings of mma.sync and
wgmma (no memory traffic): why the mma.sync and WMMA rungs top out well below wgmma on Hopper.

Writes ``benchmarks/results/phase8a_hgemm-<gpu>.json``: rows (kernel, dtype, layout, m, n, k) with
``tflops``, ``cublas_tflops`` and ``ratio``.

Usage (on a GPU machine, with its python3): ``python benchmarks/phase8a_hgemm.py``;
``--validate-only``; ``--profile RUNG SIZE [--dtype bf16]`` launches one rung (or ``cublas``) twice at
SIZE^3 and nothing else: the target for ``ncu --launch-skip 1 --launch-count 1``.
"""

from __future__ import annotations

import argparse
import ctypes
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

from common import ROOT, gpu_name, kernel_resources, time_gpu, write_results
from phase8a_wgmma import rung6_source

from minitorch.backend import toolkit_include_options  # noqa: E402 (common puts the repository on sys.path)

KERNELS = ROOT / "benchmarks" / "kernels"
RUNG_NAMES = {1: "wmma", 2: "wmma_smem", 3: "mma_ldmatrix", 4: "mma_swizzled", 5: "mma_pipelined",
              6: "wgmma_tma"}
CTYPE = {"bf16": "bf16", "fp16": "fp16"}
LAYOUTS = ((False, False), (True, False), (False, True), (True, True))
ERROR_C = 8.0  # the bound's constant, in units of sqrt(K) 2^-24 sum|a||b|
OUT_UNIT = {"bf16": 2.0 ** -8, "fp16": 2.0 ** -11, "fp32": 0.0}

# (m, k, n): sizes that are multiples of no tile
VALIDATION_SHAPES = [(1, 1, 1), (17, 1, 33), (129, 71, 130), (1000, 136, 72), (4099, 40, 8), (8, 40, 3001),
                     (257, 1000, 263), (384, 4096, 512)]


def gpt_shapes() -> list[tuple[str, int, int, int, bool, bool]]:
    """(name, m, k, n, ta, tb) of the MLP and attention projections of a GPT at B*T = 4096 rows."""
    shapes = []
    for d, label in ((64, "gpt_d64"), (768, "gpt_d768")):
        rows = 4096
        shapes += [(f"{label}_qkv_fwd", rows, d, 3 * d, False, False),
                   (f"{label}_fc_fwd", rows, d, 4 * d, False, False),
                   (f"{label}_proj_fwd", rows, 4 * d, d, False, False),
                   (f"{label}_fc_dx", rows, 4 * d, d, False, True),   # dX = dY W^T, W stored d x 4d
                   (f"{label}_fc_dw", d, rows, 4 * d, True, False)]   # dW = X^T dY, X stored rows x d
    return shapes


# rung 5's tiles (BM, BN, BK, WARPS_M, WARPS_N, STAGES): the first is the default; Ladder.tune_rung5() times
# them all at 4096^3 (bf16) and keeps the fastest for the rest of the run
RUNG5_CONFIGS = [(128, 256, 32, 2, 4, 4), (128, 256, 64, 2, 4, 3), (128, 128, 32, 2, 2, 4), (256, 128, 32, 4, 2, 4)]


def kernel_names(rung: int, dtype: str, out: str, ta: bool, tb: bool, config: tuple = RUNG5_CONFIGS[0]) -> str:
    t, o = CTYPE[dtype], {"fp32": "float"}.get(out, CTYPE[dtype])
    flags = f"{str(ta).lower()}, {str(tb).lower()}"
    if rung == 1:
        return f"hgemm_1_wmma<{t}, {o}, {flags}>"
    if rung == 2:
        return f"hgemm_2_wmma_smem<{t}, {o}, {flags}>"
    if rung in (3, 4):
        layout = "PLAIN" if rung == 3 else "SWIZZLED"
        return f"hgemm_mma<{t}, {o}, {flags}, 128, 128, 32, 2, 4, 1, {layout}>"
    if rung == 5:
        return f"hgemm_mma<{t}, {o}, {flags}, {', '.join(map(str, config))}, SWIZZLED>"
    return f"hgemm_6_wgmma<{t}, {o}, {flags}>"


RUNG_SMEM = {3: 2 * (128 * 32 + 32 * 128), 4: 2 * (128 * 32 + 32 * 128), 6: 4 * 49152 + 1024 + 64}
RUNG_THREADS = {1: 128, 2: 256, 3: 256, 4: 256, 6: 384}


def rung5_geometry(config: tuple) -> tuple[int, int, int, int]:
    """(BM, BN, threads, dynamic shared memory bytes) of a rung-5 configuration."""
    bm, bn, bk, wm, wn, stages = config
    return bm, bn, wm * wn * 32, stages * 2 * (bm * bk + bk * bn)


def variants(hopper: bool):
    """(rung, dtype, out, ta, tb, config) of every kernel instantiated (rung 5: in each configuration)."""
    for rung in range(1, 7 if hopper else 6):
        for config in RUNG5_CONFIGS if rung == 5 else [RUNG5_CONFIGS[0]]:
            for dtype in ("bf16", "fp16"):
                for out in ("fp32", dtype):
                    for ta, tb in LAYOUTS:
                        yield rung, dtype, out, ta, tb, config


# ---------------------------------------------------------------------------------------------------
# the driver, through ctypes
class Driver:
    def __init__(self):
        self.lib = ctypes.CDLL("libcuda.so.1")
        self.lib.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
        self.lib.cuFuncSetAttribute.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
        self.lib.cuTensorMapEncodeTiled.argtypes = [
            ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
            ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]

    def check(self, result: int, what: str) -> None:
        if result != 0:
            name = ctypes.c_char_p()
            self.lib.cuGetErrorName(result, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: CUresult {result} ({(name.value or b'?').decode()})")

    def set_smem(self, func: int, nbytes: int) -> None:
        if nbytes > 48 * 1024:  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            self.check(self.lib.cuFuncSetAttribute(func, 8, nbytes), "cuFuncSetAttribute")

    def tensor_map(self, ptr: int, dtype: str, inner: int, outer: int, ld: int, box: tuple[int, int]):
        """A 2-D CUtensorMap of a row-major outer x inner matrix (leading dimension ld), 128-byte swizzle."""
        buf = ctypes.create_string_buffer(128 + 64)
        addr = (ctypes.addressof(buf) + 63) & ~63  # CUtensorMap is 64-byte aligned
        dims = (ctypes.c_uint64 * 2)(inner, outer)
        strides = (ctypes.c_uint64 * 1)(ld * 2)
        box_dims = (ctypes.c_uint32 * 2)(*box)
        elem = (ctypes.c_uint32 * 2)(1, 1)
        data_type = {"bf16": 9, "fp16": 6}[dtype]  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 / FLOAT16
        # interleave none, swizzle 128B (3), L2 promotion 256B (3), out-of-bounds fill zeros (0)
        self.check(self.lib.cuTensorMapEncodeTiled(ctypes.c_void_p(addr), data_type, 2, ctypes.c_void_p(ptr),
                                                   dims, strides, box_dims, elem, 0, 3, 3, 0),
                   f"cuTensorMapEncodeTiled({inner}x{outer}, ld {ld}, box {box})")
        return buf, addr

    def launcher(self, func: int, grid: tuple, block: int, smem: int, args: list):
        """A zero-argument launch of `func` with ctypes values `args` (kept alive by the closure)."""
        import torch

        holders = [a for a in args]
        pointers = (ctypes.c_void_p * len(args))(
            *[ctypes.cast(ctypes.pointer(a), ctypes.c_void_p) if not isinstance(a, int) else ctypes.c_void_p(a)
              for a in holders])
        gx, gy = grid

        def launch():
            stream = torch.cuda.current_stream().cuda_stream
            self.check(self.lib.cuLaunchKernel(func, gx, gy, 1, block, 1, 1, smem, stream, pointers, None),
                       "cuLaunchKernel")

        launch.keep = (holders, pointers)
        return launch


# ---------------------------------------------------------------------------------------------------
class Ladder:
    """The compiled rungs, and launchers for them."""

    def __init__(self, rungs: tuple[int, ...] | None = None):
        import cupy
        import torch

        props = torch.cuda.get_device_properties(0)
        self.sms = props.multi_processor_count
        self.hopper = (props.major, props.minor) == (9, 0)
        self.driver = Driver()
        self.rung5 = RUNG5_CONFIGS[0]
        arch = f"sm_{props.major}{props.minor}"
        names: dict[tuple, list[str]] = {}
        for v in variants(self.hopper):  # one module a rung (a rung-5 configuration): they compile in parallel
            if rungs is None or v[0] in rungs:
                names.setdefault((v[0], v[5] if v[0] == 5 else None), []).append(kernel_names(*v))
        if (5, RUNG5_CONFIGS[0]) in names:
            names[(5, RUNG5_CONFIGS[0])] += ["mma_sync_peak<bf16>", "mma_sync_peak<fp16>"]
        if (6, None) in names:
            names[(6, None)] += ["wgmma_peak<bf16>", "wgmma_peak<fp16>"]
        opts = ("--std=c++17", "-lineinfo") + toolkit_include_options()

        def build(key):
            rung = key[0]
            code = rung6_source(peak=True) if rung == 6 else (KERNELS / "hgemm.cu").read_text()
            target = "sm_90a" if rung == 6 else arch
            start = time.perf_counter()
            mod = cupy.RawModule(code=code, options=opts + (f"--gpu-architecture={target}",),
                                 name_expressions=names[key])
            funcs = {n: mod.get_function(n) for n in names[key]}
            return key, funcs, time.perf_counter() - start

        start = time.perf_counter()
        with ThreadPoolExecutor(len(names)) as pool:
            built = list(pool.map(build, list(names)))
        self.funcs = {}
        for key, funcs, seconds in built:
            self.funcs.update(funcs)
            print(f"rung {key[0]}{'' if key[1] is None else ' ' + str(key[1])}: compiled {len(funcs)} kernels in "
                  f"{seconds:.0f} s", flush=True)
        print(f"compiled in {time.perf_counter() - start:.0f} s", flush=True)

    def ptr(self, name: str) -> int:
        f = self.funcs[name]
        return f.kernel.ptr if hasattr(f, "kernel") else f.ptr

    def resources(self) -> dict:
        """Registers, local (spill) bytes and static shared memory of every kernel, read from the driver."""
        return kernel_resources(self.driver, {name: self.ptr(name) for name in self.funcs})

    def make(self, rung: int, a, b, out, ta: bool = False, tb: bool = False):
        """A zero-argument launch computing out = op(a) @ op(b) with `rung` (torch tensors, row-major)."""
        import torch

        dtype = {torch.bfloat16: "bf16", torch.float16: "fp16"}[a.dtype]
        outname = "fp32" if out.dtype == torch.float32 else dtype
        m, k = (a.shape[1], a.shape[0]) if ta else a.shape
        n = b.shape[0] if tb else b.shape[1]
        assert out.shape == (m, n) and (b.shape[1] if tb else b.shape[0]) == k, "shapes do not chain"
        for t in (a, b, out):
            assert t.shape[1] == 1 or t.stride(1) == 1, "row-major operands (unit column stride) only"
        name = kernel_names(rung, dtype, outname, ta, tb, self.rung5)
        func = self.ptr(name)
        if k == 0:
            return lambda: out.zero_()
        if rung == 6:
            return self._make_wgmma(func, dtype, a, b, out, m, n, k, ta, tb)
        lda, ldb, ldc = _ld(a), _ld(b), _ld(out)
        vec = lda % 8 == 0 and ldb % 8 == 0 and a.data_ptr() % 32 == 0 and b.data_ptr() % 32 == 0
        threads, smem = RUNG_THREADS.get(rung), RUNG_SMEM.get(rung, 0)
        if rung == 1:
            grid = (math.ceil(math.ceil(m / 16) * math.ceil(n / 16) / 4), 1)
        else:
            bm, bn = (128, 128)
            if rung == 5:
                bm, bn, threads, smem = rung5_geometry(self.rung5)
            grid = (math.ceil(n / bn), math.ceil(m / bm))
        self.driver.set_smem(func, smem)
        args = [ctypes.c_uint64(a.data_ptr()), ctypes.c_uint64(b.data_ptr()), ctypes.c_uint64(out.data_ptr()),
                ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k), ctypes.c_int(lda), ctypes.c_int(ldb),
                ctypes.c_int(ldc), ctypes.c_bool(vec)]
        launch = self.driver.launcher(func, grid, threads, smem if rung >= 3 else 0, args)
        launch.keep += (a, b, out)
        return launch

    def _make_wgmma(self, func, dtype, a, b, out, m, n, k, ta, tb):
        # the TMA needs 16-byte row strides: an operand whose rows are not is copied once into a padded one
        a, b = _pad_rows(a), _pad_rows(b)
        if ta:  # stored K x M, boxes of 64 m x 64 k
            map_a = self.driver.tensor_map(a.data_ptr(), dtype, m, k, _ld(a), (64, 64))
        else:   # stored M x K, boxes of 64 k x 128 m
            map_a = self.driver.tensor_map(a.data_ptr(), dtype, k, m, _ld(a), (64, 128))
        if tb:  # stored N x K, boxes of 64 k x 256 n
            map_b = self.driver.tensor_map(b.data_ptr(), dtype, k, n, _ld(b), (64, 256))
        else:   # stored K x N, boxes of 64 n x 64 k
            map_b = self.driver.tensor_map(b.data_ptr(), dtype, n, k, _ld(b), (64, 64))
        tiles = math.ceil(m / 128) * math.ceil(n / 256)
        smem = RUNG_SMEM[6]
        self.driver.set_smem(func, smem)
        assert _ld(out) == n, "the lab's rung 6 writes a contiguous C"
        # one 256-byte parameter: A's map, then B's (the lab's kernel reads maps[0] and maps[1])
        maps = (ctypes.c_uint8 * 256).from_buffer_copy(ctypes.string_at(map_a[1], 128) + ctypes.string_at(map_b[1], 128))
        args = [maps, ctypes.c_uint64(out.data_ptr()), ctypes.c_uint64(0), ctypes.c_int(0),  # no bias
                ctypes.c_int(m), ctypes.c_int(n), ctypes.c_int(k)]
        launch = self.driver.launcher(func, (min(tiles, self.sms), 1), 384, smem, args)
        launch.keep += (a, b, out, map_a, map_b)
        return launch

    def tune_rung5(self, size: int = 4096) -> dict:
        """Times every rung-5 configuration at size^3 (bf16), checked against torch.matmul; keeps the fastest."""
        import torch

        a, b = operands(size, size, size, torch.bfloat16, seed=3)
        out = torch.empty(size, size, dtype=torch.bfloat16, device="cuda")
        expected = torch.matmul(a, b)
        tflops = {}
        for config in RUNG5_CONFIGS:
            self.rung5 = config
            fn = self.make(5, a, b, out)
            out.fill_(float("nan"))
            fn()
            if not torch.allclose(out.float(), expected.float(), rtol=2e-2, atol=0.2):
                raise AssertionError(f"rung 5 {config} differs from torch.matmul")
            tflops[str(config)] = 2 * size ** 3 / time_gpu(fn, max_seconds=0.3) / 1e12
        self.rung5 = max(RUNG5_CONFIGS, key=lambda c: tflops[str(c)])
        print("rung 5 configurations (TFLOP/s at 4096^3 bf16):", {k: round(v, 1) for k, v in tflops.items()},
              "-> using", self.rung5, flush=True)
        return {"tflops": tflops, "chosen": list(self.rung5)}

    def peak(self, which: str, dtype: str) -> float:
        """TFLOP/s of the mma.sync or wgmma ceiling kernel (register or shared-memory operands only)."""
        import torch

        iters = 4096
        if which == "mma_sync":
            func, block, smem = self.ptr(f"mma_sync_peak<{dtype}>"), 256, 0
            blocks = self.sms * 8
            flops = blocks * (block // 32) * iters * 8 * 4096
        else:
            func, block, smem = self.ptr(f"wgmma_peak<{dtype}>"), 256, 49152 + 1024
            self.driver.set_smem(func, smem)
            blocks = self.sms
            flops = blocks * 2 * iters * 4 * 524288
        sink = torch.empty(blocks * block, device="cuda")
        launch = self.driver.launcher(func, (blocks, 1), block, smem, [ctypes.c_uint64(sink.data_ptr()),
                                                                       ctypes.c_int(iters)])
        launch.keep += (sink,)
        return flops / time_gpu(launch, max_seconds=0.3) / 1e12


def _ld(t) -> int:
    """The leading dimension (elements between rows) of a row-major matrix; torch reports any stride for a
    dimension of size 1."""
    return t.stride(0) if t.shape[0] > 1 or t.stride(0) >= t.shape[1] else t.shape[1]


def _pad_rows(t):
    """t itself if its rows start 16-byte aligned, else a copy with the row pitch rounded up to 8 elements."""
    import torch

    if _ld(t) % 8 == 0 and t.data_ptr() % 16 == 0 and (t.shape[1] == 1 or t.stride(1) == 1):
        return t
    rows, cols = t.shape
    padded = torch.zeros(rows, (cols + 7) // 8 * 8, dtype=t.dtype, device=t.device)
    padded[:, :cols] = t
    return padded[:, :cols]


# ---------------------------------------------------------------------------------------------------
def operands(m: int, k: int, n: int, dtype, seed: int):
    """Uniform(-1, 1) op(A) (m x k) and op(B) (k x n), rounded to dtype."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.rand(m, k, device="cuda", generator=g) * 2 - 1).to(dtype)
    b = (torch.rand(k, n, device="cuda", generator=g) * 2 - 1).to(dtype)
    return a, b


def stored(x, transposed: bool):
    """x, or a row-major copy of its transpose (a fresh tensor: .contiguous() keeps odd strides of size-1 dims)."""
    import torch

    if not transposed:
        return x
    y = torch.empty(x.shape[1], x.shape[0], dtype=x.dtype, device=x.device)
    return y.copy_(x.t())


def check(got, ref, mag, k: int, out: str) -> tuple[bool, float]:
    """Within the bound? And the accumulation error in units of sqrt(K) 2^-24 sum|a||b|."""
    import torch

    scale = math.sqrt(k) * 2.0 ** -24 * mag
    gamma = ERROR_C * scale
    bound = gamma * (1 + OUT_UNIT[out]) + OUT_UNIT[out] * ref.abs() + (2.0 ** -24 if out == "fp16" else 0.0)
    err = (got.double() - ref).abs()
    ok = bool(torch.isfinite(got).all()) and bool((err <= bound).all())
    # the accumulation's share: the error less the output rounding, relative to sqrt(K) 2^-24 sum|a||b|
    rest = (err - OUT_UNIT[out] * ref.abs()).clamp(min=0)
    units = float((rest / scale.clamp(min=1e-300)).max()) if got.numel() else 0.0
    return ok, units


def validate(ladder: Ladder, shapes=VALIDATION_SHAPES, rungs: tuple[int, ...] | None = None) -> dict:
    import torch

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    rungs = rungs or tuple(range(1, 7 if ladder.hopper else 6))
    worst: dict[str, float] = {}
    failures, bad = [], set()
    for dtype in ("bf16", "fp16"):
        for si, (m, k, n) in enumerate(shapes):
            a, b = operands(m, k, n, tdt[dtype], seed=si)
            ref = a.double() @ b.double()
            mag = a.double().abs() @ b.double().abs()
            # cuBLAS on the same inputs, fp32 output where this torch offers it
            try:
                cub = torch.mm(a, b, out_dtype=torch.float32)
                _, units = check(cub, ref, mag, k, "fp32")
                worst["cublas"] = max(worst.get("cublas", 0.0), units)
            except (TypeError, RuntimeError):
                pass
            for rung in rungs:
                for out in ("fp32", dtype):
                    for ta, tb in LAYOUTS:
                        odt = torch.float32 if out == "fp32" else tdt[dtype]
                        guard = torch.full((m * n + 64,), float("nan"), dtype=odt, device="cuda")
                        c = guard[: m * n].view(m, n)
                        ladder.make(rung, stored(a, ta), stored(b, tb), c, ta, tb)()
                        torch.cuda.synchronize()
                        ok, units = check(c, ref, mag, k, out)
                        spill = not bool(torch.isnan(guard[m * n:]).all())
                        if out == "fp32":  # the accumulation alone; a 16-bit output adds its own rounding
                            worst[f"{rung}"] = max(worst.get(f"{rung}", 0.0), units)
                        if not ok or spill:
                            bad.add((rung, dtype, ta, tb))
                            failures.append(f"rung {rung} {dtype}->{out} ta={ta} tb={tb} {m}x{k}x{n}: "
                                            f"error {units:.2f} sqrt(K)u units" + (", wrote past C" if spill else ""))
            print(f"validated {dtype} {m}x{k}x{n}", flush=True)
    print("largest accumulation error (fp32 outputs) in sqrt(K) 2^-24 sum|a||b| units:",
          {k: round(v, 3) for k, v in worst.items()}, flush=True)
    if failures:
        print(f"{len(failures)} FAILURES:\n  " + "\n  ".join(failures[:60]), flush=True)
    else:
        print(f"validation: every rung right at {len(shapes)} shapes x 2 dtypes x 2 outputs x 4 layouts "
              f"(bound {ERROR_C} sqrt(K) 2^-24 sum|a||b| + output rounding)", flush=True)
    return {"worst_units": worst, "failures": failures, "bound_c": ERROR_C,
            "shapes": [list(s) for s in shapes], "bad": sorted(bad)}


def timing_rows(ladder: Ladder, quick: bool = False, bad: frozenset = frozenset()) -> list[dict]:
    import torch

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}
    shapes = [("square_4096", 4096, 4096, 4096, False, False)]
    if not quick:
        shapes += [("square_4096_At", 4096, 4096, 4096, True, False),
                   ("square_4096_Bt", 4096, 4096, 4096, False, True)] + gpt_shapes()
    rows = []
    for name, m, k, n, ta, tb in shapes:
        for dtype in ("bf16", "fp16"):
            a, b = operands(m, k, n, tdt[dtype], seed=1)
            a_st, b_st = stored(a, ta), stored(b, tb)
            out = torch.empty(m, n, dtype=tdt[dtype], device="cuda")
            op_a = a_st.t() if ta else a_st
            op_b = b_st.t() if tb else b_st
            expected = torch.matmul(op_a, op_b)
            flops = 2.0 * m * n * k
            cublas = flops / time_gpu(partial(torch.matmul, op_a, op_b, out=out), max_seconds=0.3) / 1e12
            line = []
            for rung in range(1, 7 if ladder.hopper else 6):
                if (rung, dtype, ta, tb) in bad:
                    rows.append({"kernel": f"{rung}_{RUNG_NAMES[rung]}", "rung": rung, "shape": name,
                                 "dtype": dtype, "m": m, "n": n, "k": k, "tflops": None, "cublas_tflops": cublas,
                                 "ratio": None, "note": "not timed: failed validation"})
                    continue
                fn = ladder.make(rung, a_st, b_st, out, ta, tb)
                out.fill_(float("nan"))
                fn()
                if not torch.allclose(out.float(), expected.float(), rtol=2e-2, atol=2e-2 * math.sqrt(k) / 8):
                    raise AssertionError(f"rung {rung} differs from torch.matmul at {name} {dtype}")
                slow = rung <= 2 and flops > 1e11
                seconds = time_gpu(fn, max_seconds=0.3 if not slow else 0.1)
                tflops = flops / seconds / 1e12
                rows.append({"kernel": f"{rung}_{RUNG_NAMES[rung]}", "rung": rung, "shape": name, "dtype": dtype,
                             "out": dtype, "ta": ta, "tb": tb, "m": m, "n": n, "k": k, "seconds": seconds,
                             "tflops": tflops, "cublas_tflops": cublas, "ratio": tflops / cublas})
                line.append(f"{rung}:{tflops:6.1f} ({tflops / cublas:.2f})")
            if not ladder.hopper:
                rows.append({"kernel": "6_wgmma_tma", "rung": 6, "shape": name, "dtype": dtype, "m": m, "n": n,
                             "k": k, "tflops": None, "cublas_tflops": cublas, "ratio": None,
                             "note": "not measured: needs an sm_90 GPU"})
            print(f"{name:22s} {dtype} cuBLAS {cublas:6.1f} TFLOP/s | " + "  ".join(line), flush=True)
    # fp32 output of the best rung at 4096^3
    best = 6 if ladder.hopper else 5
    for dtype in ("bf16", "fp16"):
        a, b = operands(4096, 4096, 4096, tdt[dtype], seed=1)
        out = torch.empty(4096, 4096, device="cuda")
        seconds = time_gpu(ladder.make(best, a, b, out), max_seconds=0.3)
        cub = [r for r in rows if r["shape"] == "square_4096" and r["dtype"] == dtype][0]["cublas_tflops"]
        tflops = 2 * 4096 ** 3 / seconds / 1e12
        rows.append({"kernel": f"{best}_{RUNG_NAMES[best]}", "rung": best, "shape": "square_4096_fp32out",
                     "dtype": dtype, "out": "fp32", "ta": False, "tb": False, "m": 4096, "n": 4096, "k": 4096,
                     "seconds": seconds, "tflops": tflops, "cublas_tflops": cub, "ratio": tflops / cub,
                     "note": "fp32 output; cuBLAS column is its 16-bit-output time"})
        print(f"rung {best} {dtype}->fp32 4096^3: {tflops:.1f} TFLOP/s", flush=True)
    return rows


def profile(ladder: Ladder, target: str, size: int, dtype: str) -> None:
    import torch

    tdt = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    a, b = operands(size, size, size, tdt, seed=0)
    out = torch.empty(size, size, dtype=tdt, device="cuda")
    fn = (lambda: torch.matmul(a, b, out=out)) if target == "cublas" else ladder.make(int(target), a, b, out)
    for _ in range(2):
        fn()
    torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--validate-only", action="store_true")
    parser.add_argument("--quick", action="store_true", help="time 4096^3 only")
    parser.add_argument("--profile", nargs=2, metavar=("RUNG", "SIZE"),
                        help="launch one rung (or cublas) twice at SIZE^3 and stop: a target for ncu")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    parser.add_argument("--resources", help="write the kernels' registers and memory to this JSON file")
    parser.add_argument("--rung5", help="rung 5's tiles for --profile, e.g. 128,256,32,2,4,4 (default: the first)")
    parser.add_argument("--rungs", help="with --validate-only: compile and validate these rungs only, e.g. 6")
    args = parser.parse_args()
    if args.rungs:
        if not args.validate_only:
            parser.error("--rungs goes with --validate-only")
        rungs = tuple(int(r) for r in args.rungs.split(","))
        ladder = Ladder(rungs)
        return 1 if validate(ladder, rungs=rungs)["failures"] else 0
    ladder = Ladder()
    if args.rung5:
        ladder.rung5 = tuple(int(v) for v in args.rung5.split(","))
    if args.profile:
        profile(ladder, args.profile[0], int(args.profile[1]), args.dtype)
        return 0
    device = gpu_name()
    print(f"device: {device}", flush=True)
    resources = ladder.resources()
    for name, r in resources.items():
        if "float" not in name and "peak" not in name:
            print(f"  {name}: {r}", flush=True)
    if args.resources:
        import json

        Path(args.resources).write_text(json.dumps(resources, indent=1))
    tuning = ladder.tune_rung5()
    validation = validate(ladder)
    if args.validate_only:
        return 1 if validation["failures"] else 0
    ceilings = {}
    for which in ("mma_sync", "wgmma") if ladder.hopper else ("mma_sync",):
        for dtype in ("bf16", "fp16"):
            ceilings[f"{which}_{dtype}"] = ladder.peak(which, dtype)
    print("ceilings (TFLOP/s, operands from registers / shared memory only):",
          {k: round(v, 1) for k, v in ceilings.items()}, flush=True)
    rows = timing_rows(ladder, quick=args.quick, bad=frozenset(tuple(b) for b in validation["bad"]))
    write_results("phase8a_hgemm", device, rows, validation=validation, ceilings_tflops=ceilings,
                  rung5_tuning=tuning,
                  kernels={f"{r}_{RUNG_NAMES[r]}": kernel_names(r, "bf16", "bf16", False, False, ladder.rung5)
                           for r in RUNG_NAMES},
                  resources=resources)
    return 1 if validation["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
