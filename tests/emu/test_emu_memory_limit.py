"""The emulator's device-memory limit: a mistyped shape raises OutOfMemoryError (a MemoryError, as
CuPy's is) naming the bytes asked for and the limit, and the process goes on."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

from minitorch.emu import memory
from minitorch.emu.errors import OutOfMemoryError


def test_parse_size():
    assert memory.parse_size("4096") == 4096
    assert memory.parse_size("8GiB") == 8 << 30
    assert memory.parse_size("512 MB") == 512 * 10**6
    with pytest.raises(ValueError, match="MINITORCH_EMU_MEMORY.*'lots'"):
        memory.parse_size("lots")


def test_default_limit_is_what_the_host_can_spare():
    with open("/proc/meminfo") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    assert 0 < memory._host_can_spare() < total


def test_four_tebibytes_raise_and_the_process_goes_on():
    # A child process: the 4 TiB zeros of the issue must raise, not get the process killed (exit 137).
    code = """
import minitorch
minitorch.set_device("emu")
try:
    minitorch.zeros((1 << 20, 1 << 20))
except MemoryError as e:
    print(type(e).__name__, "|", e)
x = minitorch.zeros((3, 4))
print("alive", tuple(x.shape))
"""
    env = dict(os.environ, MINITORCH_EMU_MEMORY="256MiB", MINITORCH_DEVICE="emu")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "OutOfMemoryError | Out of memory allocating 4,398,046,511,104 bytes" in out.stdout
    assert f"limit is {256 << 20:,} bytes" in out.stdout
    assert "alive" in out.stdout


def test_limit_counts_live_buffers_and_frees_them():
    old = memory._limit
    try:
        gc.collect()  # garbage of earlier tests freed now, not in the middle of this count
        before = memory.memory_in_use()
        memory.set_memory_limit(before + (8 << 20))
        a = memory.zeros(1 << 20, np.float32)   # 4 MiB
        assert memory.memory_in_use() >= before + (4 << 20)
        with pytest.raises(OutOfMemoryError) as info:
            memory._Buffer(6 << 20)
        assert info.value.size == 6 << 20 and info.value.limit == before + (8 << 20)
        del a
        gc.collect()
        assert memory.memory_in_use() == before
        b = memory._Buffer(6 << 20)   # fits again once the first buffer is freed
        assert b.nbytes == 6 << 20
    finally:
        memory._limit = old
