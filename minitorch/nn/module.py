"""``Module`` (parameters, state dicts, save/load) and the containers that hold modules (``Sequential``,
``ModuleList``).

A module's parameters are the tensors with ``requires_grad=True`` among its attributes, and those of
its sub-modules (attributes that are modules, or lists, tuples and dicts of them), found in the order
they were assigned.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from minitorch import backend, dtypes
from minitorch.tensor import HALF, Tensor, _check_device, check_dtype, from_numpy, names_a_device

__all__ = ["DTYPE_SUFFIX", "Module", "ModuleList", "Sequential"]

DTYPE_SUFFIX = ":dtype"  # state-dict entry beside a bfloat16 parameter's bits: "name:dtype" -> "bfloat16"


class Module:
    """Base class of layers and models: subclass it and write ``forward``; call the module to run it."""

    training = True  # train() / eval(): layers that behave differently (Dropout) read it

    def forward(self, *args: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    # --- parameters -----------------------------------------------------------------------------
    def _children(self) -> Iterator[tuple[str, Any]]:
        for name, value in vars(self).items():
            if isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    yield f"{name}.{i}", item
            elif isinstance(value, dict):
                for key, item in value.items():
                    yield f"{name}.{key}", item
            else:
                yield name, value

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """(dotted name, tensor) for every parameter, recursively; a shared tensor appears once."""
        seen: set[int] = set()
        for name, t in self._named_parameters(prefix):
            if id(t) not in seen:
                seen.add(id(t))
                yield name, t

    def _named_parameters(self, prefix: str) -> Iterator[tuple[str, Tensor]]:
        for name, value in self._children():
            if isinstance(value, Tensor) and value.requires_grad:
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value._named_parameters(f"{prefix}{name}.")

    def parameters(self) -> Iterator[Tensor]:
        """Every parameter of this module and its sub-modules (for an optimizer)."""
        for _, t in self.named_parameters():
            yield t

    def train(self, mode: bool = True) -> Module:
        """Set training mode (``mode=True``) or eval mode on this module and every sub-module, as PyTorch's."""
        self.training = bool(mode)
        for _, value in self._children():
            if isinstance(value, Module):
                value.train(mode)
        return self

    def eval(self) -> Module:
        """Eval mode: ``train(False)`` (Dropout becomes the identity)."""
        return self.train(False)

    def zero_grad(self) -> None:
        """Forget the accumulated gradients (``.grad = None``)."""
        for t in self.parameters():
            t.grad = None

    def _to_device(self, device: str) -> None:
        device = _check_device(device)
        for t in self.parameters():
            if t.device != device:
                check_dtype(t.dtype, device, allow_half=True)
                t._data = backend.get_backend(device).asarray(backend.get_backend(t.device).asnumpy(t._data))
                t._device = device
                t.grad = None

    # --- state ----------------------------------------------------------------------------------
    def to(self, target: Any = None, *, device: str | None = None, dtype: Any = None) -> Module:
        """Move every parameter to a device (``"cpu"``) and/or convert it to a dtype (``minitorch.bfloat16``),
        in place (the tensors stay the same objects; their gradients are dropped)."""
        if target is not None:
            if names_a_device(target):
                device = target
            else:
                dtype = target
        if device is not None:
            self._to_device(device)
        if dtype is not None:
            dt = check_dtype(dtype, "cpu" if dtype == "float64" else next(
                (p.device for p in self.parameters()), "cpu"), allow_half=True)
            for t in self.parameters():
                if t.dtype != dt:
                    t._data = t.detach().to(dtype=dt)._data
                    t.grad = None
        return self

    def state_dict(self) -> dict[str, np.ndarray]:
        """{name: host copy of the parameter}: float32 (float64, float16) arrays as they are; a bfloat16
        parameter as its uint16 bits, with an entry ``name + DTYPE_SUFFIX`` holding ``"bfloat16"`` (NumPy has
        no bfloat16; the record says how to read the bits back)."""
        state: dict[str, np.ndarray] = {}
        for name, t in self.named_parameters():
            if t.dtype is dtypes.bfloat16:
                state[name] = t.bits()
                state[name + DTYPE_SUFFIX] = np.array("bfloat16")
            else:
                state[name] = t.numpy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Copy values into the parameters (same names, same shapes)."""
        params = dict(self.named_parameters())
        records = {k[:-len(DTYPE_SUFFIX)]: str(np.asarray(v)) for k, v in state.items() if k.endswith(DTYPE_SUFFIX)}
        state = {k: v for k, v in state.items() if not k.endswith(DTYPE_SUFFIX)}
        for name, kind in records.items():
            if kind != "bfloat16" or name not in state:
                raise ValueError(f"load_state_dict: the record {name + DTYPE_SUFFIX!r} says {kind!r}; expected "
                                 f"'bfloat16' beside the bits of a parameter {name!r}")
        missing = sorted(set(params) - set(state))
        unexpected = sorted(set(state) - set(params))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing {missing or 'nothing'}, unexpected {unexpected or 'nothing'} "
                           f"(this {type(self).__name__} has {sorted(params)})")
        for name, t in params.items():
            value = np.asarray(state[name])
            if value.shape != t.shape:
                raise ValueError(f"load_state_dict: {name} has shape {t.shape}, the state has {value.shape}")
            if name in records:  # bfloat16 bits
                if value.dtype != np.uint16:
                    raise ValueError(f"load_state_dict: {name} is recorded as bfloat16 bits (uint16), the state holds "
                                     f"{value.dtype}")
                value = dtypes.bits_to_float32(value, dtypes.bfloat16)  # exact
            _assign(t, value)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the parameters to a NumPy ``.npz`` file."""
        np.savez(path, **self.state_dict())

    def load(self, path: str | os.PathLike[str]) -> Module:
        """Read parameters written by :meth:`save` (``.npz`` may be left out of the name)."""
        path = os.fspath(path)
        if not os.path.exists(path) and os.path.exists(path + ".npz"):
            path += ".npz"
        with np.load(path) as data:
            self.load_state_dict({k: data[k] for k in data.files})
        return self

    def __repr__(self) -> str:
        inner = [f"  ({name}): {value!r}".replace("\n", "\n  ") for name, value in self._children()
                 if isinstance(value, Module)]
        return f"{type(self).__name__}(" + ("\n" + "\n".join(inner) + "\n" if inner else self.extra_repr()) + ")"

    def extra_repr(self) -> str:
        return ""


def _assign(t: Tensor, value: np.ndarray) -> None:
    """Replace a parameter's values from the host, keeping the tensor object (optimizers hold it). Values
    for a 16-bit parameter are rounded to it as ``.to(dtype)`` rounds (exact when they came from it)."""
    if t.dtype in HALF:
        t._data = from_numpy(np.ascontiguousarray(value, dtype=np.float32), t.device, dtype=t.dtype)._data
        return
    value = np.ascontiguousarray(value, dtype=t.dtype)
    if value.shape == t.shape:  # in place: a flat optimizer's view (optim) or a captured graph keeps reading it
        t.copy_from(value)
        return
    t._data = backend.get_backend(t.device).asarray(value)


class Sequential(Module):
    """Modules applied in order: ``Sequential(Linear(4, 8), ReLU(), Linear(8, 1))(x)``.

    Parameters are named by position (``0.weight``, ``2.bias``), as in PyTorch, so a state dict of a
    Sequential loads into another Sequential of the same layers. Indexing with an integer gives a
    layer; a slice gives a new Sequential sharing those layers.
    """

    def __init__(self, *modules: Module) -> None:
        for i, m in enumerate(modules):
            if not isinstance(m, Module):
                raise TypeError(f"Sequential: argument {i} is a {type(m).__name__}, not a minitorch nn.Module")
        self._modules: dict[str, Module] = {str(i): m for i, m in enumerate(modules)}

    def _children(self) -> Iterator[tuple[str, Any]]:
        yield from self._modules.items()

    def forward(self, x: Any) -> Any:
        for m in self._modules.values():
            x = m(x)
        return x

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules.values()))

    def __getitem__(self, index: int | slice) -> Module:
        layers = list(self._modules.values())
        if isinstance(index, slice):
            return Sequential(*layers[index])
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"Sequential indices must be integers or slices, got {type(index).__name__}")
        if not -len(layers) <= index < len(layers):
            raise IndexError(f"Sequential index {index} out of range for {len(layers)} layers")
        return layers[index]

    def append(self, module: Module) -> Sequential:
        if not isinstance(module, Module):
            raise TypeError(f"Sequential.append: expected a minitorch nn.Module, got {type(module).__name__}")
        self._modules[str(len(self._modules))] = module
        return self


class ModuleList(Module):
    """A list of modules whose parameters belong to the module that holds it (named ``0.``, ``1.``, ...
    as in PyTorch): ``self.blocks = ModuleList(Block() for _ in range(n))``, then
    ``for block in self.blocks: x = block(x)``. It has no forward of its own."""

    def __init__(self, modules: Iterable[Module] = ()) -> None:
        self._modules: list[Module] = []
        for m in modules:
            self.append(m)

    def _children(self) -> Iterator[tuple[str, Any]]:
        for i, m in enumerate(self._modules):
            yield str(i), m

    def append(self, module: Module) -> ModuleList:
        if not isinstance(module, Module):
            raise TypeError(f"ModuleList: expected a minitorch nn.Module, got {type(module).__name__}")
        self._modules.append(module)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(list(self._modules))

    def __getitem__(self, index: int) -> Module:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"ModuleList indices must be integers, got {type(index).__name__}")
        if not -len(self._modules) <= index < len(self._modules):
            raise IndexError(f"ModuleList index {index} out of range for {len(self._modules)} modules")
        return self._modules[index]
