"""Transformer layers (Phase 7): ``Embedding``, ``LayerNorm``, ``GELU``, causal ``MultiHeadAttention``, the
pre-norm ``TransformerBlock`` and a character-level ``GPT`` with PyTorch's calling conventions:
``logits = model(idx)`` for int32 token ids idx (B, T), ``model.generate(idx, n, temperature)``.

Initial values follow PyTorch's defaults (so a model of the same shape trains alike): embeddings N(0, 1),
Linear layers uniform in ±1/sqrt(in_features), LayerNorm weight 1 and bias 0. A model made with one seed
has the same initial values on every device.

``GPT(..., tie_weights=True)`` shares one table between the token embedding and the output head, as GPT-2
and nanoGPT do: logits = ln_f(x) · wteᵀ + lm_head.bias. The table then receives the sum of two gradients,
the embedding's scatter-add and the head's product; it starts N(0, 1/d_model) instead of N(0, 1), so
that the first logits have unit variance rather than d_model, and so does the position table: a token
table 1/√d_model the size of the positions' would leave the sum of the two almost blind to which token it is
(the reduced Lab 7 model, tied with the positions at N(0, 1), ended 0.5 nats worse than untied).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minitorch import backend, functional, ops
from minitorch.autograd import Context, Function, no_grad
from minitorch.nn.dropout import Dropout, StepCounter
from minitorch.nn.kv_cache import KVCacheDecoder
from minitorch.nn.linear import Linear
from minitorch.nn.module import Module, ModuleList, _assign
from minitorch.ops.flash import HEAD_DIMS
from minitorch.tensor import DTYPE, INDEX, DTypeLike, Tensor, _check_device, check_dtype, from_numpy

__all__ = ["GELU", "GPT", "Embedding", "LayerNorm", "MultiHeadAttention", "TransformerBlock", "sample_next"]


def _positive(cls: str, **values: Any) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{cls}: {name} must be a positive integer, got {value!r}")


def _parameter(values: np.ndarray, device: str) -> Tensor:
    return Tensor(backend.get_backend(device).asarray(np.ascontiguousarray(values)), device, requires_grad=True)


class Embedding(Module):
    """A table of ``num_embeddings`` rows of ``embedding_dim`` values: ``emb(idx)`` is ``weight[idx]`` for int32
    ids of any shape (idx.shape + (embedding_dim,)). Initial values N(0, 1), drawn from ``seed``."""

    def __init__(self, num_embeddings: int, embedding_dim: int, *, device: str | None = None,
                 dtype: DTypeLike = None, seed: int | None = None, std: float = 1.0) -> None:
        _positive("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if not (isinstance(std, (int, float)) and std > 0 and math.isfinite(std)):
            raise ValueError(f"Embedding: std must be a positive number, got {std!r}")
        self.num_embeddings, self.embedding_dim = int(num_embeddings), int(embedding_dim)
        device = _check_device(device)
        dt = check_dtype(dtype, device)
        values = np.random.default_rng(seed).standard_normal((num_embeddings, embedding_dim))
        values = (values * std if std != 1.0 else values).astype(dt)
        self.weight = _parameter(values, device)

    def forward(self, idx: Tensor) -> Tensor:
        return functional.embedding(idx, self.weight)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}"


class LayerNorm(Module):
    """Normalises the last dimension (of size ``dim``) to mean 0 and variance 1, then scales and shifts it by
    a learned weight (initially 1) and bias (initially 0)."""

    def __init__(self, dim: int, eps: float = 1e-5, *, device: str | None = None, dtype: DTypeLike = None) -> None:
        _positive("LayerNorm", dim=dim)
        if not eps > 0:
            raise ValueError(f"LayerNorm: eps must be > 0, got {eps!r}")
        self.dim, self.eps = int(dim), float(eps)
        device = _check_device(device)
        dt = check_dtype(dtype, device)
        self.weight = _parameter(np.ones(dim, dt), device)
        self.bias = _parameter(np.zeros(dim, dt), device)

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.ndim < 1 or x.shape[-1] != self.dim:
            got = x.shape if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"LayerNorm({self.dim}) expects an input of shape (..., {self.dim}), got {got}")
        return functional.layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps:g}"


class GELU(Module):
    """GELU in GPT-2's tanh approximation."""

    def forward(self, x: Tensor, *, keep_rounded: bool = False) -> Tensor:
        """gelu(x); ``keep_rounded``: under autocast, the output in the autocast dtype (functional.gelu)."""
        return functional.gelu(x, keep_rounded)


ATTENTIONS = ("materialised", "flash")
INITS = ("phase7", "gpt2")  # GPT's initial values: Phase 7's (PyTorch's layer defaults) or GPT-2's
GPT2_STD = 0.02


def _check_attention(cls: str, attention: object, d_model: int, n_head: int) -> str:
    if attention not in ATTENTIONS:
        raise ValueError(f"{cls}: attention must be one of {', '.join(map(repr, ATTENTIONS))}, got {attention!r}")
    head_dim = d_model // n_head
    if attention == "flash" and head_dim not in HEAD_DIMS:
        raise ValueError(f"{cls}: attention='flash' runs FlashAttention's kernels, whose head dims are "
                         f"{' or '.join(map(str, HEAD_DIMS))}; d_model / n_head = {d_model} / {n_head} = {head_dim}")
    return str(attention)


class MultiHeadAttention(Module):
    """Causal multi-head self-attention of x (B, T, d_model): one Linear makes Q | K | V (``c_attn``, d_model
    -> 3 d_model), ``n_head`` heads of d_model / n_head columns attend, each position to itself and the
    positions before it, and ``c_proj`` mixes the merged heads.

    ``attention``: ``"materialised"`` (Phase 7: the T x T scores and probabilities in float32 device memory,
    products under autocast in 16 bits) or ``"flash"`` (Phase 8b: the learner's FlashAttention, head dims 64
    or 128, in the autocast dtype, or bfloat16 when no ``amp.autocast`` region is active; never the T x T
    matrix). ``dropout``: while training, each attention probability is dropped with this probability, as
    nanoGPT's ``attn_dropout``, from Phase 5's Philox, with a step counter in device memory that each training
    forward advances on the device (a step captured into a graph draws new masks on every replay). Materialised:
    the learner's ``dropout_apply`` (``recipe.cu``) on the probabilities, from ``attn_dropout``'s seed and
    counter; the backward regenerates the mask. Flash: inside the kernels, from this layer's seed and an offset
    that the kernels read from the counter.
    """

    def __init__(self, d_model: int, n_head: int, *, device: str | None = None, dtype: DTypeLike = None,
                 seed: int | None = None, attention: str = "materialised", dropout: float = 0.0) -> None:
        _positive("MultiHeadAttention", d_model=d_model, n_head=n_head)
        if d_model % n_head:
            raise ValueError(f"MultiHeadAttention: d_model = {d_model} must be a multiple of n_head = {n_head}")
        self.d_model, self.n_head = int(d_model), int(n_head)
        self.attention = _check_attention("MultiHeadAttention", attention, self.d_model, self.n_head)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError(f"MultiHeadAttention: dropout must be a probability in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        rng = np.random.default_rng(seed)
        seeds = rng.integers(0, 2**31, 2)
        self.c_attn = Linear(d_model, 3 * d_model, device=device, dtype=dtype, seed=int(seeds[0]))
        self.c_proj = Linear(d_model, d_model, device=device, dtype=dtype, seed=int(seeds[1]))
        self.dropout_seed = int(rng.integers(0, 2**62))  # drawn after the weights' seeds: those stay as they were
        # flash: training forwards that drew masks, the Philox offset of the latest (in device memory)
        self._dropout_step = (StepCounter(self.c_attn.weight.device) if self.dropout and self.attention == "flash"
                              else None)
        if self.dropout and self.attention == "materialised":  # nanoGPT's name; its counter lives on the device
            self.attn_dropout = Dropout(self.dropout, seed=self.dropout_seed, device=device)

    def forward(self, x: Tensor) -> Tensor:
        if not isinstance(x, Tensor) or x.ndim != 3 or x.shape[2] != self.d_model:
            got = x.shape if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"MultiHeadAttention(d_model={self.d_model}) expects x of shape (B, T, {self.d_model}), "
                             f"got {got}")
        # flash under autocast: Q | K | V stay rounded, as FlashAttention takes them (one conversion less each way)
        qkv = self.c_attn(x, keep_rounded=self.attention == "flash" and ops.autocast_dtype() is not None)
        if self.attention == "materialised":
            if not (self.dropout and self.training):
                return self.c_proj(functional.causal_self_attention(qkv, self.n_head))
            drop = self.attn_dropout
            return self.c_proj(functional.causal_self_attention(qkv, self.n_head, dropout_p=drop.p, seed=drop.seed,
                                                                step=drop.next_step(x.device)))
        p = self.dropout if self.training else 0.0
        offset = self._dropout_step.advance(x.device) if p and self._dropout_step is not None else 0
        # under autocast the output stays rounded: c_proj's product takes it as it is (one conversion less)
        return self.c_proj(functional.flash_self_attention(qkv, self.n_head, p, seed=self.dropout_seed,
                                                           offset=offset,
                                                           keep_rounded=ops.autocast_dtype() is not None))

    @property
    def dropout_steps(self) -> int:
        """How many training forwards drew attention masks (read from the device: a synchronisation)."""
        if hasattr(self, "attn_dropout"):  # materialised
            return self.attn_dropout.steps
        return 0 if self._dropout_step is None else self._dropout_step.count

    def extra_repr(self) -> str:
        flash = f", attention='flash', dropout={self.dropout:g}" if self.attention == "flash" else ""
        return f"d_model={self.d_model}, n_head={self.n_head}{flash}"


class TransformerBlock(Module):
    """A pre-norm block: x + attn(ln1(x)), then x + proj(gelu(fc(ln2(x)))), fc widening to 4 d_model. With
    ``dropout`` > 0, each residual branch passes through a Dropout before it is added (nanoGPT's
    ``resid_dropout`` and the MLP's dropout), and the attention drops its probabilities (``attn_dropout``)."""

    def __init__(self, d_model: int, n_head: int, *, device: str | None = None, dtype: DTypeLike = None,
                 seed: int | None = None, dropout: float = 0.0, attention: str = "materialised") -> None:
        rng = np.random.default_rng(seed)
        seeds = rng.integers(0, 2**31, 3)
        self.ln1 = LayerNorm(d_model, device=device, dtype=dtype)
        self.attn = MultiHeadAttention(d_model, n_head, device=device, dtype=dtype, seed=int(seeds[0]),
                                       attention=attention, dropout=dropout)
        self.ln2 = LayerNorm(d_model, device=device, dtype=dtype)
        self.fc = Linear(d_model, 4 * d_model, device=device, dtype=dtype, seed=int(seeds[1]))
        self.gelu = GELU()
        self.proj = Linear(4 * d_model, d_model, device=device, dtype=dtype, seed=int(seeds[2]))
        drop_seeds = rng.integers(0, 2**62, 2)  # drawn after the weights' seeds: those stay as they were
        self.attn_drop = Dropout(dropout, seed=int(drop_seeds[0]), device=device)
        self.mlp_drop = Dropout(dropout, seed=int(drop_seeds[1]), device=device)

    def forward(self, x: Tensor) -> Tensor:
        # x + dropout(branch), each in one kernel while training (Dropout.residual)
        x = self.attn_drop.residual(x, self.attn(self.ln1(x)))
        # under autocast GELU's output stays rounded: proj's product takes it as it is
        hidden = self.gelu(self.fc(self.ln2(x)), keep_rounded=ops.autocast_dtype() is not None)
        return self.mlp_drop.residual(x, self.proj(hidden))


class _TiedProjection(Function):
    """y = x @ Wᵀ for x (N, C) and a (V, C) table W: the tied head's logits, the table read transposed in
    place. dx = dy @ W; dW = dyᵀ @ x, which backprop adds to the embedding's own gradient of W. Under
    autocast dx runs in the forward's 16-bit dtype too (recorded at the forward, as MatMul does: the backward
    runs after the autocast region has closed); dW stays a float32 product on Phase 5's GEMM, which splits
    its K = N rows over many blocks: a (V, C) output has few tiles, and rows of V = 65 16-bit values rule out
    the tensor-core launcher's 16-byte loads (an H100 took 1.66 ms for it on hgemm.py's rung 5, a tenth of
    the nanoGPT step)."""

    @staticmethod
    def forward(ctx: Context, x: Tensor, weight: Tensor) -> Tensor:
        ctx.compute = c = ops.product_dtype(x.dtype)  # None outside autocast: float32 products, as before
        if c is None:
            ctx.save_for_backward(x, weight)
            return ops.matmul(x, weight, transpose_b=True)
        # the table rounded once a step: the forward's copy is the backward's dx operand too (the same bits as
        # rounding it again, one conversion less)
        w16 = ops.convert(weight, c)
        ctx.save_for_backward(x, w16)
        return ops.matmul(ops.convert(x, c), w16, transpose_b=True, out_dtype=DTYPE)

    @staticmethod
    def backward(ctx: Context, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x, weight = ctx.saved_tensors  # weight: the table, or its rounded copy under autocast
        c = ctx.compute
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = (ops.matmul(grad, weight) if c is None
                      else ops.matmul(ops.convert(grad, c), weight, out_dtype=DTYPE))
        if not ctx.needs_input_grad[1]:
            return grad_x, None
        # float32 (see the class); on a side branch of a captured graph where that is on
        # (ops.set_concurrent_weight_grads): the sum with the embedding's gradient waits for it
        with ops.weight_grad_branch(grad.device):
            return grad_x, ops.matmul(grad, x, transpose_a=True, compute_dtype=DTYPE if c is not None else None)


class TiedHead(Module):
    """The output head of a GPT whose token table is tied: logits = x @ tableᵀ + bias. It owns only the
    bias (``lm_head.bias``); the table is the token embedding's weight, passed in."""

    def __init__(self, vocab_size: int, *, device: str | None = None, dtype: DTypeLike = None) -> None:
        device = _check_device(device)
        self.bias = _parameter(np.zeros(vocab_size, check_dtype(dtype, device)), device)

    def forward(self, x: Tensor, table: Tensor) -> Tensor:
        lead, c = x.shape[:-1], x.shape[-1]
        y = _TiedProjection.apply(x.reshape(-1, c), table) + self.bias
        return y.reshape(*lead, table.shape[0])

    def extra_repr(self) -> str:
        return f"tied to wte, bias={self.bias.shape[0]}"


class GPT(Module):
    """A GPT over a vocabulary of ``vocab_size`` tokens and contexts of up to ``block_size`` positions:
    token and position embeddings, ``n_layer`` TransformerBlocks, a final LayerNorm and a Linear head.

    ``model(idx)``, idx int32 (B, T) with T <= block_size, returns the logits (B, T, vocab_size) of the token
    that follows each position. Parameters are named as the attributes: ``wte``, ``wpe``, ``blocks.<i>.…``,
    ``ln_f``, ``lm_head``.

    ``tie_weights``: the head multiplies by the token table's transpose (no ``lm_head.weight`` of its own;
    see the module's docstring). ``dropout``: the probability of zeroing an activation while training, after
    the embeddings, on each residual branch (attention's and the MLP's outputs) and on the attention
    probabilities, as nanoGPT's ``dropout``; 0 (the default) adds no kernel. ``model.train()`` / ``model.eval()`` switch it on and off.

    ``init``: ``"phase7"`` (the default: PyTorch's layer defaults, as above) or ``"gpt2"`` (GPT-2's and
    nanoGPT's: N(0, 0.02) weights and tables, the residual projections N(0, 0.02 / sqrt(2 n_layer)), zero
    biases; see ``_init_gpt2``); ``"init"`` is in ``config`` only when not the default.

    ``attention``: ``"materialised"`` (the default, Phase 7's attention) or ``"flash"`` (Phase 8b's
    FlashAttention: head dims d_model / n_head of 64 or 128, computed in the autocast dtype, or bfloat16 when
    no ``amp.autocast`` region is active). A flash model's ``config`` holds ``"attention": "flash"``, so
    ``GPT(**config)`` rebuilds it; a materialised model's config stays as it always was.
    """

    def __init__(self, vocab_size: int, block_size: int, d_model: int = 64, n_head: int = 4, n_layer: int = 2, *,
                 device: str | None = None, dtype: DTypeLike = None, seed: int | None = 0,
                 tie_weights: bool = False, dropout: float = 0.0, attention: str = "materialised",
                 init: str = "phase7") -> None:
        _positive("GPT", vocab_size=vocab_size, block_size=block_size, d_model=d_model, n_head=n_head,
                  n_layer=n_layer)
        self.vocab_size, self.block_size = int(vocab_size), int(block_size)
        self.d_model, self.n_head, self.n_layer = int(d_model), int(n_head), int(n_layer)
        if not isinstance(tie_weights, bool):
            raise TypeError(f"GPT: tie_weights must be True or False, got {tie_weights!r}")
        self.tie_weights = tie_weights
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError(f"GPT: dropout must be a probability in [0, 1), got {dropout!r}")
        self.dropout = float(dropout)
        self.attention = _check_attention("GPT", attention, self.d_model, self.n_head)
        if init not in INITS:
            raise ValueError(f"GPT: init must be one of {', '.join(map(repr, INITS))}, got {init!r}")
        self.init = str(init)
        rng = np.random.default_rng(seed)
        seeds = [int(s) for s in rng.integers(0, 2**31, n_layer + 3)]
        kw = {"device": device, "dtype": dtype}
        self.wte = Embedding(vocab_size, d_model, seed=seeds[0], std=d_model ** -0.5 if tie_weights else 1.0, **kw)
        self.wpe = Embedding(block_size, d_model, seed=seeds[1], std=d_model ** -0.5 if tie_weights else 1.0, **kw)
        self.drop = Dropout(self.dropout, seed=int(rng.integers(0, 2**62)), device=device)
        self.blocks = ModuleList(TransformerBlock(d_model, n_head, seed=seeds[3 + i], dropout=self.dropout,
                                                  attention=self.attention, **kw)
                                 for i in range(n_layer))
        self.ln_f = LayerNorm(d_model, **kw)
        self.lm_head: Linear | TiedHead = (TiedHead(vocab_size, **kw) if tie_weights
                                           else Linear(d_model, vocab_size, seed=seeds[2], **kw))
        if self.init == "gpt2":
            self._init_gpt2(seed)
        # The position ids 0..T-1, made once per (device, T): a captured step may not copy them in.
        self._position_ids: dict[tuple[str, int], Tensor] = {}
        self._positions(self.block_size)

    def _init_gpt2(self, seed: int | None) -> None:
        """GPT-2's (and nanoGPT's) initial values, drawn from ``seed`` (a stream of its own): every Linear
        weight and both embedding tables N(0, 0.02); the residual branches' last projections (``attn.c_proj``,
        the MLP's ``proj``) N(0, 0.02 / sqrt(2 n_layer)), so that the residual stream's variance does not grow
        with depth; biases 0; LayerNorm 1 and 0 (as made)."""
        rng = np.random.default_rng(None if seed is None else [int(seed), 2])
        residual = GPT2_STD / math.sqrt(2 * self.n_layer)

        def normal(t: Tensor, std: float) -> None:
            _assign(t, rng.standard_normal(t.shape) * std)

        normal(self.wte.weight, GPT2_STD)
        normal(self.wpe.weight, GPT2_STD)
        for layer in self._linear_layers():
            is_residual = any(layer is b.attn.c_proj or layer is b.proj for b in self.blocks)
            normal(layer.weight, residual if is_residual else GPT2_STD)
            if layer.bias is not None:
                _assign(layer.bias, np.zeros(layer.bias.shape))
        if isinstance(self.lm_head, TiedHead):
            _assign(self.lm_head.bias, np.zeros(self.lm_head.bias.shape))

    @property
    def config(self) -> dict[str, int | bool | str]:
        config: dict[str, int | bool | str] = {"vocab_size": self.vocab_size, "block_size": self.block_size,
                                         "d_model": self.d_model, "n_head": self.n_head, "n_layer": self.n_layer}
        if self.tie_weights:  # an untied model's config stays as it always was
            config["tie_weights"] = True
        if self.attention == "flash":  # likewise: a materialised model's config is Phase 7's
            config["attention"] = "flash"
        if self.init != "phase7":  # likewise (the initial values do not change what the parameters mean)
            config["init"] = self.init
        return config

    def optimizer_groups(self, weight_decay: float) -> list[dict[str, Any]]:
        """The parameters in two groups for AdamW, as nanoGPT and minGPT make them: the matrices of the Linear
        layers decay by ``weight_decay``; biases, LayerNorm weights and the embedding tables (the tied head's
        too) do not: decaying a gain or an offset towards 0 only fights the normalisation, and a token's row
        gets gradients only when the token occurs, so decay would erase rare tokens."""
        matrices = {id(m.weight) for m in self._linear_layers()}
        decay = [p for p in self.parameters() if id(p) in matrices]
        rest = [p for p in self.parameters() if id(p) not in matrices]
        return [{"params": decay, "weight_decay": float(weight_decay)}, {"params": rest, "weight_decay": 0.0}]

    def _linear_layers(self) -> list[Linear]:
        layers = [layer for block in self.blocks
                  for layer in (block.attn.c_attn, block.attn.c_proj, block.fc, block.proj)]
        return layers + ([self.lm_head] if isinstance(self.lm_head, Linear) else [])

    def _positions(self, t: int) -> Tensor:
        device = self.wpe.weight.device
        ids = self._position_ids.get((device, t))
        if ids is None:
            ids = self._position_ids[(device, t)] = from_numpy(np.arange(t, dtype=INDEX), device)
        return ids

    def to(self, device: str) -> GPT:
        super().to(device)
        self._positions(self.block_size)
        return self

    def _embed(self, idx: Tensor) -> Tensor:
        """Token plus position embeddings of idx (B, T): (B, T, d_model)."""
        if not isinstance(idx, Tensor) or idx.dtype != INDEX or idx.ndim != 2:
            got = f"{idx.dtype} {idx.shape}" if isinstance(idx, Tensor) else type(idx).__name__
            raise TypeError(f"GPT expects int32 token ids of shape (B, T) (minitorch.tensor(ids, dtype='int32')), "
                            f"got {got}")
        batch, t = idx.shape
        if not 1 <= t <= self.block_size:
            raise ValueError(f"GPT: a context of 1 to block_size = {self.block_size} positions, got T = {t}")
        c = self.d_model
        tok = self.wte(idx)                                  # (B, T, C)
        pos = self.wpe(self._positions(t))                   # (T, C), the same for every sequence
        return (tok.reshape(batch, t * c) + pos.reshape(t * c)).reshape(batch, t, c)  # a bias of T*C values

    def _head(self, x: Tensor) -> Tensor:
        if isinstance(self.lm_head, TiedHead):
            return self.lm_head(x, self.wte.weight)
        return self.lm_head(x)

    def forward(self, idx: Tensor) -> Tensor:
        x = self.drop(self._embed(idx))
        for block in self.blocks:
            x = block(x)
        return self._head(self.ln_f(x))                      # (B, T, vocab)

    def attention_maps(self, idx: Tensor) -> list[np.ndarray]:
        """The attention probabilities of every layer for idx (B, T): one host array (B, n_head, T, T) per
        layer, row t the weights query t gives keys 0..t (not recorded for autograd)."""
        with no_grad():
            x = self._embed(idx)                             # no dropout: the maps of the model itself
            maps = []
            for block in self.blocks:
                _, saved = ops.attention(block.attn.c_attn(block.ln1(x)), self.n_head)
                maps.append(saved[3].numpy().reshape(idx.shape[0], self.n_head, idx.shape[1], idx.shape[1]))
                x = block.eval()(x)
                block.train(self.training)
        return maps

    def generate(self, idx: Any, n: int, temperature: float = 1.0, *, seed: int | None = None,
                 use_cache: bool = True) -> Tensor:
        """``idx`` (B, T0) followed by ``n`` sampled tokens: (B, T0 + n) int32 ids on the model's device.

        Each new token is drawn from softmax(logits / temperature) of the last position, the context cropped
        to the last block_size tokens; ``temperature=0`` takes the most likely token. Sampling runs on the
        host from ``seed`` (NumPy), in float64.

        ``use_cache``: keep the keys and values of earlier positions on the device and compute one new
        position a token (:mod:`minitorch.nn.kv_cache`; a graph replayed per token on cuda and emu) while
        the sequence fits in block_size; past it, recompute the cropped window each token (captured too).
        The same kernels compute the same scores, so the tokens are those of ``use_cache=False`` for the
        same seed, unless a logit's last-bit rounding (matrix products of 1 row instead of T) moves a draw
        across a boundary of the cumulative distribution.
        """
        ids = idx.numpy() if isinstance(idx, Tensor) else np.asarray(idx)
        if ids.ndim == 1:
            ids = ids[None, :]
        if ids.ndim != 2 or ids.shape[1] < 1 or ids.dtype.kind not in "iu":
            raise ValueError(f"generate: idx must be integer ids of shape (B, T0) with T0 >= 1, got "
                             f"{ids.dtype} {ids.shape}")
        if ids.size and (ids.min() < 0 or ids.max() >= self.vocab_size):
            raise ValueError(f"generate: ids must be in [0, {self.vocab_size}), got {ids.min()} to {ids.max()}")
        if not (isinstance(n, (int, np.integer)) and n >= 0):
            raise ValueError(f"generate: n must be a non-negative integer, got {n!r}")
        if not (temperature >= 0 and math.isfinite(temperature)):
            raise ValueError(f"generate: temperature must be >= 0, got {temperature!r}")
        device = self.wte.weight.device
        rng = np.random.default_rng(seed)
        ids = ids.astype(INDEX)
        training = self.training
        self.eval()  # sampling never drops: the model's own predictions
        try:
            with no_grad():
                if use_cache and n:
                    return from_numpy(self._generate_cached(ids, n, temperature, rng), device)
                for _ in range(n):
                    context = from_numpy(np.ascontiguousarray(ids[:, -self.block_size:]), device)
                    logits = self(context).numpy()[:, -1, :].astype(np.float64)
                    ids = np.concatenate([ids, sample_next(logits, temperature, rng)[:, None]], axis=1)
            return from_numpy(ids, device)
        finally:
            self.train(training)

    def _generate_cached(self, ids: np.ndarray, n: int, temperature: float, rng: np.random.Generator) -> np.ndarray:
        decoder = KVCacheDecoder(self, ids.shape[0])
        fed = 0                                            # positions in the cache
        for _ in range(n):
            length = ids.shape[1]
            if length <= self.block_size:                  # feed the tokens the cache lacks, one a step
                while fed < length:
                    logits = decoder.step(ids[:, fed], fed)
                    fed += 1
            else:                                          # the context is full: the cropped window
                logits = decoder.window(ids[:, -self.block_size:])
            ids = np.concatenate([ids, sample_next(logits, temperature, rng)[:, None]], axis=1)
        return ids

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.config.items())


def sample_next(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> np.ndarray:
    """One id per row of logits (B, vocab): argmax when temperature is 0, else a draw from
    softmax(logits / temperature) by inverting its cumulative sum at one uniform number per row."""
    if temperature == 0:
        return np.argmax(logits, axis=1).astype(INDEX)
    z = logits / temperature
    p = np.exp(z - z.max(axis=1, keepdims=True))
    cdf = np.cumsum(p / p.sum(axis=1, keepdims=True), axis=1)
    u = rng.random(len(logits))
    return np.minimum((cdf < u[:, None]).sum(axis=1), logits.shape[1] - 1).astype(INDEX)
