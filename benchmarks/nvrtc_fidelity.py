"""Where the emulator and a GPU could disagree on what compiles and on NaN bits: the same probes on both.

1. Names of the host's <math.h>, <float.h> and <limits.h> (``INFINITY``, ``FLT_MAX``, ``M_PI``, ...): does a
   kernel using one compile? NVRTC (CuPy's compiler) has no host headers; the emulator rejects the names listed
   in ``minitorch/emu/compiler.py``'s ``NVRTC_MISSING``. Also what NVRTC does provide (``isinf``, ``isnan``,
   ``isfinite``, ``signbit``, ``__int_as_float``, ``<math_constants.h>``'s ``CUDART_INF_F``).
2. The bits of float32 results that are NaN: each operation (add, mul, fma, division, sqrt, fminf, a copy, a
   negation, ...) on inputs that are NaN with a payload, a negative NaN, a signalling NaN, or that make a NaN
   (0 * inf, inf - inf, 0 / 0, sqrt(-1)). A GPU returns its canonical NaN 0x7fffffff from arithmetic; x86 SSE
   keeps the first operand's payload and sign, and makes 0xffc00000 (negative) from invalid operations.

``--device cuda`` (CuPy) or ``emu``; writes ``benchmarks/results/nvrtc_fidelity-<device>.json``.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from common import emulator_name, gpu_name, write_results

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent.parent))
from minitorch.emu.compiler import NVRTC_MISSING  # noqa: E402

PROVIDED = {
    "isinf": "x[0] = (float)isinf(x[1]);",
    "isnan": "x[0] = (float)isnan(x[1]);",
    "isfinite": "x[0] = (float)isfinite(x[1]);",
    "signbit": "x[0] = (float)signbit(x[1]);",
    "__int_as_float": "x[0] = __int_as_float(0x7f800000);",
    "CUDART_INF_F (math_constants.h)": "x[0] = CUDART_INF_F;",
}

# (name, expression of a and b) evaluated by one thread per (operation, input pair)
OPS = [("a + b", "a + b"), ("a - b", "a - b"), ("a * b", "a * b"), ("a / b", "a / b"), ("fmaf(a, b, 1)", "fmaf(a, b, 1.0f)"),
       ("fmaf(1, 1, a)", "fmaf(1.0f, 1.0f, a)"), ("sqrtf(a)", "sqrtf(a)"), ("fminf(a, b)", "fminf(a, b)"),
       ("fmaxf(a, b)", "fmaxf(a, b)"), ("a (copy)", "a"), ("-a", "-a"), ("fabsf(a)", "fabsf(a)"),
       ("expf(a)", "expf(a)"), ("logf(a)", "logf(a)"), ("(float)(double)a", "(float)(double)a"),
       ("__fadd_rn(a, b)", "__fadd_rn(a, b)"), ("__fmul_rn(a, b)", "__fmul_rn(a, b)")]
INPUTS = {"qnan payload 0x7fc00001": 0x7FC00001, "negative qnan 0xffc00000": 0xFFC00000,
          "snan 0x7f800001": 0x7F800001, "-1": 0xBF800000, "0": 0x00000000, "inf": 0x7F800000, "1": 0x3F800000}
PAIRS = [("qnan payload 0x7fc00001", "1"), ("negative qnan 0xffc00000", "1"), ("snan 0x7f800001", "1"),
         ("1", "negative qnan 0xffc00000"), ("0", "inf"), ("inf", "inf"), ("0", "0"), ("-1", "1")]


def first_error(log: str) -> str:
    return next((ln.strip()[:300] for ln in log.splitlines() if "error" in ln), log.strip()[:300])


def kernel_source() -> str:
    cases = "\n".join(f"        case {i}: r = {expr}; break;" for i, (_, expr) in enumerate(OPS))
    return f"""
extern "C" __global__ void nan_ops(const unsigned* a_bits, const unsigned* b_bits, unsigned* out, int pairs) {{
    int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= pairs * {len(OPS)}) return;
    float a = __uint_as_float(a_bits[t % pairs]), b = __uint_as_float(b_bits[t % pairs]), r = 0.0f;
    switch (t / pairs) {{
{cases}
    }}
    out[t] = __float_as_uint(r);
}}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--device", choices=("cuda", "emu"), default="emu")
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results)")
    args = parser.parse_args(argv)
    if args.device == "cuda":
        import cupy as xp

        device = gpu_name()

        def compiles(src: str) -> tuple[bool, str]:
            try:
                xp.RawModule(code=src).get_function("k")
                return True, ""
            except Exception as e:  # noqa: BLE001 - CuPy raises CompileException; any failure is the answer
                return False, first_error(str(e)) or type(e).__name__
    else:
        from minitorch import emu as xp

        device = emulator_name()

        def compiles(src: str) -> tuple[bool, str]:
            try:
                xp.RawModule(code=src).get_function("k")
                return True, ""
            except xp.CompileError as e:
                return False, first_error(str(e))

    rows: list[dict] = []
    for name in NVRTC_MISSING:
        ok, msg = compiles(f'extern "C" __global__ void k(float* x) {{ x[0] = (float)({name}); }}\n')
        rows.append({"kind": "name", "name": name, "compiles": ok, "message": msg})
    for name, stmt in PROVIDED.items():
        inc = "#include <math_constants.h>\n" if "math_constants" in name else ""
        ok, msg = compiles(f'{inc}extern "C" __global__ void k(float* x) {{ {stmt} }}\n')
        rows.append({"kind": "provided", "name": name, "compiles": ok, "message": msg})

    a = np.array([INPUTS[p] for p, _ in PAIRS], np.uint32)
    b = np.array([INPUTS[q] for _, q in PAIRS], np.uint32)
    out = xp.zeros(len(OPS) * len(PAIRS), dtype=np.uint32)
    fn = xp.RawModule(code=kernel_source()).get_function("nan_ops")
    fn((1,), (len(OPS) * len(PAIRS),), (xp.asarray(a), xp.asarray(b), out, np.int32(len(PAIRS))))
    bits = out.get() if hasattr(out, "get") else np.asarray(out)
    for i, (op, _) in enumerate(OPS):
        for j, (p, q) in enumerate(PAIRS):
            v = int(bits[i * len(PAIRS) + j])
            rows.append({"kind": "nan_bits", "op": op, "a": p, "b": q, "bits": f"0x{v:08x}",
                         "is_nan": (v & 0x7F800000) == 0x7F800000 and (v & 0x7FFFFF) != 0})
    import common

    if args.out:
        common.RESULTS = __import__("pathlib").Path(args.out)
    path = write_results("nvrtc_fidelity", device, rows,
                         notes=["kind name: a kernel `x[0] = (float)(NAME);` compiled by NVRTC (cuda) or the emulator",
                                "kind provided: what NVRTC has without an include (and CUDA's math_constants.h)",
                                "kind nan_bits: the float32 result's bits of one thread computing op on (a, b)"])
    print(path)
    for r in rows:
        if r["kind"] != "nan_bits" or r["is_nan"]:
            print(r)
    return 0


if __name__ == "__main__":
    sys.exit(main())
