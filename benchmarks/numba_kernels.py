"""numba.cuda versions of the kernels in kernels/*.cu, for emu_vs_numba.py.

Same algorithms and launch configurations as the CUDA C sources. Import only with
NUMBA_ENABLE_CUDASIM=1 set. The simulator replaces each kernel's module-global ``cuda``
with its fake module, so the kernels must sit at module level.

Difference: Numba's simulator has no warp shuffles, so ``reduce_sum`` finishes with the
shared-memory tree (and __syncthreads) where the CUDA C kernel uses __shfl_down_sync.
"""

from __future__ import annotations

import math

from numba import cuda, float32

TILE = 16
RED_BLOCK = 256
RED_ELEMS = 4
SMX_BLOCK = 256


@cuda.jit
def sgemm_tiled(a, b, c, m, n, k):
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx = cuda.threadIdx.x
    ty = cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for t in range((k + TILE - 1) // TILE):
        ka = t * TILE + tx
        kb = t * TILE + ty
        a_tile[ty, tx] = a[row, ka] if (row < m and ka < k) else float32(0.0)
        b_tile[ty, tx] = b[kb, col] if (kb < k and col < n) else float32(0.0)
        cuda.syncthreads()
        for kk in range(TILE):
            acc += a_tile[ty, kk] * b_tile[kk, tx]
        cuda.syncthreads()
    if row < m and col < n:
        c[row, col] = acc


@cuda.jit
def reduce_sum(x, out, n):
    s = cuda.shared.array(RED_BLOCK, float32)
    tid = cuda.threadIdx.x
    base = cuda.blockIdx.x * RED_BLOCK * RED_ELEMS + tid
    v = float32(0.0)
    for e in range(RED_ELEMS):
        i = base + e * RED_BLOCK
        if i < n:
            v += x[i]
    s[tid] = v
    cuda.syncthreads()
    stride = RED_BLOCK // 2
    while stride > 0:  # all the way down in shared memory: no shuffles in the simulator
        if tid < stride:
            s[tid] += s[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        cuda.atomic.add(out, 0, s[0])


@cuda.jit
def softmax_rows(x, y, rows, cols):
    s = cuda.shared.array(SMX_BLOCK, float32)
    row = cuda.blockIdx.x
    tid = cuda.threadIdx.x
    if row < rows:  # uniform per block, as in the CUDA C kernel
        m = float32(-math.inf)
        for j in range(tid, cols, SMX_BLOCK):
            m = max(m, x[row, j])
        s[tid] = m
        cuda.syncthreads()
        stride = SMX_BLOCK // 2
        while stride > 0:
            if tid < stride:
                s[tid] = max(s[tid], s[tid + stride])
            cuda.syncthreads()
            stride //= 2
        m = s[0]
        cuda.syncthreads()
        acc = float32(0.0)
        for j in range(tid, cols, SMX_BLOCK):
            acc += float32(math.exp(x[row, j] - m))
        s[tid] = acc
        cuda.syncthreads()
        stride = SMX_BLOCK // 2
        while stride > 0:
            if tid < stride:
                s[tid] += s[tid + stride]
            cuda.syncthreads()
            stride //= 2
        inv = float32(1.0) / s[0]
        for j in range(tid, cols, SMX_BLOCK):
            y[row, j] = float32(math.exp(x[row, j] - m)) * inv


KERNELS = {"sgemm": sgemm_tiled, "reduce": reduce_sum, "softmax": softmax_rows}
