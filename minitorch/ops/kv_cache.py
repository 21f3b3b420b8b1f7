"""Attention of one new position against a key/value cache (KV-cached generation), from the learner's
Phase 7 launchers (``bmm``, ``softmax_forward``, ``merge_heads``) and Phase 2's ``add``.

The position being written is device data, not a kernel argument, so a step captured once into a graph
(:mod:`minitorch.graph`) replays for every position: it arrives as a row of the identity (``one_hot``)
and a row of an additive mask (0 for the keys written so far, a large negative number for the rest), both gathered on the
device by the embedding kernel from the position's id.

- ``write_position_``: cache[z, t] = new[z] in place, as cache += one_hot ⊗ new (a bmm with K = 1, then
  an elementwise add whose output is its first input). Exact: row t holds zeros before the write
  (0 + 1·x = x) and every other row gains 0·x = ±0.
- ``cached_attention``: softmax(q Kᵀ / sqrt(D) + mask) V for one query a head: the same scores, the same
  kernels and, for the keys it sees, the same sums as the causal attention of the full sequence (masked
  keys add exact zeros).
"""

from __future__ import annotations

import math

from minitorch.ops.attention import attention_softmax, bmm, merge_heads
from minitorch.ops.dispatch import check_tensors, launch
from minitorch.ops.elementwise import add
from minitorch.ops.shape import reshape
from minitorch.tensor import DTYPE, Tensor


def write_position_(cache: Tensor, one_hot: Tensor, new: Tensor) -> None:
    """In place: cache[z, t] += new[z, 0] where one_hot[z] is row t of the identity.

    cache (Z, T, D), one_hot (Z, T), new (Z, 1, D). Row t of the cache is expected to hold zeros (a cache
    is zeroed once and each position written once), so it then holds new exactly."""
    device, _ = check_tensors("write_position_", cache=cache, one_hot=one_hot, new=new)
    if cache.ndim != 3 or one_hot.shape != cache.shape[:2] or new.shape != (cache.shape[0], 1, cache.shape[2]):
        raise ValueError(f"write_position_: expected cache (Z, T, D), one_hot (Z, T) and new (Z, 1, D); got "
                         f"{cache.shape}, {one_hot.shape} and {new.shape}")
    z, t, _ = cache.shape
    # (Z, T, D): new in row t, zeros elsewhere; in float32 even under autocast, so the cache holds new exactly
    delta = bmm(reshape(one_hot, (z, t, 1)), new, compute_dtype=DTYPE)
    if device == "cpu":
        cache.data[...] += delta.data
    elif cache.size:
        # Phase 2's add with its output aliasing its first input: each element is read, then written, by
        # one thread. No launch plan (outputs=None): the output is also read.
        launch(device, "elementwise.py", "add", cache.data, delta.data, cache.data)


def cached_attention(q: Tensor, keys: Tensor, values: Tensor, mask: Tensor) -> Tensor:
    """Attention of one query a head against cached keys and values: q (B, H, 1, D), keys and values
    (B·H, T, D), mask (B·H, T) added to the scores (0 where a key is visible, a large negative number such as -1e30
    where not) ->
    y (B, 1, H·D), the heads merged as ``attention`` merges them."""
    check_tensors("cached_attention", q=q, keys=keys, values=values, mask=mask)
    if q.ndim != 4 or q.shape[2] != 1:
        raise ValueError(f"cached_attention: q must be (B, H, 1, D), got {q.shape}")
    batch, n_head, _, d = q.shape
    z = batch * n_head
    if keys.ndim != 3 or keys.shape[0] != z or keys.shape[2] != d or values.shape != keys.shape:
        raise ValueError(f"cached_attention: keys and values must be ({z}, T, {d}), got {keys.shape} and "
                         f"{values.shape}")
    t = keys.shape[1]
    if mask.shape != (z, t):
        raise ValueError(f"cached_attention: mask must be ({z}, {t}), got {mask.shape}")
    scores = bmm(reshape(q, (z, 1, d)), keys, transpose_b=True)              # (Z, 1, T)
    scores = reshape(add(reshape(scores, (z, t)), mask), (z, 1, t))
    probs = attention_softmax(scores, 1.0 / math.sqrt(d), causal=False)
    y = bmm(probs, values)                                                    # (Z, 1, D)
    return merge_heads(reshape(y, (batch, n_head, 1, d)))
