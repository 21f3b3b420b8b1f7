"""Known-bad Phase 8a learner code (conversions and the HGEMM ladder) must be rejected, each for the right reason.

Every fixture is the reference solution (with the earlier phases' files) with one deliberate mistake, graded from a
prepared workspace on the emulator; only the tests that matter run, on one rung and a few shapes (each mutated
hgemm.cu is compiled afresh: about half a minute a rung on the emulator). The last one needs a GPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.grader.test_grader_fixtures import (
    _emu_available,
    assert_kernel_never_ran,
    grade_workspace,
    replace_once,
    results,
)

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase8a_tensor_cores.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase8a_tensor_cores.ipynb not written yet"),
    pytest.mark.timeout(400),
]
needs_emu = pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available")

B_TRANS = "                    ldmatrix_x4<true>(r, sb + TileB::offset(row, chunk));\n"
WAIT = "            cp_async_wait<STAGES - 2>();  // tile kt has landed (this thread's part)\n"
NEXT = "            const int next = kt + STAGES - 1;\n"
MMA = "                for (int j = 0; j < NT; ++j) mma16816<T>(acc[i][j], fa[i], fb[j]);\n"
BATCH_Z = "    const size_t z = blockIdx.z;\n"
B_STRIDE = "    B += z * K * N;\n"
ROUND = "        const unsigned rounded = mag + 0xfffu + ((mag >> 13) & 1u);\n"
NAN = "        return (unsigned short)(sign | 0x7e00u | ((mag >> 13) & 0x3ffu));\n"
OVERFLOW = "    if (mag >= 0x477ff000u) {\n"
LAUNCH = ("    args = (a, b, out)\n"
          "    if variant == \"pipeline\":  # rung 5 takes a bias (or a stand-in it never reads)\n"
          "        args += (no_bias() if bias is None else bias, np.int32(bias is not None))\n")
LAUNCH_END = ("    kernel(grid, block, (*args, np.int32(M), np.int32(N), np.int32(K), np.int32(vec)),\n"
              "           shared_mem=smem)")  # the end of hgemm()


def solution_sources() -> dict[str, str]:
    """Every earlier phase's reference files and Phase 8a's."""
    from grader.labs import learner_files
    from grader.phases import PHASES

    files: dict[str, str] = {}
    for phase in PHASES.values():
        if phase.lab is not None and (REPO / "solutions" / f"{phase.lab}.ipynb").exists():
            files.update(learner_files(REPO / "solutions" / f"{phase.lab}.ipynb"))
        if phase.name == "phase8a":
            break
    return files


def grade(tmp_path: Path, files: dict[str, str], *args: str, device: str = "emu") -> dict:
    return grade_workspace(tmp_path, "phase8a", files, "--no-notebook", *args, timeout=300, device=device)


def failed(check: dict) -> bool:
    return check["result"] in ("FAIL", "CRASH")


@needs_emu
@pytest.mark.slow
def test_b_fragment_loaded_without_trans_gives_wrong_values(tmp_path):
    """A row-major B tile given to mma.sync without ldmatrix's .trans: each lane gets B's values along n
    instead of along k. The emulator runs the PTX ISA's layouts, so the products are wrong, not crashed."""
    files = solution_sources()
    files["hgemm.cu"] = replace_once(files["hgemm.cu"], B_TRANS, B_TRANS.replace("<true>", "<false>"))
    report = grade(tmp_path, files, "-k", "test_rung_values and swizzle and (17-1-33 or 33-24-130)")
    checks = results(report, "test_rung_values")
    assert len(checks) == 2 and all(failed(c) for c in checks), checks
    for check in checks:
        assert "values differ from op(A)·op(B)" in check["reason"], check
        assert "never written" not in check["reason"], check  # every element written, with wrong values


@needs_emu
@pytest.mark.slow
def test_missing_cp_async_wait_group_is_named_as_a_race(tmp_path):
    files = solution_sources()
    files["hgemm.cu"] = replace_once(files["hgemm.cu"], WAIT, "")
    report = grade(tmp_path, files, "-k", "test_rung_has_no_shared_memory_race and pipeline")
    [race] = results(report, "test_rung_has_no_shared_memory_race")
    assert failed(race), race
    assert "cp.async race" in race["reason"] and "cp.async.wait_group" in race["reason"], race
    assert "hgemm.cu:" in race["reason"], race


@needs_emu
@pytest.mark.slow
def test_pipeline_stage_count_off_by_one_is_rejected(tmp_path):
    """Tile kt + STAGES loaded where tile kt + STAGES - 1 belongs: one tile is never loaded, and the copies
    overwrite the stage being multiplied. A short K (one tile) still passes; a long one does not, and check
    mode names the race."""
    files = solution_sources()
    files["hgemm.cu"] = replace_once(files["hgemm.cu"], NEXT, NEXT.replace("STAGES - 1", "STAGES"))
    report = grade(tmp_path, files, "-k", "(test_rung_values and pipeline and (17-1-33 or 24-1000-40)) or "
                                          "(test_rung_has_no_shared_memory_race and pipeline)")
    values = {c["name"]: c for c in results(report, "test_rung_values")}
    [short] = [c for name, c in values.items() if "17-1-33" in name]
    [deep] = [c for name, c in values.items() if "24-1000-40" in name]
    assert short["result"] == "PASS", short
    assert failed(deep) and "values differ from op(A)·op(B)" in deep["reason"], deep
    [race] = results(report, "test_rung_has_no_shared_memory_race")
    assert failed(race) and "race" in race["reason"], race


@needs_emu
@pytest.mark.slow
def test_fp16_accumulator_fails_the_bound_at_large_k(tmp_path):
    """Every partial sum rounded to fp16 (what an f16 accumulator does): within the bound nowhere it matters
    less than at K = 1000, where it is far past it, and the report asks whether the accumulator is float32."""
    files = solution_sources()
    files["hgemm.cu"] = replace_once(
        files["hgemm.cu"], MMA,
        "                for (int j = 0; j < NT; ++j) {\n"
        "                    mma16816<T>(acc[i][j], fa[i], fb[j]);\n"
        "                    for (int e = 0; e < 4; ++e)  // an fp16 accumulator\n"
        "                        acc[i][j][e] = __half2float(__float2half_rn(acc[i][j][e]));\n"
        "                }\n")
    report = grade(tmp_path, files, "-k", "test_rung_values and swizzle and 24-1000-40")
    [deep] = results(report, "test_rung_values")
    assert failed(deep) and "a float32 accumulation of K = 1000 products" in deep["reason"], deep
    assert "is the accumulator float32?" in deep["reason"], deep


@needs_emu
@pytest.mark.slow
def test_batch_ignoring_blockidx_z_or_with_the_wrong_stride_is_rejected(tmp_path):
    """A select_matrix that ignores blockIdx.z (every block z multiplies matrix 0 into matrix 0: the others are
    never written), and one that moves B by A's matrix size (M·K instead of K·N): single products still pass,
    the batched check does not, and says where to look."""
    for name, (old, new) in {"z": (BATCH_Z, "    const size_t z = 0;\n"),
                             "stride": (B_STRIDE, "    B += z * M * K;\n")}.items():
        files = solution_sources()
        files["hgemm.cu"] = replace_once(files["hgemm.cu"], old, new)
        (tmp_path / name).mkdir()
        report = grade(tmp_path / name, files, "-k",
                       "(test_batched_values or test_rung_values) and swizzle and not 300 and not 1000 and not 136")
        [batched] = results(report, "test_batched_values")
        assert failed(batched) and "select_matrix" in batched["reason"], (name, batched)
        assert "of the batch" in batched["reason"], (name, batched)
        single = results(report, "test_rung_values")
        assert single and all(c["result"] == "PASS" for c in single), (name, single)


@needs_emu
@pytest.mark.slow
def test_float_to_half_that_truncates_is_rejected(tmp_path):
    files = solution_sources()
    files["convert.cu"] = replace_once(files["convert.cu"], ROUND, "        const unsigned rounded = mag;\n")
    report = grade(tmp_path, files, "-k", "test_float32_to_16bit_every_class_of_pattern and not bfloat16 and not x4")
    [check] = results(report, "test_float32_to_16bit_every_class_of_pattern")
    assert failed(check) and "differ from the reference" in check["reason"], check
    assert "a tie of fp16" in check["reason"] and "a normal float" in check["reason"], check


@needs_emu
@pytest.mark.slow
def test_float_to_half_mishandling_nan_or_overflow_is_rejected(tmp_path):
    """A NaN whose payload lies in the 13 dropped bits made inf (no quiet bit); values past 65504 sent through
    the normal path (their exponent overflows into the sign)."""
    files = solution_sources()
    files["convert.cu"] = replace_once(files["convert.cu"], NAN, NAN.replace("0x7e00u", "0x7c00u"))
    (tmp_path / "nan").mkdir()
    report = grade(tmp_path / "nan", files, "-k", "test_float32_to_16bit_every_class_of_pattern and not bfloat16 and not x4")
    [check] = results(report, "test_float32_to_16bit_every_class_of_pattern")
    assert failed(check) and "NaN" in check["reason"] and "(or any NaN of this sign)" in check["reason"], check
    files = solution_sources()
    files["convert.cu"] = replace_once(files["convert.cu"], OVERFLOW, "    if (mag >= 0x7f800000u) {\n")
    (tmp_path / "overflow").mkdir()
    report = grade(tmp_path / "overflow", files, "-k", "test_float32_to_16bit_every_class_of_pattern and not bfloat16 and not x4")
    [check] = results(report, "test_float32_to_16bit_every_class_of_pattern")
    assert failed(check) and "past fp16's range (>= 65520 rounds to inf)" in check["reason"], check


def rejected_for(tmp_path: Path, name: str, file: str, old: str, new: str, select: str, reason: str) -> None:
    """The solutions with `old` replaced by `new` in `file`, graded on the tests `select` names (in their own
    directory, `name`): at least one of them fails, its reason naming `reason`."""
    files = solution_sources()
    files[file] = replace_once(files[file], old, new)
    (tmp_path / name).mkdir()
    checks = results(grade(tmp_path / name, files, "-k", select), select.split()[0])
    assert any(failed(c) and reason in c["reason"] for c in checks), checks


PACK = "    return (unsigned)lo | ((unsigned)hi << 16);\n"
X4_CHOICE = "    if n % 4 == 0 and x.data.ptr % 16 == 0 and out.data.ptr % 16 == 0:\n"


@needs_emu
@pytest.mark.slow
def test_four_a_thread_conversions_with_swapped_halves_or_taken_when_misaligned_are_rejected(tmp_path):
    """The _x4 kernels storing element 1 where element 0 goes; a launcher that takes them for any n % 4 == 0,
    aligned or not (16-byte loads at an address 4 bytes past a boundary: a misaligned access)."""
    rejected_for(tmp_path, "swapped", "convert.cu", PACK, "    return (unsigned)hi | ((unsigned)lo << 16);\n",
                 "test_float32_to_16bit_every_class_of_pattern and float16", "patterns differ from the reference")
    rejected_for(tmp_path, "misaligned", "convert.py", X4_CHOICE, "    if n % 4 == 0:\n",
                 "test_conversions_at_every_length", "misaligned")


BIAS_READ = "                if (c < N) b0 = bias[c];\n"
BIAS_FLAG = "        args += (no_bias() if bias is None else bias, np.int32(bias is not None))\n"


@needs_emu
@pytest.mark.slow
def test_bias_epilogue_reading_by_row_or_never_switched_on_is_rejected(tmp_path):
    """Rung 5's epilogue adding bias[r] (the row's) instead of bias[c]; a launcher that passes the bias with
    has_bias = 0 (the product comes back without it)."""
    rejected_for(tmp_path, "row", "hgemm.cu", BIAS_READ, "                if (r < N) b0 = bias[r];\n",
                 "test_bias_added_as_c_is_stored", "op(A)·op(B) + bias")
    rejected_for(tmp_path, "off", "hgemm.py", BIAS_FLAG, BIAS_FLAG.replace("np.int32(bias is not None)", "np.int32(0)"),
                 "test_bias_added_as_c_is_stored", "without the bias")


ZERO_SUMS = "    sums.fill(0)  # the blocks add their chunks' sums into it\n"
VEC_SUMS = "    vec = cols % 4 == 0 and x.data.ptr % 16 == 0 and out.data.ptr % 16 == 0\n"


@needs_emu
@pytest.mark.slow
def test_column_sums_never_zeroed_or_vectorised_at_any_width_are_rejected(tmp_path):
    """to_16bit_column_sums' launcher that leaves sums as it found them (the blocks add into the poison), and one
    that takes the 16-byte path whatever the width (rows of 13 floats start off 16-byte boundaries)."""
    rejected_for(tmp_path, "unzeroed", "convert.py", ZERO_SUMS, "", "test_conversion_with_column_sums",
                 "was sums zeroed")
    rejected_for(tmp_path, "vec", "convert.py", VEC_SUMS, "    vec = True\n", "test_conversion_with_column_sums",
                 "misaligned")


HOST_PRODUCT = (
    "    widen = ((lambda x: x.astype(np.float32)) if dtype == 'float16'\n"
    "             else (lambda x: (x.astype(np.uint32) << 16).view(np.float32)))\n"
    "    a_h, b_h = widen(backend.asnumpy(a)), widen(backend.asnumpy(b))  # NumPy, not the kernels\n"
    "    c = (a_h.T if transpose_a else a_h) @ (b_h.T if transpose_b else b_h)\n"
    "    out.set(c.astype(np.float32) if out.dtype == np.float32 else c.astype(out.dtype))\n")


@needs_emu
@pytest.mark.slow
def test_launcher_computing_on_the_host_is_rejected(tmp_path):
    files = solution_sources()
    files["hgemm.py"] = replace_once(replace_once(files["hgemm.py"], LAUNCH, HOST_PRODUCT), LAUNCH_END, "")
    report = grade(tmp_path, files, "-k",
                   "(test_rung_values and pipeline and 17-1-33) or test_results_come_from_your_kernels")
    [replay] = results(report, "test_results_come_from_your_kernels")
    assert_kernel_never_ran(results(report, "test_rung_values"), replay, "hgemm_5_pipeline", "hgemm.cu")


@pytest.mark.gpu
def test_launcher_calling_cupy_matmul_is_rejected(tmp_path):
    """On a GPU the tempting shortcut is cuBLAS itself: the launcher hands the product to cupy.matmul."""
    files = solution_sources()
    files["hgemm.py"] = replace_once(
        replace_once(files["hgemm.py"], LAUNCH,
                     "    import cupy  # cuBLAS, not the kernels\n"
                     "    x, y = (a.T if transpose_a else a), (b.T if transpose_b else b)\n"
                     "    out[...] = cupy.matmul(x.astype(np.float32), y.astype(np.float32))\n"),
        LAUNCH_END, "")
    report = grade(tmp_path, files, "-k",
                   "(test_rung_values and pipeline and 17-1-33) or test_results_come_from_your_kernels",
                   device="cuda")
    [replay] = results(report, "test_results_come_from_your_kernels")
    assert_kernel_never_ran(results(report, "test_rung_values"), replay, "hgemm_5_pipeline", "hgemm.cu")


GELU_VALUE = "    return 0.5f * v * (1.0f + tanhf(u));\n"  # convert.cu's gelu_value (Phase 7's formula)
COLUMN_WIDEN = "                s[0] += from_16bit_bits<HALF>(w.x & 0xffffu);\n"  # column_sums_16bit's first column


@needs_emu
@pytest.mark.slow
def test_16bit_gelu_or_column_sums_that_lose_a_term_are_rejected(tmp_path):
    """The 16-bit GELU without its 1/2, and 16-bit column sums whose first column of each quad adds the second
    value: the graded tests against float64 name the values that differ."""
    rejected_for(tmp_path, "gelu", "convert.cu", GELU_VALUE, GELU_VALUE.replace("0.5f * ", ""),
                 "test_gelu_in_16_bits", "values differ")
    rejected_for(tmp_path, "sums", "convert.cu", COLUMN_WIDEN, COLUMN_WIDEN.replace("w.x & 0xffffu", "w.x >> 16"),
                 "test_column_sums_of_16bit_values", "values differ")
