"""The 32-bit fast path of 64-bit divisions (minitorch/emu/fastdiv.py): the rewrite itself, and kernels whose
quotients and remainders must match NumPy's for operands on both sides of 2^31 and 2^32, negative ones, the
extremes, and a zero divisor that must still be reported with its line."""

from __future__ import annotations

import platform
import re
import shutil
import subprocess

import numpy as np
import pytest

from minitorch import emu
from minitorch.emu import fastdiv

DIV = r"""
extern "C" __global__ void sdiv(const long long* a, const long long* b, long long* q, long long* r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        q[i] = a[i] / b[i];
        r[i] = a[i] % b[i];
    }
}
extern "C" __global__ void udiv(const unsigned long long* a, const unsigned long long* b,
                                unsigned long long* q, unsigned long long* r, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        q[i] = a[i] / b[i];
        r[i] = a[i] % b[i];
    }
}
// the course's indexing: a long long index divided by int extents
extern "C" __global__ void split(int* out, long long total, int W, int H) {
    long long step = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
        out[3 * i] = (int)(i % W);
        out[3 * i + 1] = (int)(i / W % H);
        out[3 * i + 2] = (int)(i / ((long long)H * W));  // line of the division by zero
    }
}
"""


def _operands(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    edges = np.array([0, 1, 2, 3, 7, 2**31 - 1, 2**31, 2**31 + 1, 2**32 - 1, 2**32, 2**32 + 1, 2**40 + 5,
                      2**62, 2**63 - 1], dtype=np.int64)
    signed = np.concatenate([edges, -edges[1:], [np.iinfo(np.int64).min]])
    a = np.concatenate([rng.choice(signed, n), rng.integers(-(2**40), 2**40, n), rng.integers(0, 2**32, n)])
    b = np.concatenate([rng.choice(signed[signed != 0], n), rng.integers(1, 2**33, n) * rng.choice([-1, 1], n),
                        rng.integers(1, 2**32, n)])
    keep = ~((a == np.iinfo(np.int64).min) & (b == -1))  # INT64_MIN / -1 traps on a GPU's host too
    return a[keep], b[keep]


def test_signed_and_unsigned_64_bit_division_match_numpy() -> None:
    rng = np.random.default_rng(0)
    a, b = _operands(rng, 700)
    m = emu.RawModule(code=DIV, filename="div.cu")
    n = len(a)
    q, r = emu.zeros(n, np.int64), emu.zeros(n, np.int64)
    m.get_function("sdiv")(((n + 127) // 128,), (128,), (emu.asarray(a), emu.asarray(b), q, r, np.int32(n)))
    # C truncates toward zero; NumPy's // floors
    expected_q = np.array([abs(int(x)) // abs(int(y)) * (1 if (x < 0) == (y < 0) else -1) for x, y in zip(a, b, strict=True)],
                          dtype=object)
    expected_r = np.array([int(x) - int(qq) * int(y) for x, y, qq in zip(a, b, expected_q, strict=True)], dtype=object)
    assert list(q.get()) == [int(v) for v in expected_q]
    assert list(r.get()) == [int(v) for v in expected_r]
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    uq, ur = emu.zeros(n, np.uint64), emu.zeros(n, np.uint64)
    m.get_function("udiv")(((n + 127) // 128,), (128,), (emu.asarray(ua), emu.asarray(ub), uq, ur, np.int32(n)))
    np.testing.assert_array_equal(uq.get(), ua // ub)
    np.testing.assert_array_equal(ur.get(), ua % ub)


@pytest.mark.parametrize("total,w,h", [(5 * 7 * 3 + 4, 7, 5), (3 * 2**20 + 11, 1 << 10, 1 << 10)])
def test_long_long_index_split(total: int, w: int, h: int) -> None:
    out = emu.zeros(3 * total, np.int32)
    emu.RawModule(code=DIV, filename="div.cu").get_function("split")((64,), (128,), (out, np.int64(total),
                                                                                   np.int32(w), np.int32(h)))
    i = np.arange(total, dtype=np.int64)
    np.testing.assert_array_equal(out.get().reshape(-1, 3), np.stack([i % w, i // w % h, i // (h * w)], 1))


def test_zero_divisor_is_still_reported_with_its_line() -> None:
    a = np.arange(1, 65, dtype=np.int64)
    b = np.ones(64, np.int64)
    b[37] = 0
    q, r = emu.zeros(64, np.int64), emu.zeros(64, np.int64)
    with pytest.raises(emu.KernelFault, match="division by zero") as ei:
        emu.RawModule(code=DIV, filename="div.cu").get_function("sdiv")((2,), (32,), (emu.asarray(a), emu.asarray(b),
                                                                                    q, r, np.int32(64)))
    assert ei.value.line == next(n for n, ln in enumerate(DIV.splitlines(), 1) if "a[i] / b[i]" in ln)
    assert ei.value.thread == (5, 0, 0) and ei.value.block == (1, 0, 0)


def test_rewrite_adds_the_fast_path_only_where_rdx_is_known() -> None:
    asm = "\n".join(["\tcqto", "\tidivq\t%rsi", "\txorl\t%edx, %edx", "\tdivq\t24(%rdi)", "\tmovq\t$0, %rdx",
                     "\tidivq\t%rcx", "\tcqto", "\tidivq\t(%rdx)", "\tcqto", "\t.loc 1 2 3", "\tidivq\t%r9"])
    out, count = fastdiv.rewrite(asm)
    assert count == 2
    assert "\tdivl\t%esi" in out and "\tdivl\t24(%rdi)" in out
    # rdx set some other way, rdx in the operand, a directive in between: untouched
    assert out.count("\tidivq\t%rcx") == 1 and "divl\t(%rdx)" not in out and "divl\t%r9d" not in out
    slow = out.index(".Lemu_div_slow0:")
    assert out[slow:].split("\n")[1:3] == ["\tcqto", "\tidivq\t%rsi"]


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="an x86-64 assembly rewrite")
def test_a_long_long_kernel_is_built_with_the_32_bit_division() -> None:
    from minitorch.emu import compiler

    if not shutil.which("objdump"):
        pytest.skip("objdump is not installed")
    built = compiler.build_module(DIV.replace("split", "split_probe"), (), None, "probe.cu", False)
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(built.so_path)], capture_output=True,
                         text=True).stdout
    fast = re.findall(r"shr\s+\$0x20,%rdx\n.*\bjne\b.*\n.*\bdiv\s+\S*%(?:e[a-z]{2}|r\d+d)\b", dis)
    assert len(fast) >= 3, "the 64-bit divisions of split_probe, sdiv and udiv have no 32-bit fast path"
    assert re.search(r"\bidiv\s+%r[a-z0-9]+\b", dis), "the 64-bit division (slow path) is gone"
