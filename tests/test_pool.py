"""The learner's caching pool (pool.py, reference solution from the Phase 5 notebook) as the allocator
of device memory (minitorch.allocator): installed on the emulator once pool.py exists and the graded
phase allows it, removed when it goes; a training loop reuses its blocks and leaks none; release()
gives the memory back to the emulator; blocks freed during a graph capture stay with the graph; a
pool that hands out a block still in use is stopped by the emulator. The same on a GPU (marked gpu)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import minitorch
from minitorch import allocator, emu, functional, graph, nn, optim
from minitorch.emu import memory
from tests.phase3_support import write_solutions
from tests.solution_files import solution_files

DEVICES = ["emu", pytest.param("cuda", marks=pytest.mark.gpu)]


def pool_source() -> str:
    return solution_files("phase5_fast.ipynb")["pool.py"]


@pytest.fixture
def on_device(request, workspace, monkeypatch):
    """Phases 1-3b and the Adam files in the workspace, no pool.py yet; MINITORCH_PHASE unset."""
    monkeypatch.delenv("MINITORCH_PHASE", raising=False)
    write_solutions(workspace)
    files = solution_files("phase5_fast.ipynb")
    for name in ("adam.cu", "adam.py"):
        (workspace / name).write_text(files[name])
    device = getattr(request, "param", "emu")
    previous = minitorch.get_device()
    minitorch.set_device(device)
    yield device
    (workspace / "pool.py").unlink(missing_ok=True)
    gc.collect()
    allocator.refresh(device)  # pool.py is gone: the device's own allocator again
    minitorch.set_device(previous)


def _write_pool(workspace, text=None):
    from minitorch import kernels

    kernels.write_source("pool.py", text if text is not None else pool_source())


def test_installed_when_written_removed_when_deleted_and_only_from_phase5(on_device, workspace, monkeypatch):
    assert allocator.stats("emu") is None and emu.get_allocator() is None
    _write_pool(workspace)
    x = minitorch.tensor(np.arange(10, dtype=np.float32))
    s = allocator.stats("emu")
    assert s is not None and s["bytes_in_use"] >= 512 and s["misses"] >= 1
    assert x._data._buf.owner.handle in allocator.active_pool("emu").pool.in_use
    np.testing.assert_array_equal(x.numpy(), np.arange(10, dtype=np.float32))
    monkeypatch.setenv("MINITORCH_PHASE", "phase4")  # grading Phase 4: its own allocator
    minitorch.tensor(np.ones(3, np.float32))
    assert allocator.stats("emu") is None and emu.get_allocator() is None
    monkeypatch.setenv("MINITORCH_PHASE", "phase6")
    minitorch.tensor(np.ones(3, np.float32))
    assert allocator.stats("emu") is not None
    (workspace / "pool.py").unlink()
    minitorch.tensor(np.ones(3, np.float32))
    assert allocator.stats("emu") is None and emu.get_allocator() is None
    np.testing.assert_array_equal(x.numpy(), np.arange(10, dtype=np.float32))  # still valid


def test_an_array_ends_against_the_guard_page(on_device, workspace):
    _write_pool(workspace)
    x = minitorch.zeros(100)  # 400 bytes in a 512-byte block
    kernel = emu.RawModule(code='extern "C" __global__ void poke(float* x, int i) { x[i] = 1.0f; }',
                           filename="poke.cu").get_function("poke")
    with pytest.raises(emu.KernelFault, match="byte offset 400 of a 400-byte buffer"):
        kernel((1,), (1,), (x.data, np.int32(100)))
    with pytest.raises(emu.KernelFault, match="byte offset -4 of a 400-byte buffer"):
        kernel((1,), (1,), (x.data, np.int32(-1)))


def _sales_like_step(device):
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(5, 16, seed=1, device=device), nn.ReLU(), nn.Linear(16, 1, seed=2, device=device))
    opt = optim.Adam(model.parameters(), lr=0.01)
    x = minitorch.tensor(rng.normal(size=(33, 5)).astype(np.float32), device=device)
    y = minitorch.tensor(rng.normal(size=(33, 1)).astype(np.float32), device=device)

    def step():
        opt.zero_grad()
        loss = functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


@pytest.mark.parametrize("on_device", DEVICES, indirect=True)
def test_training_loop_reuses_blocks_and_leaks_none(on_device, workspace):
    device = on_device
    _write_pool(workspace)
    step = _sales_like_step(device)
    losses = [step().item() for _ in range(3)]
    gc.collect()
    warm = allocator.stats(device)
    for _ in range(10):
        losses.append(step().item())
    gc.collect()
    after = allocator.stats(device)
    assert after["misses"] == warm["misses"], f"steady-state steps still allocate: {warm} -> {after}"
    assert after["hits"] > warm["hits"] + 10 * 10
    assert after["bytes_in_use"] == warm["bytes_in_use"], f"blocks leak over the loop: {warm} -> {after}"
    assert losses[-1] < losses[0]


def test_release_returns_memory_to_the_emulator(on_device, workspace):
    _write_pool(workspace)
    tensors = [minitorch.zeros(1000 + i) for i in range(8)]
    blocks, counted = emu.blocks_in_use(), memory.memory_in_use()
    del tensors
    gc.collect()
    cached = allocator.stats("emu")["bytes_cached"]
    assert cached >= 8 * 4096 and emu.blocks_in_use() == blocks  # cached, not freed
    assert allocator.release("emu") == cached
    assert allocator.stats("emu")["bytes_cached"] == 0
    assert emu.blocks_in_use() <= blocks - 8
    assert memory.memory_in_use() <= counted - 8 * 4096


def test_blocks_freed_during_a_capture_stay_with_the_graph(on_device, workspace):
    _write_pool(workspace)
    step = _sales_like_step("emu")
    step()
    captured = graph.capture(step, device="emu")
    captured.replay()
    held = sum(len(h.handles) for h in captured._held)
    assert held > 0  # the temporaries of the captured step
    before = allocator.stats("emu")
    junk = [minitorch.zeros(n) for n in (33, 16, 5)]  # eager work after the capture: never a held block
    handles = {t.data._buf.owner.handle for t in junk}
    assert not handles & {h for hs in captured._held for h in hs.handles}
    first = captured.output.item()
    captured.replay()
    assert captured.output.item() < first
    del captured, junk
    gc.collect()
    assert allocator.stats("emu")["bytes_in_use"] < before["bytes_in_use"]  # the held blocks came back


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning", "ignore::RuntimeWarning")
def test_a_pool_handing_out_a_block_in_use_is_stopped_by_the_emulator(on_device, workspace):
    bad = pool_source().replace("handle = self.free_blocks[size].pop()", "handle = self.free_blocks[size][-1]")
    assert bad != pool_source()
    _write_pool(workspace, bad)
    a = minitorch.zeros(100)
    del a
    gc.collect()
    b = minitorch.zeros(100)  # a hit: the block is handed out and stays in the free list
    with pytest.raises(RuntimeError, match="handed out the block at .* while it still backs a live array"):
        minitorch.zeros(100)
    del b


def test_a_broken_pool_names_its_cell(on_device, workspace):
    _write_pool(workspace, pool_source().replace("size = size_class(nbytes)\n        if self.free_blocks",
                                                 "size = size_klass(nbytes)\n        if self.free_blocks"))
    with pytest.raises(RuntimeError, match=r"pool.py allocates device memory .* CachingPool.malloc\(12\) raised "
                                           r"NameError.*Exercise 6: a caching allocator"):
        minitorch.zeros(3)


@pytest.mark.parametrize("on_device", [pytest.param("cuda", marks=pytest.mark.gpu)], indirect=True)
def test_cupy_allocations_go_through_the_pool_and_release_frees_device_memory(on_device, workspace):
    """On a GPU: CuPy's allocator hook serves every array from the pool; release() returns the bytes
    to the driver (cudaMemGetInfo sees them)."""
    import cupy

    _write_pool(workspace)
    allocator.refresh("cuda")
    big = [minitorch.zeros(16 << 20) for _ in range(4)]  # 4 x 64 MiB
    s = allocator.stats("cuda")
    assert s["bytes_in_use"] >= 4 * (64 << 20)
    before = allocator.stats("cuda")
    direct = cupy.empty(1000, np.float32)  # a CuPy array made outside minitorch: through the hook too
    after = allocator.stats("cuda")
    assert after["hits"] + after["misses"] == before["hits"] + before["misses"] + 1
    assert after["bytes_in_use"] == before["bytes_in_use"] + 4096
    del direct
    del big
    gc.collect()
    cupy.cuda.Device().synchronize()
    free_before, _ = cupy.cuda.runtime.memGetInfo()
    released = allocator.release("cuda")
    free_after, _ = cupy.cuda.runtime.memGetInfo()
    assert released >= 4 * (64 << 20)
    assert free_after - free_before >= 4 * (64 << 20) - (16 << 20), (free_before, free_after, released)
