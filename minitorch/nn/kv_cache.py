"""Generation with a key/value cache: a GPT's keys and values of earlier positions stay on the device, and
each step computes one new position (``GPT.generate(..., use_cache=True)``).

A step embeds one token a sequence at position t, and in every layer writes that position's key and value
into the layer's cache (``ops.write_position_``) and attends to the positions 0..t written so far
(``ops.cached_attention``). t is device data (an int32 id the embedding kernel reads), so on ``cuda`` and
``emu`` the step is captured into a graph once and replayed for every position: one launch a token instead
of a forward pass of the whole context.

The cache holds block_size positions, as many as the position embedding has. Once a sequence is longer,
the next token depends on the last block_size tokens at positions 0..block_size-1 (the context is cropped,
as nanoGPT crops it): every key and value moves to a new position, so nothing cached can be reused and
the cropped window is recomputed, a full forward pass of (B, block_size) ids, itself captured once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from minitorch import graph, ops
from minitorch.tensor import INDEX, Tensor, from_numpy, zeros

if TYPE_CHECKING:
    from minitorch.nn.transformer import GPT

__all__ = ["KVCacheDecoder"]

_GRAPH_DEVICES = ("cuda", "emu")
# Added to the score of a key not written yet: exp(scale * (score + HIDDEN - max)) is exactly 0 in float32.
HIDDEN = -1e30


class KVCacheDecoder:
    """The cache and the captured steps of one generation by ``model`` (a ``GPT``) of ``batch`` sequences.

    ``step(tokens, position)`` feeds one token a sequence at ``position`` (0, 1, 2, … in order, at most
    block_size - 1) and returns the logits of the token after it (B, vocab) in float64; ``window(ids)``
    returns those after the last of (B, block_size) ids, the whole window recomputed.
    """

    def __init__(self, model: GPT, batch: int) -> None:
        self.model, self.batch = model, int(batch)
        weight = model.wte.weight
        self.device, dt = weight.device, weight.dtype
        t, h = model.block_size, model.n_head
        rows, d = self.batch * h, model.d_model // h
        self.keys = [zeros((rows, t, d), self.device, dtype=dt) for _ in range(model.n_layer)]
        self.values = [zeros((rows, t, d), self.device, dtype=dt) for _ in range(model.n_layer)]
        # Row t of each table, gathered on the device from the position id: where to write (the identity)
        # and which keys to see (0 for keys 0..t, HIDDEN after: finite, so that a softmax kernel that keeps
        # a running maximum never computes -inf - (-inf) for a lane whose keys are all hidden).
        self._one_hot = from_numpy(np.eye(t, dtype=dt), self.device, dtype=dt)
        self._mask = from_numpy(np.where(np.tri(t, dtype=bool), 0, HIDDEN).astype(dt), self.device, dtype=dt)
        # The inputs a replay reads, refilled before each one.
        self._tokens = zeros((self.batch, 1), self.device, dtype=INDEX)
        self._position = zeros((1,), self.device, dtype=INDEX)
        self._position_rows = zeros((rows,), self.device, dtype=INDEX)
        self._window_ids = zeros((self.batch, t), self.device, dtype=INDEX)
        self._next_position = 0
        self._step_graph: graph.Graph[Tensor] | None = None
        self._window_graph: graph.Graph[Tensor] | None = None

    def step(self, tokens: np.ndarray, position: int) -> np.ndarray:
        if position != self._next_position or not 0 <= position < self.model.block_size:
            raise ValueError(f"KVCacheDecoder.step: position {self._next_position} comes next (the cache holds "
                             f"{self.model.block_size}), got {position}")
        self._tokens.copy_from(np.asarray(tokens, INDEX).reshape(self.batch, 1))
        self._position.copy_from(np.full(1, position, INDEX))
        self._position_rows.copy_from(np.full(self._position_rows.shape, position, INDEX))
        self._next_position += 1
        if self.device not in _GRAPH_DEVICES:
            return _last_row(self._step())
        if self._step_graph is None:
            self._step_graph = graph.capture(self._step, device=self.device)
        self._step_graph.replay()
        return _last_row(self._step_graph.output)

    def window(self, ids: np.ndarray) -> np.ndarray:
        self._window_ids.copy_from(np.ascontiguousarray(ids, INDEX))
        if self.device not in _GRAPH_DEVICES:
            return _last_row(self.model(self._window_ids))
        if self._window_graph is None:
            self._window_graph = graph.capture(lambda: self.model(self._window_ids), device=self.device)
        self._window_graph.replay()
        return _last_row(self._window_graph.output)

    def _step(self) -> Tensor:
        """The logits (B, 1, vocab) after the tokens at the current position, the caches written."""
        m, b, c = self.model, self.batch, self.model.d_model
        tok = m.wte(self._tokens).reshape(b, c)
        x = (tok + m.wpe(self._position).reshape(c)).reshape(b, 1, c)   # as GPT._embed adds them
        one_hot = ops.embedding(self._position_rows, self._one_hot)       # (B·H, T)
        mask = ops.embedding(self._position_rows, self._mask)             # (B·H, T)
        for block, keys, values in zip(m.blocks, self.keys, self.values, strict=True):
            attn = block.attn
            q, k, v = ops.split_heads(attn.c_attn(block.ln1(x)), m.n_head, parts=3)  # (B, H, 1, D) each
            ops.write_position_(keys, one_hot, ops.reshape(k, (keys.shape[0], 1, keys.shape[2])))
            ops.write_position_(values, one_hot, ops.reshape(v, (values.shape[0], 1, values.shape[2])))
            x = x + attn.c_proj(ops.cached_attention(q, keys, values, mask))
            x = x + block.proj(block.gelu(block.fc(block.ln2(x))))
        return m._head(m.ln_f(x))


def _last_row(logits: Tensor) -> np.ndarray:
    return logits.numpy()[:, -1, :].astype(np.float64)
