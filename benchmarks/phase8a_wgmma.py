"""Phase 8a benchmark: the lab's rung 6 (hgemm_wgmma.cu through hgemm.py, variant="wgmma") on an sm_90 GPU.

Runs the reference solution's files of solutions/phase8a_tensor_cores.ipynb, launched as a learner's launcher
launches them (CuPy, the tensor maps made by cuTensorMapEncodeTiled through ctypes and written to global memory by
a launch of store_tensor_maps; the GEMM acquires them with fence.proxy.tensormap), and writes
``benchmarks/results/phase8a_wgmma-<gpu>.json``:

- validation: every format, fp32 and 16-bit outputs, the four layouts, at sizes that are multiples of no tile (and
  one whose rows the TMA cannot copy: rung 5 computes it), against a float64 product of the 16-bit inputs, as
  errors in units of ``sqrt(K) 2^-24 max(|A||B|)``;
- timing (the grader's time_cuda: CUDA events, L2 flushed, median) at 4096^3 and at the GPT's training shapes,
  against torch.matmul (cuBLAS) on the same dtypes and layouts in the same run; rung 5 at 4096^3 beside it;
- where the tensor maps live: the same kernel source with the two maps passed by value as a ``__grid_constant__``
  parameter (launched with cuLaunchKernel through ctypes, as benchmarks/phase8a_hgemm.py does; no writer launch,
  no proxy fence) against the lab's global-memory maps, at 4096^3, same run.

Usage (on an H100 or H200): ``python benchmarks/phase8a_wgmma.py``; ``--profile`` launches rung 5 and rung 6 once
each at 4096^3 (bf16 in and out) and nothing else: the target of ``ncu --kernel-name regex:hgemm_[56]_``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
from functools import partial

import numpy as np
from common import ROOT, gpu_name, solution_sources, time_gpu, write_results

NOTEBOOK = "phase8a_tensor_cores.ipynb"
SHAPES = [(136, 72, 264), (129, 72, 136), (8, 40, 3000), (520, 1000, 264), (1024, 1024, 1024), (17, 1, 33)]
GPT_SHAPES = [("gpt_d768_fc_fwd", 4096, 768, 3072, False, False), ("gpt_d768_fc_dx", 4096, 3072, 768, False, True),
              ("gpt_d768_fc_dw", 768, 4096, 3072, True, False), ("gpt_d768_qkv_fwd", 4096, 768, 2304, False, False),
              ("gpt_d64_fc_fwd", 4096, 64, 256, False, False), ("gpt_d64_fc_dw", 64, 4096, 256, True, False)]
LAYOUTS = ((False, False), (True, False), (False, True), (True, True))


def lab_workspace() -> None:
    """A fresh learner workspace holding the reference solution's Phase 8a files."""
    from minitorch import kernels

    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="phase8a_wgmma_")
    for name, text in solution_sources(NOTEBOOK).items():
        kernels.write_source(name, text)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def widen(x16: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float16":
        return x16.astype(np.float64)
    return (x16.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def validate(hg) -> list[dict]:
    import cupy

    from minitorch import kernels

    rows = []
    rng = np.random.default_rng(0)
    for m, k, n in SHAPES:
        for dtype in ("bfloat16", "float16"):
            for ta, tb in LAYOUTS:
                a32, b32 = rng.uniform(-1, 1, (m, k)), rng.uniform(-1, 1, (k, n))
                a16, b16 = ((x.astype(np.float16) if dtype == "float16" else bf16_bits(x)) for x in (a32, b32))
                a64, b64 = widen(a16, dtype), widen(b16, dtype)
                stored_a, stored_b = (np.ascontiguousarray(a16.T) if ta else a16), (
                    np.ascontiguousarray(b16.T) if tb else b16)
                out = cupy.full((m, n), np.nan, np.float32)
                kernels.reset_launch_counts()
                hg.hgemm(cupy.asarray(stored_a), cupy.asarray(stored_b), out, dtype, "wgmma", transpose_a=ta,
                         transpose_b=tb)
                rung6 = sum(c for (f, name), c in kernels.launch_counts().items() if f == "hgemm_wgmma.cu"
                            and name.startswith("hgemm_6_wgmma"))
                got, expected = cupy.asnumpy(out).astype(np.float64), a64 @ b64
                unit = np.sqrt(k) * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64)).max()
                err = float(np.abs(got - expected).max() / unit) if np.isfinite(got).all() else float("inf")
                rows.append({"m": m, "k": k, "n": n, "dtype": dtype, "ta": ta, "tb": tb, "ran_rung6": rung6 > 0,
                             "max_error_units": err, "ok": err <= 8.0})
                if err > 8.0:
                    print(f"WRONG: {dtype} {m}x{k}x{n} ta={ta} tb={tb}: error {err:.3g} units", flush=True)
    print(f"validation: {sum(r['ok'] for r in rows)} of {len(rows)} within 8 sqrt(K) 2^-24 max|A||B|; rung 6 ran in "
          f"{sum(r['ran_rung6'] for r in rows)}", flush=True)
    return rows


def operands(cupy, shape: tuple[int, int], dtype: str, seed: int):
    x = cupy.random.RandomState(seed).uniform(-1, 1, shape, dtype=np.float32)
    if dtype == "float16":
        return x.astype(np.float16)
    bits = x.view(np.uint32)
    return ((bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16).astype(np.uint16)


def rung6_source(peak: bool = False) -> str:
    """The lab's hgemm_wgmma.cu (the reference solution's) with its two tensor maps as one ``__grid_constant__``
    parameter of 256 bytes instead of a pointer to global memory (and no acquire fence: parameters are not written
    by the generic proxy): the kernel benchmarks/phase8a_hgemm.py launches through the driver, and the other side
    of the comparison above. ``peak``: with benchmarks/kernels/wgmma_peak.cu appended (the wgmma ceiling)."""
    src = solution_sources(NOTEBOOK)["hgemm_wgmma.cu"]
    edits = [("struct __align__(128) TensorMap { u64 word[16]; };\n",
              "struct __align__(128) TensorMap { u64 word[16]; };\n"
              "struct __align__(64) TensorMapPair { u64 word[32]; };  // a CUtensorMap parameter is 64-aligned\n"),
             ("    hgemm_6_wgmma(const TensorMap* maps, O* C, const float* bias, int has_bias, int M,\n"
              "                  int N, int K) {\n",
              "    hgemm_6_wgmma(const __grid_constant__ TensorMapPair by_value, O* C, const float* bias,\n"
              "                  int has_bias, int M, int N, int K) {\n"
              "    const TensorMap* maps = reinterpret_cast<const TensorMap*>(by_value.word);\n")]
    for old, new in edits:
        if src.count(old) != 1:
            raise ValueError(f"hgemm_wgmma.cu of {NOTEBOOK} changed: cannot find {old.strip()!r}")
        src = src.replace(old, new)
    start = src.index("            // the maps were written in global memory by store_tensor_maps")
    end = src.index("            int it = 0;", start)
    src = src[:start] + src[end:]
    if peak:
        src += "\n" + (ROOT / "benchmarks" / "kernels" / "wgmma_peak.cu").read_text()
    return src


def by_value_launch(hg, a, b, out, dtype: str):
    """rung6_source()'s kernel on a, b (K x N), out, launched through the driver: a zero-argument call."""
    import cupy
    from phase8a_hgemm import Driver

    from minitorch.backend import toolkit_include_options

    ctype = {"bfloat16": "bf16", "float16": "fp16"}[dtype]
    name = f"hgemm_6_wgmma<{ctype}, {ctype}, false, false>"
    mod = cupy.RawModule(code=rung6_source(), name_expressions=[name],
                         options=("--gpu-architecture=sm_90a", "-lineinfo") + toolkit_include_options())
    func = mod.get_function(name)
    driver = Driver()
    ptr = func.kernel.ptr if hasattr(func, "kernel") else func.ptr
    driver.set_smem(ptr, hg.WGMMA_SMEM)
    words = hg.tensor_map_words(a, ctype, (64, 128)) + hg.tensor_map_words(b, ctype, (64, 64))
    maps = (ctypes.c_uint8 * 256).from_buffer_copy(np.array(words, np.uint64).tobytes())
    m, n = out.shape
    k = a.shape[1]
    tiles = -(-m // 128) * -(-n // 256)
    args = [maps, ctypes.c_uint64(out.data.ptr), ctypes.c_uint64(0), ctypes.c_int(0), ctypes.c_int(m), ctypes.c_int(n),
            ctypes.c_int(k)]  # no bias (has_bias 0: the null pointer is never read)
    launch = driver.launcher(ptr, (min(tiles, hg.multiprocessors()), 1), hg.WGMMA_THREADS, hg.WGMMA_SMEM, args)
    launch.keep += (a, b, out, mod)
    return launch


def timing(hg) -> tuple[list[dict], dict]:
    import cupy
    import torch

    rows = []
    size = 4096
    flop = 2 * size ** 3
    tdtype = {"bfloat16": torch.bfloat16, "float16": torch.float16}
    for dtype in ("bfloat16", "float16"):
        a = operands(cupy, (size, size), dtype, 1)
        b = operands(cupy, (size, size), dtype, 2)
        out = cupy.empty((size, size), a.dtype)
        x = torch.empty((size, size), dtype=tdtype[dtype], device="cuda").uniform_(-1, 1)
        y = torch.empty((size, size), dtype=tdtype[dtype], device="cuda").uniform_(-1, 1)
        z = torch.empty((size, size), dtype=tdtype[dtype], device="cuda")
        cublas = flop / time_gpu(partial(torch.matmul, x, y, out=z)) / 1e12
        for variant in ("wgmma", "pipeline"):
            call = partial(hg.hgemm, a, b, out, dtype, variant)
            call()  # compiled before it is timed
            tflops = flop / time_gpu(call) / 1e12
            rows.append({"shape": "square_4096", "kernel": variant, "dtype": dtype, "m": size, "n": size, "k": size,
                         "tflops": tflops, "cublas_tflops": cublas, "ratio": tflops / cublas})
            print(f"{dtype} 4096^3 {variant:>8}: {tflops:6.1f} TFLOP/s = {tflops / cublas:.3f} x cuBLAS "
                  f"({cublas:.1f})", flush=True)
    # where the maps live: by value against global memory, interleaved, bf16 at 4096^3
    a, b = operands(cupy, (size, size), "bfloat16", 1), operands(cupy, (size, size), "bfloat16", 2)
    out, again = cupy.empty((size, size), np.uint16), cupy.empty((size, size), np.uint16)
    launch = by_value_launch(hg, a, b, again, "bfloat16")
    hg.hgemm(a, b, out, "bfloat16", "wgmma")
    launch()
    cupy.cuda.runtime.deviceSynchronize()
    same = bool((out == again).all())
    seconds = {"global_memory_maps": [], "by_value_maps": []}
    for _ in range(3):
        seconds["global_memory_maps"].append(time_gpu(partial(hg.hgemm, a, b, out, "bfloat16", "wgmma")))
        seconds["by_value_maps"].append(time_gpu(launch))
    maps = {key: {"seconds": min(v), "tflops": flop / min(v) / 1e12} for key, v in seconds.items()}
    maps["same_bits"] = same
    maps["global_over_by_value"] = maps["global_memory_maps"]["seconds"] / maps["by_value_maps"]["seconds"]
    print(f"tensor maps: global memory {maps['global_memory_maps']['tflops']:.1f} TFLOP/s, by value "
          f"{maps['by_value_maps']['tflops']:.1f} (time ratio {maps['global_over_by_value']:.3f}); same C: {same}",
          flush=True)
    for name, m, k, n, ta, tb in GPT_SHAPES:
        x = torch.empty((k, m) if ta else (m, k), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        y = torch.empty((n, k) if tb else (k, n), dtype=torch.bfloat16, device="cuda").uniform_(-1, 1)
        z = torch.empty((m, n), dtype=torch.bfloat16, device="cuda")
        opx, opy = (x.t() if ta else x), (y.t() if tb else y)
        a, b = operands(cupy, tuple(x.shape), "bfloat16", 3), operands(cupy, tuple(y.shape), "bfloat16", 4)
        out = cupy.empty((m, n), np.uint16)
        cublas = 2 * m * n * k / time_gpu(partial(torch.matmul, opx, opy, out=z)) / 1e12
        for variant in ("wgmma", "pipeline"):
            call = partial(hg.hgemm, a, b, out, "bfloat16", variant, transpose_a=ta, transpose_b=tb)
            call()
            tflops = 2 * m * n * k / time_gpu(call) / 1e12
            rows.append({"shape": name, "kernel": variant, "dtype": "bfloat16", "m": m, "n": n, "k": k, "ta": ta,
                         "tb": tb, "tflops": tflops, "cublas_tflops": cublas, "ratio": tflops / cublas})
            print(f"{name} {variant:>8}: {tflops:6.1f} TFLOP/s = {tflops / cublas:.3f} x cuBLAS", flush=True)
    return rows, maps


def profile(hg) -> None:
    import cupy

    size = 4096
    a, b = operands(cupy, (size, size), "bfloat16", 1), operands(cupy, (size, size), "bfloat16", 2)
    out = cupy.empty((size, size), np.uint16)
    for variant in ("pipeline", "wgmma"):
        hg.hgemm(a, b, out, "bfloat16", variant)
    cupy.cuda.runtime.deviceSynchronize()


def ncu_json(csv_files: list[str], device: str) -> int:
    """Nsight Compute's --csv output (of ``--profile``) -> benchmarks/results/phase8a_wgmma_ncu-<gpu>.json:
    {kernel: {metric: [value, unit]}}, rung 5 and rung 6 at 4096^3 (bf16 in and out)."""
    import csv

    kernels_seen: dict[str, dict[str, list]] = {}
    for path in csv_files:
        lines = [line for line in open(path, encoding="utf-8", errors="replace") if line.startswith('"')]
        for row in csv.DictReader(lines):
            name = row.get("Kernel Name", "")
            rung = "rung5_pipeline" if "hgemm_5_pipeline" in name else "rung6_wgmma" if "hgemm_6_wgmma" in name else None
            if rung is None or not row.get("Metric Name"):
                continue
            value = row["Metric Value"].replace(",", "")
            try:
                number: float | str = float(value)
            except ValueError:
                number = value
            kernels_seen.setdefault(rung, {"kernel": [name, ""]})[row["Metric Name"]] = [number, row["Metric Unit"]]
    if not kernels_seen:
        print("no hgemm_5_pipeline / hgemm_6_wgmma rows in " + ", ".join(csv_files), file=sys.stderr)
        return 1
    write_results("phase8a_wgmma_ncu", device, [{"rung": k, **v} for k, v in kernels_seen.items()],
                  what="Nsight Compute, one launch each of the lab's rung 5 (hgemm_5_pipeline) and rung 6 "
                       "(hgemm_6_wgmma) at 4096^3, bf16 in and out (benchmarks/phase8a_wgmma.py --profile)")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", action="store_true", help="one launch of rungs 5 and 6 at 4096^3, for ncu")
    parser.add_argument("--from-ncu", nargs="+", metavar="CSV", help="write the JSON of ncu --csv outputs")
    parser.add_argument("--device", default="NVIDIA H100 80GB HBM3", help="the GPU ncu ran on (--from-ncu)")
    args = parser.parse_args()
    if args.from_ncu:
        return ncu_json(args.from_ncu, args.device)
    os.environ.setdefault("MINITORCH_DEVICE", "cuda")
    lab_workspace()
    from minitorch import kernels

    hg = kernels.load_module("hgemm.py")
    if not hg.has_sm90():
        print("rung 6 needs an sm_90 GPU (H100, H200)", file=sys.stderr)
        return 1
    if args.profile:
        profile(hg)
        return 0
    checks = validate(hg)
    rows, maps = timing(hg)
    write_results("phase8a_wgmma", gpu_name(), rows, validation=checks, tensor_map_placement=maps,
                  launcher="solutions/phase8a_tensor_cores.ipynb hgemm.py, variant='wgmma' (and 'pipeline')")
    return 0 if all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
