"""The dtypes of minitorch tensors, and the host (NumPy) conversions between float32 and the 16-bit formats.

``float32`` (every device), ``float64`` (the cpu device: gradient checks), ``int32`` (ids), and from
Phase 8a the two 16-bit formats of tensor cores:

- ``float16`` (IEEE half: 1 sign, 5 exponent, 10 mantissa bits), stored as NumPy/CuPy ``float16``;
- ``bfloat16`` (1 sign, 8 exponent, 7 mantissa bits: float32's range, 3 significant digits). NumPy and
  CuPy have no bfloat16, so a bfloat16 tensor's array is ``uint16``: its bits. :data:`bfloat16` is a
  small descriptor (``name``, ``itemsize``, ``storage``) that compares equal to itself and to the string
  ``"bfloat16"`` and to no NumPy dtype, so ``t.dtype == minitorch.float32`` stays the test it was.

The conversions here are the cpu device's (and the independent host reference of the tests): float32 to
bfloat16 by integer arithmetic on the bits, rounded to nearest even; float32 to float16 by NumPy's
``astype`` (also nearest even, subnormals and overflow to ±inf included). Every NaN becomes a quiet NaN of
the same sign, as the learner's kernels must make it (Phase 8a's contract). Widening to float32 is exact.
On cuda and emu the same conversions run the learner's ``convert.py`` (:mod:`minitorch.ops.precision`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["HALF", "BFloat16", "bfloat16", "bfloat16_bits", "bits_to_float32", "float16", "float32",
           "float32_to_16bit", "float64", "int32", "resolve", "storage"]

float32 = np.dtype(np.float32)
float64 = np.dtype(np.float64)
float16 = np.dtype(np.float16)
int32 = np.dtype(np.int32)
UINT16 = np.dtype(np.uint16)


class BFloat16:
    """The bfloat16 dtype: arrays of it are ``uint16`` (the bits). A singleton: use :data:`bfloat16`."""

    name = "bfloat16"
    itemsize = 2
    kind = "f"
    storage = UINT16

    def __eq__(self, other: object) -> bool:
        return other is self or (isinstance(other, str) and other == "bfloat16")

    def __hash__(self) -> int:
        return hash("bfloat16")

    def __repr__(self) -> str:
        return "minitorch.bfloat16"

    def __str__(self) -> str:
        return "bfloat16"

    def __reduce__(self) -> str:
        return "bfloat16"  # pickles as the module's singleton


bfloat16 = BFloat16()
HALF = (float16, bfloat16)  # the 16-bit floating formats (tensor cores' operands)

DType = Any  # numpy.dtype or BFloat16


def resolve(dtype: Any) -> DType:
    """``bfloat16`` for the names of bfloat16 ("bfloat16", ``minitorch.bfloat16``), else ``numpy.dtype(dtype)``
    (raises TypeError for what is no dtype)."""
    if dtype is bfloat16 or (isinstance(dtype, str) and dtype in ("bfloat16", "bf16")):
        return bfloat16
    if isinstance(dtype, str) and dtype == "half":
        return float16
    return np.dtype(dtype)


def storage(dtype: DType) -> np.dtype:
    """The dtype of the device array that holds a tensor of ``dtype``."""
    return UINT16 if dtype is bfloat16 else dtype


def of_array(array_dtype: np.dtype) -> DType:
    """A tensor's dtype from its array's: uint16 arrays hold bfloat16 bits (no tensor holds uint16)."""
    return bfloat16 if array_dtype == UINT16 else array_dtype


# ---------------------------------------------------------------- host conversions (NumPy)

def bfloat16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values -> bfloat16 bits (uint16), rounded to nearest even, with integer arithmetic.

    Adding 0x7fff plus the lowest kept bit to the 32 bits then dropping the low 16 rounds to nearest,
    ties to even; a carry out of the mantissa moves the exponent up, and past the largest finite value
    lands on infinity's bits, which is what overflow must give. NaN is kept apart (the addition could
    carry a NaN into infinity) and made quiet.
    """
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounded = ((bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16))
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = (bits >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def float16_bits(x: np.ndarray) -> np.ndarray:
    """float32 values -> float16 bits, rounded to nearest even (NumPy's conversion), NaNs made quiet."""
    with np.errstate(over="ignore"):  # overflow to ±inf is the rounding asked for
        bits = np.ascontiguousarray(x, dtype=np.float32).astype(np.float16).view(np.uint16)
    nan = (bits & np.uint16(0x7FFF)) > np.uint16(0x7C00)
    return np.where(nan, bits | np.uint16(0x0200), bits).astype(np.uint16)


def bits_to_float32(bits: np.ndarray, dtype: DType) -> np.ndarray:
    """16-bit patterns of ``dtype`` -> their float32 values (exact: both formats widen without rounding)."""
    bits = np.ascontiguousarray(bits, dtype=np.uint16)
    if resolve(dtype) is bfloat16:
        return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return bits.view(np.float16).astype(np.float32)


def float32_to_16bit(x: np.ndarray, dtype: DType) -> np.ndarray:
    """float32 values -> the host array of a ``dtype`` tensor: float16 values, or bfloat16 bits (uint16)."""
    if resolve(dtype) is bfloat16:
        return bfloat16_bits(x)
    return float16_bits(x).view(np.float16)
