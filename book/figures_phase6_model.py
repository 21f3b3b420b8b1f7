"""The size and arithmetic of Phase 6's MNIST network, computed at build time from its layers, for the chapter's
sentences about them (no run measures a count: it follows from the layers).

``LAYERS`` is ``mnist_cnn()`` of ``benchmarks/phase6_mnist.py`` (and of the lab); ``tests/test_measured_numbers.py``
checks the parameter count against that model built by minitorch. The batch size is the committed MNIST run's.
"""

from __future__ import annotations

# (kind, in, out, filter size, output height = width): the convolutions keep their input's size (padding 1)
LAYERS = [("conv", 1, 8, 3, 28), ("conv", 8, 16, 3, 14), ("linear", 784, 64), ("linear", 64, 10)]


def parameters() -> int:
    """Weights and biases of every layer (pooling, ReLU and Flatten have none)."""
    total = 0
    for kind, fan_in, out, *shape in LAYERS:
        weights = fan_in * out * (shape[0] ** 2 if kind == "conv" else 1)
        total += weights + out
    return total


def forward_flops_per_image() -> int:
    """Two operations (a multiply and an add) per weight use: a convolution's weights are used at every output
    position, a linear layer's once. ReLU, pooling and the loss, a few thousand operations, are left out."""
    total = 0
    for kind, fan_in, out, *shape in LAYERS:
        total += 2 * fan_in * out * (shape[0] ** 2 * shape[1] ** 2 if kind == "conv" else 1)
    return total


def phase6_model_text(name: str = "phase6-model-size") -> None:
    """'It has N parameters, and a training step on a batch of B images is about F MFLOP (...)'."""
    from figures import glue_md, latest  # matplotlib: only when the book is built

    res = latest("phase6_mnist")
    batch = 64
    if res is not None:
        import json

        batch = int(json.loads(res.path.read_text()).get("batch_size", batch))
    forward = forward_flops_per_image()
    step = 3 * forward * batch  # the backward pass does about twice the forward's arithmetic
    glue_md(name, f"It has {parameters():,} parameters, and a training step on a batch of {batch} images is about "
                  f"{step / 1e6:.0f} MFLOP (the forward pass, {forward / 1e6:.2f} MFLOP an image, and a backward pass "
                  f"twice as large)")
