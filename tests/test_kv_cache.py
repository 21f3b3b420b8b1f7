"""Generation with a key/value cache (minitorch.nn.kv_cache): the same tokens as generation without it,
and each cached step's logits those of the full forward pass's last row."""

from __future__ import annotations

import numpy as np
import pytest

import minitorch
from minitorch import nn
from minitorch.nn import kv_cache
from tests.phase3_support import write_solutions
from tests.test_transformer import NOTEBOOKS

# A vocabulary, context and width that are no multiple of any tile; two layers, two heads.
CONFIG = dict(vocab_size=11, block_size=6, d_model=16, n_head=2, n_layer=2, seed=4)
DEVICES = ["cpu", "emu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.fixture
def solutions(workspace):
    return write_solutions(workspace, NOTEBOOKS)


@pytest.fixture
def captures(monkeypatch):
    """How many graphs the decoder captures."""
    count = []
    capture = kv_cache.graph.capture

    def counting(fn, **kw):
        count.append(1)
        return capture(fn, **kw)

    monkeypatch.setattr(kv_cache.graph, "capture", counting)
    return count


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("prompt, temperature", [(2, 1.0), (1, 0.0), (8, 1.0)])
def test_cached_generation_gives_the_tokens_of_uncached_generation(solutions, captures, device, prompt,
                                                                   temperature):
    """Two sequences, past block_size (the cropped window recomputed), from a prompt shorter or longer
    than the context; on emu and cuda the step and the window are each captured once and replayed."""
    model = nn.GPT(**CONFIG, device=device)
    start = np.random.default_rng(prompt).integers(0, CONFIG["vocab_size"], (2, prompt))
    n = 10 - prompt
    cached = model.generate(start, n, temperature, seed=7).numpy()
    uncached = model.generate(start, n, temperature, seed=7, use_cache=False).numpy()
    assert cached.shape == (2, prompt + n) and cached.dtype == np.int32
    np.testing.assert_array_equal(cached, uncached)
    if device != "cpu":
        assert len(captures) == (1 if prompt > CONFIG["block_size"] else 2)
    else:
        assert not captures


@pytest.mark.parametrize("device", DEVICES)
def test_each_cached_step_gives_the_full_forward_passs_last_row(solutions, device):
    model = nn.GPT(**CONFIG, device=device)
    t = CONFIG["block_size"]
    ids = np.random.default_rng(0).integers(0, CONFIG["vocab_size"], (3, t)).astype(np.int32)
    decoder = kv_cache.KVCacheDecoder(model, 3)
    with minitorch.no_grad():
        for pos in range(t):
            got = decoder.step(ids[:, pos], pos)
            want = model(minitorch.tensor(ids[:, :pos + 1], device=device, dtype="int32")).numpy()[:, -1]
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"position {pos}")
        np.testing.assert_allclose(decoder.window(ids), want, rtol=1e-5, atol=1e-5)
        with pytest.raises(ValueError, match="holds 6"):
            decoder.step(ids[:, 0], t)


def test_the_decoder_refuses_a_position_out_of_order(solutions):
    decoder = kv_cache.KVCacheDecoder(nn.GPT(**CONFIG, device="cpu"), 1)
    with pytest.raises(ValueError, match="position 0 comes next"):
        decoder.step(np.array([1]), 1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("position", [0, 2, 36])
def test_cached_attention_and_the_write_match_float64(solutions, device, position):
    """37 cached positions (more than a warp's 32 lanes, so some lanes see hidden keys only), 3 heads of 5
    columns, 2 sequences: the write leaves every other row as it was, and the attention of one query is
    that of NumPy over the keys 0..position."""
    from minitorch import ops

    b, h, t, d = 2, 3, 37, 5
    rng = np.random.default_rng(position)
    cache = rng.standard_normal((b * h, t, d)).astype(np.float32)
    cache[:, position:] = 0                                      # not written yet
    values = rng.standard_normal((b * h, t, d)).astype(np.float32)
    values[:, position:] = 0
    new_k, new_v = rng.standard_normal((2, b * h, 1, d)).astype(np.float32)
    q = rng.standard_normal((b, h, 1, d)).astype(np.float32)
    one_hot = np.zeros((b * h, t), np.float32)
    one_hot[:, position] = 1
    mask = np.where(np.arange(t) <= position, 0, kv_cache.HIDDEN).astype(np.float32)[None].repeat(b * h, 0)

    def dev(x):
        return minitorch.tensor(x, device=device)

    keys, vals = dev(cache), dev(values)
    ops.write_position_(keys, dev(one_hot), dev(new_k))
    ops.write_position_(vals, dev(one_hot), dev(new_v))
    want_k, want_v = cache.copy(), values.copy()
    want_k[:, position], want_v[:, position] = new_k[:, 0], new_v[:, 0]
    np.testing.assert_array_equal(keys.numpy(), want_k)
    np.testing.assert_array_equal(vals.numpy(), want_v)

    y = ops.cached_attention(dev(q), keys, vals, dev(mask)).numpy()
    k64, v64 = want_k[:, :position + 1].astype(np.float64), want_v[:, :position + 1].astype(np.float64)
    scores = np.einsum("zd,ztd->zt", q.reshape(b * h, d).astype(np.float64), k64) / np.sqrt(d)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    want = np.einsum("zt,ztd->zd", p, v64).reshape(b, h, d).reshape(b, 1, h * d)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"mask must be \(6, 37\)"):
        ops.cached_attention(dev(q), keys, vals, dev(mask[:, :5]))
