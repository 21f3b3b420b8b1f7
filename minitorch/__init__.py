"""minitorch: a small PyTorch-like framework whose every kernel you write in CUDA C.

Phase 1 (GPU memory) provides devices, tensors and the mechanism that puts your code into the
package. In a notebook, ``%load_ext minitorch`` registers the ``%%kernel`` and ``%%module`` cell magics.
Phase 3 adds autograd (``minitorch.autograd``, ``minitorch.no_grad``), layers (``minitorch.nn``),
``minitorch.functional`` and optimizers (``minitorch.optim``), all running on the learner's kernels.
Phase 8a adds float16 and bfloat16 tensors (``minitorch.float16``, ``minitorch.bfloat16``) and mixed
precision (``minitorch.amp``: ``autocast``, ``GradScaler``) on the learner's tensor-core kernels.
"""

from __future__ import annotations

from typing import Any

from minitorch import amp, autograd, functional, gradcheck, nn, ops, optim, progress
from minitorch.autograd import Context, Function, enable_grad, is_grad_enabled, no_grad
from minitorch.backend import DeviceError, cuda_available, get_device, set_device
from minitorch.dtypes import bfloat16, float16, float32, float64, int32
from minitorch.kernels import (
    KernelCompileError,
    KernelLaunchError,
    KernelNotWrittenError,
    load_kernel,
    load_module,
    workspace_dir,
)
from minitorch.tensor import Tensor, empty, from_bits, from_numpy, full, ones, randn, tensor, zeros

__version__ = "0.1.0"

__all__ = [
    "Context", "DeviceError", "Function", "KernelCompileError", "KernelLaunchError", "KernelNotWrittenError",
    "Tensor", "autograd", "cuda_available", "empty", "enable_grad", "from_numpy", "full", "functional", "gradcheck",
    "get_device", "is_grad_enabled", "load_kernel", "load_module", "nn", "no_grad", "ones", "ops", "optim",
    "progress", "randn", "set_device", "tensor", "workspace_dir", "zeros",
    # Phase 8a
    "amp", "bfloat16", "float16", "float32", "float64", "from_bits", "int32",
]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext minitorch``: registers ``%%kernel`` and ``%%module``."""
    from minitorch.kernels import register_magics

    register_magics(ipython)
