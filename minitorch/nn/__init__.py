"""Layers (PyTorch's ``torch.nn``), one module per topic: ``module`` (Module, Sequential), ``linear``,
``activation``. Later phases add their own files here (convolution, pooling, transformer blocks)."""

from minitorch.nn.activation import ReLU, Sigmoid
from minitorch.nn.conv import Conv2d, Flatten, MaxPool2d
from minitorch.nn.deliverable import save_deliverable
from minitorch.nn.dropout import Dropout, StepCounter
from minitorch.nn.linear import Linear
from minitorch.nn.module import Module, ModuleList, Sequential
from minitorch.nn.transformer import GELU, GPT, Embedding, LayerNorm, MultiHeadAttention, TransformerBlock

__all__ = ["Linear", "Module", "ReLU", "Sequential", "Sigmoid", "save_deliverable",
           # Phase 6
           "Conv2d", "Flatten", "MaxPool2d"]
__all__ += ["GELU", "GPT", "Dropout", "Embedding", "LayerNorm", "ModuleList", "MultiHeadAttention",  # Phase 7
            "TransformerBlock"]
__all__ += ["StepCounter"]  # Phase 8b: the dropout counter that FlashAttention's kernels read too
