"""Primitive operations on tensors, without autograd: the layer between Tensors and the learner's kernels.

On ``cpu`` each primitive is NumPy, in the tensors' own dtype (float32, or float64 for gradient checks):
the reference path. On ``cuda`` and ``emu`` it allocates the output and calls the learner's launcher
(``kernels.load_module("<file>.py").<function>(...)``, ARCHITECTURE.md "Phases 2–4"), so every number
comes out of the learner's CUDA C. A launcher that is not written yet raises ``KernelNotWrittenError``
naming the lab cell that writes it.

Inputs are checked here, before any launch: a shape, dtype or device mismatch raises ``ValueError`` or
``TypeError`` naming what was expected and what came. An empty output launches nothing.
"""

from minitorch.ops.attention import (
    AttentionDropout,
    attention,
    attention_backward,
    attention_softmax,
    attention_softmax_backward,
    bmm,
    merge_heads,
    split_heads,
)
from minitorch.ops.clip import clip_by_global_norm_
from minitorch.ops.conv import conv2d, conv2d_backward_input, conv2d_backward_weight, conv2d_bias_grad
from minitorch.ops.dispatch import on_device, set_concurrent_weight_grads, weight_grad_branch
from minitorch.ops.dropout import step_slot as dropout_step_slot
from minitorch.ops.elementwise import add, add_bias, mul, relu, relu_backward, scalar_mul, sigmoid, sigmoid_backward
from minitorch.ops.embedding import embedding, embedding_backward
from minitorch.ops.flash import flash_attention, flash_attention_backward
from minitorch.ops.gelu import gelu, gelu_backward
from minitorch.ops.kv_cache import cached_attention, write_position_
from minitorch.ops.layernorm import layer_norm, layer_norm_backward
from minitorch.ops.linalg import matmul, product_dtype, set_hgemm_variant, set_split_k, transpose
from minitorch.ops.loss import mse_backward, mse_loss
from minitorch.ops.optim import sgd_momentum_
from minitorch.ops.pooling import max_pool2d, max_pool2d_backward
from minitorch.ops.precision import (
    autocast_dtype,
    column_sums_16bit,
    convert,
    convert_with_column_sums,
    restore_if_found_,
    scale_by_,
    set_autocast_dtype,
    unscale_check_,
    update_scale_,
)
from minitorch.ops.reduce import bias_grad, column_mean_var, max, sum  # noqa: A004 (the operations' names)
from minitorch.ops.shape import expand, reshape
from minitorch.ops.softmax import (
    class_indices,
    cross_entropy,
    cross_entropy_backward,
    log_softmax,
    log_softmax_backward,
    softmax,
    softmax_backward,
)

__all__ = [
    "add", "add_bias", "bias_grad", "column_mean_var", "expand", "matmul", "max", "mse_backward", "mse_loss",
    "mul", "on_device", "relu", "relu_backward", "reshape", "scalar_mul", "sgd_momentum_", "sigmoid",
    "sigmoid_backward", "sum", "transpose",
    # Phase 6
    "class_indices", "cross_entropy", "cross_entropy_backward", "log_softmax", "log_softmax_backward", "softmax",
    "softmax_backward", "conv2d", "conv2d_backward_input", "conv2d_backward_weight", "conv2d_bias_grad", "max_pool2d",
    "max_pool2d_backward",
    # Phase 7
    "AttentionDropout", "attention", "attention_backward", "bmm", "dropout_step_slot", "clip_by_global_norm_", "embedding", "embedding_backward", "gelu",
    "gelu_backward", "layer_norm", "layer_norm_backward", "merge_heads", "attention_softmax", "attention_softmax_backward",
    "split_heads",
    # Phase 8a
    "autocast_dtype", "column_sums_16bit", "convert", "convert_with_column_sums", "product_dtype", "restore_if_found_", "scale_by_", "set_autocast_dtype", "unscale_check_",
    "update_scale_",
    # KV-cached generation
    "cached_attention", "write_position_",
    # Phase 8b
    "flash_attention", "flash_attention_backward", "set_concurrent_weight_grads", "set_hgemm_variant", "set_split_k",
    "weight_grad_branch",
]
