"""Matrix ops: transpose and matmul.

Phases 2-4 run matmul on Phase 2's naive kernel (``matmul.py``). From Phase 5 on, once the learner's
GEMM launcher (``gemm.py``) exists, matmul runs on it, with transposed operands read in place: the
backward products dX = dY·Wᵀ and dW = Xᵀ·dY then need no transpose kernel. The grader sets
``MINITORCH_PHASE`` to the phase it grades, so an earlier phase is graded on that phase's own kernels.

From Phase 8a, products of 16-bit operands run on the learner's tensor-core launcher ``hgemm.py``
(fp32 accumulation): two float16 (or two bfloat16) tensors give a tensor of their dtype, rounded once at
the end; and inside ``minitorch.amp.autocast(dtype)`` (or with ``compute_dtype=``) two float32 tensors are
rounded to the 16-bit dtype (the learner's ``convert.py``), multiplied on ``hgemm.py``, and give float32.
On cpu the same rounding is done by NumPy and the product accumulates in float32.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from minitorch import backend, dtypes, kernels
from minitorch.ops.dispatch import accepts, check_tensors, cpu_result, empty, launch, matrix, provides
from minitorch.ops.elementwise import add_bias
from minitorch.ops.precision import autocast_dtype, convert
from minitorch.ops.reduce import bias_grad
from minitorch.tensor import DTYPE, HALF, Tensor

GEMM_FILE = "gemm.py"
HGEMM_FILE = "hgemm.py"
# None: the rule of hgemm_variant below; a name; or a function of the product's shape giving a name
HgemmVariant = str | Callable[[int, int, int, bool, bool], str] | None
_hgemm_variant: HgemmVariant = None


def set_hgemm_variant(variant: HgemmVariant) -> HgemmVariant:
    """The ``variant`` every tensor-core product passes to the learner's ``hgemm.py`` from now on; returns the
    previous setting. None: :func:`hgemm_variant`'s rule (rung 1 for small outputs, the launcher's "best"
    otherwise); a name, e.g. ``"wgmma"`` (Lab 8a's rung 6, sm_90 GPUs only); or a function ``(M, N, K, transpose_a, transpose_b) -> name`` choosing by the
    product's shape (e.g. a table of the fastest variant per shape, measured on the card). The launcher
    checks the name."""
    global _hgemm_variant
    if variant is not None and not (callable(variant) or (isinstance(variant, str) and variant)):
        raise TypeError(f"set_hgemm_variant: a variant name of hgemm.py, a function of the shape, or None; "
                        f"got {variant!r}")
    previous, _hgemm_variant = _hgemm_variant, variant
    return previous


# Small products run on rung 1 of the ladder ("wmma": one warp a 16 x 16 tile of C), the others on variant "best"
# (rung 5, whose block computes a whole 128 x 128 tile of C; on an sm_90 GPU, rung 6 where K >= 256: the lab's
# hgemm.py, best_variant). What is small depends on what a product costs:
# - on a GPU, time. Attention's batched products on an H100 (benchmarks/results/phase8a_bmm-*.json, 256 matrices):
#   64 x 16 outputs (P V, dQ, dK, dV) take 5.3-5.7 us on rung 1 and 9.7-9.9 us on rung 5; 64 x 64 (Q Kᵀ) 10.5 us
#   against 8.1 us, 128 x 128 29.6 against 11.1 us. So outputs of at most GPU_SMALL_OUTPUT values.
# - on the emulator, work: every thread of a block runs, so rung 5 computes its whole 128 x 128 tile however small C
#   is (16 times the output for MNIST's 8-row convolution products), and rung 1 never computes more. Through the
#   lab's launcher rung 1 took 0.02-0.79 of rung 5's CPU time at every shape tried, the CNN's, the reduced GPT's and
#   squares up to 256 x 256 x 512 (benchmarks/results/phase8a_emu_rungs-*.json): every product runs on rung 1.
GPU_SMALL_OUTPUT = 2048


# Split K: a weight gradient dW = Xᵀ·dY has a small output (C x C' values) and a long K (B·T rows): unsplit, it runs
# on few blocks of a GPU's 132 multiprocessors (nanoGPT's 384 x 1152 output: 27 of rung 5's 128 x 128 tiles), each
# looping over all of K (16,384 rows): an H100 took 150 us for each of those products on rung 6 (wgmma), 380 us on
# rung 5, a fifth of the step (benchmarks/results/phase8b_nanogpt_phase7init-*.json, gemm rows). Stored K-major (Xᵀ read in
# place, dY as it is), both operands are stacks of pieces of K without a copy; one batched launch computes the
# partial products (grid z = the piece; on rung 6 too, whose tensor maps see each stack as one matrix) and the
# lab's sum_pieces adds them in float32, in order (Phase 3b's bias_grad where hgemm.py predates it). The pieces
# are as many as bring the blocks (tiles x pieces) to the target, about one a multiprocessor, each piece at least
# SPLIT_PIECE_K rows long.
SPLIT_MIN_K, SPLIT_PIECE_K, SPLIT_MAX = 2048, 256, 16
SPLIT_TARGET_BLOCKS = 128
_split_target = SPLIT_TARGET_BLOCKS


def set_split_k(target_blocks: int | None) -> int:
    """The blocks (output tiles of 128 x 128 times pieces of K) a split weight-gradient product aims at from now
    on; 0: never split; None: the default, SPLIT_TARGET_BLOCKS. Returns the previous setting."""
    global _split_target
    if target_blocks is not None and (isinstance(target_blocks, bool) or not isinstance(target_blocks, int)
                                      or target_blocks < 0):
        raise TypeError(f"set_split_k: a number of blocks >= 0 (0: never split) or None, got {target_blocks!r}")
    previous, _split_target = _split_target, SPLIT_TARGET_BLOCKS if target_blocks is None else target_blocks
    return previous


def split_k(m: int, n: int, k: int, transpose_a: bool, transpose_b: bool) -> int:
    """How many pieces of K the product runs as (1: not split)."""
    blocks = -(-m // 128) * -(-n // 128)  # rung 5's blocks for the whole output
    if not transpose_a or transpose_b or k < SPLIT_MIN_K or blocks >= _split_target:
        return 1
    pieces = 1
    while pieces < SPLIT_MAX and blocks * pieces < _split_target:
        pieces *= 2
    while pieces > 1 and (k % pieces or k // pieces < SPLIT_PIECE_K):
        pieces //= 2
    return pieces


def hgemm_variant(device: str, m: int, n: int, k: int) -> str:
    """The rung of ``hgemm.py`` a product with (M, N) output matrices and inner dimension K runs on, on ``device``."""
    return "wmma" if device == "emu" or m * n <= GPU_SMALL_OUTPUT else "best"


BIAS_VARIANTS = ("best", "pipeline", "wgmma")  # the rungs of hgemm.py that add a bias as they store C


def _hgemm_choice(device: str, mnk: tuple[int, int, int], transpose_a: bool, transpose_b: bool) -> str:
    """The variant of ``hgemm.py`` that the setting (``set_hgemm_variant``) picks for this product."""
    m, n, k = mnk
    choice = _hgemm_variant
    if callable(choice):
        choice = choice(m, n, k, transpose_a, transpose_b)
    if choice is None:
        choice = hgemm_variant(device, m, n, k)
    if (choice in ("wgmma", "best") and backend.get_backend(device).in_branch
            and not (provides(HGEMM_FILE, "map_buffer") and accepts(HGEMM_FILE, "map_buffer", "stream"))):
        # rung 6 writes its tensor maps into a buffer before each product: one per device in a hgemm.py from
        # before the buffers were kept per stream, where a product on a side branch of a graph, concurrent with
        # one on the main stream, would race for it; rung 5 keeps none ("best" is rung 6 on an sm_90 GPU for a
        # long K: the lab's hgemm.py, best_variant)
        choice = "pipeline"
    return choice


def _adds_bias(choice: str) -> bool:
    """Whether the learner's launch of variant ``choice`` adds a bias as it stores C (rungs 5 and 6, in a
    launcher that takes one)."""
    return choice in BIAS_VARIANTS and accepts(HGEMM_FILE, "hgemm", "bias")


def _epilogue_adds_bias(device: str, mnk: tuple[int, int, int], transpose_a: bool, transpose_b: bool) -> bool:
    """Whether this product's one launch adds a bias as it stores C (not an empty product, not split along K, on a
    rung that adds one)."""
    m, n, k = mnk
    return bool(m and n and k and split_k(m, n, k, transpose_a, transpose_b) == 1
                and _adds_bias(_hgemm_choice(device, mnk, transpose_a, transpose_b)))


def _hgemm(device: str, a: Any, b: Any, out: Any, compute: Any, transpose_a: bool, transpose_b: bool,
           mnk: tuple[int, int, int], bias: Any = None) -> bool:
    """One launch of the learner's ``hgemm.py`` (a matrix or a stack of them), on the variant the setting picks.
    ``bias`` (a float32 device vector of N values, or None) is added by the launch where the variant adds one
    (rungs 5 and 6); returns whether it was (else the caller adds it)."""
    m, n, k = mnk
    choice = _hgemm_choice(device, mnk, transpose_a, transpose_b)
    if bias is not None and _adds_bias(choice):
        # positional: a plan replays it with the bias of each call
        launch(device, HGEMM_FILE, "hgemm", a, b, out, compute.name, choice, transpose_a, transpose_b, bias,
               outputs=(2,))
        return True
    launch(device, HGEMM_FILE, "hgemm", a, b, out, outputs=(2,), dtype=compute.name, variant=choice,
           transpose_a=transpose_a, transpose_b=transpose_b)
    return bias is None


def transpose(a: Tensor) -> Tensor:
    """The transpose of a 2-D tensor, as a new contiguous tensor."""
    device, dtype = check_tensors("transpose", a=a)
    rows, cols = matrix("transpose", "a", a)
    if device == "cpu":
        return cpu_result(a.data.T, dtype)
    out = empty(device, (cols, rows))
    if a.size:
        launch(device, "transpose.py", "transpose", a.data, out, outputs=(1,))
    return Tensor(out, device)


def uses_gemm() -> bool:
    """Whether matmul runs on the learner's Phase 5 GEMM: ``gemm.py`` is written, and the phase being
    graded (``MINITORCH_PHASE``, when set) is Phase 5 or later."""
    graded = os.environ.get("MINITORCH_PHASE")
    if graded and kernels.phase_index(graded) < kernels.phase_index(kernels.KERNEL_FILES.get(
            GEMM_FILE, kernels.LearnerFile("phase5", "", "")).phase):
        return False
    return os.path.exists(kernels.source_path(GEMM_FILE))


def product_dtype(dtype: Any, compute_dtype: Any = None) -> Any:
    """The 16-bit format a product of two ``dtype`` operands is computed in, or None for their own dtype:
    ``compute_dtype`` if given (float32: none), else the autocast setting; float32 operands only."""
    if compute_dtype is not None:
        compute = dtypes.resolve(compute_dtype)
        if compute != DTYPE and compute not in HALF:
            raise ValueError(f"matmul: compute_dtype must be float32, float16 or bfloat16, got {compute}")
        if compute in HALF and dtype != DTYPE:
            raise TypeError(f"matmul: compute_dtype={compute} rounds float32 operands; these are {dtype}")
    else:
        compute = autocast_dtype()
    return compute if compute in HALF and dtype == DTYPE else None


def matmul(a: Tensor, b: Tensor, *, transpose_a: bool = False, transpose_b: bool = False,
           compute_dtype: Any = None, out_dtype: Any = None, bias: Tensor | None = None) -> Tensor:
    """op(a) @ op(b) -> (M, N), where op(a) = aᵀ if ``transpose_a`` (then a is (K, M)), else a (M, K);
    likewise op(b) is (K, N).

    16-bit operands (both float16 or both bfloat16) give their dtype, or float32 with
    ``out_dtype=float32``. Float32 operands are rounded to ``compute_dtype`` (float16 or bfloat16;
    default: the autocast dtype, if any) and give float32.

    ``bias``: a float32 (N,) tensor added to every row of the result (a Linear layer's), to the float32 sums
    before a 16-bit result is rounded. On the tensor cores' rungs 5 and 6 it is added as the product is stored
    (no pass of its own over the result); elsewhere by ``add_bias`` after the product (then a 16-bit result is
    rounded by a conversion). Either way each element is the float32 sum plus the bias, rounded once: the same
    bits."""
    device, dtype = check_tensors("matmul", half=True, a=a, b=b)
    out_dt = dtype
    if out_dtype is not None:
        out_dt = dtypes.resolve(out_dtype)
        if out_dt != dtype and not (dtype in HALF and out_dt == DTYPE):
            raise TypeError(f"matmul: out_dtype={out_dt}: 16-bit operands give their dtype or float32, others "
                            f"their own dtype; these are {dtype}")
    rows_a, cols_a = matrix("matmul", "a", a)
    rows_b, cols_b = matrix("matmul", "b", b)
    (m, k), (k2, n) = ((cols_a, rows_a) if transpose_a else (rows_a, cols_a),
                       (cols_b, rows_b) if transpose_b else (rows_b, cols_b))
    if k != k2:
        what_a = f"a{'ᵀ' if transpose_a else ''}"
        raise ValueError(f"matmul: the inner dimensions must agree: {what_a} is ({m}, {k}) (M, K), so "
                         f"b{'ᵀ' if transpose_b else ''} must be ({k}, N); got {b.shape}")
    if bias is not None:
        bias_device, bias_dtype = check_tensors("matmul", bias=bias)
        wanted = DTYPE if out_dt in HALF else out_dt  # a 16-bit result: the float32 sum plus the bias, rounded
        if bias_device != device or bias_dtype != wanted or bias.shape != (n,):
            raise ValueError(f"matmul: bias must be a {wanted} tensor of shape ({n},) on {device!r} (one value per "
                             f"column of the result); got {bias_dtype} {bias.shape} on {bias_device!r}")
    compute = dtype if dtype in HALF else product_dtype(dtype, compute_dtype)
    if compute is not None:
        return _tensor_core_matmul(a, b, compute, out_dt, (m, n, k), transpose_a, transpose_b, bias)
    product = _plain_matmul(a, b, device, dtype, (m, n, k), transpose_a, transpose_b)
    return product if bias is None else add_bias(product, bias)


def _plain_matmul(a: Tensor, b: Tensor, device: str, dtype: Any, mnk: tuple[int, int, int], transpose_a: bool,
                  transpose_b: bool) -> Tensor:
    """The product in the operands' own dtype: NumPy on cpu, else Phase 5's GEMM (or Phase 2's matmul)."""
    m, n, k = mnk
    if device == "cpu":
        return cpu_result(np.matmul(a.data.T if transpose_a else a.data, b.data.T if transpose_b else b.data), dtype)
    if k == 0:  # a sum of no products: zeros, nothing to launch
        return Tensor(backend.get_backend(device).zeros((m, n), DTYPE), device)
    out = empty(device, (m, n))
    if not (m and n):
        return Tensor(out, device)
    if uses_gemm():
        launch(device, GEMM_FILE, "gemm", a.data, b.data, out, outputs=(2,), transpose_a=transpose_a,
               transpose_b=transpose_b)
        return Tensor(out, device)
    if transpose_a:  # Phase 2's kernel reads row-major operands: materialise the transposes
        a = transpose(a)
    if transpose_b:
        b = transpose(b)
    launch(device, "matmul.py", "matmul", a.data, b.data, out, outputs=(2,))
    return Tensor(out, device)


def _tensor_core_matmul(a: Tensor, b: Tensor, compute: Any, dtype: Any, mnk: tuple[int, int, int],
                        transpose_a: bool, transpose_b: bool, bias: Tensor | None = None) -> Tensor:
    """The product on 16-bit operands of format ``compute``, fp32 accumulation; the result in ``dtype``
    (the operands' own: 16-bit operands give 16-bit, float32 operands (autocast) give float32); plus ``bias``
    (float32), in the product's epilogue where the rung adds one (before a 16-bit result is rounded)."""
    m, n, k = mnk
    device = a.device

    def plus_bias(t: Tensor) -> Tensor:
        return t if bias is None else add_bias(t, bias)

    if device == "cpu":  # round as the devices do, then a float32 product (NumPy accumulates in float32)
        a32, b32 = (dtypes.bits_to_float32(dtypes.float32_to_16bit(t.numpy(), compute).view(np.uint16), compute)
                    for t in (a, b))
        c = np.matmul(a32.T if transpose_a else a32, b32.T if transpose_b else b32).astype(DTYPE)
        out = plus_bias(cpu_result(c, DTYPE))
        return out if dtype == DTYPE else convert(out, dtype)
    if bias is not None and dtype != DTYPE and not _epilogue_adds_bias(device, mnk, transpose_a, transpose_b):
        # a 16-bit result whose bias no epilogue adds: the float32 result plus the bias, rounded once
        return convert(_tensor_core_matmul(a, b, compute, DTYPE, mnk, transpose_a, transpose_b, bias), dtype)
    if not (m and n and k):  # nothing to multiply: zeros (a sum of no products), nothing to launch
        return plus_bias(Tensor(backend.get_backend(device).zeros((m, n), dtypes.storage(dtype)), device))
    a16, b16 = convert(a, compute), convert(b, compute)
    pieces = split_k(m, n, k, transpose_a, transpose_b)
    if pieces > 1:  # A stored (K, M), B (K, N): both are stacks of pieces along K, read in place
        partial = empty(device, (pieces, m, n))
        _hgemm(device, a16.data.reshape(pieces, k // pieces, m), b16.data.reshape(pieces, k // pieces, n), partial,
               compute, True, False, (m, n, k // pieces))
        out32 = plus_bias(_sum_pieces(device, partial))
        return out32 if dtype == DTYPE else convert(out32, dtype)
    out = empty(device, (m, n), dtypes.storage(dtype))
    added = _hgemm(device, a16.data, b16.data, out, compute, transpose_a, transpose_b, (m, n, k),
                   bias=None if bias is None else bias.data)
    return Tensor(out, device) if added else plus_bias(Tensor(out, device))


def _sum_pieces(device: str, partial: Any) -> Tensor:
    """The float32 sum (M, N) of a split product's pieces (pieces, M, N): the lab's ``sum_pieces`` (the pieces in
    order), or Phase 3b's bias_grad (the column sums of the pieces seen as rows) where hgemm.py predates it."""
    pieces, m, n = partial.shape
    if not provides(HGEMM_FILE, "sum_pieces"):
        total = bias_grad(Tensor(partial.reshape(pieces, m * n), device))
        return Tensor(total.data.reshape(m, n), device)
    out = empty(device, (m, n))
    launch(device, HGEMM_FILE, "sum_pieces", partial, out, outputs=(1,))
    return Tensor(out, device)


def tensor_core_bmm(a: Tensor, b: Tensor, compute: Any, shape: tuple[int, int, int, int], transpose_a: bool,
                    transpose_b: bool) -> Tensor:
    """The batched product of float32 ``a`` (batch, M, K) and ``b`` (batch, K, N) (stored transposed where
    asked) on 16-bit operands of format ``compute``, fp32 accumulation, a float32 (batch, M, N) result.

    The operands are rounded once, whole (one conversion launch each); then one ``hgemm`` launch for the
    whole batch: the learner's launcher takes stacks of matrices, and its kernels pick matrix
    ``blockIdx.z`` (attention's batches are B·H small matrices: one launch each would cost more than the
    products)."""
    batch, m, n, k = shape
    device = a.device
    if device == "cpu":
        a32, b32 = (dtypes.bits_to_float32(dtypes.float32_to_16bit(t.numpy(), compute).view(np.uint16), compute)
                    for t in (a, b))
        c = np.matmul(np.swapaxes(a32, 1, 2) if transpose_a else a32, np.swapaxes(b32, 1, 2) if transpose_b else b32)
        return cpu_result(c.astype(DTYPE), DTYPE)
    if not (batch and m and n):
        return Tensor(empty(device, (batch, m, n)), device)
    if not k:
        return Tensor(backend.get_backend(device).zeros((batch, m, n), DTYPE), device)
    a16, b16 = convert(a, compute), convert(b, compute)
    out = empty(device, (batch, m, n))
    _hgemm(device, a16.data, b16.data, out, compute, transpose_a, transpose_b, (m, n, k))
    return Tensor(out, device)
