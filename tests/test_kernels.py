"""The learner-code mechanism: workspace, atomic writes, TODO stubs, loading, argument checks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from minitorch import kernels

ROOT = Path(__file__).resolve().parent.parent


def test_workspace_override(workspace):
    assert kernels.workspace_dir() == workspace.resolve()
    path = kernels.write_source("memory.cu", "// hello\n")
    assert path == workspace.resolve() / "memory.cu"
    assert path.read_text() == "// hello\n"
    assert [p.name for p in workspace.iterdir()] == ["memory.cu"]  # no temporary file left behind


def test_default_workspace_is_inside_the_package(monkeypatch):
    monkeypatch.delenv("MINITORCH_WORKSPACE", raising=False)
    assert kernels.workspace_dir() == Path(kernels.__file__).resolve().parent / "csrc"


@pytest.mark.parametrize("bad", ["../escape.cu", "sub/dir.cu", ".hidden.cu", "notes.txt", ""])
def test_rejects_unsafe_or_unknown_file_names(workspace, bad):
    with pytest.raises(ValueError, match="expected"):
        kernels.write_source(bad, "x")


def test_todo_stub_is_refused_and_previous_version_kept(workspace):
    kernels.write_source("memory.cu", "// version 1\n")
    with pytest.raises(NotImplementedError, match=r"Exercise 2: fill and copy kernels.*TODO stub"):
        kernels.write_source("memory.cu", 'MINITORCH_TODO("write fill");\n')
    assert (workspace / "memory.cu").read_text() == "// version 1\n"


def _lab_conv_cu() -> str:
    """Lab 6's conv.cu as a learner gets it (every rung a TODO stub)."""
    lab = json.loads((ROOT / "labs" / "phase6_cnn.ipynb").read_text())
    cell = next(s for s in ("".join(c["source"]) for c in lab["cells"]) if s.startswith("%%kernel conv.cu"))
    return cell.split("\n", 1)[1]


def test_todo_stubs_left_are_named_by_function_and_line(workspace):
    """Lab 6's conv.cu without the define that lets its stubs compile (a learner deleted it), the first kernel
    written: the refusal lists the stubs left, and in a notebook shows that message alone (not the traceback that
    opens with the whole cell)."""
    source = _lab_conv_cu().replace(kernels.TODO_DEFINE + "\n", "", 1)
    assert not kernels.stubs_compile(source)
    stubs = kernels.todo_stubs(source)
    assert [f for _, f in stubs][:3] == ["conv2d_direct", "im2col", "gemm_to_nchw"] and len(stubs) == 24
    first = source.splitlines()[stubs[0][0] - 1]
    written = source.replace(first, "    y[i] = 0.0f;  // (a learner's attempt)", 1)
    with pytest.raises(kernels.KernelStubError) as err:
        kernels.write_source("conv.cu", written)
    message = str(err.value)
    assert "23 TODO stubs" in message and "conv2d_direct" not in message
    assert f"im2col (line {stubs[1][0]})" in message and "conv2d_bias_grad (line" in message
    assert not (workspace / "conv.cu").exists()
    shown = err.value._render_traceback_()
    assert shown == [f"KernelStubError: {message}"] and "extern" not in "".join(shown)


def test_lab6_conv_rungs_are_refused_one_at_a_time(workspace):
    """Lab 6's conv.cu as given (its define makes the stubs compile) is saved; each unwritten rung's kernel is
    refused by name and line, and a written one loads while others are still stubs."""
    source = _lab_conv_cu()
    assert kernels.stubs_compile(source)
    kernels.write_source("conv.cu", source)
    stubs = dict((f, line) for line, f in kernels.todo_stubs(source))
    for name in ("conv2d_igemm", "winograd_filter", "conv2d_backward_weight_igemm", "splitk_reduce"):
        with pytest.raises(kernels.KernelNotWrittenError) as err:
            kernels.load_kernel("conv.cu", name)
        assert f"{name} in conv.cu is not written yet" in str(err.value), err.value
        assert f"{name} (line {stubs[name]})" in str(err.value), err.value
    lines = source.splitlines(keepends=True)
    start = sum(len(x) for x in lines[:stubs["splitk_reduce"] - 1])
    end = source.index(");", start) + 2  # the stub's call, over however many lines it is wrapped
    kernels.write_source("conv.cu", source[:start] + "        out[i] = partial[i];" + source[end:])
    assert kernels.load_kernel("conv.cu", "splitk_reduce").function == "splitk_reduce"


def test_lab8b_flash_rungs_are_refused_one_at_a_time(workspace):
    """Lab 8b's flash.cu as given: every rung refuses to load, naming itself; once rung 2's one line is written,
    rung 2 names the part it calls that is still a stub (the online softmax of the shared body), while rung 3 still
    names its own line."""
    lab = json.loads((ROOT / "labs" / "phase8b_flash.ipynb").read_text())
    source = next(s for s in ("".join(c["source"]) for c in lab["cells"])
                  if s.startswith("%%kernel flash.cu")).split("\n", 1)[1]
    assert kernels.stubs_compile(source)
    kernels.write_source("flash.cu", source)
    stubs = {f: line for line, f in kernels.todo_stubs(source)}
    for name in ("flash_fwd_1_scalar", "flash_fwd_2_mma", "flash_fwd_5_tuned", "flash_bwd_mma"):
        with pytest.raises(kernels.KernelNotWrittenError) as err:
            kernels.load_kernel("flash.cu", f"{name}<bf16, 64>" if "5" not in name else
                                "flash_fwd_5_tuned<bf16, 64, 4, 2, 64, false>")
        assert f"{name} in flash.cu is not written yet" in str(err.value), err.value
        assert f"{name} (line {stubs[name]})" in str(err.value), err.value
    lines = source.splitlines(keepends=True)
    start = sum(len(x) for x in lines[:stubs["flash_fwd_2_mma"] - 1])
    end = source.index(");", start) + 2  # the stub's call, over however many lines it is wrapped
    rung2 = "    flash_fwd_mma<T, D, 4, 1, 64, PLAIN, false, 1, false, false, false>(FWD_ARGS);"
    kernels.write_source("flash.cu", source[:start] + rung2 + source[end:])
    with pytest.raises(kernels.KernelNotWrittenError) as err:
        kernels.load_kernel("flash.cu", "flash_fwd_2_mma<bf16, 64>")
    assert "flash_fwd_mma (line" in str(err.value) and ", which it calls" in str(err.value), err.value
    with pytest.raises(kernels.KernelNotWrittenError, match="flash_fwd_3_ldmatrix \\(line"):
        kernels.load_kernel("flash.cu", "flash_fwd_3_ldmatrix<bf16, 64>")


def test_missing_kernel_names_the_lab_and_cell(workspace):
    with pytest.raises(kernels.KernelNotWrittenError) as err:
        kernels.load_kernel("memory.cu", "fill")
    message = str(err.value)
    assert "%%kernel memory.cu" in message
    assert "labs/phase1_memory.ipynb" in message and "Exercise 2: fill and copy kernels" in message
    with pytest.raises(kernels.KernelNotWrittenError, match="%%module memory.py"):
        kernels.load_module("memory.py")


def test_registry_matches_the_solution_notebooks():
    """Each registered file is written by a cell of that lab, under the registered heading."""
    for filename, where in kernels.KERNEL_FILES.items():
        notebook = ROOT / "solutions" / Path(where.lab).name
        cells = json.loads(notebook.read_text())["cells"]
        heading = None
        for cell in cells:
            text = "".join(cell["source"])
            if cell["cell_type"] == "markdown" and text.startswith("#"):
                heading = text.splitlines()[0].lstrip("#").strip()
            if cell["cell_type"] == "code" and re.match(rf"%%(kernel|module) {re.escape(filename)}( --\S+)*\s*\n", text):
                assert heading == where.cell, (filename, heading)
                break
        else:
            pytest.fail(f"no cell of {notebook.name} writes {filename}")


def test_kernel_signatures_parse_learner_style_code():
    src = '''
    // extern "C" __global__ void commented_out(int x) {}
    extern "C" __global__ void fill(float* out, float value, long long n) { }
    extern "C" __global__ __launch_bounds__(256) void copy(const float* __restrict__ src,
                                                          float* __restrict__ dst, long long n) {}
    extern "C" __global__ void nothing(void) {}
    __global__ void not_exported(int* x) {}
    '''
    sigs = kernels.kernel_signatures(src)
    assert sigs == {"fill": ["float* out", "float value", "long long n"],
                    "copy": ["const float* __restrict__ src", "float* __restrict__ dst", "long long n"],
                    "nothing": []}


def test_python_float_for_a_float_parameter_is_explained():
    params = ["float* out", "float value", "long long n"]
    with pytest.raises(TypeError, match=r"argument #1 .*64-bit double.*numpy.float32"):
        kernels.check_args("memory.cu", "fill", params, (object(), 1.0, np.int64(3)))
    with pytest.raises(TypeError, match=r"takes 3 arguments, got 2"):
        kernels.check_args("memory.cu", "fill", params, (object(), np.float32(1)))
    with pytest.raises(TypeError, match=r"host\) array"):
        kernels.check_args("memory.cu", "fill", params, (np.zeros(3, np.float32), np.float32(1), 3))
    # Python ints are fine for 64-bit parameters, numpy scalars for anything.
    kernels.check_args("memory.cu", "fill", params, (object(), np.float32(1), 3))
    with pytest.raises(TypeError, match=r"Python int .*`int`.*numpy.int32"):
        kernels.check_args("k.cu", "k", ["int n"], (3,))


def test_load_module_reloads_when_the_source_changes(workspace):
    kernels.write_source("memory.py", "VALUE = 1\n")
    assert kernels.load_module("memory.py").VALUE == 1
    assert kernels.load_module("memory.py") is kernels.load_module("memory.py")  # cached
    kernels.write_source("memory.py", "VALUE = 2\n")
    assert kernels.load_module("memory.py").VALUE == 2


def test_cell_magics_write_and_check(workspace, monkeypatch, capsys):
    monkeypatch.setenv("MINITORCH_DEVICE", "cpu")
    from minitorch import backend

    monkeypatch.setattr(backend, "_active", "cpu")
    kernels.kernel_magic("memory.cu", 'extern "C" __global__ void fill(float* out, float v, long long n) {}\n')
    assert "not compiled (the 'cpu' device runs no CUDA C)" in capsys.readouterr().out
    kernels.module_magic("memory.py", "X = 40 + 2\n")
    assert "wrote memory.py" in capsys.readouterr().out
    assert kernels.load_module("memory.py").X == 42
    with pytest.raises(SyntaxError):
        kernels.module_magic("memory.py", "def broken(:\n")


def test_kernel_cell_for_one_architecture_is_saved_not_compiled_elsewhere(workspace, monkeypatch, capsys):
    """``%%kernel f.cu --arch=sm_90a`` (Phase 8a's rung 6): on a device that is not that GPU the cell is saved and
    said not to be compiled, naming the architecture and the device; PTX the emulator cannot run is never fed
    to it. An unknown option is refused, naming it."""
    from minitorch import backend

    monkeypatch.setattr(backend, "_active", "emu")
    source = 'extern "C" __global__ void k(int* x) { asm volatile("wgmma.fence.sync.aligned;"); }\n'
    kernels.kernel_magic("rung6.cu --arch=sm_90a", source)
    out = capsys.readouterr().out
    assert "wrote rung6.cu" in out and "not compiled: it is built for sm_90a" in out and "'emu'" in out
    assert kernels.read_source("rung6.cu") == source
    with pytest.raises(ValueError, match="--fast"):
        kernels.kernel_magic("rung6.cu --fast", source)
    with pytest.raises(kernels.KernelCompileError):  # without --arch the emulator compiles it, and refuses wgmma
        kernels.kernel_magic("rung6.cu", source)


STUBS_COMPILE = '''#define MINITORCH_TODO(message)
__device__ float twice(float x) {
    MINITORCH_TODO("rung 0: twice");
    return 0.0f;
}
template <int N>
__global__ void __launch_bounds__(256) scaled(float* out, long long n) {
    for (long long i = threadIdx.x; i < n; i += blockDim.x) out[i] = N * twice(1.0f);
}
extern "C" __global__ void filled(float* out, long long n) {
    for (long long i = threadIdx.x; i < n; i += blockDim.x) out[i] = 7.0f;
}
extern "C" __global__ void unwritten(float* out, long long n) {
    // ### a learner's comment mentioning twice( and MINITORCH_TODO( is not a stub
    MINITORCH_TODO("rung 2: unwritten");
}
'''


def test_a_file_whose_stubs_compile_runs_its_written_kernels_and_names_the_unwritten(workspace):
    """Lab 5's gemm.cu is climbed one rung at a time: with `#define MINITORCH_TODO(message)` the file is
    saved and compiled while stubs are left; a written kernel runs, and an unwritten one (or one calling an
    unwritten helper, through a template and __launch_bounds__) refuses to run, naming the function and
    line. Without the define a stub still blocks the whole file."""
    from minitorch import backend

    kernels.write_source("gemm.cu", STUBS_COMPILE)
    assert kernels.todo_stubs(STUBS_COMPILE) == [(3, "twice"), (15, "unwritten")]
    out = backend.zeros((5,))
    kernels.load_kernel("gemm.cu", "filled")((1,), (32,), (out, np.int64(5)))
    assert backend.asnumpy(out).tolist() == [7.0] * 5
    with pytest.raises(kernels.KernelNotWrittenError, match=r"unwritten in gemm.cu is not written yet: "
                       r"MINITORCH_TODO is still in unwritten \(line 15\)\. .*Exercise 1: the SGEMM ladder"):
        kernels.load_kernel("gemm.cu", "unwritten")
    with pytest.raises(kernels.KernelNotWrittenError, match=r"scaled in gemm.cu .* twice \(line 3\), which it calls"):
        kernels.load_kernel("gemm.cu", "scaled<2>", name_expressions=["scaled<2>"])
    with pytest.raises(kernels.KernelStubError, match=r"unwritten \(line 14\)"):
        kernels.write_source("gemm.cu", STUBS_COMPILE.split("\n", 1)[1])


def test_lab5_gemm_cu_as_a_learner_gets_it_compiles_and_names_each_unwritten_rung(workspace):
    """The generated lab's gemm.cu, every rung a stub: the %%kernel cell saves and compiles it, and each rung
    (the templated ones through their instantiation, rung 9 through rung9_steps) refuses to run, naming
    itself; the given split-K sum runs."""
    lab = json.loads((ROOT / "labs" / "phase5_fast.ipynb").read_text())
    cell = next(s for s in ("".join(c["source"]) for c in lab["cells"]) if s.startswith("%%kernel gemm.cu"))
    kernels.kernel_magic("gemm.cu", cell.split("\n", 1)[1])
    rungs = ["sgemm_1_naive", "sgemm_2_coalesced", "sgemm_3_shared", "sgemm_4_blocktile_1d",
             "sgemm_5_blocktile_2d", "sgemm_6_vectorized", "sgemm_7_autotuned<128, 128, 8, 8, 8>",
             "sgemm_8_warptiling", "sgemm_9_double_buffered<128, 128, 8, 32, 64, 0, 0>",
             "sgemm_10_regtile"]
    for rung in rungs:
        base = rung.split("<")[0]
        with pytest.raises(kernels.KernelNotWrittenError, match=rf"^{base} in gemm.cu is not written yet"):
            kernels.load_kernel("gemm.cu", rung, name_expressions=[rung] if "<" in rung else None)
    assert kernels.load_kernel("gemm.cu", "sgemm_sum_splits").function == "sgemm_sum_splits"
