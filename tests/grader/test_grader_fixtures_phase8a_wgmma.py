"""Known-bad Phase 8a rung 6 (hgemm_wgmma.cu, wgmma fed by the TMA) must be rejected on an sm_90 GPU, each for the
right reason; and off Hopper the rung's checks must neither run nor hold the phase back.

The GPU fixtures are the reference solution with one deliberate mistake in the asynchronous plumbing that the
emulator cannot run (wgmma, the TMA and mbarriers are sm_90a instructions): a consumer that never waits for the
copies to land, a producer that announces fewer bytes than its copies bring, a launcher that hands the product to
cuBLAS. Only the rung-6 test of one shape runs (each mutated file is compiled afresh).
"""

from __future__ import annotations

import pytest

from tests.grader.test_grader_fixtures import _emu_available, replace_once, results
from tests.grader.test_grader_fixtures_phase8a import grade, solution_sources

FULL_WAIT = "                mbar_wait(full + 8 * s, (it / STAGES) & 1);\n"
EXPECT_TX = "                    mbar_expect_tx(fb, STAGE_BYTES);\n"
WGMMA_LAUNCH = "            launch_wgmma(a, b, out, ctype, out_ctype, ta, tb, M, N, K, bias)\n"
ONE_SHAPE = "test_wgmma_values and 136-72-264"

pytestmark = [pytest.mark.timeout(400)]


def _has_sm90() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0 and cupy.cuda.Device(0).compute_capability == "90"
    except Exception:  # noqa: BLE001 - no CuPy, no driver: no Hopper
        return False


needs_sm90 = pytest.mark.skipif(not _has_sm90(), reason="needs an sm_90 GPU (H100, H200): rung 6 is sm_90a code")


def rejected(check: dict) -> bool:
    return check["result"] in ("FAIL", "CRASH", "TIMEOUT")


def test_the_mutations_find_their_lines():
    """Each mutation's line is in the reference files (a fixture whose line moved would test nothing)."""
    files = solution_sources()
    for name, line in (("hgemm_wgmma.cu", FULL_WAIT), ("hgemm_wgmma.cu", EXPECT_TX), ("hgemm.py", WGMMA_LAUNCH)):
        replace_once(files[name], line, line)


@pytest.mark.gpu
@needs_sm90
def test_consumer_that_never_waits_for_the_copies_is_rejected(tmp_path):
    """Without the wait on the stage's `full` mbarrier the consumers issue wgmma on shared memory the TMA has not
    filled yet (or still holds the tile of the round before): wrong values, every layout."""
    files = solution_sources()
    files["hgemm_wgmma.cu"] = replace_once(files["hgemm_wgmma.cu"], FULL_WAIT, "")
    report = grade(tmp_path, files, "-k", ONE_SHAPE, device="cuda")
    [check] = results(report, "test_wgmma_values")
    assert check["result"] == "FAIL" and "values differ from op(A)·op(B)" in check["reason"], check


@pytest.mark.gpu
@needs_sm90
def test_producer_announcing_too_few_bytes_is_rejected(tmp_path):
    """expect_tx of half a stage: the `full` phase completes when half the bytes have landed, so the consumers read
    a half-copied stage (wrong values), or the byte count of later phases goes wrong and they never complete (the
    test times out, naming the kernel). Either way not a pass."""
    files = solution_sources()
    files["hgemm_wgmma.cu"] = replace_once(files["hgemm_wgmma.cu"], EXPECT_TX,
                                           EXPECT_TX.replace("STAGE_BYTES", "STAGE_BYTES / 2"))
    report = grade(tmp_path, files, "-k", ONE_SHAPE, "--timeout", "30", device="cuda")
    [check] = results(report, "test_wgmma_values")
    assert rejected(check), check
    if check["result"] == "TIMEOUT":
        assert "hgemm_6_wgmma" in check["reason"] or "hgemm_wgmma.cu" in check["reason"], check


@pytest.mark.gpu
@needs_sm90
def test_launcher_calling_cupy_matmul_for_rung6_is_rejected(tmp_path):
    """variant='wgmma' answered by cuBLAS: the values are right, but rung 6's kernel never ran."""
    files = solution_sources()
    files["hgemm.py"] = replace_once(
        files["hgemm.py"], WGMMA_LAUNCH,
        "            import cupy  # cuBLAS, not the kernel\n"
        "            x, y = (a.T if ta else a), (b.T if tb else b)\n"
        "            out[...] = cupy.matmul(x.astype(np.float32), y.astype(np.float32))\n")
    report = grade(tmp_path, files, "-k", ONE_SHAPE, device="cuda")
    [check] = results(report, "test_wgmma_values")
    assert check["result"] == "FAIL" and "no launch of `hgemm_6_wgmma`" in check["reason"], check


@pytest.mark.slow
@pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available")
@pytest.mark.skipif(_has_sm90(), reason="on an sm_90 GPU rung 6 runs")
def test_off_hopper_rung6_is_not_measured_and_blocks_nothing(tmp_path):
    """On the emulator, with --require-perf: every rung-6 check is NOT MEASURED with the reason, none blocks; a
    hgemm_wgmma.cu that would hang on a GPU (its producer announces twice the bytes) is never even compiled."""
    files = solution_sources()
    files["hgemm_wgmma.cu"] = replace_once(files["hgemm_wgmma.cu"], EXPECT_TX,
                                           EXPECT_TX.replace("STAGE_BYTES", "2 * STAGE_BYTES"))
    from tests.grader.test_grader_fixtures import grade_workspace

    report = grade_workspace(tmp_path, "phase8a", files, "--no-notebook", "--require-perf", "-k",
                             "test_phase8a_wgmma", timeout=120, expect_pass=False)
    checks = [c for c in report["checks"] if "test_phase8a_wgmma.py::" in c["nodeid"]]
    assert checks and all(c["result"] == "NOT MEASURED" and c["unavailable"] for c in checks), checks
    assert all("needs an sm_90a GPU" in c["reason"] for c in checks), checks
    assert not any(c["result"] in ("FAIL", "CRASH", "TIMEOUT") for c in report["checks"]), report["checks"]
