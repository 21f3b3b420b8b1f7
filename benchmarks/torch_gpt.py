"""The GPT of Phases 7 and 8b in PyTorch, for the benchmarks that race minitorch's (``phase7_gpt.py``,
``phase7_step_profile.py``, ``phase8a_amp.py``, ``phase8b_nanogpt.py``): the model, the copy of minitorch's
weights into it, and AdamW over minitorch's parameter groups."""

from __future__ import annotations

import numpy as np


def torch_gpt(config: dict, vocab: int, device: str, tie: bool, dropout: float, attention_dropout: float = 0.0):
    """minitorch's ``nn.GPT`` in PyTorch (its own modules, ``scaled_dot_product_attention``), parameters named as
    minitorch's (``load_weights`` copies them): dropout ``dropout`` after the embeddings and on both residual
    branches, as ``nn.GPT`` places it, and ``attention_dropout`` on the attention probabilities while training
    (SDPA's ``dropout_p``: Phase 8b's FlashAttention drops them, Phase 7's materialised attention does not); with
    ``tie`` the head is the token table (``lm_head.weight`` is ``wte.weight``), as nanoGPT ties them."""
    import torch
    import torch.nn.functional as TF  # noqa: N812

    class Attention(torch.nn.Module):
        def __init__(self, c: int, h: int) -> None:
            super().__init__()
            self.h, self.c_attn, self.c_proj = h, torch.nn.Linear(c, 3 * c), torch.nn.Linear(c, c)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, self.h, c // self.h).transpose(1, 2) for z in self.c_attn(x).split(c, dim=2))
            p = attention_dropout if self.training else 0.0
            y = TF.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)
            return self.c_proj(y.transpose(1, 2).reshape(b, t, c))

    class Block(torch.nn.Module):
        def __init__(self, c: int, h: int) -> None:
            super().__init__()
            self.ln1, self.attn, self.ln2 = torch.nn.LayerNorm(c), Attention(c, h), torch.nn.LayerNorm(c)
            self.fc, self.proj = torch.nn.Linear(c, 4 * c), torch.nn.Linear(4 * c, c)
            self.attn_drop, self.mlp_drop = torch.nn.Dropout(dropout), torch.nn.Dropout(dropout)

        def forward(self, x):
            x = x + self.attn_drop(self.attn(self.ln1(x)))
            return x + self.mlp_drop(self.proj(TF.gelu(self.fc(self.ln2(x)), approximate="tanh")))

    class GPT(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            c = config["d_model"]
            self.wte, self.wpe = torch.nn.Embedding(vocab, c), torch.nn.Embedding(config["block_size"], c)
            self.blocks = torch.nn.ModuleList(Block(c, config["n_head"]) for _ in range(config["n_layer"]))
            self.ln_f, self.lm_head = torch.nn.LayerNorm(c), torch.nn.Linear(c, vocab)
            self.drop = torch.nn.Dropout(dropout)
            if tie:  # one (vocab, C) table: nn.Linear keeps its weight as (out, in), the embedding's layout
                self.lm_head.weight = self.wte.weight

        def forward(self, idx):
            x = self.drop(self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device)))
            for block in self.blocks:
                x = block(x)
            return self.lm_head(self.ln_f(x))

    return GPT().to(device)


def load_weights(net, model) -> None:
    """Copy the minitorch model's parameters into the PyTorch one (a Linear weight is stored transposed there)."""
    import torch

    state = {}
    for name, p in model.named_parameters():
        value = p.numpy()
        linear = value.ndim == 2 and not name.startswith(("wte.", "wpe."))
        state[name] = torch.from_numpy(np.ascontiguousarray(value.T if linear else value))
    if model.tie_weights:  # PyTorch's state dict names the shared table twice
        state["lm_head.weight"] = state["wte.weight"]
    net.load_state_dict(state, strict=True)  # every name and shape must match


def torch_optimizer(net, model, weight_decay: float, schedule, **kw):
    """PyTorch's AdamW over the same two groups as minitorch's (``model.optimizer_groups``: the Linear matrices
    decay, nothing else), and a LambdaLR giving PyTorch's step k the rate ``schedule`` (minitorch's WarmupCosine)
    gives minitorch's step k + 1. A float lr, as LambdaLR sets it: in a captured step the rate is frozen (PyTorch
    would need it on the device, as minitorch's lr_schedule keeps it). ``kw``: AdamW's other arguments."""
    import torch

    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in model.optimizer_groups(weight_decay)[0]["params"]}
    params = dict(net.named_parameters())  # a tied table once, as wte.weight
    groups = [{"params": [p for n, p in params.items() if n in decayed], "weight_decay": weight_decay},
              {"params": [p for n, p in params.items() if n not in decayed], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=schedule.max_lr, **kw)
    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda k: schedule.lr(k + 1) / schedule.max_lr)
