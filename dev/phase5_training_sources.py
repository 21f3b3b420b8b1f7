"""Reference solutions of Phase 5's training files (adam.cu, adam.py), as the notebook cells hold them.

``dev/phase5_training_cells.py`` appends them to solutions/phase5_fast.ipynb; tests write them into a
workspace directly until that notebook carries them.
"""

ADAM_CU = r'''%%kernel adam.cu
// Phase 5: one fused Adam / AdamW step, in place, over a flat float32 parameter.

extern "C" __global__ void adam_update(float* __restrict__ param, const float* __restrict__ grad,
                                       float* __restrict__ m, float* __restrict__ v,
                                       float lr, float beta1, float beta2, float eps,
                                       float weight_decay, float bias1, float bias2,
                                       int decoupled, long long n) {
    // ### BEGIN SOLUTION
    // HINT: decoupled (AdamW): p -= lr * wd * p; otherwise (Adam) g += wd * p.
    // HINT: m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
    // HINT: p -= lr * (m / bias1) / (sqrt(v / bias2) + eps), bias_k = 1 - beta_k^t.
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float p = param[i];
        float g = grad[i];
        if (decoupled) {
            p -= lr * weight_decay * p;
        } else {
            g += weight_decay * p;
        }
        float mi = beta1 * m[i] + (1.0f - beta1) * g;
        float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
        m[i] = mi;
        v[i] = vi;
        param[i] = p - lr * (mi / bias1) / (sqrtf(vi / bias2) + eps);
    }
    // ### END SOLUTION
}
'''

ADAM_PY = r'''%%module adam.py
"""Launcher for the fused Adam kernel in adam.cu."""
import numpy as np

from minitorch.kernels import load_kernel

THREADS = 256
MAX_BLOCKS = 16384


def adam_update(param, grad, m, v, lr: float, beta1: float, beta2: float, eps: float,
                weight_decay: float, step: int, decoupled: bool, blocks: int = 0) -> None:
    """One Adam step in place (AdamW when ``decoupled``); ``step`` counts from 1.

    ``blocks`` > 0 forces the grid size (the kernel is grid-stride, so any grid is correct).
    """
    for name, a in (("param", param), ("grad", grad), ("m", m), ("v", v)):
        if a.dtype != np.float32:
            raise TypeError(f"adam_update: {name} must be a float32 array, got {a.dtype}")
        if a.shape != param.shape:
            raise ValueError(f"adam_update: {name} must have the shape of param, "
                             f"{param.shape}; got {a.shape}")
    if step < 1:
        raise ValueError(f"adam_update: step counts from 1, got {step}")
    n = param.size
    ### BEGIN SOLUTION
    # HINT: compute the bias corrections 1 - beta**step on the host, in double precision.
    kernel = load_kernel("adam.cu", "adam_update")
    if blocks <= 0:
        blocks = max(1, min((n + THREADS - 1) // THREADS, MAX_BLOCKS))
    bias1, bias2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
    f32 = np.float32
    kernel((blocks,), (THREADS,), (param, grad, m, v, f32(lr), f32(beta1), f32(beta2), f32(eps),
                                   f32(weight_decay), f32(bias1), f32(bias2),
                                   np.int32(bool(decoupled)), np.int64(n)))
    ### END SOLUTION
'''

SOURCES = {"adam.cu": ADAM_CU, "adam.py": ADAM_PY}


def file_text(cell: str) -> str:
    """The text a %%kernel/%%module cell writes: the cell without its magic line."""
    return cell.split("\n", 1)[1]

POOL_PY = r'''%%module pool.py
"""A caching allocator: freed blocks are kept per size class and handed out again."""
from collections import defaultdict

MIN_BLOCK = 512  # bytes; every request is rounded up to a power of two, at least this


def size_class(nbytes: int) -> int:
    """The block size that serves a request of ``nbytes``: the next power of two >= MIN_BLOCK."""
    if nbytes < 0:
        raise ValueError(f"size_class: nbytes must be >= 0, got {nbytes}")
    size = MIN_BLOCK
    while size < nbytes:
        size *= 2
    return size


class CachingPool:
    """``malloc(nbytes) -> handle``, ``free(handle)``; ``raw_malloc(size) -> handle`` and
    ``raw_free(handle)`` are the device's own calls, used only on a miss and on ``release()``."""

    def __init__(self, raw_malloc, raw_free):
        self.raw_malloc, self.raw_free = raw_malloc, raw_free
        ### BEGIN SOLUTION
        # HINT: a dict size -> list of free handles, and a dict handle -> size for blocks in use.
        self.free_blocks = defaultdict(list)
        self.in_use = {}
        self.bytes_in_use = self.bytes_cached = self.peak = 0
        self.hits = self.misses = 0
        ### END SOLUTION

    def malloc(self, nbytes: int):
        ### BEGIN SOLUTION
        size = size_class(nbytes)
        if self.free_blocks[size]:
            handle = self.free_blocks[size].pop()
            self.bytes_cached -= size
            self.hits += 1
        else:
            handle = self.raw_malloc(size)
            self.misses += 1
        self.in_use[handle] = size
        self.bytes_in_use += size
        self.peak = max(self.peak, self.bytes_in_use)
        return handle
        ### END SOLUTION

    def free(self, handle) -> None:
        ### BEGIN SOLUTION
        if handle not in self.in_use:
            raise ValueError(f"free: {handle!r} is not a block this pool handed out (double free?)")
        size = self.in_use.pop(handle)
        self.bytes_in_use -= size
        self.free_blocks[size].append(handle)
        self.bytes_cached += size
        ### END SOLUTION

    def release(self) -> int:
        """Give every cached (free) block back to the device; returns the bytes released."""
        ### BEGIN SOLUTION
        released = 0
        for size, handles in self.free_blocks.items():
            for handle in handles:
                self.raw_free(handle)
                released += size
        self.free_blocks.clear()
        self.bytes_cached = 0
        return released
        ### END SOLUTION

    def stats(self) -> dict:
        return {"bytes_in_use": self.bytes_in_use, "bytes_cached": self.bytes_cached,
                "peak": self.peak, "hits": self.hits, "misses": self.misses}
'''

SOURCES["pool.py"] = POOL_PY
