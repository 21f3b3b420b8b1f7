"""Float32 arithmetic that makes a NaN gives the GPU's NaN, 0x7fffffff, on the emulator too
(minitorch/emu/nancanon.py: in check mode, or with MINITORCH_EMU_CANONICAL_NAN=1); moves keep a NaN's bits, as on a
GPU. Negation and fabsf keep them here too, but not on an H100: there -x and fabsf(x) of a NaN gave 0x7fffffff
(benchmarks/results/nvrtc_fidelity-nvidia-h100-80gb-hbm3.json), a gap the emulator has not closed."""

from __future__ import annotations

import numpy as np
import pytest

from minitorch import emu
from minitorch.emu import nancanon

CANONICAL = 0x7FFFFFFF
SRC = r"""
extern "C" __global__ void nan_ops(const float* a, const float* b, unsigned* out) {
    int i = threadIdx.x;
    float x = a[i], y = b[i];
    out[0 * 32 + i] = __float_as_uint(x + y);
    out[1 * 32 + i] = __float_as_uint(x - y);
    out[2 * 32 + i] = __float_as_uint(x * y);
    out[3 * 32 + i] = __float_as_uint(x / y);
    out[4 * 32 + i] = __float_as_uint(sqrtf(x));
    out[5 * 32 + i] = __float_as_uint(logf(x));
    out[6 * 32 + i] = __float_as_uint(expf(x) * y);
    out[7 * 32 + i] = __float_as_uint(fmaf(x, y, 1.0f));
    // a copy keeps the bits on a GPU too; -x and fabsf(x) of a NaN give 0x7fffffff on an H100, not here
    out[8 * 32 + i] = __float_as_uint(x);
    out[9 * 32 + i] = __float_as_uint(-x);
    out[10 * 32 + i] = __float_as_uint(fabsf(x));
}
"""
OPS = ["add", "sub", "mul", "div", "sqrt", "log", "exp*", "fma", "copy", "neg", "fabs"]


def bits(v: int) -> np.float32:
    return np.array([v], np.uint32).view(np.float32)[0]


@pytest.fixture
def canonical(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINITORCH_EMU_CANONICAL_NAN", "1")


def run(pairs: list[tuple[float, float]]) -> np.ndarray:
    a = np.array([p for p, _ in pairs] + [1.0] * (32 - len(pairs)), np.float32)
    b = np.array([q for _, q in pairs] + [1.0] * (32 - len(pairs)), np.float32)
    out = emu.zeros(len(OPS) * 32, dtype=np.uint32)
    emu.RawModule(code=SRC, filename="nan.cu").get_function("nan_ops")((1,), (32,), (emu.asarray(a), emu.asarray(b),
                                                                                        out))
    return out.get().reshape(len(OPS), 32)[:, :len(pairs)]


def test_arithmetic_that_makes_a_nan_gives_the_gpus_nan(canonical: None) -> None:
    payload, negative, inf = bits(0x7FC00001), bits(0xFFC00000), np.float32(np.inf)
    pairs = [(np.float32(p), np.float32(q)) for p, q in
             [(payload, 2.0), (negative, 2.0), (2.0, negative), (0.0, inf), (inf, inf), (0.0, 0.0), (-1.0, 2.0)]]
    got = run(pairs)
    for op in ("add", "sub", "mul", "div", "fma"):
        row = got[OPS.index(op)]
        for (a, b), v in zip(pairs, row, strict=True):
            with np.errstate(all="ignore"):
                ref = {"add": a + b, "sub": a - b, "mul": a * b, "div": a / b, "fma": a * b + 1}[op]
            if np.isnan(ref):
                assert v == CANONICAL, f"{op}({a!r}, {b!r}) gave 0x{v:08x}, a GPU 0x7fffffff"
            else:
                assert v == np.float32(ref).view(np.uint32), (op, a, b)
    # sqrt and log of -1, of a NaN; exp of a NaN
    for op in ("sqrt", "log", "exp*"):
        for (a, _), v in zip(pairs[:2] + pairs[-1:], got[OPS.index(op)][[0, 1, 6]], strict=True):
            if op != "exp*" or np.isnan(a):
                assert v == CANONICAL, f"{op}({a!r}) gave 0x{v:08x}"


def test_moves_keep_a_nans_bits(canonical: None) -> None:
    # the emulator's negation and fabsf flip and clear the sign bit only (an H100's give the canonical NaN)
    payload, negative = bits(0x7FC00001), bits(0xFFC00000)
    got = run([(payload, 1.0), (negative, 1.0)])
    assert list(got[OPS.index("copy")]) == [0x7FC00001, 0xFFC00000]
    assert list(got[OPS.index("neg")]) == [0xFFC00001, 0x7FC00000]
    assert list(got[OPS.index("fabs")]) == [0x7FC00001, 0x7FC00000]


def test_check_mode_has_the_gpus_nan_and_normal_mode_by_default_x86s() -> None:
    pairs = [(np.float32(0.0), np.float32(np.inf)), (np.float32(-1.0), np.float32(1.0))]
    with emu.check_mode():
        got = run(pairs)
    assert got[OPS.index("mul")][0] == CANONICAL and got[OPS.index("sqrt")][1] == CANONICAL
    got = run(pairs)  # x86's default NaN, negative: the cost of the check is not paid outside check mode
    assert got[OPS.index("mul")][0] == 0xFFC00000 and got[OPS.index("sqrt")][1] == 0xFFC00000


@pytest.mark.parametrize(("asm", "rewritten"), [
    # flags dead: the next flag instruction writes them
    ("\taddss\t%xmm1, %xmm0\n\tmovss\t%xmm0, (%rax)\n\tcmpl\t%edx, %ecx\n\tjl\t.L3\n", True),
    # flags live: a compare before, its branch after the arithmetic
    ("\tcmpl\t%edx, %ecx\n\tmulss\t4(%rax,%rbx,4), %xmm2\n\tjl\t.L3\n", False),
    # through an unconditional jump to a label, then a write
    ("\tdivss\t%xmm1, %xmm3\n\tjmp\t.L7\n.L8:\n\tjne\t.L9\n.L7:\n\ttestl\t%eax, %eax\n\tje\t.L9\n", True),
    # ... or a read
    ("\tsubss\t%xmm1, %xmm3\n\tjmp\t.L7\n.L8:\n\tnop\n.L7:\n\tsetg\t%al\n", False),
    # a call's result: the flags die in the callee
    ("\tcall\tlogf@PLT\n\tmovss\t%xmm0, (%rbx)\n\tret\n", True),
    ("\tcall\tsomething_else@PLT\n\tret\n", False),
    # packed arithmetic is left alone
    ("\taddps\t%xmm1, %xmm0\n\tret\n", False),
])
def test_the_check_goes_only_where_the_flags_are_dead(asm: str, rewritten: bool) -> None:
    out, done, _ = nancanon.rewrite(asm)
    assert done == int(rewritten), out
    if rewritten:
        assert "ucomiss" in out and ".Lemu_nan_canon" in out


def _gpu_probe() -> dict | None:
    """benchmarks/results/nvrtc_fidelity-<gpu>.json (benchmarks/nvrtc_fidelity.py --device cuda), if committed."""
    import json
    from pathlib import Path

    files = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "results").glob("nvrtc_fidelity-nvidia*.json"))
    return json.loads(files[-1].read_text()) if files else None


@pytest.mark.skipif(_gpu_probe() is None, reason="no GPU measurement committed (benchmarks/nvrtc_fidelity.py)")
def test_the_emulator_agrees_with_the_gpu_on_names_and_nan_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import nvrtc_fidelity

    gpu = _gpu_probe()["results"]
    for r in gpu:  # every name the emulator refuses, NVRTC refused; what NVRTC has, the emulator has
        if r["kind"] == "name":
            assert not r["compiles"], f"NVRTC compiled {r['name']}: the emulator must not refuse it"
        elif r["kind"] == "provided":
            assert r["compiles"], r
    monkeypatch.setenv("MINITORCH_EMU_CANONICAL_NAN", "1")
    a = np.array([nvrtc_fidelity.INPUTS[p] for p, _ in nvrtc_fidelity.PAIRS], np.uint32)
    b = np.array([nvrtc_fidelity.INPUTS[q] for _, q in nvrtc_fidelity.PAIRS], np.uint32)
    ops, pairs = nvrtc_fidelity.OPS, nvrtc_fidelity.PAIRS
    out = emu.zeros(len(ops) * len(pairs), dtype=np.uint32)
    emu.RawModule(code=nvrtc_fidelity.kernel_source()).get_function("nan_ops")(
        (1,), (len(ops) * len(pairs),), (emu.asarray(a), emu.asarray(b), out, np.int32(len(pairs))))
    ours = {(op, p, q): f"0x{int(v):08x}" for (op, _), row in zip(ops, out.get().reshape(len(ops), len(pairs)),
                                                                 strict=True) for (p, q), v in zip(pairs, row, strict=True)}
    # signalling NaNs into fminf/fmaxf and a double's NaN narrowed to float are not canonicalised (see nancanon.py)
    skip = {"fminf(a, b)", "fmaxf(a, b)", "(float)(double)a",
            # measured on an H100: -a and fabsf(a) of a NaN give 0x7fffffff there; the emulator keeps the payload
            # and flips or clears the sign (a known gap: nancanon.py rewrites arithmetic only)
            "-a", "fabsf(a)"}
    def nan(bits: str) -> bool:
        v = int(bits, 16)
        return (v & 0x7F800000) == 0x7F800000 and (v & 0x7FFFFF) != 0

    # where either made a NaN (other results may differ in the last bit: expf, logf are not the GPU's)
    differ = [(r["op"], r["a"], r["b"], r["bits"], ours[(r["op"], r["a"], r["b"])]) for r in gpu
              if r["kind"] == "nan_bits" and r["op"] not in skip and (nan(r["bits"]) or nan(ours[(r["op"], r["a"], r["b"])]))
              and r["bits"] != ours[(r["op"], r["a"], r["b"])]]
    assert not differ, f"(op, a, b, GPU bits, emulator bits): {differ}"
