"""The learner's code runs in a process of its own: the graded tests (the judge) never import it.

While the graded tests of an isolated phase run (``GRADER_ISOLATE=1``, set by ``grader check``),
``kernels.load_module`` and ``kernels.load_kernel`` return stand-ins (:class:`ProxyModule`,
:class:`ProxyKernel`) whose calls are made in a **learner process**: started by the judge on the
first call, in the same sandbox, restarted after it dies. The judge sends the arguments and receives
the results:

- on the emulator device arrays travel by value: the judge sends each array's bytes (shape, dtype),
  the learner process makes a device array of them, calls the launcher, then sends back the bytes of
  every array the call changed, which the judge writes into its own arrays (launchers write their
  outputs in place). One array passed twice arrives as one array. On a GPU they travel by CUDA IPC
  handle (the allocation holding the array, the array's offset there): the learner process maps the
  judge's memory for the request, its kernels write the judge's arrays in place, and it closes the
  mappings before it replies (a performance timing's fresh sets go the other way: they are the learner
  process's own memory, which the judge maps: :func:`time_replayed`). NumPy arrays, NumPy scalars (their dtype kept), numbers, strings,
  tuples, lists and dicts of them travel as they are;
- nothing the learner process sends is unpickled or executed: replies are a JSON header and raw
  bytes, decoded into those types only;
- an exception comes back as the same type where it is a builtin or one of the course's own
  (``KernelCompileError``, ``KernelLaunchError``, ``emu.KernelFault`` with its kind and location, ...)
  with its message and causes; any other type (pytest's ``Skipped`` included) becomes a RuntimeError
  naming it, so that a learner's ``pytest.skip()`` is a failure, not a skip;
- the evidence the tests read about launches is the learner process's word: each reply carries the
  launch counts of the call and its latest launches (kernel, grid, block, arguments), which the judge
  adds to ``kernels.launch_count`` and to the open ``kernels.recording()`` lists. Replaying such a
  record launches the kernel again in the learner process, on the judge's arrays. A forged record can
  at most hide that a result was computed another way (on the host, say); the values are checked by
  the judge whatever the records say;
- the emulator's settings of the judge's block (check mode, schedule order, time limit) go with each
  call, and a capture of a CUDA graph in the judge (``checks.run_without_host_transfers``) becomes a
  capture of the call in the learner process: a launcher that copies between host and device is
  refused there, with CUDA's words.

Every value comparison, every timing (the judge's clock around requests: :func:`timed_calls`,
:func:`time_replayed`), and the verdict, are made in the judge; a submission can patch whatever it
likes in its own process (``grader.checks``, pytest, the timer) and it changes nothing the judge
runs. The judge makes itself non-dumpable before it starts the learner process (no ptrace, no
/proc/<judge>/mem), and its stream of results carries an HMAC under a key the learner process never
sees (grader/pytest_plugin.py).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ISOLATE_ENV = "GRADER_ISOLATE"
LEARNER_ENV = "GRADER_LEARNER_PROCESS"   # set in the learner process itself
RUNTIME_SHA256_ENV = "GRADER_EMU_RUNTIME"  # "<sha256>:<path>" of the emulator's runtime, pinned before any learner code ran
MAX_FRAME_BYTES = 8 << 30
MAX_LAUNCH_RECORDS = 64                  # latest launches of one call sent back (their arrays included)
PR_SET_PDEATHSIG = 1
_HEADER = struct.Struct("<Q")


class LearnerProcessError(RuntimeError):
    """The learner process died, or sent something that is not a reply."""


class UntimeableCallError(RuntimeError):
    """A performance check whose timed call hands the learner's code what a fresh set cannot stand in for (a
    Tensor): a fault of the check, never of the submission, raised before anything is timed."""


class TransportError(TypeError):
    """A value that cannot travel between the judge and the learner process."""


# ---------------------------------------------------------------- frames: a JSON header and raw buffers


def _wait_until_stopped(pid: int, timeout_s: float = 2.0) -> None:
    """SIGSTOP is delivered asynchronously: return once the process is stopped (or gone), so that nothing the
    judge does next (writing a timed round's inputs) can overlap a thread of it still running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return
        if state in ("T", "t", "Z", "X"):
            return
        time.sleep(0.0002)


def _read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 24))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def frame(header: dict, buffers: list[bytes]) -> bytes:
    """The bytes of a frame: its JSON header's length and text, then each buffer's length and bytes."""
    head = json.dumps(header).encode()
    parts = [_HEADER.pack(len(head)), head, _HEADER.pack(len(buffers))]
    for b in buffers:
        parts += [_HEADER.pack(len(b)), b]
    return b"".join(parts)


def send_frame(fd: int, header: dict, buffers: list[bytes]) -> None:
    _write_all(fd, frame(header, buffers))


def recv_frame(fd: int) -> tuple[dict, list[bytes]]:
    (n,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    if n > MAX_FRAME_BYTES:
        raise LearnerProcessError(f"a reply header of {n} bytes")
    header = json.loads(_read_exact(fd, n).decode())
    if not isinstance(header, dict):
        raise LearnerProcessError("a reply that is not a JSON object")
    (count,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
    buffers, total = [], 0
    for _ in range(count):
        (size,) = _HEADER.unpack(_read_exact(fd, _HEADER.size))
        total += size
        if total > MAX_FRAME_BYTES:
            raise LearnerProcessError(f"a reply of more than {MAX_FRAME_BYTES} bytes")
        buffers.append(_read_exact(fd, size))
    return header, buffers


# ---------------------------------------------------------------- values


def _dtype(name: Any) -> np.dtype:
    if not isinstance(name, str):
        raise LearnerProcessError(f"a dtype that is not a name: {name!r}")
    dt = np.dtype(name)
    if dt.kind not in "biufc" or dt.hasobject:
        raise LearnerProcessError(f"an array of {dt}, which cannot travel")
    return dt


def _shape(shape: Any) -> tuple[int, ...]:
    if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise LearnerProcessError(f"a shape that is not a list of sizes: {shape!r}")
    return tuple(shape)


class Encoder:
    """Values to JSON and buffers; device arrays go to a table of slots (one slot per array)."""

    def __init__(self, with_contents: bool = True, ipc: bool = False) -> None:
        self.ipc = ipc                        # device arrays by CUDA IPC handle (the judge on a GPU), not by value
        # allocation start -> its IPC handle: one per allocation a request, or a timing (time_replayed keeps them for
        # all its requests, so that the learner process finds its mappings again instead of opening them anew)
        self._handles: dict[int, bytes] = _timing_handles if _timing_handles is not None else {}
        self.buffers: list[bytes] = []
        self.slots: list[dict] = []
        self.arrays: list[Any] = []           # the device array of each slot
        self._slot_of: dict[tuple, int] = {}  # (address, nbytes, dtype, shape) -> slot
        self._base_of: dict[tuple, int] = {}  # (address, nbytes) -> the first slot there
        self.with_contents = with_contents
        self.tensors: list[Any] = []          # the Tensor of each node
        self.staged: list[tuple[Any, Any]] = []  # (a judge's array without an IPC handle, the copy sent instead)
        self.nodes: list[Any] = []            # each tensor's encoding (its data, grad, grad_fn: a graph)
        self._tensor_of: dict[int, int] = {}  # id(tensor) -> node

    def buffer(self, data: bytes) -> int:
        self.buffers.append(data)
        return len(self.buffers) - 1

    def register(self, a: Any, buffer: int | None) -> int:
        """A new slot for the device array `a`, its contents in `buffer` (None: not sent)."""
        slot = self._slot_of[(_address(a), a.nbytes, str(a.dtype), tuple(a.shape))] = len(self.slots)
        self._base_of.setdefault((_address(a), a.nbytes), slot)
        # where the array starts past a multiple of 16 bytes (a view into a buffer, say): the learner process makes
        # its copy start there too, so that a kernel's vector accesses meet the alignment the judge's array has
        self.slots.append({"dtype": str(a.dtype), "shape": list(a.shape), "b": buffer,
                           "align": _address(a) % COPY_ALIGN})
        self.arrays.append(a)
        return slot

    def device(self, a: Any) -> dict:
        from minitorch import backend

        if self.ipc and a.size and all(st >= 0 for st in a.strides):
            return {"t": "dev", "i": self._ipc_slot(a)}
        key = (_address(a), a.nbytes, str(a.dtype), tuple(a.shape))
        slot = self._slot_of.get(key)
        if slot is not None:
            return {"t": "dev", "i": slot}
        base = self._base_of.get((_address(a), a.nbytes))
        if base is not None:  # another view of a slot's array (out.reshape(-1), x.view(np.uint32))
            return {"t": "view", "i": base, "dtype": str(a.dtype), "shape": list(a.shape)}
        contents = np.ascontiguousarray(backend.asnumpy(a)).tobytes() if self.with_contents else None
        return {"t": "dev", "i": self.register(a, None if contents is None else self.buffer(contents))}

    def _ipc_slot(self, a: Any) -> int:
        """A slot naming `a` by the CUDA IPC handle of the allocation holding it and its offset there: the learner
        process maps the judge's memory and its kernels write the judge's arrays in place (nothing copied)."""
        key = ("ipc", _address(a), str(a.dtype), tuple(a.shape), tuple(a.strides))
        slot = self._slot_of.get(key)
        own = None if slot is not None else _offset_in_learner_arena(a)
        if own is not None:  # a set of a timing, in the learner process's own memory: named by its offset there
            slot = self._slot_of[key] = len(self.slots)  # type: ignore[index]
            self.slots.append({"dtype": str(a.dtype), "shape": list(a.shape), "strides": list(a.strides), "b": None,
                               "own": own})
            self.arrays.append(a)
        elif slot is None:
            sent = a
            try:
                base, handle = cuda_ipc_handle(_address(a), self._handles)
            except TransportError:
                # memory CUDA cannot share (cudaMallocAsync's pools, a framework's virtual-memory segments): a copy
                # in memory it can travels, and is copied back after the reply (_call)
                sent = _staged_copy(a)
                self.staged.append((a, sent))
                base, handle = cuda_ipc_handle(_address(sent))  # (not kept: the copy goes with this request)
            slot = self._slot_of[key] = len(self.slots)  # type: ignore[index]
            self.slots.append({"dtype": str(a.dtype), "shape": list(sent.shape), "strides": list(sent.strides),
                               "b": None, "ipc": handle.hex(), "off": _address(sent) - base})
            self.arrays.append(a)
        return slot

    def known_tensors(self, tensors: list[Any]) -> None:
        """Nodes 0 .. len(tensors) - 1 are these tensors (the request's, in a reply): referred to, not sent again."""
        for t in tensors:
            self._tensor_of[id(t)] = len(self.tensors)
            self.tensors.append(t)
            self.nodes.append(None)

    def tensor(self, t: Any) -> dict:
        node = self._tensor_of.get(id(t))
        if node is None:
            self._add_graph(t)
            node = self._tensor_of[id(t)]
        return {"t": "tensor", "i": node}

    def _add_graph(self, root: Any) -> None:
        """A node for `root` and for every tensor it reaches (its grad, its grad_fn's inputs, saved tensors and
        attributes), without recursion: a tape may be thousands of operations deep."""
        new, pending = [], [root]
        while pending:
            t = pending.pop()
            if id(t) in self._tensor_of:
                continue
            self._tensor_of[id(t)] = len(self.tensors)
            self.tensors.append(t)
            self.nodes.append(None)
            new.append(t)
            if t.grad is not None:
                pending.append(t.grad)
            ctx = t.grad_fn
            if ctx is not None:
                pending += [*ctx.inputs, *ctx.saved_tensors]
                for value in _context_attrs(ctx).values():
                    pending += _tensors_in(value)
        for t in new:
            self.nodes[self._tensor_of[id(t)]] = self._node(t)

    def _node(self, t: Any) -> dict:
        from minitorch.autograd.function import host_value

        ctx = t.grad_fn
        fn = None
        if ctx is not None:
            cls = ctx.function
            fn = {"cls": f"{cls.__module__}:{cls.__qualname__}",
                  "inputs": [self._tensor_of[id(x)] for x in ctx.inputs],
                  "saved": [self._tensor_of[id(x)] for x in ctx.saved_tensors],
                  "needs": [bool(n) for n in ctx.needs_input_grad],
                  "attrs": [[name, self.encode(value)] for name, value in _context_attrs(ctx).items()]}
        known = host_value(t)
        return {"data": self.encode(t._data), "device": str(t._device), "rg": bool(t._requires_grad),
                "grad": None if t.grad is None else self._tensor_of[id(t.grad)], "fn": fn,
                "hv": None if known is None else float(known).hex()}

    def encode(self, v: Any) -> Any:
        kind = type(v)
        if v is None or kind is bool or kind is str:
            return v
        if kind is int:
            return {"t": "int", "v": str(v)}  # any size
        if kind is float:
            return {"t": "float", "v": v.hex()}
        from minitorch import backend
        from minitorch.tensor import Tensor

        if isinstance(v, (bool, str)):
            return v
        if kind is Tensor:
            return self.tensor(v)
        if isinstance(v, np.generic):
            if v.dtype.hasobject or v.dtype.kind not in "biufc":
                raise TransportError(f"a NumPy scalar of {v.dtype} cannot travel")
            return {"t": "npscalar", "dtype": str(v.dtype), "b": self.buffer(v.tobytes())}
        if isinstance(v, int):
            return {"t": "int", "v": str(v)}  # any size
        if isinstance(v, float):
            return {"t": "float", "v": v.hex()}
        if isinstance(v, np.ndarray):
            if v.dtype.hasobject or v.dtype.kind not in "biufc":
                raise TransportError(f"a NumPy array of {v.dtype} cannot travel")
            return {"t": "host", "dtype": str(v.dtype), "shape": list(v.shape),
                    "b": self.buffer(np.ascontiguousarray(v).tobytes())}
        if backend.is_device_array(v):
            return self.device(v)
        if isinstance(v, tuple):
            return {"t": "tuple", "v": [self.encode(x) for x in v]}
        if isinstance(v, list):
            return {"t": "list", "v": [self.encode(x) for x in v]}
        if isinstance(v, dict):
            return {"t": "dict", "v": [[self.encode(k), self.encode(x)] for k, x in v.items()]}
        if isinstance(v, np.dtype):
            return {"t": "dtype", "v": str(v)}
        if isinstance(v, type) and issubclass(v, np.generic):
            return {"t": "nptype", "v": np.dtype(v).name}
        if isinstance(v, slice):
            return {"t": "slice", "v": [self.encode(v.start), self.encode(v.stop), self.encode(v.step)]}
        if isinstance(v, RemoteObject):  # the judge's handle on an object of the learner process
            return {"t": "object", "i": v._handle}
        if os.environ.get(LEARNER_ENV) == "1" and _is_learner_object(v):
            return {"t": "object", "i": _keep_object(v), "type": type(v).__qualname__}
        if os.environ.get(LEARNER_ENV) != "1" and isinstance(v, _CALLABLE_TYPES):
            return {"t": "callback", "i": _register_callback(v)}
        raise TransportError(f"a {type(v).__module__}.{type(v).__qualname__} cannot be passed between the "
                             f"grader and the learner's process (device arrays, NumPy arrays and scalars, numbers, "
                             f"strings, and tuples, lists and dicts of them can)")


class Decoder:
    def __init__(self, buffers: list[bytes], arrays: list[Any], tensors: list[Any] | None = None) -> None:
        self.buffers, self.arrays = buffers, arrays
        self.tensors: list[Any] = list(tensors or [])

    def build_tensors(self, nodes: Any) -> None:
        """Tensors for the encoded `nodes` (numbered after those already known), their grads and tapes linked:
        each grad_fn a Context of the same course Function (``minitorch.*``), with its inputs, saved tensors and
        attributes."""
        from minitorch.autograd.function import Context, mark_host_value
        from minitorch.tensor import Tensor

        if not isinstance(nodes, list) or not all(isinstance(n, dict) for n in nodes):
            raise LearnerProcessError("a tensor table that is not a list of nodes")
        first = len(self.tensors)
        for node in nodes:
            device = node.get("device")
            if not isinstance(device, str):
                raise LearnerProcessError("a tensor without its device")
            t = Tensor(self.decode(node.get("data")), device)
            t._requires_grad = bool(node.get("rg"))
            self.tensors.append(t)
        for i, node in enumerate(nodes):
            t = self.tensors[first + i]
            t.grad = self._tensor_ref(node.get("grad"))
            if isinstance(node.get("hv"), str):
                mark_host_value(t, float.fromhex(node["hv"]))
            fn = node.get("fn")
            if fn is None:
                continue
            if not isinstance(fn, dict):
                raise LearnerProcessError("a grad_fn that is not one")
            inputs = tuple(self._tensor_ref(x) for x in fn.get("inputs") or [])
            ctx = Context(_function_class(fn.get("cls")), inputs, tuple(bool(n) for n in fn.get("needs") or []))
            ctx._saved = tuple(self._tensor_ref(x) for x in fn.get("saved") or [])
            for name, value in fn.get("attrs") or []:
                if not isinstance(name, str) or name in ("function", "inputs", "needs_input_grad", "_saved"):
                    raise LearnerProcessError(f"a context attribute {name!r}")
                setattr(ctx, name, self.decode(value))
            t.grad_fn = ctx

    def _tensor_ref(self, i: Any) -> Any:
        if i is None:
            return None
        if not (isinstance(i, int) and 0 <= i < len(self.tensors)):
            raise LearnerProcessError(f"a reference to tensor {i!r} of {len(self.tensors)}")
        return self.tensors[i]

    def _buf(self, i: Any) -> bytes:
        if not (isinstance(i, int) and 0 <= i < len(self.buffers)):
            raise LearnerProcessError(f"a reference to buffer {i!r} of {len(self.buffers)}")
        return self.buffers[i]

    def decode(self, v: Any) -> Any:
        if v is None or isinstance(v, (bool, str)):
            return v
        if not isinstance(v, dict) or not isinstance(v.get("t"), str):
            raise LearnerProcessError(f"an encoded value that is not one: {str(v)[:80]}")
        t = v["t"]
        if t == "int":
            return int(v["v"])
        if t == "float":
            return float.fromhex(v["v"])
        if t == "npscalar":
            dt = _dtype(v["dtype"])
            return np.frombuffer(self._buf(v["b"]), dtype=dt, count=1)[0]
        if t == "host":
            dt, shape = _dtype(v["dtype"]), _shape(v["shape"])
            return np.frombuffer(self._buf(v["b"]), dtype=dt).reshape(shape).copy()
        if t == "tensor":
            found = self._tensor_ref(v.get("i"))
            if found is None:
                raise LearnerProcessError("a tensor reference without its number")
            return found
        if t == "dev":
            i = v.get("i")
            if not (isinstance(i, int) and 0 <= i < len(self.arrays)):
                raise LearnerProcessError(f"a reference to array {i!r} of {len(self.arrays)}")
            return self.arrays[i]
        if t == "view":
            i = v.get("i")
            if not (isinstance(i, int) and 0 <= i < len(self.arrays)):
                raise LearnerProcessError(f"a reference to array {i!r} of {len(self.arrays)}")
            base, dt, shape = self.arrays[i], _dtype(v["dtype"]), _shape(v["shape"])
            if base.nbytes != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
                raise LearnerProcessError("a view of another size than its array")
            return base.reshape(-1).view(dt).reshape(shape)
        if t in ("tuple", "list"):
            items = [self.decode(x) for x in v["v"]]
            return tuple(items) if t == "tuple" else items
        if t == "dict":
            return {self.decode(k): self.decode(x) for k, x in v["v"]}
        if t == "dtype":
            return _dtype(v["v"])
        if t == "nptype":
            return _dtype(v["v"]).type
        if t == "slice":
            return slice(*(self.decode(x) for x in v["v"]))
        if t == "object":
            i = v.get("i")
            if not isinstance(i, int):
                raise LearnerProcessError(f"an object reference {i!r}")
            if os.environ.get(LEARNER_ENV) == "1":
                if i not in _objects:
                    raise LearnerProcessError(f"no object {i} in the learner's process")
                return _objects[i]
            return RemoteObject(i, str(v.get("type", "object")))
        if t == "callback" and os.environ.get(LEARNER_ENV) == "1":
            i = v.get("i")
            if not isinstance(i, int):
                raise LearnerProcessError(f"a callback reference {i!r}")
            return _callback_stub(i)
        raise LearnerProcessError(f"a value of unknown kind {t!r}")


_CONTEXT_OWN = ("function", "inputs", "needs_input_grad", "_saved")


def _context_attrs(ctx: Any) -> dict[str, Any]:
    """What a Function kept on its Context besides its inputs and saved tensors (``ctx.scale``, ``ctx.shape``)."""
    return {k: v for k, v in vars(ctx).items() if k not in _CONTEXT_OWN}


def _tensors_in(value: Any) -> list[Any]:
    from minitorch.tensor import Tensor

    if type(value) is Tensor:
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for x in value for t in _tensors_in(x)]
    return []


def _function_class(name: Any) -> type:
    """A course autograd Function by its ``module:qualname``; nothing else is looked up (nor imported)."""
    import importlib

    from minitorch.autograd.function import Function

    module, _, qualname = str(name).partition(":")
    if not (module == "minitorch" or module.startswith("minitorch.")) or not qualname:
        raise LearnerProcessError(f"a grad_fn of {name!r}, which is no course Function")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    if not (isinstance(obj, type) and issubclass(obj, Function)):
        raise LearnerProcessError(f"a grad_fn of {name!r}, which is no course Function")
    return obj


# Copies of the judge's arrays (the emulator's transport) start as many bytes past a multiple of COPY_ALIGN as the
# judge's arrays do: the emulator's allocations start 16-byte aligned (a float4's alignment), a view need not
COPY_ALIGN = 16


def _copy_of_judge_array(dt: np.dtype, shape: tuple, contents: bytes | None, align: Any) -> Any:
    """Learner process: a device array of `shape` and `dt` holding `contents` (zeros when None) that starts `align`
    bytes past a multiple of COPY_ALIGN, as the judge's array does."""
    from minitorch import backend

    if not isinstance(align, int) or isinstance(align, bool) or not 0 < align < COPY_ALIGN:
        return (backend.zeros(shape, dt) if contents is None else
                backend.asarray(np.frombuffer(contents, dtype=dt).reshape(shape)))
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    # raw starts aligned; the copy, `align` bytes in, ends where raw does (what lies past an array's end, where a
    # kernel's overrun is caught, is the same as for any other array)
    raw = backend.zeros((nbytes + align,), np.uint8)
    a = raw[align:].view(dt).reshape(shape)
    if contents is not None:
        a.set(np.frombuffer(contents, dtype=dt).reshape(shape))
    return a


def _address(a: Any) -> int:
    data = getattr(a, "data", None)
    ptr = getattr(data, "ptr", None)
    return int(ptr if ptr is not None else a.ptr)


# ---------------------------------------------------------------- CUDA IPC: the judge's device arrays on a GPU
#
# On a GPU the learner process maps the judge's memory instead of receiving copies: a slot names the allocation
# holding an array by its CUDA IPC handle, with the array's offset in it (CuPy's memory pool hands out pieces of
# larger cudaMalloc allocations, and a handle always names a whole allocation: cudaIpcOpenMemHandle maps its
# start). The learner process opens each handle once per request and closes them all before it replies (the
# judge may free or reuse the memory once it has the reply), so outside a request it can reach none of the
# judge's memory. The judge synchronises its device before sending a request, the learner process before it
# replies: each side sees the other's writes.

_libcuda: Any = None
_timing_handles: dict[int, bytes] | None = None  # judge: the IPC handles of a time_replayed's allocations
_mapped: dict[str, int] = {}  # learner process: IPC handle (hex) -> the address of its mapping
_views: dict[tuple, Any] = {}  # learner process: (handle, offset, dtype, shape, strides) -> its array, while mapped
_prepared: dict[str, list] = {}  # learner process: a timing's calls, ready to run again on its mapped arrays
_prepared_graphs: dict[str, Any] = {}  # learner process: those calls captured into one graph, when they can be


def _driver() -> Any:
    global _libcuda
    if _libcuda is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuMemGetAddressRange_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.c_uint64]
        lib.cuMemGetAddressRange_v2.restype = ctypes.c_int
        _libcuda = lib
    return _libcuda


def _allocation_range(ptr: int) -> tuple[int, int] | None:
    """(start, size) of the device allocation (or IPC mapping) holding the address `ptr`; None if none does."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    rc = _driver().cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
    return None if rc != 0 else (int(base.value), int(size.value))


def cuda_ipc_handle(ptr: int, known: dict[int, bytes] | None = None) -> tuple[int, bytes]:
    """(base, handle): the start of the device allocation holding the address `ptr`, and its CUDA IPC handle (taken
    from `known`, by allocation start, when there: one handle, and so one mapping, per allocation a request)."""
    import cupy

    found = _allocation_range(ptr)
    if found is None:
        raise TransportError(f"the device address {ptr:#x} is in no allocation of the grader's")
    start = found[0]
    handle = None if known is None else known.get(start)
    if handle is None:
        try:
            handle = bytes(cupy.cuda.runtime.ipcGetMemHandle(start))
        except cupy.cuda.runtime.CUDARuntimeError as err:
            raise TransportError(f"the device allocation at {start:#x} has no CUDA IPC handle ({err})") from None
        if known is not None:
            known[start] = handle
    return start, handle


def _staged_copy(a: Any) -> Any:
    """A copy of the device array `a` in memory of CuPy's default pool (cudaMalloc: shareable by IPC handle)."""
    import cupy

    memory = cupy.cuda.Memory(max(1, int(a.nbytes)))  # cudaMalloc itself: whatever allocator the process has set
    copy = cupy.ndarray(a.shape, a.dtype, cupy.cuda.MemoryPointer(memory, 0))
    cupy.copyto(copy, a)
    return copy


# The sets of a timing (time_replayed) live in the learner process's own memory. On an H100 (2026-11-27,
# benchmarks/results/isolated_sum_timing-*.json, isolated_sum_layout-*.json) Phase 4's sum of 256 MiB took 128 us a
# set in a second process reading the judge's arena of 86 sets (one cudaMalloc of 23,085,493,248 bytes) through its
# CUDA IPC mapping, cupy.sum 122 us, where both took 90-93 us on that arena in the judge's own process, and in the
# second process on the same arena rounded up to a whole number of 2 MiB, on one IPC-mapped allocation of 256 MiB +
# 512 B, and on an arena of its own (while the judge had it mapped and wrote it too); sets 4 KiB, 64 KiB or 2 MiB
# apart were as slow as 512 B apart whenever the arena's size was not a multiple of 2 MiB: what was slow is an
# importing process reading a large imported allocation of such a size. So the judge asks the learner process for the
# sets' memory, maps it by IPC handle itself, writes each round's inputs through that mapping (untimed), and copies
# out the sets it checks; the learner's timed kernels read and write their own process's memory, as the calls the
# performance bars were calibrated on did; and every arena is a whole number of 2 MiB (_arena_nbytes), whichever
# process imports it. The grader's timing of that sum went from 139.9 us (sets in the judge's memory) to 99.2 us.
TIMING_MEMORY_ENV = "GRADER_TIMING_MEMORY"  # "judge": the sets in the judge's memory, mapped by the learner (before)
_arena: Any = None  # learner process: the current timing's sets (cudaMalloc), mapped by the judge
_arena_range: tuple[int, int] | None = None  # judge: (address, size) of its mapping of the learner process's arena


def _offset_in_learner_arena(a: Any) -> int | None:
    """Where the judge's device array `a` lies in the learner process's timing arena, None if it does not."""
    if _arena_range is None:
        return None
    start, size = _arena_range
    address = _address(a)
    span = sum((n - 1) * st for n, st in zip(a.shape, a.strides, strict=True)) + a.itemsize if a.size else 0
    return address - start if start <= address and address + span <= start + size else None


def _allocate_arena(nbytes: int) -> str | None:
    """Learner process: frees the previous timing's arena, allocates one of `nbytes` bytes (cudaMalloc itself, whatever
    allocator the learner's code set) and returns its IPC handle (hex); nbytes 0: only frees."""
    global _arena
    import cupy

    _prepared_graphs.clear()  # (first: a graph launches kernels on the arena)
    _views.clear()
    _prepared.clear()
    if _arena is not None:
        cupy.cuda.Device().synchronize()
        _arena = None
    if nbytes <= 0:
        return None
    _arena = cupy.cuda.Memory(nbytes)
    return bytes(cupy.cuda.runtime.ipcGetMemHandle(int(_arena.ptr))).hex()


def _own_array(slot: dict) -> Any:
    """Learner process: its view of a piece of its timing arena (``Encoder._ipc_slot``, ``"own"``: its offset)."""
    import cupy

    offset, strides = slot.get("own"), slot.get("strides")
    dt, shape = _dtype(slot["dtype"]), _shape(slot["shape"])
    if not (isinstance(offset, int) and offset >= 0 and isinstance(strides, list) and len(strides) == len(shape)
            and all(isinstance(s, int) and s >= 0 for s in strides)):
        raise LearnerProcessError(f"an arena slot that is not one: {str(slot)[:120]}")
    key = ("own", offset, dt.str, shape, tuple(strides))
    view = _views.get(key)
    if view is not None:
        return view
    span = sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + dt.itemsize if all(shape) else 0
    if _arena is None or offset + span > int(_arena.size):
        raise LearnerProcessError("an array of a timing's sets outside the arena this process allocated for them")
    view = _views[key] = cupy.ndarray(shape, dt, cupy.cuda.MemoryPointer(_arena, offset), tuple(strides))
    return view


class _LearnerArena:
    """Judge: the learner process's memory for a timing's sets, mapped here by its IPC handle."""

    def __init__(self, nbytes: int) -> None:
        import cupy

        global _arena_range
        self.nbytes, self.address = int(nbytes), None
        handle = _call({"op": "arena", "nbytes": self.nbytes}, (), {}, "the memory of a timing's sets")
        if not (isinstance(handle, str) and len(handle) == 128):
            raise LearnerProcessError("the learner's process answered the allocation of a timing's sets with no handle")
        try:
            address = int(cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(handle)))
        except (ValueError, cupy.cuda.runtime.CUDARuntimeError) as err:
            raise LearnerProcessError(f"the learner's process sent a handle for a timing's sets that does not open "
                                      f"({err})") from None
        self.address = address
        found = _allocation_range(address)
        if found is None or found[0] != address or found[1] < self.nbytes:
            self.close()
            raise LearnerProcessError(f"the learner's process sent a handle for a timing's sets of {self.nbytes} bytes "
                                      f"that maps {found and found[1]} bytes")
        self.memory = cupy.cuda.UnownedMemory(address, self.nbytes, self, cupy.cuda.Device().id)
        _arena_range = (address, self.nbytes)

    def close(self) -> None:
        """Unmap it here, and have the learner process free it."""
        global _arena_range
        import cupy

        _arena_range = None
        if self.address is not None:
            cupy.cuda.Device().synchronize()
            with contextlib.suppress(cupy.cuda.runtime.CUDARuntimeError):
                cupy.cuda.runtime.ipcCloseMemHandle(self.address)
            self.address = None
        if _process.alive():
            with contextlib.suppress(LearnerProcessError):
                _call({"op": "arena", "nbytes": 0}, (), {}, "the memory of a timing's sets (freed)")


def _timing_memory() -> str:
    """Where a timing's sets live on a GPU: "learner" (the default), or "judge" (TIMING_MEMORY_ENV: how the two were
    compared, benchmarks/isolated_sum_timing.py)."""
    return "judge" if os.environ.get(TIMING_MEMORY_ENV) == "judge" else "learner"


def _mapped_array(slot: dict) -> Any:
    """The learner process's view of a judge's array named by IPC handle and offset (``Encoder._ipc_slot``)."""
    import cupy

    handle, offset, strides = slot.get("ipc"), slot.get("off"), slot.get("strides")
    if not (isinstance(handle, str) and len(handle) == 128 and isinstance(offset, int) and offset >= 0):
        raise LearnerProcessError(f"an IPC slot that is not one: {str(slot)[:120]}")
    dt, shape = _dtype(slot["dtype"]), _shape(slot["shape"])
    if not (isinstance(strides, list) and len(strides) == len(shape) and all(isinstance(s, int) and s >= 0
                                                                               for s in strides)):
        raise LearnerProcessError(f"strides that are not a list of sizes: {strides!r}")
    key = (handle, offset, dt.str, shape, tuple(strides))
    view = _views.get(key)
    if view is not None:  # made by an earlier request that kept its mappings (a timing's sets, mapped beforehand)
        return view
    base = _mapped.get(handle)
    if base is None:
        base = _mapped[handle] = int(cupy.cuda.runtime.ipcOpenMemHandle(bytes.fromhex(handle)))
    span = sum((n - 1) * s for n, s in zip(shape, strides, strict=True)) + dt.itemsize if all(shape) else 0
    memory = cupy.cuda.UnownedMemory(base + offset, span, _mapped, cupy.cuda.Device().id)
    view = _views[key] = cupy.ndarray(shape, dt, cupy.cuda.MemoryPointer(memory, 0), tuple(strides))
    return view


def _unmap_all() -> None:
    """Close every IPC mapping (after the learner's work on them is done)."""
    _prepared_graphs.clear()  # (first: a graph launches kernels on the mapped memory)
    _views.clear()
    _prepared.clear()
    if not _mapped:
        return
    import cupy

    try:
        cupy.cuda.Device().synchronize()
    except Exception:  # noqa: BLE001 - a faulted context: the mappings go with the process
        pass
    for address in list(_mapped.values()):
        try:
            cupy.cuda.runtime.ipcCloseMemHandle(address)
        except Exception:  # noqa: BLE001
            pass
    _mapped.clear()


_keep_mapped = False  # judge: inside mappings_kept(), every request leaves its mappings open


@contextlib.contextmanager
def mappings_kept() -> Any:
    """On a GPU, every request made inside the block leaves its IPC mappings open in the learner process, and the
    judge's arrays keep one handle each: an array mapped by one request is at the same address in the next. What
    needs it is a replay of launch records (``checks.assert_computed_on_device``): a launcher may put a device
    address into data (rung 6's tensor maps hold the addresses of A and B, written by one launch and read by the
    next), and a mapping closed and opened again lands anywhere. On exit the mappings are closed (one request that
    runs nothing). Elsewhere (the emulator, no isolation) it does nothing."""
    global _timing_handles, _keep_mapped
    from minitorch import kernels

    if _keep_mapped or not (kernels.learner_code_elsewhere() and _judge_uses_ipc()):
        yield
        return
    saved = _timing_handles
    _timing_handles = {} if saved is None else saved
    _keep_mapped = True
    try:
        yield
    finally:
        _keep_mapped = False
        _timing_handles = saved
        if _process.alive():  # (a learner process that died took its mappings with it)
            with contextlib.suppress(LearnerProcessError):
                _replay([], [], what="arrays unmapped", dry=True)


def _synchronize_device() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def _judge_uses_ipc() -> bool:
    from minitorch import backend

    return backend.get_device() == "cuda"


# ---------------------------------------------------------------- exceptions


def _course_exceptions() -> dict[str, type[BaseException]]:
    """The course's own exception types a learner process may raise, by name."""
    from grader import checks
    from minitorch import backend, kernels

    # (the grader's own: a helper of the graded tests run in the learner's process fails with them)
    found: dict[str, type[BaseException]] = {
        c.__name__: c for c in (kernels.KernelNotWrittenError, kernels.KernelStubError, kernels.KernelCompileError,
                                kernels.KernelLaunchError, backend.DeviceError, checks.GradeError,
                                checks.WrongValuesError)}
    try:
        from minitorch.emu import errors
    except ImportError:
        return found
    for name in dir(errors):
        obj = getattr(errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception) and obj.__module__ == errors.__name__:
            found[name] = obj
    return found


_NOT_PASSED_ON = {"SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseExceptionGroup", "ExceptionGroup"}
_FAULT_ATTRS = ("kernel", "block", "thread", "argument", "argument_name", "offset", "nbytes", "file", "line", "kind",
                "findings")


def _jsonable(v: Any) -> bool:
    try:
        json.dumps(v)
    except (TypeError, ValueError):
        return False
    return True


def encode_exception(exc: BaseException) -> list[dict]:
    chain, seen = [], set()
    while exc is not None and id(exc) not in seen and len(chain) < 8:
        seen.add(id(exc))
        args = list(exc.args) if all(isinstance(a, (str, int, float)) or a is None for a in exc.args) else [str(exc)]
        attrs = {k: getattr(exc, k) for k in _FAULT_ATTRS if hasattr(exc, k) and _jsonable(getattr(exc, k))}
        chain.append({"type": type(exc).__name__, "module": type(exc).__module__, "args": args,
                      "text": str(exc), "attrs": attrs, "cause": exc.__cause__ is not None})
        exc = exc.__cause__ if exc.__cause__ is not None else (
            None if exc.__suppress_context__ else exc.__context__)
    return chain


def _make_exception(entry: dict, course: dict[str, type[BaseException]]) -> BaseException:
    name, text = str(entry.get("type")), str(entry.get("text", ""))
    args = entry.get("args") if isinstance(entry.get("args"), list) else [text]
    cls = course.get(name)
    if cls is None and entry.get("module") == "builtins" and name not in _NOT_PASSED_ON:
        candidate = getattr(__import__("builtins"), name, None)
        if isinstance(candidate, type) and issubclass(candidate, Exception):
            cls = candidate
    if cls is None:  # a type of the learner's (or pytest's Skipped, or SystemExit): a plain error naming it
        return RuntimeError(f"{name}: {text}" if text else name)
    try:
        exc = cls(*args)
    except Exception:  # noqa: BLE001 - a constructor with other arguments: the message is what matters
        exc = cls.__new__(cls)
        exc.args = tuple(args)
    for k, v in (entry.get("attrs") or {}).items():
        if k in _FAULT_ATTRS:
            with_tuples = tuple(v) if k in ("block", "thread") and isinstance(v, list) else v
            try:
                setattr(exc, k, with_tuples)
            except (AttributeError, TypeError):
                pass
    return exc


def decode_exception(chain: Any) -> BaseException:
    if not isinstance(chain, list) or not chain or not all(isinstance(e, dict) for e in chain):
        return LearnerProcessError("the learner's process reported an error it did not describe")
    course = _course_exceptions()
    made = [_make_exception(e, course) for e in chain]
    for outer, inner, entry in zip(made, made[1:], chain, strict=False):
        if entry.get("cause"):
            outer.__cause__ = inner
        else:
            outer.__context__ = inner
    return made[0]


# ---------------------------------------------------------------- the judge's side


def _emu_settings() -> dict:
    from minitorch import backend

    if backend.get_device() != "emu":
        return {}
    from minitorch.emu import config

    name, seed = config.schedule()
    return {"check": bool(config.check_enabled()), "schedule": [name, int(seed)], "timeout": config.timeout_s()}


def _capturing() -> bool:
    from minitorch import backend

    return bool(backend.get_backend().capturing)


class LearnerProcess:
    """The judge's handle on the learner process: one request at a time, started on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen | None = None
        self._to: int | None = None
        self._from: int | None = None
        self._lock = threading.Lock()
        self.starts = 0
        self.last_seconds = 0.0
        self._busy: int | None = None  # the thread whose request is in flight
        self._busy_with = ""

    def _start(self) -> None:
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        env = {k: v for k, v in os.environ.items() if not k.startswith("GRADER_RESULTS")}
        env[LEARNER_ENV] = "1"
        env.pop(ISOLATE_ENV, None)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self._proc = subprocess.Popen(
            [sys.executable, "-P", "-s", "-c", "import sys; from grader.learner_process import serve; "
             "serve(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))", str(to_r), str(from_w), str(os.getpid())],
            pass_fds=(to_r, from_w), env=env, stdin=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self._to, self._from = to_w, from_r
        self.starts += 1

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        for fd in (self._to, self._from):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._to = self._from = None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    @contextlib.contextmanager
    def paused(self) -> Any:
        """The learner process stopped (SIGSTOP) for the duration: none of its threads runs meanwhile."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            yield
            return
        os.kill(proc.pid, signal.SIGSTOP)
        _wait_until_stopped(proc.pid)
        try:
            yield
        finally:
            os.kill(proc.pid, signal.SIGCONT)

    def request(self, header: dict, encoder: Encoder) -> tuple[dict, list[bytes]]:
        if self._busy == threading.get_ident():  # a callback of the judge calling the learner's code again
            raise LearnerProcessError(f"{header.get('what', '?')} was called from a callback of the grader while the "
                                      f"learner's process was running {self._busy_with}: one call at a time")
        with self._lock:
            self._busy, self._busy_with = threading.get_ident(), header.get("what", "?")
            try:
                return self._request(header, encoder)
            finally:
                self._busy = None

    def _request(self, header: dict, encoder: Encoder) -> tuple[dict, list[bytes]]:
        if self._proc is None or self._proc.poll() is not None:
            self.stop()
            self._start()
        assert self._to is not None and self._from is not None
        request = frame({**header, "slots": encoder.slots}, encoder.buffers)  # (made before the clock starts)
        try:
            start = time.perf_counter()
            _write_all(self._to, request)
            failed: BaseException | None = None
            while True:
                reply, buffers = recv_frame(self._from)
                if "callback" not in reply:
                    break
                answer, answer_buffers, error = _answer_callback(reply, buffers)
                failed = failed or error
                send_frame(self._to, answer, answer_buffers)
            self.last_seconds = time.perf_counter() - start  # the judge's clock around the whole request
        except (EOFError, OSError, ValueError, LearnerProcessError, struct.error) as err:
            proc = self._proc
            self.stop()
            code = proc.wait() if proc is not None else None
            died = (f"killed by {signal.Signals(-code).name}" if code is not None and code < 0
                    else f"exit status {code}")
            raise LearnerProcessError(
                f"the learner's process died ({died}) while running {header.get('what', '?')}"
                + ("" if isinstance(err, EOFError) else f": {err}")) from None
        if failed is not None:  # a callback of the judge's raised: that error stands, whatever the learner's code
            raise failed        # did with it
        return reply, buffers


_process = LearnerProcess()


# ---------------------------------------------------------------- callbacks and remote objects
#
# A function of the judge passed to the learner's code (a recording raw_malloc handed to the learner's
# CachingPool) travels as a callback: the learner process gets a stand-in which, when called during a request,
# sends the call back to the judge and waits for its answer. An object of the learner's code returned to the judge
# (the CachingPool itself) stays in the learner process: the judge gets a RemoteObject whose methods are called
# there. Neither side ever holds the other's object.

_CALLABLE_TYPES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.BuiltinMethodType)
_callbacks: dict[int, Any] = {}       # judge: callback number -> the function
_callback_of: dict[int, int] = {}     # judge: id(function) -> its number
_objects: dict[int, Any] = {}         # learner process: object number -> the object
_object_of: dict[int, int] = {}


def _register_callback(fn: Any) -> int:
    number = _callback_of.get(id(fn))
    if number is None or _callbacks.get(number) is not fn:
        number = _callback_of[id(fn)] = len(_callbacks)
        _callbacks[number] = fn  # kept: the learner's code may call it in a later request
    return number


def _answer_callback(header: dict, buffers: list[bytes]) -> tuple[dict, list[bytes], BaseException | None]:
    """Run a callback the learner's code called: (the answer to send, its buffers, the error it raised)."""
    fn = _callbacks.get(header.get("callback"))  # type: ignore[arg-type]
    encoder, error = Encoder(), None
    try:
        if fn is None:
            raise LearnerProcessError(f"a call of callback {header.get('callback')!r}, which the judge never sent")
        decoder = Decoder(buffers, [])
        args, kwargs = decoder.decode(header.get("args")), decoder.decode(header.get("kwargs"))
        answer: dict[str, Any] = {"result": encoder.encode(fn(*(args or ()), **(kwargs or {})))}
    except Exception as exc:  # noqa: BLE001 - the learner's code sees it; the judge raises it after the request
        error = exc
        answer = {"error": encode_exception(exc)}
    return answer, encoder.buffers, error


class RemoteObject:
    """An object of the learner's code, living in the learner process: ``obj.method(...)`` is called there."""

    def __init__(self, handle: int, type_name: str) -> None:
        self._handle, self._type_name = handle, type_name

    def __repr__(self) -> str:
        return f"<{self._type_name} in the learner's process>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        handle, what = self._handle, f"{self._type_name}.{name}"

        def method(*args: Any, **kwargs: Any) -> Any:
            return _call({"op": "method", "object": handle, "name": name}, args, kwargs, what)

        method.__name__ = name
        return method


def _is_learner_object(v: Any) -> bool:
    """An instance of a class of the learner's modules (``minitorch.workspace.*``)."""
    return type(v).__module__.startswith("minitorch.workspace.") and not isinstance(v, type)


def _keep_object(v: Any) -> int:
    number = _object_of.get(id(v))
    if number is None or _objects.get(number) is not v:
        number = _object_of[id(v)] = len(_objects)
        _objects[number] = v
    return number


_channel: tuple[int, int] | None = None  # learner process: (request fd, reply fd)


def _callback_stub(number: int) -> Any:
    def callback(*args: Any, **kwargs: Any) -> Any:
        if _channel is None:
            raise LearnerProcessError("a callback of the judge called outside a request")
        encoder = Encoder()
        send_frame(_channel[1], {"callback": number, "args": encoder.encode(tuple(args)),
                                 "kwargs": encoder.encode(dict(kwargs))}, encoder.buffers)
        answer, buffers = recv_frame(_channel[0])
        if "error" in answer:
            raise decode_exception(answer["error"])
        return Decoder(buffers, []).decode(answer.get("result"))

    callback.__name__ = f"judge_callback_{number}"
    return callback


def learner_process() -> LearnerProcess:
    return _process


_call_log: list | None = None  # judge: while time_replayed watches, the learner's calls made (target, args, kwargs)


def _call(header: dict, args: tuple, kwargs: dict, what: str) -> Any:
    """Send one call (a launcher, or a kernel launch) and apply its reply in the judge."""
    from minitorch import backend

    if _call_log is not None and header.get("op") in ("call", "launch"):
        _call_log.append((dict(header), args, kwargs))
    capture = _capturing()
    ipc = _judge_uses_ipc()
    encoder = Encoder(with_contents=not capture, ipc=ipc)  # nothing is read from the device during a capture
    payload = {"args": encoder.encode(tuple(args)), "kwargs": encoder.encode(dict(kwargs))}
    header = {**header, **payload, "nodes": encoder.nodes, "what": what, "capture": capture, "emu": _emu_settings()}
    if _keep_mapped:
        header["keep_mapped"] = True
    if ipc and not capture:  # the judge's writes to the arrays done before the learner's kernels read them
        _synchronize_device()
    reply, buffers = _process.request(header, encoder)
    if encoder.staged and not capture:  # what the call wrote into the copies, into the judge's arrays
        import cupy

        for judge_array, sent in encoder.staged:
            cupy.copyto(judge_array, sent)
    if reply.get("warnings"):
        _rewarn(reply["warnings"])
    # Arrays the call changed are written back; arrays new to the judge (a returned array, a launcher's scratch
    # buffer seen in a launch record) are made from their bytes.
    judge_arrays = list(encoder.arrays)
    slots = reply.get("slots")
    if not isinstance(slots, list):
        raise LearnerProcessError("a reply without its array table")
    for i, slot in enumerate(slots):
        if not isinstance(slot, dict):
            raise LearnerProcessError("an array table entry that is not one")
        b = slot.get("b")
        if i < len(judge_arrays):
            if b is None or capture:
                continue
            a = judge_arrays[i]
            host = np.frombuffer(_checked_buffer(buffers, b), dtype=a.dtype)
            if host.size != a.size:
                raise LearnerProcessError(f"array {i} came back with {host.size} elements, not {a.size}")
            a.set(host.reshape(a.shape))
        else:
            dt, shape = _dtype(slot.get("dtype")), _shape(slot.get("shape"))
            if b is None or capture:
                judge_arrays.append(backend.empty(shape, dt))
            else:
                judge_arrays.append(backend.asarray(np.frombuffer(_checked_buffer(buffers, b), dtype=dt).reshape(shape)))
    decoder = Decoder(buffers, judge_arrays, encoder.tensors)
    if not capture:
        # Tensors: the call's own keep their identity (their grad and requires_grad, set by the learner's code, come
        # back); tensors it made (a result, a gradient) are made here from their nodes.
        nodes = reply.get("nodes") or []
        if not isinstance(nodes, list):
            raise LearnerProcessError("a tensor table that is not a list")
        known = len(encoder.tensors)
        decoder.build_tensors(nodes[known:])
        _update_tensors(encoder.tensors, nodes[:known], decoder, buffers)
        _note_launches(reply, decoder)
    if "error" in reply:
        if ipc:
            from grader.pytest_plugin import POISONED_CONTEXT

            if POISONED_CONTEXT.search(json.dumps(reply["error"])):  # the learner process's CUDA context is dead
                _process.stop()  # (not the judge's): the next call starts a fresh learner process
        raise decode_exception(reply["error"])
    return decoder.decode(reply.get("result"))


def _update_tensors(tensors: list[Any], updates: list[Any], decoder: Decoder, buffers: list[bytes]) -> None:
    """The judge's tensors as the call left them: ``.grad``, ``requires_grad``, and host (cpu) data changed in place
    (device data came back with the arrays)."""
    for t, update in zip(tensors, updates, strict=False):
        if not isinstance(update, dict):
            raise LearnerProcessError("a tensor update that is not one")
        t.grad = decoder._tensor_ref(update.get("grad"))
        t._requires_grad = bool(update.get("rg"))
        if update.get("data") is not None and isinstance(t._data, np.ndarray):
            host = np.frombuffer(_checked_buffer(buffers, update["data"]), dtype=t._data.dtype)
            if host.size != t._data.size:
                raise LearnerProcessError(f"a tensor of {t._data.size} elements came back with {host.size}")
            np.copyto(t._data, host.reshape(t._data.shape))


def _checked_buffer(buffers: list[bytes], b: Any) -> bytes:
    if not (isinstance(b, int) and 0 <= b < len(buffers)):
        raise LearnerProcessError(f"a reference to buffer {b!r} of {len(buffers)}")
    return buffers[b]


def _rewarn(items: Any) -> None:
    from minitorch.emu import errors

    known = {c.__name__: c for c in (UserWarning, RuntimeWarning, errors.EmuWarning, errors.ArgumentWarning,
                                     errors.RaceWarning)}
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            warnings.warn(str(item.get("message", "")), known.get(str(item.get("category")), UserWarning), stacklevel=3)


def _note_launches(reply: dict, decoder: Decoder) -> None:
    """The learner process's launch counts and records of this call, added to the judge's."""
    from minitorch import kernels

    counts: dict[tuple[str, str], int] = {}
    for entry in reply.get("counts") or []:
        if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[2], int):
            counts[(str(entry[0]), str(entry[1]))] = entry[2]
    launches = []
    for rec in reply.get("launches") or []:
        try:
            kernel = ProxyKernel(str(rec["file"]), str(rec["function"]), None, tuple(rec.get("options") or ()),
                                 tuple(str(n) for n in rec.get("names") or ()))
            launches.append(kernels.Launch(kernel, tuple(int(g) for g in rec["grid"]), tuple(int(b) for b in rec["block"]),
                                           tuple(decoder.decode(rec["args"])), int(rec.get("shared_mem", 0))))
        except (KeyError, TypeError, ValueError) as err:
            raise LearnerProcessError(f"a launch record that is not one ({err})") from None
    kernels.note_launches(counts, launches)


class ProxyKernel:
    """A learner's kernel, launched in the learner process: called like ``kernels.Kernel``."""

    def __init__(self, filename: str, function: str, params: list[str] | None,
                 options: tuple = (), name_expressions: tuple = ()) -> None:
        self.filename, self.function, self.params = filename, function, params
        self.options, self.name_expressions = tuple(options), tuple(name_expressions)

    def __repr__(self) -> str:
        return f"<Kernel {self.function} from {self.filename} (in the learner's process)>"

    def __call__(self, grid: Any, block: Any, args: Any, shared_mem: int = 0, **kwargs: Any) -> None:
        from minitorch.kernels import _as_dims

        _call({"op": "launch", "file": self.filename, "function": self.function, "options": list(self.options),
               "names": list(self.name_expressions), "grid": list(_as_dims(grid)), "block": list(_as_dims(block)),
               "shared_mem": int(shared_mem)}, tuple(args), kwargs, f"kernel `{self.function}` from {self.filename}")


def load_kernel(filename: str, function: str, options: Any = (), name_expressions: Any = None) -> ProxyKernel:
    """The judge's ``kernels.load_kernel``: compiled (and its errors raised) in the learner process."""
    params = _call({"op": "load_kernel", "file": filename, "function": function, "options": list(options),
                    "names": list(name_expressions or ())}, (), {}, f"load_kernel({filename!r}, {function!r})")
    return ProxyKernel(filename, function, params, tuple(options), tuple(name_expressions or ()))


class ProxyModule(types.ModuleType):
    """A learner's Python module, imported in the learner process: its functions are called there and its
    plain values (numbers, strings, tuples of them) copied here."""

    def __init__(self, filename: str, names: dict[str, Any]) -> None:
        super().__init__(f"minitorch.workspace.{Path(filename).stem}")
        self.__file__ = filename
        for name, value in names.items():
            setattr(self, name, value)


def _function(filename: str, name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return _call({"op": "call", "file": filename, "name": name}, args, kwargs, f"{filename[:-3]}.{name}")

    call.__name__ = call.__qualname__ = name
    call._learner_target = {"op": "call", "file": filename, "name": name}  # type: ignore[attr-defined]
    return call


def timed_calls(fn: Any, calls: list[tuple[tuple, dict]]) -> tuple[float, list[Any]]:
    """Each call ``fn(*args, **kwargs)`` of `calls`, one after the other, timed by this process's clock: (seconds of
    them all, their results). `fn` a learner's function loaded by ``kernels.load_module``: while the learner's code
    runs in its own process, the calls go there in one request, and the clock runs from before the request leaves
    to after its reply (with every output) is back, so nothing the learner process does is left out of it and
    nothing it says about time is read. The caller makes fresh inputs for each call and checks each call's outputs:
    a launcher that keeps its first result and hands it back later fails the check of every later call."""
    from minitorch import backend, kernels

    target = getattr(fn, "_learner_target", None)
    if target is None or not kernels.learner_code_elsewhere():
        backend.synchronize()
        start = time.perf_counter()
        results = [fn(*args, **kwargs) for args, kwargs in calls]
        backend.synchronize()
        return time.perf_counter() - start, results
    results = _call({"op": "repeat", "target": target}, ([[tuple(a), dict(k)] for a, k in calls],), {},
                    f"{target['file'][:-3]}.{target['name']} x {len(calls)} (timed)")
    if not isinstance(results, list) or len(results) != len(calls):
        raise LearnerProcessError(f"{len(calls)} timed calls answered with {type(results).__name__}")
    return _process.last_seconds, results


# ---------------------------------------------------------------- performance timings of the learner's code

REPLAY_ROUNDS = 3  # timed requests; the median is the figure
REPLAY_SECONDS = 0.25  # about the longest a timed request should take (the sets are fewer for slow calls)
last_timing: dict[str, Any] = {}  # the latest time_replayed's sets, and the seconds of each of its requests


def time_replayed(fn: Any, *, what: str, reps: int = 200) -> float | None:
    """Seconds one ``fn()`` takes on the device, by the judge's clock, while the learner's code runs in its own
    process; None when `fn` calls none of the learner's code (the caller times `fn` itself: a framework copy).
    UntimeableCallError when `fn` hands the learner's code a Tensor, which no fresh set can stand in for: every figure of
    the learner's code is timed over fresh sets, so a check must pass arrays.

    `fn` (a performance check's ``lambda: gm.gemm(a, b, out)``) is called once, untimed: it compiles what it
    needs, and the judge notes the learner's calls it makes (launchers and kernels, with their arguments). Then
    those calls are replayed on `reps` fresh sets of arrays (as many as fit in memory and about REPLAY_SECONDS),
    all in one request, once untimed and then REPLAY_ROUNDS times timed, the judge writing new contents into the
    sets before each round; the judge's clock runs from before a timed request leaves to after its reply is back
    (the learner process synchronises before replying), and the fastest round, divided by `reps`, is the figure.
    On a GPU the learner process keeps the calls it decoded in the untimed round, and a timed request only says to
    run them again (their arrays are the mapped sets, whose contents the judge rewrote):

    - the clock is the judge's (``time.perf_counter`` here, never read in the learner process): a learner that
      patches its timer, CuPy's events or the grader's timing helpers in its own process changes nothing here,
      and every bit of work it does during the request (Python, copies, sleeps) is counted;
    - CUDA events could not do better: events of the judge's stream do not order the learner process's launches
      (another CUDA context), and an interprocess event (``ipcGetEventHandle``) must be made with timing
      disabled, so the only event timings across the two processes would be the learner's own, which it could
      forge. The host clock costs the request's round trip (well under a millisecond), shared by `reps` calls;
    - each set is fresh, in every round: the arrays the calls only read are the warm-up's made new for the set and
      the round (_fresh_contents: 32- and 64-bit floats scaled, 16-bit floats rotated, others copied), those they
      write start as the warm-up left them. A launcher that keeps a first result, or skips work it saw before,
      leaves results that belong to other inputs;
    - on a GPU the sets are pieces of one allocation of the learner process's own, a whole number of 2 MiB
      (_LearnerArena: asked for by the judge, which maps it by its IPC handle and writes every round's contents
      through that mapping; the learner's kernels streaming through the judge's arena, imported, ran at 0.7x their
      speed: TIMING_MEMORY_ENV says where that was measured and why), first touched in the untimed round; after the untimed round the learner process
      captures the calls into one graph (_capture_steps), which each timed round replays: the figure is the
      device's work, as the reference's (checks.time_cuda hides the host's overhead), not the Python of the
      learner's launchers between kernels; the judge writes each round's contents while the learner process is
      stopped (SIGSTOP), so no thread of it can start on them before the judge's clock does, and copies out the
      sets it will check, the process stopped again, right after the last timed round (the memory is the learner
      process's: its code could rewrite a timed set's outputs in any later call). What this leaves open: work the
      learner's code left running on the GPU itself (a kernel spinning on the sets, launched before the stop)
      could start on a round's inputs during the judge's write;
    - after the timing, some sets (the first, the last and two the judge draws at random) are made again and
      their calls made untimed, one plain request each (as the value checks make them): every array must come
      out as in the timed request (close, for kernels with atomics), or the check fails naming the call
      (``GradeError``). What this cannot catch is a launcher wrong in the same way timed and untimed (a result
      kept for every call of one size, say): that is the value checks' to find, at their sizes.
    """

    from minitorch import backend
    from minitorch.tensor import Tensor

    global _call_log
    _call_log = []
    try:
        fn()
    finally:
        log, _call_log = _call_log, None
    if not log:
        return None
    found: dict[int, Any] = {}
    unsupported = []

    def collect(v: Any) -> None:
        if isinstance(v, Tensor):
            unsupported.append(v)
        elif backend.is_device_array(v):
            found.setdefault(id(v), v)
        elif isinstance(v, (tuple, list)):
            for x in v:
                collect(x)
        elif isinstance(v, dict):
            for x in v.values():
                collect(x)

    for _, args, kwargs in log:
        collect(args)
        collect(kwargs)
    if not found and not unsupported:
        return None
    if unsupported:  # a Tensor (its tape) cannot be copied into a fresh set: no figure rather than a forgeable one
        raise UntimeableCallError(
            f"{what}: the performance check hands the learner's code {len(unsupported)} Tensor(s); the grader times "
            "the learner's calls only over fresh sets of device arrays (a launcher could keep a result for inputs "
            "it has seen), so a check must pass arrays (Tensor.data), not Tensors")
    global _timing_handles
    _timing_handles = {}  # every array of the timing lives until it returns: their handles stay valid
    try:
        return _time_sets(log, found, what=what, reps=reps)
    finally:
        _timing_handles = None


def _time_sets(log: list, found: dict[int, Any], *, what: str, reps: int) -> float:
    """time_replayed's timing proper, once it has the learner's calls (`log`) and the arrays they take (`found`)."""
    from minitorch import backend

    backend.synchronize()
    warm = {k: _device_copy(a) for k, a in found.items()}
    # once more on the warm-up's arrays: which ones the calls write, and about how long a request of one set takes
    # (the second of two: the first may pay for imports in the learner process)
    once = _replay(log, [{}], what=f"{what} (replayed)")
    once = min(once, _replay(log, [{}], what=f"{what} (replayed)"))
    backend.synchronize()
    written = {k for k, a in found.items() if not np.array_equal(_host(a), _host(warm[k]), equal_nan=True)}
    nbytes = sum(int(a.nbytes) for a in found.values()) or 1
    # as many sets as fit (beside the warm-up's copy and a set made again) and take about REPLAY_SECONDS at most
    reps = max(2, min(reps, int(_replay_budget() // nbytes) - 3, int(REPLAY_SECONDS / max(once, 1e-6))))

    ipc = _judge_uses_ipc()
    arena = _LearnerArena(_arena_nbytes(found, reps)) if ipc and _timing_memory() == "learner" else None
    try:
        return _time_rounds(log, found, what=what, reps=reps, warm=warm, written=written, once=once, arena=arena)
    finally:
        if arena is not None:
            arena.close()
        warm.clear()
        _release_cached_memory()


def _time_rounds(log: list, found: dict[int, Any], *, what: str, reps: int, warm: dict[int, Any], written: set[int],
                 once: float, arena: _LearnerArena | None) -> float:
    """_time_sets's rounds over `reps` fresh sets (in `arena`, the learner process's memory mapped here, when given),
    then the check of some sets made again."""
    import random

    place = {key: k for k, key in enumerate(found)}

    def prestate(r: int, i: int, key: int) -> Any:
        """Set `i`'s array `key` before round `r`'s calls: the arrays the calls only read made new (_fresh_contents),
        those they write as the warm-up left them. Each array of a set is made new its own way: two arrays the
        warm-up left equal (a copy's input and output) are not equal in a set, or a copy that skipped its timed calls
        would leave the right output behind (the replays that find which arrays are written are the learner's too)."""
        a = warm[key]
        if key in written:
            return _device_copy(a)
        return _fresh_contents(a, (r * reps + i) * len(found) + place[key] + 1,
                               reps * (REPLAY_ROUNDS + 1) * len(found))

    def fill(r: int, sets: list[dict[int, Any]], indices: list[int]) -> None:
        for i, subst in zip(indices, sets, strict=True):
            for key in found:
                _copy_into(subst[key], prestate(r, i, key))

    ipc = _judge_uses_ipc()
    sets = _fresh_sets(found, reps, None if arena is None else arena.memory)
    # Round 0, untimed: the calls run once on each set, so that a timed round pays no first touch of fresh memory;
    # then each round's contents are new (the judge writes them), and timed. On a GPU the learner process keeps the
    # calls it decoded in the untimed round (their arrays are the sets, which the judge rewrites): a timed request
    # carries no arguments to decode, only the word to run them.
    fill(0, sets, list(range(reps)))
    warm_up = _replay(log, sets, what=f"{what} x {reps} (untimed)", keep_mapped=ipc, prepare=ipc)
    as_graph = ipc and isinstance(last_replay_answer, dict) and bool(last_replay_answer.get("graph"))
    seconds = []
    for r in range(1, REPLAY_ROUNDS + 1):
        # the learner process, which has the sets mapped, is stopped while the judge writes them: no thread of its own
        # starts on a round's inputs before the judge's clock does
        with _process.paused() if ipc else contextlib.nullcontext():
            fill(r, sets, list(range(reps)))
            _synchronize_any()
        seconds.append(_replay(log, sets, what=f"{what} x {reps} (timed)", keep_mapped=ipc, prepared=ipc))
    checked = sorted({0, reps - 1, *random.SystemRandom().sample(range(reps), min(2, reps))})
    timed = sets
    if arena is not None:
        # the sets are the learner process's memory, which its code can write whenever it runs (the set made again
        # included): what is checked is copied out now, the process stopped, right after the last timed round
        with _process.paused():
            timed = {i: {key: _device_copy(a) for key, a in sets[i].items()} for i in checked}  # type: ignore[assignment]
            _synchronize_any()
    if ipc:  # the mappings closed, untimed
        _replay(log, [], what=f"{what} (arrays unmapped)", dry=True)
    last_timing.clear()
    last_timing.update(reps=reps, once=once, warm_up=warm_up, rounds=seconds, nbytes=sum(int(a.nbytes) for a in
                       found.values()), graph=as_graph, memory="judge" if arena is None else "learner")
    for i in checked:
        again = {key: _device_empty_like(a) for key, a in found.items()}
        fill(REPLAY_ROUNDS, [again], [i])
        for target, args, kwargs in log:  # one plain call a request, as the value checks make them
            _call(dict(target), _swap(args, again), _swap(kwargs, again), f"{what} (set {i} again, untimed)")
        for n, key in enumerate(found):
            _require_same(timed[i][key], again[key], f"{what}: timed call {i} (of {reps}), array {n} of its arguments")
    sets.clear()  # (the arrays go before the pool lets go of their memory)
    del again, timed
    return min(seconds) / reps  # the fastest round: what slows a round (the machine's noise) never speeds one


PREPARED = "timing"  # the name of a timing's calls kept in the learner process


def _replay(log: list, sets: list[dict[int, Any]], *, what: str, dry: bool = False, keep_mapped: bool = False,
            prepare: bool = False, prepared: bool = False) -> float:
    """Run the logged calls once per set (each set: id of a logged array -> the array standing in for it; an empty
    set: the logged arrays themselves), in one request; returns the seconds the request took by the judge's clock.
    `prepare`: the learner process keeps the calls; `prepared`: it runs the calls it kept (nothing is sent)."""
    global last_replay_answer
    header: dict[str, Any] = {"op": "sequence", "dry": dry, "keep_mapped": keep_mapped}
    if prepared:
        last_replay_answer = _call({**header, "prepared": PREPARED}, ([],), {}, what)
        return _process.last_seconds
    if prepare:
        header["prepare"] = PREPARED
    steps = [[target, list(_swap(args, subst)), _swap(kwargs, subst)] for subst in sets for target, args, kwargs in log]
    last_replay_answer = _call(header, (steps,), {}, what)
    return _process.last_seconds


last_replay_answer: Any = None  # judge: what the latest _replay's request answered ({"graph": bool} when prepared)


def _swap(v: Any, subst: dict[int, Any]) -> Any:
    """`v` with each array whose id `subst` names replaced by its stand-in (through tuples, lists and dicts)."""
    if id(v) in subst:
        return subst[id(v)]
    if isinstance(v, tuple):
        return tuple(_swap(x, subst) for x in v)
    if isinstance(v, list):
        return [_swap(x, subst) for x in v]
    if isinstance(v, dict):
        return {k: _swap(x, subst) for k, x in v.items()}
    return v


def _synchronize_any() -> None:
    if _judge_uses_ipc():
        _synchronize_device()


def _replay_budget() -> float:
    """Bytes the timing's fresh sets of arrays may take: enough for the request's round trip to be a small part of
    the time of the calls it carries (at 256 MiB arrays, 60 or more calls)."""
    from minitorch import backend

    if backend.get_device() == "cuda":
        import cupy

        return min(0.4 * cupy.cuda.runtime.memGetInfo()[0], 24e9)
    return 64e6


def _release_cached_memory() -> None:
    """The timing's sets given back to the device (CuPy's pool would keep them from the checks after it)."""
    if _judge_uses_ipc():
        import cupy

        cupy.get_default_memory_pool().free_all_blocks()


def _host(a: Any) -> np.ndarray:
    from minitorch import backend

    return np.asarray(backend.asnumpy(a))


def _device_copy(a: Any) -> Any:
    from minitorch import backend

    if backend.get_device() == "cuda":
        return a.copy()
    return backend.asarray(np.ascontiguousarray(_host(a)))


def _set_steps(found: dict[int, Any]) -> dict[int, int]:
    return {key: -(-int(a.nbytes) // 512) * 512 for key, a in found.items()}


ARENA_GRANULE = 2 << 20  # a timing's arena is a whole number of 2 MiB (see TIMING_MEMORY_ENV)


def _sets_nbytes(found: dict[int, Any], reps: int) -> int:
    """The bytes of `reps` sets of arrays like `found`'s laid out as _fresh_sets lays them."""
    return max(1, reps * sum(_set_steps(found).values()))


def _arena_nbytes(found: dict[int, Any], reps: int) -> int:
    """The bytes of the allocation holding them: rounded up to a whole number of 2 MiB. A process that imports an
    allocation of some 22 GB by CUDA IPC handle read it at 0.7x speed on an H100 when its size was not a multiple of
    2 MiB, at full speed when it was (benchmarks/results/isolated_sum_layout-*.json)."""
    return -(-_sets_nbytes(found, reps) // ARENA_GRANULE) * ARENA_GRANULE


def _fresh_sets(found: dict[int, Any], reps: int, memory: Any = None) -> list[dict[int, Any]]:
    """`reps` sets of arrays like `found`'s. On a GPU all of them are pieces of one allocation (one IPC handle, one
    mapping, whatever the number of sets), each array 512-byte aligned: `memory` (the learner process's, mapped here:
    _LearnerArena) when given, else a new allocation of the judge's."""
    from minitorch import backend

    if backend.get_device() != "cuda":
        return [{key: _device_empty_like(a) for key, a in found.items()} for _ in range(reps)]
    import cupy

    step = _set_steps(found)
    if memory is None:  # cudaMalloc itself (not a piece of a pool's chunk): the allocation the learner maps is this
        memory = cupy.cuda.Memory(_arena_nbytes(found, reps))
        arena = cupy.ndarray((_sets_nbytes(found, reps),), np.uint8, cupy.cuda.MemoryPointer(memory, 0))
    else:
        arena = cupy.ndarray((_sets_nbytes(found, reps),), np.uint8, cupy.cuda.MemoryPointer(memory, 0))
    sets, offset = [], 0
    for _ in range(reps):
        views = {}
        for key, a in found.items():
            views[key] = arena[offset:offset + int(a.nbytes)].view(a.dtype).reshape(a.shape)
            offset += step[key]
        sets.append(views)
    return sets


def _device_empty_like(a: Any) -> Any:
    from minitorch import backend

    return backend.empty(tuple(a.shape), a.dtype)


def _copy_into(dst: Any, src: Any) -> None:
    from minitorch import backend

    if backend.get_device() == "cuda":
        import cupy

        cupy.copyto(dst, src)
    else:
        dst.set(np.ascontiguousarray(_host(src)))


def _is_16bit_float(dtype: Any) -> bool:
    """float16, or uint16: the bits of bfloat16 (minitorch.dtypes: no course array holds uint16 for anything else)."""
    dt = np.dtype(dtype)
    return dt == np.float16 or dt == np.uint16


def _fresh_contents(a: Any, n: int, count: int) -> Any:
    """New contents for an array the timed calls only read, the `n`-th of `count` (n >= 1 numbers the set and the
    round): 32- and 64-bit floats scaled by 1 + n / (2 count), 16-bit floats (float16, bfloat16's bits) rotated by
    n places (a factor that close to 1 rounds back to the same value in 8 or 11 bits of mantissa: sets would repeat,
    and a result kept from one would pass for the next), anything else (integers: indices, sizes) copied."""
    from minitorch import backend

    kind = np.dtype(a.dtype).kind
    if _is_16bit_float(a.dtype):
        if a.size < 2:
            return _device_copy(a)
        if backend.get_device() == "cuda":
            import cupy

            return cupy.roll(a.reshape(-1), n % a.size).reshape(a.shape)
        return backend.asarray(np.roll(np.ascontiguousarray(_host(a)).reshape(-1), n % a.size).reshape(a.shape))
    if kind == "f":
        return _scaled(a, 1.0 + n / (2.0 * count))
    return _device_copy(a)


def _scaled(a: Any, factor: float) -> Any:
    from minitorch import backend

    if backend.get_device() == "cuda":
        return (a * factor).astype(a.dtype)
    return backend.asarray((_host(a) * factor).astype(a.dtype))


def _as_values(x: Any, xp: Any) -> Any:
    """float64 values of a flat array: bfloat16's bits (uint16) read as the numbers they encode."""
    if np.dtype(x.dtype) == np.uint16:
        x = (x.astype(xp.uint32) << 16).view(xp.float32)
    return x.astype(xp.float64)


def _same_rtol(dtype: Any) -> float:
    """How far two runs of one call may differ (kernels with atomics add in any order, then round): 1e-3, or two
    units in the last place of a 16-bit result (bfloat16's 8 significant bits, float16's 11)."""
    dt = np.dtype(dtype)
    if dt == np.uint16:  # bfloat16's bits
        return 2.0 ** -6
    if dt == np.float16:
        return 2.0 ** -9
    return 1e-3


def _require_same(timed: Any, again: Any, what: str) -> None:
    """The device arrays `timed` and `again` hold the same values (close: kernels with atomics add in any order)."""
    from grader.checks import GradeError

    rtol = _same_rtol(timed.dtype)
    if _judge_uses_ipc() and np.dtype(timed.dtype).kind != "b":  # compared on the device: arrays of 256 MiB
        import cupy

        a, b = _as_values(timed.reshape(-1), cupy), _as_values(again.reshape(-1), cupy)
        finite = cupy.isfinite(b)
        scale = float(cupy.abs(cupy.where(finite, b, 0)).max()) if b.size else 0.0
        if bool(cupy.isclose(a, b, rtol=rtol, atol=1e-4 * scale, equal_nan=True).all()):
            return
    got = _as_values(np.ascontiguousarray(_host(timed)).reshape(-1), np)
    want = _as_values(np.ascontiguousarray(_host(again)).reshape(-1), np)
    with np.errstate(invalid="ignore"):
        scale = float(np.nanmax(np.abs(want[np.isfinite(want)]))) if np.isfinite(want).any() else 0.0
        same = np.isclose(got, want, rtol=rtol, atol=1e-4 * scale, equal_nan=True)
    if not same.all():
        j = int(np.flatnonzero(~same)[0])
        raise GradeError(f"{what} holds {got[j]!r} at index {j} where the same call on the same inputs, run again "
                         f"untimed, gives {want[j]!r}: a timed call must compute its own result (a result kept from "
                         f"an earlier call, or work skipped because the arguments looked alike, is not)")


_modules: dict[str, tuple[Any, ProxyModule]] = {}


def load_module(filename: str) -> ProxyModule:
    """The judge's ``kernels.load_module``: imported (and its errors raised) in the learner process, again
    whenever the file changes."""
    from minitorch import kernels

    if not filename.endswith(".py"):
        raise ValueError(f"expected a Python file name such as 'memory.py', got {filename!r}")
    _, stamp = kernels._stamp(filename)
    cached = _modules.get(filename)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    listing = _call({"op": "load_module", "file": filename}, (), {}, f"import of {filename}")
    if not isinstance(listing, dict):
        raise LearnerProcessError(f"the import of {filename} answered {type(listing).__name__}")
    names = {str(k): (_function(filename, str(k)) if v == ("function",) else v[1])
             for k, v in listing.items() if isinstance(v, tuple) and v}
    module = ProxyModule(filename, names)
    _modules[filename] = (stamp, module)
    return module


def install() -> None:
    """Route this (the judge's) process's loads of learner code to the learner process."""
    from grader import sandbox
    from minitorch import kernels

    sandbox.protect_this_process()
    if _judge_uses_ipc():  # a GPU: the learner's kernels are device code in another process; no emulator here
        kernels.set_learner_loaders(load_module, load_kernel)
        return
    # The emulator's runtime, mapped here from a sealed copy: the learner's process (same user) could rewrite
    # the cached library in place while the judge has it mapped, and so run its code in the judge.
    from minitorch.emu import rt

    pinned = os.environ.get(RUNTIME_SHA256_ENV, "")
    digest, _, path = pinned.partition(":")
    if not rt.load_sealed(digest or None, path or None):
        raise RuntimeError("grader: the emulator's runtime was loaded from its cache before the learner's process "
                           "was isolated")
    kernels.set_learner_loaders(load_module, load_kernel)


def uninstall() -> None:
    from minitorch import kernels

    kernels.set_learner_loaders(None, None)
    _process.stop()
    _modules.clear()


def runtime_pin() -> dict[str, str]:
    """``{RUNTIME_SHA256_ENV: "<sha256>:<path>"}`` of the emulator's runtime library, built now if need be: taken
    by ``grader check`` before the lab notebook (the learner's code) runs, so that the judge loads only that
    library, whatever the notebook wrote into the cache since."""
    import hashlib

    from minitorch.emu import compiler

    path = compiler.build_runtime()
    return {RUNTIME_SHA256_ENV: f"{hashlib.sha256(path.read_bytes()).hexdigest()}:{path}"}


def enabled() -> bool:
    """True in the graded tests of an isolated phase (``grader check`` sets ``GRADER_ISOLATE`` for the phases and
    devices ``tests_step.isolated`` names), on the emulator or a GPU."""
    if os.environ.get(ISOLATE_ENV) != "1" or os.environ.get(LEARNER_ENV) == "1":
        return False
    from minitorch import backend

    return backend.get_device() in ("emu", "cuda")


# ---------------------------------------------------------------- the learner process


def _die_with(judge: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != judge:
        os._exit(1)


def _listing(module: types.ModuleType) -> dict:
    """{name: ("function",) or ("value", v)}: the module's functions, and its plain values."""
    out: dict[str, tuple] = {}
    for name, value in vars(module).items():
        if name.startswith("__") or isinstance(value, types.ModuleType):
            continue
        if isinstance(value, type) and value.__module__ != module.__name__:
            continue  # a class it imported; its own classes are called like functions (their instances stay there)
        if callable(value):
            out[name] = ("function",)
        elif _plain(value):
            out[name] = ("value", value)
    return out


def _plain(v: Any) -> bool:
    if v is None or isinstance(v, (bool, int, float, str, np.generic)):
        return True
    return isinstance(v, tuple) and all(_plain(x) for x in v)


def _run(header: dict, args: tuple, kwargs: dict) -> Any:
    from minitorch import graph, kernels

    op = header.get("op")
    if op == "load_module":
        return _listing(kernels.load_module(str(header["file"])))
    if op == "arena":
        return _allocate_arena(int(header.get("nbytes") or 0))
    if op == "load_kernel":
        k = kernels.load_kernel(str(header["file"]), str(header["function"]), tuple(header.get("options") or ()),
                                tuple(header.get("names") or ()) or None)
        return k.params
    if op == "launch":
        kernel = kernels.load_kernel(str(header["file"]), str(header["function"]), tuple(header.get("options") or ()),
                                     tuple(header.get("names") or ()) or None)
        fn = lambda: kernel(tuple(header["grid"]), tuple(header["block"]), args,  # noqa: E731
                            shared_mem=int(header.get("shared_mem", 0)), **kwargs)
    elif op == "call":
        target = getattr(kernels.load_module(str(header["file"])), str(header["name"]))
        fn = lambda: target(*args, **kwargs)  # noqa: E731
    elif op == "method":
        obj = _objects.get(header.get("object"))  # type: ignore[arg-type]
        if obj is None:
            raise LearnerProcessError(f"no object {header.get('object')!r} in the learner's process")
        target = getattr(obj, str(header["name"]))
        fn = lambda: target(*args, **kwargs)  # noqa: E731
    elif op == "repeat":  # timed calls on fresh inputs: nothing else runs between them
        target_header = header.get("target") or {}
        if target_header.get("op") != "call":
            raise LearnerProcessError(f"timed calls of {target_header.get('op')!r}")
        target = getattr(kernels.load_module(str(target_header["file"])), str(target_header["name"]))
        sets = args[0] if args else []
        fn = lambda: [target(*a, **k) for a, k in sets]  # noqa: E731
    elif op == "sequence":  # replays of the learner's calls a timing made (time_replayed); nothing between them
        prepare, prepared, dry = header.get("prepare"), header.get("prepared"), bool(header.get("dry"))
        captured = None
        if prepared is not None:  # the calls of an earlier request, on the same mapped arrays
            steps = _prepared.get(str(prepared))
            if steps is None:
                raise LearnerProcessError(f"no prepared sequence {prepared!r} in the learner's process")
            captured = _prepared_graphs.get(str(prepared))
        else:
            resolved: dict[str, Any] = {}
            steps = [_step(step, resolved) for step in (args[0] if args else [])]
            if prepare is not None:
                _prepared[str(prepare)] = steps
        if dry:  # only the arrays mapped (or unmapped), nothing run
            steps, captured = [], None

        def fn() -> dict | None:
            from grader.checks import _async_launches

            with _async_launches():
                if captured is not None:
                    captured.replay()
                else:
                    for step in steps:
                        step()
                if prepare is not None and steps:  # after the untimed run: the timed rounds replay one graph
                    graph_of = _capture_steps(steps)
                    if graph_of is not None:
                        _prepared_graphs[str(prepare)] = graph_of
                    return {"graph": graph_of is not None}
            return None if prepared is None else {"graph": captured is not None}
    elif op == "helper":
        target = _grader_helper(header.get("module"), header.get("name"))
        fn = lambda: target(*args, **kwargs)  # noqa: E731
    else:
        raise LearnerProcessError(f"unknown request {op!r}")
    if header.get("capture"):
        with kernels.unrecorded():
            return graph.capture(fn) and None
    result = fn()
    _finish_device_work()
    return result


def _finish_device_work() -> None:
    """Wait for every kernel the call launched, on any stream: the reply (and with it the judge's clock around a
    timed request) must not come before work the learner's code left running on a stream of its own."""
    from minitorch import backend

    if backend.get_device() == "cuda":
        import cupy

        cupy.cuda.runtime.deviceSynchronize()
    else:
        backend.synchronize()


def _capture_steps(steps: list) -> Any:
    """The prepared calls of a timing captured into one graph (minitorch.graph: CUDA Graphs on a GPU), which the
    timed rounds replay: the judge's clock then counts their device work, not the Python of the learner's launchers
    call after call (tens of microseconds each, more than a kernel of a few megabytes takes; outside the learner's
    process the performance checks hide it too: checks.time_cuda(hide_host_overhead=True)). None when the calls
    cannot be captured (a launcher that reads a value back or synchronises): they are called one by one. What the
    graph computes is checked as any timed call's: some sets are made again untimed and compared."""
    from minitorch import graph, kernels

    def run() -> None:
        for step in steps:
            step()

    try:
        with kernels.unrecorded():
            return graph.capture(run)
    except Exception:  # noqa: BLE001 - not capturable: the calls are made one by one, as before
        return None


def _step(step: Any, resolved: dict[str, Any]) -> Any:
    """One call of a replayed sequence: ``[target, args, kwargs]``, the target a launcher or a kernel (looked up
    once a sequence: `resolved`)."""
    from minitorch import kernels

    if not (isinstance(step, list) and len(step) == 3 and isinstance(step[0], dict)):
        raise LearnerProcessError("a replayed call that is not [target, args, kwargs]")
    target, args, kwargs = step[0], tuple(step[1]), dict(step[2])
    key = json.dumps(target, sort_keys=True)
    if target.get("op") == "call":
        function = resolved.get(key)
        if function is None:
            function = resolved[key] = getattr(kernels.load_module(str(target["file"])), str(target["name"]))
        return lambda: function(*args, **kwargs)
    if target.get("op") == "launch":
        kernel = resolved.get(key)
        if kernel is None:
            kernel = resolved[key] = kernels.load_kernel(
                str(target["file"]), str(target["function"]), tuple(target.get("options") or ()),
                tuple(target.get("names") or ()) or None)
        grid, block, shared = tuple(target["grid"]), tuple(target["block"]), int(target.get("shared_mem", 0))
        return lambda: kernel(grid, block, args, shared_mem=shared, **kwargs)
    raise LearnerProcessError(f"a replayed call of {target.get('op')!r}")


HELPER_PACKAGE = "grader.tests."


def _grader_helper(module: Any, name: Any) -> Any:
    """A function of the graded tests' helper modules (``grader/tests/*_helpers.py``), by module and name."""
    import importlib

    module, name = str(module), str(name)
    if not (module.startswith(HELPER_PACKAGE) and module.endswith("_helpers")) or not name.isidentifier():
        raise LearnerProcessError(f"no grader helper {module}.{name} to run in the learner's process")
    return getattr(importlib.import_module(module), name)


def run_in_learner_process(helper: Any, *args: Any, **kwargs: Any) -> Any:
    """``helper(*args, **kwargs)``, run in the learner process when the learner's code is isolated (here
    otherwise): for a helper of the graded tests (a function of a ``grader/tests/*_helpers.py`` module) that
    runs much of the learner's code at once, a training loop replayed from a captured graph, say. What it
    returns (by value, as a launcher's result) is the learner process's word: the caller checks it in the judge
    (a trained model's weights re-evaluated by its own forward pass, say), never trusts a verdict computed
    there."""
    from minitorch import kernels

    if not kernels.learner_code_elsewhere():
        return helper(*args, **kwargs)
    module = helper.__module__ if helper.__module__.startswith(HELPER_PACKAGE) else HELPER_PACKAGE + helper.__module__
    return _call({"op": "helper", "module": module, "name": helper.__name__}, args, kwargs,
                 f"{helper.__name__} (in the learner's process)")


def _emu_context(settings: dict) -> Any:
    """The judge's emulator settings for the call; nothing to enter when they are this process's already (most
    calls: a context costs more than a pool's method)."""
    stack = contextlib.ExitStack()
    if settings:
        from minitorch import emu
        from minitorch.emu import config

        check = bool(settings.get("check"))
        name, seed = settings.get("schedule") or ("forward", 0)
        timeout = float(settings.get("timeout") or 0)
        if check != bool(config.check_enabled()):
            stack.enter_context(emu.check_mode(check))
        if (str(name), int(seed)) != tuple(config.schedule()):
            stack.enter_context(config.schedule_order(str(name), int(seed)))
        if timeout != config.timeout_s():
            stack.enter_context(config.time_limit(timeout))
    return stack


def _reply(header: dict, slots: list, buffers: list[bytes], arrays: list) -> tuple[dict, Encoder]:
    from minitorch import kernels
    from minitorch.emu.errors import BarrierWarning

    capture = bool(header.get("capture"))
    result_value, error = None, None
    launches: list = []
    counts_before = kernels.launch_counts()
    decoder = Decoder(buffers, arrays)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        warnings.filterwarnings("ignore", category=DeprecationWarning)
        warnings.filterwarnings("error", category=BarrierWarning)  # as grader/pytest-grader.cfg says
        try:
            decoder.build_tensors(header.get("nodes") or [])
            args, kwargs = decoder.decode(header.get("args")), decoder.decode(header.get("kwargs"))
            # A helper (a training loop) is not recorded: its records would keep every array it made alive; nor is a
            # timing's replay (records are no evidence there, and encoding them would be timed).
            recorder = (contextlib.nullcontext([]) if header.get("op") in ("helper", "sequence")
                        else kernels.recording(MAX_LAUNCH_RECORDS))
            with recorder as launches, _emu_context(header.get("emu") or {}):
                result_value = _run(header, tuple(args or ()), dict(kwargs or {}))
        except Exception as exc:  # noqa: BLE001 - every error goes back to the judge
            error = exc
        except BaseException as exc:  # SystemExit, a learner's KeyboardInterrupt: an error like any other
            error = exc
    counts_after = kernels.launch_counts()
    encoder = Encoder()
    for i, a in enumerate(arrays):  # the call's own arrays keep their slots; only those it changed go back
        changed = None
        if not capture and slots[i].get("ipc") is None and slots[i].get("own") is None:  # (written in place)
            now = np.ascontiguousarray(a.get()).tobytes()
            before = slots[i].get("b")
            if before is None or now != buffers[before]:
                changed = encoder.buffer(now)
        encoder.register(a, changed)
    request_tensors = decoder.tensors
    encoder.known_tensors(request_tensors)
    reply: dict[str, Any] = {}
    try:
        reply["result"] = encoder.encode(result_value)
    except TransportError as err:
        reply["result"] = None
        if error is None:
            error = TypeError(f"{header.get('what')} returned {err}")
    if not capture and len(request_tensors) == len(header.get("nodes") or []):  # (else the request was refused)
        updates = []
        for t, node in zip(request_tensors, header.get("nodes") or [], strict=True):
            update: dict[str, Any] = {"grad": None, "rg": bool(t._requires_grad), "data": None}
            try:
                update["grad"] = None if t.grad is None else encoder.tensor(t.grad)["i"]
            except (TransportError, AttributeError) as err:
                if error is None:
                    error = TypeError(f"{header.get('what')} left a .grad that {err}")
            sent = node.get("data") if isinstance(node, dict) else None
            if isinstance(t._data, np.ndarray) and isinstance(sent, dict) and sent.get("t") == "host":
                now = np.ascontiguousarray(t._data).tobytes()
                if now != buffers[sent["b"]]:
                    update["data"] = encoder.buffer(now)
            updates.append(update)
        reply["nodes"] = updates + encoder.nodes[len(updates):]
    if not capture:
        reply["counts"] = [[f, fn, n - counts_before.get((f, fn), 0)] for (f, fn), n in counts_after.items()
                           if n != counts_before.get((f, fn), 0)]
        records = []
        for launch in list(launches)[-MAX_LAUNCH_RECORDS:]:
            try:
                kernel = launch.kernel
                records.append({"file": kernel.filename, "function": kernel.function,
                                "options": list(getattr(kernel, "options", ())),
                                "names": list(getattr(kernel, "name_expressions", ())),
                                "grid": list(launch.grid), "block": list(launch.block),
                                "shared_mem": int(launch.shared_mem), "args": encoder.encode(tuple(launch.args))})
            except (TransportError, AttributeError, TypeError, ValueError):
                continue
        reply["launches"] = records
    if error is not None:
        reply["error"] = encode_exception(error)
    reply["warnings"] = [{"category": w.category.__name__, "message": str(w.message)} for w in caught]
    reply["slots"] = encoder.slots
    return reply, encoder


def serve(request_fd: int, reply_fd: int, judge: int) -> None:
    """The learner process: answer the judge's requests until it closes the pipe."""
    global _channel
    _die_with(judge)
    _channel = (request_fd, reply_fd)

    while True:
        try:
            header, buffers = recv_frame(request_fd)
        except EOFError:
            return
        slots = header.get("slots") or []
        arrays = []
        try:
            for slot in slots:
                if slot.get("ipc") is not None:
                    arrays.append(_mapped_array(slot))
                    continue
                if slot.get("own") is not None:
                    arrays.append(_own_array(slot))
                    continue
                dt, shape = _dtype(slot["dtype"]), _shape(slot["shape"])
                b = slot.get("b")
                arrays.append(_copy_of_judge_array(dt, shape, None if b is None else buffers[b], slot.get("align")))
        except Exception as exc:  # noqa: BLE001 - an array that cannot be made here (a mapping refused): the call fails
            _unmap_all()
            send_frame(reply_fd, {"error": encode_exception(exc), "slots": [], "warnings": []}, [])
            continue
        reply, encoder = _reply(header, slots, buffers, arrays)
        del arrays
        if not header.get("keep_mapped"):
            _unmap_all()
        send_frame(reply_fd, reply, encoder.buffers)
