"""The caching allocator's reference solution (pool.py) against a fake device that records every raw
allocation: no block handed out twice, reuse by size class, no leak over a training-like loop, memory
returned on release, statistics exact; a pool that hands out a block still in use is caught."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from dev.phase5_training_sources import SOURCES, file_text


class FakeDevice:
    """raw_malloc/raw_free with bookkeeping: handles are addresses, never reused by the device."""

    def __init__(self):
        self.next, self.live, self.raw_calls = 0x1000, {}, 0

    def malloc(self, size):
        self.raw_calls += 1
        addr, self.next = self.next, self.next + size
        self.live[addr] = size
        return addr

    def free(self, addr):
        assert addr in self.live, f"raw_free of unknown block {addr:#x}"
        del self.live[addr]


def _load(tmp_path, text):
    path = tmp_path / "pool.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("pool_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_pool(module) -> None:
    """The invariants, as a grader would check them (raises AssertionError naming the broken one)."""
    dev = FakeDevice()
    pool = module.CachingPool(dev.malloc, dev.free)
    rng = np.random.default_rng(0)
    live: dict[int, int] = {}
    for step in range(200):  # a training loop: the same shapes each step, some extra odd sizes
        handles = [pool.malloc(int(n)) for n in (4096, 4096, 100, 1000 + step % 7, int(rng.integers(1, 5000)))]
        for h, n in zip(handles, (4096, 4096, 100, 1000, 1), strict=True):
            assert h not in live, f"block {h:#x} handed out twice while still in use"
            live[h] = n
        for h in handles:
            pool.free(h)
            del live[h]
    s = pool.stats()
    assert s["bytes_in_use"] == 0, f"bytes_in_use is {s['bytes_in_use']} after every block was freed"
    assert dev.raw_calls <= 20, f"{dev.raw_calls} raw allocations over 200 identical steps: freed blocks not reused"
    assert s["hits"] + s["misses"] == 1000 and s["misses"] == dev.raw_calls
    assert s["bytes_cached"] == sum(dev.live.values())
    held = sum(dev.live.values())
    assert pool.release() == held, "release() did not report the bytes it gave back"
    assert not dev.live, f"{len(dev.live)} blocks still held by the device after release()"
    assert pool.stats()["bytes_cached"] == 0


def test_reference_pool_keeps_its_invariants(tmp_path):
    module = _load(tmp_path, file_text(SOURCES["pool.py"]))
    check_pool(module)
    assert module.size_class(1) == 512 and module.size_class(513) == 1024 and module.size_class(4096) == 4096


def test_stats_are_exact(tmp_path):
    module = _load(tmp_path, file_text(SOURCES["pool.py"]))
    dev = FakeDevice()
    pool = module.CachingPool(dev.malloc, dev.free)
    a, b = pool.malloc(600), pool.malloc(600)
    assert a != b and pool.stats() == {"bytes_in_use": 2048, "bytes_cached": 0, "peak": 2048, "hits": 0, "misses": 2}
    pool.free(a)
    c = pool.malloc(1000)
    assert c == a and pool.stats()["hits"] == 1
    with pytest.raises(ValueError, match="double free"):
        pool.free(b)
        pool.free(b)


def test_pool_handing_out_a_block_in_use_is_rejected(tmp_path):
    bad = file_text(SOURCES["pool.py"]).replace(
        "handle = self.free_blocks[size].pop()", "handle = self.free_blocks[size][-1]")
    assert bad != file_text(SOURCES["pool.py"])
    with pytest.raises(AssertionError, match="handed out twice"):
        check_pool(_load(tmp_path, bad))
