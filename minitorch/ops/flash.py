"""Attention by FlashAttention (Phase 8b's ``flash.py``): never the T x T scores in device memory.

- ``flash_attention(q, k, v, causal, dropout_p, seed, offset, offset_used) -> (o, lse)``: o = softmax(q kᵀ /
  √D, causal), with dropout inside the attention, times v; lse the logsumexp of each row (float32, natural
  log), all the backward needs besides the inputs and o;
- ``flash_attention_backward(q, k, v, o, lse, grad_o, ...) -> (dq, dk, dv)``: the probabilities recomputed
  from lse, dropout's mask regenerated from the same (seed, offset).

Tensors are (B, H, T, D) (or (B·H, T, D)), C-contiguous. On cuda and emu: float16 or bfloat16 (the tensor
cores' formats; a float32 tensor is refused, naming ``.to("bfloat16")``), D = 64 or 128, any T. On cpu: NumPy
in float64, in any float dtype (the reference path), with the same dropout mask.

Dropout's mask (the contract of ``flash.cu``): score (query i, key j) of slice h = b·H + head is kept iff
word j % 4 of the Philox-4x32-10 block for counter (j / 4, i, h, offset) under key (seed_lo, seed_hi) is
>= floor(p·2³²); kept probabilities are scaled by float32(1 / (1 - p)).

The offset is an int, or a *counter*: a one-element int64 array on the tensors' device (NumPy on cpu) whose
element is the offset (mod 2³²), read by the kernels from device memory, as Phase 7's dropout reads its step. A
model advances its counter on the device each training forward (``dropout.advance_``), so a training step
captured into a graph draws new masks on every replay; ``offset_used`` (a counter too) receives the offset the
forward used, which its backward is given as ``offset``: the backward regenerates the forward's mask even after
the counter has moved on.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minitorch import backend, dtypes, philox
from minitorch.dtypes import HALF
from minitorch.ops.dispatch import check_tensors, empty, launch
from minitorch.tensor import Tensor

FLASH_FILE = "flash.py"
HEAD_DIMS = (64, 128)


def _shape(op: str, q: Tensor, k: Tensor, v: Tensor) -> tuple[int, ...]:
    if q.ndim not in (3, 4):
        raise ValueError(f"{op}: q must be (B, H, T, D) or (B*H, T, D), got shape {q.shape}")
    for name, t in (("k", k), ("v", v)):
        if t.shape != q.shape:
            raise ValueError(f"{op}: {name} must have q's shape {q.shape} (self-attention, one head dim); "
                             f"got {t.shape}")
    return q.shape


def _check_dropout(op: str, dropout_p: float, seed: int) -> None:
    if not 0.0 <= float(dropout_p) < 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p}")
    if not 0 <= int(seed) < 2 ** 64:
        raise ValueError(f"{op}: seed must be in [0, 2^64), got {seed}")


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


def _counter(op: str, name: str, device: str, x: Any) -> Any:
    """``x`` as the kernels' counter: an int becomes a one-element int64 array on ``device`` (a copy from the
    host: not inside a graph capture; pass a counter there); a counter is checked and passed as it is."""
    if _is_int(x):
        if not 0 <= int(x) < 2 ** 32:
            raise ValueError(f"{op}: {name} must be in [0, 2^32), got {x}")
        host = np.array([int(x)], np.int64)
        if device == "cpu":
            return host
        if backend.get_backend(device).capturing:
            raise RuntimeError(f"{op}: dropout with an int {name} ({x}) while a graph is captured: the kernels read "
                               f"the offset from device memory, and copying it there cannot be captured; pass a "
                               f"counter made before the capture (ops.dropout.new_counter, advanced in the step by "
                               f"ops.dropout.advance_: new masks on every replay)")
        return backend.get_backend(device).asarray(host)
    want = np.ndarray if device == "cpu" else backend.get_backend(device).array_type
    if type(x) is not want or x.dtype != np.int64 or tuple(x.shape) != (1,):
        got = f"{type(x).__name__} {getattr(x, 'dtype', '')} {tuple(getattr(x, 'shape', ()))}"
        raise TypeError(f"{op}: {name} must be an int or a one-element int64 array on {device!r} (a counter, "
                        f"dropout.new_counter), got {got}")
    return x


def _host_offset(counter: np.ndarray) -> int:
    return int(counter[0]) % 2 ** 32


def _device_dtype(op: str, device: str, dtype: object, d: int) -> None:
    if device == "cpu":
        return
    if dtype not in HALF:
        raise TypeError(f"{op}: on {device!r} attention runs on the tensor cores in float16 or bfloat16, got "
                        f"{dtype}: convert q, k and v with .to('bfloat16') (or use Phase 7's "
                        f"functional.causal_self_attention in float32)")
    if d not in HEAD_DIMS:
        raise ValueError(f"{op}: the head dim D must be 64 or 128 on {device!r} (flash.cu's kernels), got {d}")


def _flat(t: Tensor) -> object:
    """The (B*H, T, D) view of a tensor's array (no copy)."""
    return t.data.reshape((-1,) + tuple(t.shape[-2:]))


def dropout_keep(slices: int, t: int, dropout_p: float, seed: int, offset: int = 0) -> np.ndarray:
    """(slices, T, T) float64: float32(1 / (1 - p)) where a score is kept, 0 where dropped (minitorch.philox)."""
    if dropout_p == 0:
        return np.ones((slices, t, t))
    h, i, j4 = np.meshgrid(np.arange(slices), np.arange(t), np.arange((t + 3) // 4), indexing="ij")
    counters = np.stack([j4.ravel(), i.ravel(), h.ravel(), np.full(h.size, offset)], axis=1).astype(np.uint32)
    words = philox.philox4x32(counters, (seed & 0xFFFFFFFF, seed >> 32)).reshape(slices, t, -1)[:, :, :t]
    threshold = min(math.floor(dropout_p * 2.0 ** 32), 2 ** 32 - 1)
    return np.where(words >= threshold, float(np.float32(1.0 / (1.0 - dropout_p))), 0.0)


def _host64(t: Tensor) -> np.ndarray:
    data = np.asarray(t.data)
    if t.dtype in HALF:
        return dtypes.bits_to_float32(data.view(np.uint16), t.dtype).astype(np.float64)
    return data.astype(np.float64)


def _cpu_tensor(x: np.ndarray, dtype: object, shape: tuple[int, ...]) -> Tensor:
    x = np.ascontiguousarray(x).reshape(shape)
    if dtype in HALF:
        return Tensor(dtypes.float32_to_16bit(x.astype(np.float32), dtype), "cpu")
    return Tensor(x.astype(dtype), "cpu")


def _cpu_probabilities(q: np.ndarray, k: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    t, d = q.shape[-2:]
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(d)
    if causal:
        s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    mx = s.max(-1, keepdims=True)
    e = np.exp(s - mx)
    total = e.sum(-1, keepdims=True)
    return e / total, (mx + np.log(total))[..., 0]


def flash_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, dropout_p: float = 0.0,
                    seed: int = 0, offset: Any = 0, offset_used: Any = None) -> tuple[Tensor, Tensor]:
    """(o, lse): attention of q, k, v ((B, H, T, D) or (B*H, T, D)) and the rows' logsumexp (float32). With
    dropout, ``offset`` is an int or a counter, and ``offset_used`` (a counter, optional) receives the offset
    the masks were drawn with (see the module's docstring)."""
    op = "flash_attention"
    device, dtype = check_tensors(op, half=True, q=q, k=k, v=v)
    shape = _shape(op, q, k, v)
    _check_dropout(op, dropout_p, seed)
    _device_dtype(op, device, dtype, shape[-1])
    step = used = None
    if dropout_p:
        step = _counter(op, "offset", device, offset)
        used = None if offset_used is None else _counter(op, "offset_used", device, offset_used)
    t = shape[-2]
    if device == "cpu":
        q64, k64, v64 = (_host64(x).reshape((-1, t, shape[-1])) for x in (q, k, v))
        p, lse = _cpu_probabilities(q64, k64, causal)
        if used is not None:
            used[0] = step[0]
        off = _host_offset(step) if step is not None else 0
        o = (p * dropout_keep(p.shape[0], t, dropout_p, seed, off)) @ v64
        return _cpu_tensor(o, dtype, shape), Tensor(lse.reshape(shape[:-1]).astype(np.float32), "cpu")
    o = empty(device, shape, dtypes.storage(dtype))
    lse = empty(device, shape[:-1], np.float32)
    if q.size:
        # every argument by position: the counters are arrays, which launch plans put in place only there
        launch(device, FLASH_FILE, "forward", _flat(q), _flat(k), _flat(v), o.reshape((-1, t, shape[-1])),
               lse.reshape((-1, t)), dtype.name, bool(causal), "best", float(dropout_p), int(seed), step, used,
               outputs=(3, 4) + ((11,) if used is not None else ()))
    return Tensor(o, device), Tensor(lse, device)


def flash_attention_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, lse: Tensor, grad_o: Tensor, *,
                             causal: bool = False, dropout_p: float = 0.0, seed: int = 0,
                             offset: Any = 0) -> tuple[Tensor, Tensor, Tensor]:
    """(dq, dk, dv) of the attention that flash_attention computed (o, lse its outputs; the same causal flag,
    dropout_p and seed, and its offset: an int, or the forward's ``offset_used``; the mask is regenerated, never
    stored)."""
    op = "flash_attention_backward"
    device, dtype = check_tensors(op, half=True, q=q, k=k, v=v, o=o, grad_o=grad_o)
    shape = _shape(op, q, k, v)
    for name, x in (("o", o), ("grad_o", grad_o)):
        if x.shape != shape:
            raise ValueError(f"{op}: {name} must have q's shape {shape}, got {x.shape}")
    if lse.shape != shape[:-1] or lse.dtype != np.float32:
        raise ValueError(f"{op}: lse must be float32 of shape {shape[:-1]}, got {lse.dtype} {lse.shape}")
    _check_dropout(op, dropout_p, seed)
    _device_dtype(op, device, dtype, shape[-1])
    step = _counter(op, "offset", device, offset) if dropout_p else None
    t, d = shape[-2:]
    if device == "cpu":
        q64, k64, v64, o64, do64 = (_host64(x).reshape((-1, t, d)) for x in (q, k, v, o, grad_o))
        p, _ = _cpu_probabilities(q64, k64, causal)
        keep = dropout_keep(p.shape[0], t, dropout_p, seed, _host_offset(step) if step is not None else 0)
        dp = (do64 @ np.swapaxes(v64, -1, -2)) * keep
        ds = p * (dp - (do64 * o64).sum(-1, keepdims=True))
        grads = (ds @ k64 / math.sqrt(d), np.swapaxes(ds, -1, -2) @ q64 / math.sqrt(d),
                 np.swapaxes(p * keep, -1, -2) @ do64)
        return tuple(_cpu_tensor(g, dtype, shape) for g in grads)  # type: ignore[return-value]
    dq, dk, dv = (empty(device, shape, dtypes.storage(dtype)) for _ in range(3))
    if q.size:
        flat = (-1, t, d)
        launch(device, FLASH_FILE, "backward", _flat(q), _flat(k), _flat(v), _flat(o), lse.data.reshape((-1, t)),
               _flat(grad_o), dq.reshape(flat), dk.reshape(flat), dv.reshape(flat), dtype.name, bool(causal),
               float(dropout_p), int(seed), step, outputs=(6, 7, 8))
    return Tensor(dq, device), Tensor(dk, device), Tensor(dv, device)
