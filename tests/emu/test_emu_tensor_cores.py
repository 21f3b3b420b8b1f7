"""Tensor cores on the emulator (Phase 8a): 16-bit floats, WMMA, mma.sync / ldmatrix / cp.async PTX.

References are independent of the emulator: NumPy's float16 conversions, a bfloat16 rounding done by
value in float64, exact rational arithmetic (fractions) for a + b, a * b and a * b + c rounded once,
and float64 matrix products of the rounded inputs. Under ``-m gpu`` the same kernels run on the GPU
and must give the emulator's results bit for bit.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from tc_kernels import CONVERT, MMA, PIPELINE, PIPELINE_PRIMITIVES, WMMA

from minitorch import emu

RNG = np.random.default_rng(8)


def line_of(src: str, text: str) -> int:
    return src[:src.index(text)].count("\n") + 1


def run(src: str, name: str, grid: int, block: int, args: tuple, shared_mem: int = 0) -> None:
    emu.RawModule(code=src, filename=f"{name}.cu").get_function(name)((grid,), (block,), args, shared_mem=shared_mem)


# ---------------------------------------------------------------------------- references
def float_patterns() -> np.ndarray:
    """float32 bit patterns of every class: +-0, float subnormals, every exponent with mantissas at and
    around the rounding ties of half (13 dropped bits) and bfloat16 (16 dropped bits), half's
    subnormal range and overflow boundary, +-inf, quiet and signalling NaNs, and random patterns."""
    mant = [0, 1, 2, 0x0FFF, 0x1000, 0x1001, 0x1FFF, 0x2000, 0x3000, 0x7FFF, 0x8000, 0x8001, 0xFFFF,
            0x10000, 0x18000, 0x400000, 0x7FF000, 0x7FFFFF]
    exps = np.arange(256, dtype=np.uint32)
    grid = (exps[:, None] << 23) | np.array(mant, dtype=np.uint32)[None, :]
    special = np.array([0x477FE000, 0x477FEFFF, 0x477FF000, 0x477FF001, 0x477FFFFF,  # 65504 .. 65520
                        0x33000000, 0x33000001, 0x32FFFFFF, 0x33800000, 0x33C00000,   # 2^-25 (tie to 0) ...
                        0x387FC000, 0x387FE000, 0x387FFFFF,                           # up to the smallest normal
                        0x7F7F7FFF, 0x7F7F8000, 0x7F7FFFFF,                           # bfloat16 overflow
                        0x7F800000, 0x7F800001, 0x7FC00000, 0x7FFFFFFF, 0x7FA00000], dtype=np.uint32)
    rand = RNG.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    pos = np.concatenate([grid.ravel(), special, rand])
    return np.concatenate([pos, pos | np.uint32(0x80000000)])


def bf16_by_value(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, round to nearest even, decided by comparing float64 distances to the
    two bfloat16 neighbours (not by adding a rounding bias to the bits); NaN -> 0x7fff."""
    bits = x.view(np.uint32)
    lo = bits & np.uint32(0xFFFF0000)                  # toward zero
    hi = (lo.astype(np.uint64) + 0x10000).astype(np.uint32)  # one bfloat16 step away from zero
    hi_is_inf = (hi & np.uint32(0x7FFFFFFF)) == 0x7F800000
    with np.errstate(invalid="ignore", over="ignore"):
        mag = np.abs(x.astype(np.float64))
        vlo = np.abs(lo.view(np.float32).astype(np.float64))
        vhi = np.where(hi_is_inf, 2.0**128, np.abs(hi.view(np.float32).astype(np.float64)))
        dlo, dhi = mag - vlo, vhi - mag
    lo_even = ((lo >> 16) & 1) == 0
    pick_hi = (dhi < dlo) | ((dhi == dlo) & ~lo_even)
    out = np.where(pick_hi, hi >> 16, lo >> 16).astype(np.uint16)
    out[np.isinf(x)] = (bits[np.isinf(x)] >> 16).astype(np.uint16)
    out[np.isnan(x)] = 0x7FFF
    return out


FORMATS = {"half": (10, -14, 16), "bf16": (7, -126, 128)}  # fraction bits, min normal exponent, overflow 2^k


def value_of(bits: int, fmt: str) -> Fraction:
    if fmt == "half":
        return Fraction(float(np.uint16(bits).view(np.float16)))
    return Fraction(float(np.uint32(bits << 16).view(np.float32)))


def round_once(q: Fraction, fmt: str, negative_zero: bool = False) -> int:
    """The exact value q rounded to nearest even in `fmt`, as 16 bits (overflow -> inf)."""
    frac, emin, emax2 = FORMATS[fmt]
    if q == 0:
        v = -0.0 if negative_zero else 0.0
    else:
        a = abs(q)
        e = a.numerator.bit_length() - a.denominator.bit_length()
        if Fraction(2) ** e > a:
            e -= 1
        quantum = Fraction(2) ** (max(e, emin) - frac)
        n = a / quantum
        r = math.floor(n)
        if n - r > Fraction(1, 2) or (n - r == Fraction(1, 2) and r % 2 == 1):
            r += 1
        v = float(r * quantum) if r * quantum < Fraction(2) ** emax2 else math.inf
        v = -v if q < 0 else v
    if fmt == "half":
        return int(np.float16(v).view(np.uint16))
    return int(np.float32(v).view(np.uint32) >> 16)


# ---------------------------------------------------------------------------- conversions
def test_float_to_half_and_bfloat16_round_to_nearest_even_on_every_class_of_pattern() -> None:
    bits = float_patterns()
    x = bits.view(np.float32)
    n = x.size
    h, b = emu.zeros(n, np.uint16), emu.zeros(n, np.uint16)
    hb, bb = emu.zeros(n), emu.zeros(n)
    run(CONVERT, "convert", (n + 255) // 256, 256, (emu.asarray(x), h, b, hb, bb, np.int32(n)))
    nan = np.isnan(x)
    with np.errstate(over="ignore"):
        ref_h = x.astype(np.float16).view(np.uint16)
    got_h, got_b = h.get(), b.get()
    bad = np.flatnonzero((got_h != ref_h) & ~nan)
    assert bad.size == 0, [(hex(bits[i]), hex(got_h[i]), hex(ref_h[i])) for i in bad[:8]]
    assert (got_h[nan] == 0x7FFF).all()  # CUDA's canonical NaN, whatever the payload
    ref_b = bf16_by_value(x)
    bad = np.flatnonzero(got_b != ref_b)
    assert bad.size == 0, [(hex(bits[i]), hex(got_b[i]), hex(ref_b[i])) for i in bad[:8]]
    # back to float: exact
    widened = ref_h[~nan].view(np.float16).astype(np.float32)
    np.testing.assert_array_equal(hb.get()[~nan].view(np.uint32), widened.view(np.uint32))
    np.testing.assert_array_equal(bb.get().view(np.uint32), ref_b.astype(np.uint32) << 16)
    # the classes are all there
    assert nan.sum() > 10 and np.isinf(x).sum() >= 2 and ((bits & 0x7F800000) == 0).sum() > 100
    assert np.isinf(ref_h.view(np.float16)[~nan]).sum() > 100 and ((ref_h & 0x7C00) == 0).sum() > 100


def test_every_16_bit_pattern_widens_exactly() -> None:
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    fh, fb = emu.zeros(65536), emu.zeros(65536)
    run(CONVERT, "widen", 256, 256, (emu.asarray(bits), fh, fb, np.int32(65536)))
    ref_h = bits.view(np.float16).astype(np.float32)
    nan = np.isnan(ref_h)
    np.testing.assert_array_equal(fh.get()[~nan].view(np.uint32), ref_h[~nan].view(np.uint32))
    assert np.isnan(fh.get()[nan]).all()
    np.testing.assert_array_equal(fb.get().view(np.uint32), bits.astype(np.uint32) << 16)


def test_half_and_bfloat16_add_mul_fma_round_once_from_the_exact_result() -> None:
    n = 1500
    pats = RNG.integers(0, 65536, (3, 4 * n)).astype(np.uint16)
    finite = ((pats & 0x7C00) != 0x7C00) & ((pats & 0x7F80) != 0x7F80)
    keep = finite.all(axis=0)
    a, b, c = (p[keep][:n] for p in pats)
    # exponents near each other too, so that fma's cancellations and ties are exercised
    a[:500], b[:500] = a[:500] & 0x3FFF | 0x3800, b[:500] & 0x3FFF | 0x3800
    c[:500] = (c[:500] & 0xBFFF) | 0x3800
    # fma whose float rounding lands exactly on a 16-bit tie: a*b is a tie, c a nudge below float
    # precision (half: (1+2^-10)*1.5 - 2^-24; bfloat16: (1+2^-7)*1.5 - 2^-30); rounding through
    # float first rounds the wrong way
    a[:2], b[:2], c[:2] = [0x3C01, 0x3F81], [0x3E00, 0x3FC0], [0x8001, 0xB080]
    out = emu.zeros(6 * n, np.uint16)
    run(CONVERT, "arith", (n + 127) // 128, 128, (emu.asarray(a), emu.asarray(b), emu.asarray(c), out, np.int32(n)))
    got = out.get().reshape(n, 6)
    for col, fmt in ((0, "half"), (3, "bf16")):
        for i in range(n):
            x, y, z = (value_of(int(v[i]), fmt) for v in (a, b, c))
            neg = [bool(v[i] & 0x8000) for v in (a, b, c)]
            want = (round_once(x + y, fmt, neg[0] and neg[1]),
                    round_once(x * y, fmt, neg[0] != neg[1]),
                    round_once(x * y + z, fmt, (neg[0] != neg[1]) and neg[2]))
            have = tuple(int(v) for v in got[i, col:col + 3])
            assert have == want, (fmt, hex(a[i]), hex(b[i]), hex(c[i]), [hex(v) for v in have], [hex(v) for v in want])


# ---------------------------------------------------------------------------- mma.sync and ldmatrix
def small_ints(shape: tuple[int, ...], lo: int = -4, hi: int = 4, den: int = 1) -> np.ndarray:
    return RNG.integers(lo * den, hi * den + 1, shape) / den


def mma_f16(a: np.ndarray, b: np.ndarray, b_trans: int = 1) -> tuple[np.ndarray, np.ndarray]:
    d, dh = emu.zeros((16, 8)), emu.zeros((16, 8), np.float16)
    run(MMA, "mma_f16", 1, 32, (emu.asarray(a.astype(np.float16)), emu.asarray(b.astype(np.float16)), d, dh,
                                np.int32(b_trans)))
    return d.get(), dh.get()


def test_ldmatrix_register_layout_is_the_ptx_isas() -> None:
    m = RNG.integers(0, 65536, (8, 8)).astype(np.uint16)
    out = emu.zeros(64, np.uint32)
    run(MMA, "ldmatrix_x1", 1, 32, (emu.asarray(m), out), shared_mem=128)
    lane = np.arange(32)
    g, t = lane // 4, lane % 4
    m32 = m.astype(np.uint32)
    np.testing.assert_array_equal(out.get()[:32], m32[g, 2 * t] | m32[g, 2 * t + 1] << 16)
    np.testing.assert_array_equal(out.get()[32:], m32[2 * t, g] | m32[2 * t + 1, g] << 16)


def test_mma_m16n8k16_f16_with_ldmatrix_x4_and_x2_trans() -> None:
    a, b = small_ints((16, 16), den=8), small_ints((16, 8), den=8)  # sums exact in float
    d, _ = mma_f16(a, b)
    np.testing.assert_array_equal(d, a @ b)
    a, b = small_ints((16, 16)), small_ints((16, 8))  # f16 accumulators: integer sums, exact in half
    d, dh = mma_f16(a, b)
    np.testing.assert_array_equal(d, a @ b)
    np.testing.assert_array_equal(dh.astype(np.float64), a @ b)


def test_mma_m16n8k16_bf16_with_ldmatrix_x4_trans_and_x1() -> None:
    a, b = small_ints((16, 16), den=8), small_ints((8, 16), den=8).T
    c = small_ints((16, 8), -100, 100).astype(np.float32)
    d = emu.zeros((16, 8))
    bf = bf16_by_value
    run(MMA, "mma_bf16", 1, 32, (emu.asarray(bf(a.T.astype(np.float32).copy())),
                                 emu.asarray(bf(b.T.astype(np.float32).copy())), emu.asarray(c), d))
    np.testing.assert_array_equal(d.get(), a @ b + c)


def test_a_wrong_fragment_layout_gives_wrong_values() -> None:
    """B stored k-major but loaded without .trans: each lane gets B's rows for its columns."""
    a, b = small_ints((16, 16)), small_ints((16, 8))
    d, _ = mma_f16(a, b, b_trans=0)
    assert np.abs(d - a @ b).max() >= 8
    # exactly the product with each 8x8 block of B transposed: lane (g, t) got B[8j+g][2t..2t+1]
    # where the instruction wanted B[8j+2t..8j+2t+1][g]
    bt = np.concatenate([b[:8].T, b[8:].T])
    np.testing.assert_array_equal(d, a @ bt)


def test_tensor_core_misuse_is_reported() -> None:
    bad_addr = MMA.replace("unsigned b_row = smem_addr(&Bs[lane % 16][0]);",
                           "unsigned b_row = (unsigned)(unsigned long long)&Bs[lane % 16][0];")
    # a generic pointer where ldmatrix wants a shared-window address (no __cvta_generic_to_shared)
    with pytest.raises(emu.KernelFault, match=r"ldmatrix row address: shared-window address .* outside"):
        run(bad_addr, "mma_f16", 1, 32, (emu.zeros((16, 16), np.float16), emu.zeros((16, 8), np.float16),
                                         emu.zeros((16, 8)), emu.zeros((16, 8), np.float16), np.int32(1)))
    with pytest.raises(emu.KernelFault, match=r"all 32 lanes of the warp.*0x0000ffff"):
        run(MMA, "mma_f16", 1, 16, (emu.zeros((16, 16), np.float16), emu.zeros((16, 8), np.float16),
                                    emu.zeros((16, 8)), emu.zeros((16, 8), np.float16), np.int32(1)))
    # wmma on a pointer that is not 256-bit aligned
    with pytest.raises(emu.KernelFault, match=r"wmma::load_matrix_sync: misaligned address .* at wmma_gemm\.cu:"):
        run(WMMA.replace("A + tm * 16 * K + k", "A + tm * 16 * K + k + 8"), "wmma_gemm", 1, 32,
            (emu.zeros((16, 32), np.float16), emu.zeros((32, 16), np.float16), emu.zeros((16, 16)),
             np.int32(16), np.int32(16), np.int32(16)))
    src = ('extern "C" __global__ void k(float* x) {\n    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 '
           '{%0}, {%0}, {%0}, {%0};" : "+f"(x[0]));\n}\n')
    with pytest.raises(emu.CompileError, match=r"k\.cu:2:5: error: inline PTX `mma\.sync\.aligned\.m16n8k8"):
        emu.RawModule(code=src, filename="k.cu")


# ---------------------------------------------------------------------------- WMMA
def test_wmma_gemm_one_warp_per_tile() -> None:
    m, n, k = 32, 48, 64
    a, b = small_ints((m, k)), small_ints((k, n))
    c0 = small_ints((m, n), -9, 9).astype(np.float32)
    c = emu.asarray(c0)
    b_col = np.ascontiguousarray(b.T)  # column-major B: column j is k contiguous values
    run(WMMA, "wmma_gemm", 2, 96, (emu.asarray(a.astype(np.float16)), emu.asarray(b_col.astype(np.float16)), c,
                                   np.int32(m), np.int32(n), np.int32(k)))
    np.testing.assert_array_equal(c.get(), a @ b + c0)
    # rounded random inputs: float64 product of the rounded values, to float32 summation error
    a = RNG.standard_normal((m, k)).astype(np.float16)
    b = RNG.standard_normal((k, n)).astype(np.float16)
    c = emu.zeros((m, n))
    run(WMMA, "wmma_gemm", 2, 96, (emu.asarray(a), emu.asarray(np.ascontiguousarray(b.T)), c,
                                   np.int32(m), np.int32(n), np.int32(k)))
    np.testing.assert_allclose(c.get(), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_wmma_through_shared_memory_and_its_missing_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = small_ints((16, 16)), small_ints((16, 16))
    args = (emu.asarray(a.astype(np.float16)), emu.asarray(b.astype(np.float16)), emu.zeros((16, 16)))
    run(WMMA, "wmma_smem", 1, 32, (*args, np.int32(1)))
    np.testing.assert_array_equal(args[2].get(), a @ b)
    monkeypatch.setenv("MINITORCH_EMU_CHECK", "1")
    run(WMMA, "wmma_smem", 1, 32, (*args, np.int32(1)))  # correct code: no finding
    with pytest.raises(emu.KernelFault, match=r"race \(read-after-write\) on `Cs`"):
        run(WMMA, "wmma_smem", 1, 32, (*args, np.int32(0)))


# ---------------------------------------------------------------------------- cp.async
def test_cp_async_pipeline_gives_the_right_values() -> None:
    x = RNG.standard_normal(256 * 7).astype(np.float32)
    out = emu.zeros(x.size)
    run(PIPELINE, "reverse_tiles", 1, 64, (emu.asarray(x), out, np.int32(7), np.int32(1), np.int32(1)))
    np.testing.assert_array_equal(out.get(), x.reshape(7, 256)[:, ::-1].ravel())
    x = RNG.standard_normal(64).astype(np.float32)
    out = emu.zeros(64)
    run(PIPELINE, "small_copies", 1, 16, (emu.asarray(x), out))
    want = x.reshape(16, 4)[(np.arange(16) + 1) % 16].copy()
    want[1::2, 1] = 0.0  # even source threads zero-filled (src-size 0)
    np.testing.assert_array_equal(out.get().reshape(16, 4), want)


def test_pipeline_primitives_into_dynamic_shared_memory() -> None:
    x = RNG.standard_normal(128).astype(np.float32)
    out = emu.zeros(128)
    run(PIPELINE_PRIMITIVES, "rotate", 1, 32, (emu.asarray(x), out), shared_mem=512)
    np.testing.assert_array_equal(out.get().reshape(32, 4), x.reshape(32, 4)[(np.arange(32) + 5) % 32])


def test_a_missing_cp_async_wait_group_is_a_race(monkeypatch: pytest.MonkeyPatch) -> None:
    x = RNG.standard_normal(256 * 4).astype(np.float32)
    out = emu.zeros(x.size)
    run(PIPELINE, "reverse_tiles", 1, 64, (emu.asarray(x), out, np.int32(4), np.int32(0), np.int32(1)))
    assert not np.array_equal(out.get(), x.reshape(4, 256)[:, ::-1].ravel())  # the copies had not landed
    monkeypatch.setenv("MINITORCH_EMU_CHECK", "1")
    # with the wait and the barrier: clean
    run(PIPELINE, "reverse_tiles", 1, 64, (emu.asarray(x), out, np.int32(4), np.int32(1), np.int32(1)))
    with pytest.raises(emu.KernelFault) as ei:
        run(PIPELINE, "reverse_tiles", 1, 64, (emu.asarray(x), out, np.int32(4), np.int32(0), np.int32(1)))
    msg = str(ei.value)
    read, issue = line_of(PIPELINE, "out[t * TILE + i] ="), line_of(PIPELINE, "cp.async.cg.shared.global")
    assert "cp.async race on `buf`" in msg and f"at reverse_tiles.cu:{read} while" in msg, msg
    assert f"cp.async at reverse_tiles.cu:{issue} may still" in msg
    assert "cp.async.wait_group" in msg
    # waited, but no barrier before reading the other threads' copies: an ordinary shared-memory race
    with pytest.raises(emu.KernelFault, match=r"race \(read-after-write\) on `buf`.*add __syncthreads\(\) between "
                       rf"line {line_of(PIPELINE, 'cp.async.wait_group')} and line {read}"):
        run(PIPELINE, "reverse_tiles", 1, 64, (emu.asarray(x), out, np.int32(4), np.int32(1), np.int32(0)))


def test_cp_async_misaligned_source_is_reported() -> None:
    src = PIPELINE.replace("in + s * TILE + 4 * tid", "in + s * TILE + 4 * tid + 1")
    line = line_of(PIPELINE, "cp.async.cg.shared.global")
    with pytest.raises(emu.KernelFault,
                       match=rf"misaligned address: cp\.async of 16 bytes .* at reverse_tiles\.cu:{line}"):
        run(src, "reverse_tiles", 1, 64, (emu.zeros(512), emu.zeros(512), np.int32(2), np.int32(1), np.int32(1)))


# ---------------------------------------------------------------------------- inline PTX forms
def test_inline_ptx_forms_of_real_kernels() -> None:
    x = RNG.standard_normal(128).astype(np.float32)
    out = emu.zeros(32)
    run(PIPELINE, "forms", 1, 32, (emu.asarray(x), out))
    lane = np.arange(32)
    np.testing.assert_array_equal(out.get(), x[(4 * lane + 7) % 128] + lane.astype(np.float32))


def test_lines_after_a_multiline_asm_keep_their_numbers() -> None:
    src = PIPELINE.replace("out[threadIdx.x] = w + t;", "out[threadIdx.x] = w + t + missing;")
    with pytest.raises(emu.CompileError) as ei:
        emu.RawModule(code=src, filename="forms.cu")
    line = line_of(src, "missing;")
    assert f"forms.cu:{line}:" in str(ei.value), str(ei.value)
    src = PIPELINE.replace("cvt.u32.u64 %0, p;", "cvt.rn.f16.f32 %0, p;")
    assert src != PIPELINE
    at = line_of(src, 'asm volatile("{')
    with pytest.raises(emu.CompileError, match=rf"forms\.cu:{at}:5: error: inline PTX `cvt\.rn\.f16\.f32` is not"):
        emu.RawModule(code=src, filename="forms.cu")


# ---------------------------------------------------------------------------- GPU parity
@pytest.mark.gpu
def test_gpu_gives_the_emulators_bits() -> None:
    cp = pytest.importorskip("cupy")
    from minitorch.backend import toolkit_include_options

    def both(src: str, name: str, grid: int, block: int, host_args: list, outs: list[int],
             shared_mem: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
        """Run on the emulator and the GPU; (emulator, GPU) pairs of the arrays at `outs`."""
        e_args = [emu.asarray(a) if isinstance(a, np.ndarray) else a for a in host_args]
        g_args = [cp.asarray(a) if isinstance(a, np.ndarray) else a for a in host_args]
        emu.RawModule(code=src).get_function(name)((grid,), (block,), tuple(e_args), shared_mem=shared_mem)
        cp.RawModule(code=src, options=toolkit_include_options()).get_function(name)((grid,), (block,), tuple(g_args), shared_mem=shared_mem)
        return [(e_args[i].get(), cp.asnumpy(g_args[i])) for i in outs]

    bits = float_patterns()
    x, n = bits.view(np.float32), bits.size
    z16, z32 = np.zeros(n, np.uint16), np.zeros(n, np.float32)
    nan = np.isnan(x)
    for k, (e, g) in enumerate(both(CONVERT, "convert", (n + 255) // 256, 256, [x, z16, z16, z32, z32, np.int32(n)],
                                    [1, 2, 3, 4])):
        ev, gv = (e.view(np.uint16), g.view(np.uint16)) if k < 2 else (e.view(np.uint32), g.view(np.uint32))
        np.testing.assert_array_equal(ev[~nan], gv[~nan])
        assert np.isnan(e.view(np.float16 if k < 2 else np.float32)[nan]).all()
        assert np.isnan(g.view(np.float16 if k < 2 else np.float32)[nan]).all()
    p = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    for e, g in both(CONVERT, "widen", 256, 256, [p, np.zeros(65536, np.float32), np.zeros(65536, np.float32),
                                                   np.int32(65536)], [1, 2]):
        ok = ~np.isnan(g)
        np.testing.assert_array_equal(e[ok].view(np.uint32), g[ok].view(np.uint32))
        assert np.isnan(e[~ok]).all()
    m = 4096
    pats = RNG.integers(0, 65536, (3, m)).astype(np.uint16)
    for e, g in both(CONVERT, "arith", m // 128, 128, [*pats, np.zeros(6 * m, np.uint16), np.int32(m)], [3]):
        ok = ~np.isnan(g.view(np.float16)) & ~np.isnan((g.astype(np.uint32) << 16).view(np.float32))
        np.testing.assert_array_equal(e[ok], g[ok])

    a = small_ints((16, 16), den=8).astype(np.float16)
    b = small_ints((16, 8), den=8).astype(np.float16)
    for b_trans in (1, 0):
        for e, g in both(MMA, "mma_f16", 1, 32, [a, b, np.zeros((16, 8), np.float32), np.zeros((16, 8), np.float16),
                                                 np.int32(b_trans)], [2, 3]):
            np.testing.assert_array_equal(e.view(np.uint16 if e.dtype == np.float16 else np.uint32),
                                          g.view(np.uint16 if g.dtype == np.float16 else np.uint32))
    at = bf16_by_value(small_ints((16, 16), den=8).astype(np.float32))
    bt = bf16_by_value(small_ints((8, 16), den=8).astype(np.float32))
    c = small_ints((16, 8), -100, 100).astype(np.float32)
    for e, g in both(MMA, "mma_bf16", 1, 32, [at, bt, c, np.zeros((16, 8), np.float32)], [3]):
        np.testing.assert_array_equal(e, g)
    mm, nn, kk = 32, 48, 64
    a = small_ints((mm, kk)).astype(np.float16)
    b = small_ints((nn, kk)).astype(np.float16)
    for e, g in both(WMMA, "wmma_gemm", 2, 96, [a, b, small_ints((mm, nn), -9, 9).astype(np.float32),
                                                  np.int32(mm), np.int32(nn), np.int32(kk)], [2]):
        np.testing.assert_array_equal(e, g)
    xs = RNG.standard_normal(256 * 7).astype(np.float32)
    one = np.int32(1)
    for e, g in both(PIPELINE, "reverse_tiles", 1, 64, [xs, np.zeros_like(xs), np.int32(7), one, one], [1]):
        np.testing.assert_array_equal(e, g)
    xs = RNG.standard_normal(64).astype(np.float32)
    for e, g in both(PIPELINE, "small_copies", 1, 16, [xs, np.zeros_like(xs)], [1]):
        np.testing.assert_array_equal(e, g)
    for e, g in both(PIPELINE, "forms", 1, 32, [RNG.standard_normal(128).astype(np.float32),
                                                  np.zeros(32, np.float32)], [1]):
        np.testing.assert_array_equal(e, g)
    mat = RNG.integers(0, 65536, (8, 8)).astype(np.uint16)
    for e, g in both(MMA, "ldmatrix_x1", 1, 32, [mat, np.zeros(64, np.uint32)], [1], shared_mem=128):
        np.testing.assert_array_equal(e, g)

