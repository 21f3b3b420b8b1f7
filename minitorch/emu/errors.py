"""Exceptions and warnings of the emulator."""

from __future__ import annotations

from typing import Any

from .compiler import CompileError

__all__ = ["AllocatorError", "ArgumentWarning", "BarrierWarning", "CompileError", "EmuWarning", "KernelFault",
           "LaunchError", "OutOfMemoryError", "RaceWarning", "ScheduleMismatch"]


class LaunchError(RuntimeError):
    """The launch was refused before any thread ran (bad configuration, too many resources, no such
    kernel). The message starts with CUDA's error name, e.g. ``cudaErrorInvalidConfiguration``."""

    def __init__(self, message: str, cuda_error: str = "") -> None:
        super().__init__(message)
        self.cuda_error = cuda_error


class KernelFault(RuntimeError):  # noqa: N818 (the contract's name)
    """A kernel misbehaved: memory fault, assert, abort, trap, integer division by zero, barrier
    divergence, or (check mode) a race / uninitialised shared read / out-of-bounds access.

    Attributes (None where not meaningful): ``kernel``, ``block`` and ``thread`` (tuples of 3 ints),
    ``argument`` (index of the faulting pointer argument), ``argument_name``, ``offset`` (byte
    offset into that buffer), ``nbytes`` (size of that buffer), ``file``, ``line``, ``kind``, and
    ``findings`` (check mode: a list of dicts, one per distinct problem).
    """

    def __init__(self, message: str, **attrs: Any) -> None:
        super().__init__(message)
        self.kernel: str | None = None
        self.block: tuple[int, int, int] | None = None
        self.thread: tuple[int, int, int] | None = None
        self.argument: int | None = None
        self.argument_name: str | None = None
        self.offset: int | None = None
        self.nbytes: int | None = None
        self.file: str | None = None
        self.line: int | None = None
        self.kind: str = "fault"
        self.findings: list[dict[str, Any]] = []
        for k, v in attrs.items():
            setattr(self, k, v)


class ScheduleMismatch(KernelFault):
    """fuzz_schedules(): the outputs differ between thread orders (a missing barrier, a race)."""


class EmuWarning(UserWarning):
    """Base class of the emulator's warnings."""


class ArgumentWarning(EmuWarning):
    """CuPy-compatible argument mode: an argument is packed in a way that does not match the
    parameter type (the kernel will read garbage, as it would on a GPU)."""


class BarrierWarning(EmuWarning):
    """Threads exited before a __syncthreads() that the others reached (undefined behaviour that
    usually works on GPUs)."""


class RaceWarning(EmuWarning):
    """Check mode: threads that are not ordered wrote the same value to one address of device memory
    (every thread setting one flag). Harmless as written, but a race all the same: any other value
    stored there would be lost."""


class OutOfMemoryError(MemoryError):
    """An allocation past the emulator's device-memory limit (``MINITORCH_EMU_MEMORY``).

    The same kind of error as CuPy's ``cupy.cuda.memory.OutOfMemoryError`` (both are ``MemoryError``s):
    the allocation fails, nothing is allocated, and the process goes on."""

    def __init__(self, size: int, in_use: int, limit: int) -> None:
        self.size, self.in_use, self.limit = size, in_use, limit
        super().__init__(
            f"Out of memory allocating {size:,} bytes (allocated so far: {in_use:,} bytes; the emulator's "
            f"device-memory limit is {limit:,} bytes, set by MINITORCH_EMU_MEMORY). Check the shape you "
            f"asked for, or free tensors you no longer need.")


class AllocatorError(RuntimeError):
    """An allocator (``emu.set_allocator``) broke the rules of device memory: it handed out a block
    that still backs a live array, gave one back while in use, freed an address twice, or returned
    memory outside its blocks. On a GPU these corrupt data silently; the emulator stops at once."""
