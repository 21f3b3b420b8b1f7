"""Optimizers: ``SGD`` with momentum (the learner's ``sgd_momentum`` kernel on cuda/emu, NumPy on cpu),
``Adam`` and ``AdamW`` (the learner's fused ``adam_update`` kernel of Phase 5 on cuda/emu, NumPy on cpu).

``Adam(..., flat=True)`` / ``AdamW(..., flat=True)`` move the parameters into one flat buffer (and their
gradients, m and v into three more): each parameter's values become a view of it, a gradient that backward
assigns is copied into the parameter's view of the gradient buffer, and a step updates the whole buffer
with one ``adam_update`` launch per weight decay (scheduled: one ``scale_by`` for the decaying part and one
``adam_update``), as :func:`clip_grad_norm_` clips it with three launches, however many parameters there
are. The buffers are made once: their addresses stay fixed, so a captured step keeps working."""

from __future__ import annotations

import math
import numbers
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from minitorch import backend, ops
from minitorch.ops.dispatch import launch
from minitorch.tensor import Tensor

__all__ = ["SGD", "Adam", "AdamW", "FlatParameters", "WarmupCosine", "clip_grad_norm_"]


class SGD:
    """Stochastic gradient descent with momentum, as PyTorch's ``torch.optim.SGD`` (no dampening):

        v = momentum * v + grad
        param = param - lr * v

    With ``momentum=0`` this is plain gradient descent. ``step()`` updates every parameter that has a
    gradient, in place; ``zero_grad()`` forgets the gradients before the next backward.
    """

    def __init__(self, params: Iterable[Tensor], lr: float, momentum: float = 0.0) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("SGD got an empty parameter list (did the model create its layers?)")
        for i, p in enumerate(self.params):
            if not isinstance(p, Tensor):
                raise TypeError(f"SGD: parameter {i} is a {type(p).__name__}, not a minitorch Tensor")
            if not p.requires_grad or not p.is_leaf:
                raise ValueError(f"SGD: parameter {i} (shape {p.shape}) must be a leaf tensor with requires_grad=True")
        for name, value, ok in (("lr", lr, lambda v: v > 0), ("momentum", momentum, lambda v: 0 <= v < 1)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok(value):
                raise ValueError(f"SGD: {name} must be a number {'> 0' if name == 'lr' else 'in [0, 1)'}, got {value!r}")
        self.lr, self.momentum = float(lr), float(momentum)
        # One zeroed buffer per parameter, made now rather than at the first step: a step captured
        # into a graph (minitorch.graph) must not zero its own state on every replay.
        self.velocity: dict[int, Tensor] = {id(p): self._zeros_like(p) for p in self.params}

    @staticmethod
    def _zeros_like(p: Tensor) -> Tensor:
        return Tensor(backend.get_backend(p.device).zeros(p.shape, p.dtype), p.device)

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            v = self.velocity.get(id(p))
            if v is None or v.device != p.device:  # the model moved to another device since
                v = self.velocity[id(p)] = self._zeros_like(p)
            ops.sgd_momentum_(p, p.grad, v, self.lr, self.momentum)


def _parameter_groups(name: str, params: Iterable[Any], weight_decay: float) -> list[dict[str, Any]]:
    """[{"params": [tensors], "weight_decay": float}, ...] from a list of tensors (one group) or of dicts."""
    items = list(params)
    if not items or not all(isinstance(g, dict) for g in items):
        return [{"params": _check_params(name, items), "weight_decay": weight_decay}]
    groups, seen = [], set()
    for i, g in enumerate(items):
        unknown = set(g) - {"params", "weight_decay"}
        if "params" not in g or unknown:
            raise ValueError(f"{name}: parameter group {i} must hold 'params' (and may hold 'weight_decay'); got "
                             f"the keys {sorted(g)}")
        ps = _check_params(f"{name} (group {i})", g["params"])
        twice = [p.shape for p in ps if id(p) in seen]
        if twice:
            raise ValueError(f"{name}: parameter group {i} repeats parameters of an earlier group (shapes {twice}): "
                             f"each parameter belongs to one group")
        seen.update(id(p) for p in ps)
        wd = _check_real(name, f"weight_decay of group {i}", g.get("weight_decay", weight_decay),
                         lambda x: x >= 0, ">= 0")
        groups.append({"params": ps, "weight_decay": wd})
    return groups


def _check_params(name: str, params: Iterable[Tensor]) -> list[Tensor]:
    params = list(params)
    if not params:
        raise ValueError(f"{name} got an empty parameter list (did the model create its layers?)")
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{name}: parameter {i} is a {type(p).__name__}, not a minitorch Tensor")
        if not p.requires_grad or not p.is_leaf:
            raise ValueError(f"{name}: parameter {i} (shape {p.shape}) must be a leaf tensor with requires_grad=True")
    return params


def _check_real(opt: str, name: str, value: float, ok: Callable[[float], bool], what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or not ok(value):
        raise ValueError(f"{opt}: {name} must be a number {what}, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class WarmupCosine:
    """nanoGPT's learning-rate schedule, by Adam's step t (1 for the first step), it = t - 1: a linear warmup,
    max_lr (it + 1) / (warmup + 1) while it < warmup; then a cosine from max_lr to min_lr over the steps up to
    ``total``; min_lr after. On cuda/emu the rate is computed on the device every step (the learner's
    ``lr_schedule`` kernel, Phase 7's ``recipe.cu``): a captured step replays a new rate each time."""

    max_lr: float
    min_lr: float
    warmup: int
    total: int

    def __post_init__(self) -> None:
        if not (self.max_lr > 0 and 0 <= self.min_lr <= self.max_lr and math.isfinite(self.max_lr)):
            raise ValueError(f"WarmupCosine: needs max_lr > 0 and 0 <= min_lr <= max_lr, got max_lr={self.max_lr!r}, "
                             f"min_lr={self.min_lr!r}")
        ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (self.warmup, self.total))
        if not ints or not 0 <= self.warmup < self.total:
            raise ValueError(f"WarmupCosine: needs integers 0 <= warmup < total, got warmup={self.warmup!r}, "
                             f"total={self.total!r}")

    def lr(self, step: int) -> float:
        """The rate of step ``step`` (1-based), in float64 from the float32 rates the kernel receives."""
        hi, lo, it = float(np.float32(self.max_lr)), float(np.float32(self.min_lr)), step - 1
        if it < self.warmup:
            return hi * (it + 1) / (self.warmup + 1)
        if it >= self.total:
            return lo
        return lo + 0.5 * (hi - lo) * (1.0 + math.cos(math.pi * (it - self.warmup) / (self.total - self.warmup)))


class Adam:
    """Adam (Kingma & Ba), as ``torch.optim.Adam``; ``weight_decay`` is an L2 term added to the gradient:

        g = grad + weight_decay * param
        m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g * g
        param -= lr * (m / (1 - beta1**t)) / (sqrt(v / (1 - beta2**t)) + eps)

    On cuda/emu a step is one launch of the learner's ``adam_step`` (t and the bias corrections, kept
    in device memory, so that a captured step replays exactly) and one launch of the fused
    ``adam_update`` kernel per parameter; on cpu the same formula runs in NumPy. ``state_dict()``
    holds the step count and m, v.

    ``params`` may be parameter groups, as PyTorch's: ``[{"params": [...], "weight_decay": 0.1},
    {"params": [...], "weight_decay": 0.0}]`` (a group without ``weight_decay`` takes the argument's).
    ``schedule``: a :class:`WarmupCosine` whose rate replaces ``lr`` at every step (decoupled weight decay
    only, AdamW; the decaying groups must share one weight_decay). On cuda/emu the learner's
    ``lr_schedule`` kernel computes it on the device, divides the first bias correction by it and writes
    1 - rate * weight_decay; ``scale_by`` (clip.cu) applies that decay to the decaying groups' weights
    and ``adam_update`` runs with lr 1 and no decay of its own: the same update, with the rate read from
    device memory.

    ``flat=True``: the parameters (one device, one float dtype) move into one flat buffer
    (:class:`FlatParameters`); the update is then one launch per weight decay over the whole buffer, not one
    per parameter. Build the optimizer after moving or converting the model (a step refuses parameters that
    left the buffer). A parameter that received no gradient is updated with a zero gradient (its moments
    decay, its weight decays), where the per-parameter step skips it.
    """

    decoupled = False

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0, *,
                 schedule: WarmupCosine | None = None, flat: bool = False) -> None:
        name = type(self).__name__
        self.weight_decay = _check_real(name, "weight_decay", weight_decay, lambda x: x >= 0, ">= 0")
        self.param_groups = _parameter_groups(name, params, self.weight_decay)
        self.lr = _check_real(name, "lr", lr, lambda x: x > 0, "> 0")
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ValueError(f"{name}: betas must be a pair (beta1, beta2), got {betas!r}")
        self.betas = tuple(_check_real(name, f"beta{i + 1}", b, lambda x: 0 <= x < 1, "in [0, 1)")
                           for i, b in enumerate(betas))
        self.eps = _check_real(name, "eps", eps, lambda x: x > 0, "> 0")
        if schedule is not None and not isinstance(schedule, WarmupCosine):
            raise TypeError(f"{name}: schedule must be a minitorch.optim.WarmupCosine, got {type(schedule).__name__}")
        decays = sorted({g["weight_decay"] for g in self.param_groups} - {0.0})
        if schedule is not None and (not self.decoupled and decays or len(decays) > 1):
            raise ValueError(f"{name}: a schedule takes decoupled weight decay (AdamW) with one weight_decay for "
                             f"every decaying group; the groups have {decays}")
        self.schedule = schedule
        self._scheduled_decay = decays[0] if decays else 0.0
        if not isinstance(flat, bool):
            raise TypeError(f"{name}: flat must be True or False, got {flat!r}")
        self.flat: FlatParameters | None = None
        if flat:
            self.flat = FlatParameters(name, self.param_groups)
            self.m, self.v = self.flat.views_of(self.flat.m), self.flat.views_of(self.flat.v)
        else:
            self.m: dict[int, Tensor] = {id(p): SGD._zeros_like(p) for p in self.params}
            self.v: dict[int, Tensor] = {id(p): SGD._zeros_like(p) for p in self.params}
        # On cuda/emu the step count t and the bias corrections 1 - beta**t live in device memory,
        # advanced there by the learner's adam_step kernel: a Python t would be frozen into the
        # launches of a captured step (minitorch.graph), and every replay would repeat one step's
        # correction. Made now, not at the first step, for the same reason as SGD's buffers.
        self._host_step = 0
        self._counter: _StepCounter | None = None
        if self.params[0].device != "cpu":
            self._counter = _StepCounter(self.params[0].device, 0)

    @property
    def params(self) -> list[Tensor]:
        """Every parameter, the groups' in order."""
        return [p for group in self.param_groups for p in group["params"]]

    @params.setter
    def params(self, params: list[Tensor]) -> None:  # one group, with the optimizer's weight_decay
        if getattr(self, "flat", None) is not None:
            raise ValueError(f"{type(self).__name__}(flat=True): its parameters live in its flat buffer and cannot be "
                             f"replaced; make a new optimizer")
        self.param_groups = [{"params": list(params), "weight_decay": self.weight_decay}]

    @property
    def last_lr(self) -> float:
        """The rate of the latest step (the schedule's; read from the device when scheduled there)."""
        if self.schedule is None:
            return self.lr
        if self._counter is not None:
            return float(backend.get_backend(self._counter.device).asnumpy(self._counter.rate)[0])
        return self.schedule.lr(max(self._host_step, 1))

    @property
    def step_count(self) -> int:
        """The number of steps taken (read back from the device on cuda/emu: a synchronisation)."""
        return self._counter.read() if self._counter is not None else self._host_step

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        name, device = type(self).__name__, self.params[0].device
        if self.flat is not None:
            self.flat.check_bound(name)
        for i, p in enumerate(self.params):  # checked first: a step must not stop half done
            if p.device != device:
                raise ValueError(f"{name}: every parameter must be on one device; parameter 0 is on "
                                 f"{device!r}, parameter {i} (shape {p.shape}) on {p.device!r}")
        beta1, beta2 = self.betas
        if device == "cpu":
            if self._counter is not None:  # the model moved to the cpu since
                self._host_step, self._counter = self._counter.read(), None
            self._host_step += 1
        else:
            if self._counter is None or self._counter.device != device:  # the model moved since
                self._counter = _StepCounter(device, self.step_count)
            launch(device, "adam.py", "adam_step", self._counter.step, self._counter.bias, beta1, beta2,
                   outputs=())
            if self.schedule is not None:
                sch = self.schedule
                launch(device, "recipe.py", "lr_schedule", self._counter.step, self._counter.bias,
                       self._counter.rate, self._counter.decay, self._scheduled_decay, sch.max_lr, sch.min_lr,
                       sch.warmup, sch.total, outputs=())
        if self.flat is not None:
            self._update_flat(device)
            return
        for group in self.param_groups:
            self._update_group(device, group["params"], group["weight_decay"])

    def _update_flat(self, device: str) -> None:
        """The whole flat buffer at once: one launch per segment of one weight decay (scheduled: one scale_by
        of the decaying segments, one adam_update of everything), the same arithmetic as _update_group's."""
        flat = self.flat
        assert flat is not None
        flat.fill_missing_grads()
        beta1, beta2 = self.betas
        m, v = flat.m, flat.v
        if device == "cpu":
            lr = self.schedule.lr(self._host_step) if self.schedule is not None else self.lr
            for start, stop, wd in flat.segments:
                _adam_numpy(flat.data[start:stop], flat.grad[start:stop], m[start:stop], v[start:stop], lr,
                            beta1, beta2, self.eps, wd, self._host_step, self.decoupled)
            return
        assert self._counter is not None
        if self.schedule is not None:  # the rate and the decay come from the device (lr_schedule)
            if flat.decay_stop:  # the decaying segments come first (FlatParameters)
                launch(device, "clip.py", "scale_by", flat.data[:flat.decay_stop], self._counter.decay, outputs=())
            launch(device, "adam.py", "adam_update", flat.data, flat.grad, m, v, self._counter.bias, 1.0, beta1,
                   beta2, self.eps, 0.0, self.decoupled, outputs=())
            return
        for start, stop, wd in flat.segments:
            launch(device, "adam.py", "adam_update", flat.data[start:stop], flat.grad[start:stop], m[start:stop],
                   v[start:stop], self._counter.bias, self.lr, beta1, beta2, self.eps, wd, self.decoupled,
                   outputs=())

    def _update_group(self, device: str, params: list[Tensor], weight_decay: float) -> None:
        beta1, beta2 = self.betas
        scheduled = self.schedule is not None
        lr = self.schedule.lr(self._host_step) if scheduled and device == "cpu" else self.lr
        for p in params:
            if p.grad is None:
                continue
            m, v = self.m[id(p)], self.v[id(p)]
            if m.device != p.device:  # the model moved since: the state follows it
                m = self.m[id(p)] = Tensor(backend.get_backend(p.device).asarray(m.numpy()), p.device)
                v = self.v[id(p)] = Tensor(backend.get_backend(p.device).asarray(v.numpy()), p.device)
            if device == "cpu":
                _adam_numpy(p.data, p.grad.data, m.data, v.data, lr, beta1, beta2, self.eps,
                            weight_decay, self._host_step, self.decoupled)
            elif not p.size:
                continue
            elif scheduled:  # the rate and the decay come from the device (lr_schedule)
                if weight_decay:
                    launch(device, "clip.py", "scale_by", p.data, self._counter.decay, outputs=())
                launch(device, "adam.py", "adam_update", p.data, p.grad.data, m.data, v.data,
                       self._counter.bias, 1.0, beta1, beta2, self.eps, 0.0, self.decoupled, outputs=())
            else:
                launch(device, "adam.py", "adam_update", p.data, p.grad.data, m.data, v.data,
                       self._counter.bias, self.lr, beta1, beta2, self.eps, weight_decay,
                       self.decoupled, outputs=())

    def state_dict(self) -> dict[str, object]:
        """{"step": t, "m": [host arrays in parameter order], "v": [...], and the hyperparameters}."""
        return {"step": self.step_count, "lr": self.lr, "betas": self.betas, "eps": self.eps,
                "weight_decay": self.weight_decay,
                "m": [self.m[id(p)].numpy() for p in self.params],
                "v": [self.v[id(p)].numpy() for p in self.params]}

    def load_state_dict(self, state: dict[str, object]) -> None:
        name = type(self).__name__
        for key in ("m", "v"):
            arrays = state[key]
            if len(arrays) != len(self.params):  # type: ignore[arg-type]
                raise ValueError(f"{name}.load_state_dict: {key} has {len(arrays)} arrays, "  # type: ignore[arg-type]
                                 f"this optimizer has {len(self.params)} parameters")
            for p, a in zip(self.params, arrays, strict=True):  # type: ignore[call-overload]
                a = np.asarray(a)
                if a.shape != p.shape:
                    raise ValueError(f"{name}.load_state_dict: {key} for a parameter of shape {p.shape} "
                                     f"has shape {a.shape}")
                store = self.m if key == "m" else self.v
                if store[id(p)].device == p.device:  # in place: a captured step keeps its buffers
                    store[id(p)].copy_from(a.astype(p.dtype))
                else:
                    store[id(p)] = Tensor(backend.get_backend(p.device).asarray(a.astype(p.dtype)), p.device)
        step = int(state["step"])  # type: ignore[call-overload]
        if self._counter is not None:
            self._counter.write(step)
        else:
            self._host_step = step
        self.lr, self.betas = float(state["lr"]), tuple(state["betas"])  # type: ignore[arg-type]
        self.eps, self.weight_decay = float(state["eps"]), float(state["weight_decay"])  # type: ignore[arg-type]
        if len(self.param_groups) == 1:  # the optimizer's own decay is its one group's (groups keep theirs)
            self.param_groups[0]["weight_decay"] = self.weight_decay


class _StepCounter:
    """Adam's step count (int64, shape (1,)) and bias corrections (float32, shape (2,)) on a device."""

    def __init__(self, device: str, step: int) -> None:
        target = backend.get_backend(device)
        self.device = device
        self.step = target.asarray(np.array([step], np.int64))
        self.bias = target.zeros((2,), np.float32)  # written by adam_step before any update reads it
        self.rate = target.zeros((1,), np.float32)  # a schedule's rate and decay factor (lr_schedule)
        self.decay = target.zeros((1,), np.float32)

    def read(self) -> int:
        return int(backend.get_backend(self.device).asnumpy(self.step)[0])

    def write(self, step: int) -> None:
        self.step.set(np.array([step], np.int64))  # in place: a captured step keeps the buffer


class AdamW(Adam):
    """Adam with decoupled weight decay (Loshchilov & Hutter), as ``torch.optim.AdamW``: the decay
    shrinks the parameter, ``param -= lr * weight_decay * param``, instead of entering the gradient."""

    decoupled = True

    def __init__(self, params: Iterable[Tensor] | Iterable[dict[str, Any]], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2, *,
                 schedule: WarmupCosine | None = None, flat: bool = False) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, schedule=schedule, flat=flat)


def _adam_numpy(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, beta1: float,
                beta2: float, eps: float, weight_decay: float, t: int, decoupled: bool) -> None:
    """The cpu device's Adam step, in place, in the arrays' own dtype."""
    if decoupled:
        p -= p.dtype.type(lr * weight_decay) * p
    elif weight_decay:
        g = g + p.dtype.type(weight_decay) * p
    m *= m.dtype.type(beta1)
    m += m.dtype.type(1 - beta1) * g
    v *= v.dtype.type(beta2)
    v += v.dtype.type(1 - beta2) * g * g
    p -= p.dtype.type(lr) * (m / p.dtype.type(1 - beta1**t)) / (np.sqrt(v / p.dtype.type(1 - beta2**t))
                                                              + p.dtype.type(eps))


def clip_grad_norm_(params: Iterable[Tensor], max_norm: float) -> Tensor:
    """Scale the gradients of ``params`` in place so that their global 2-norm (all of them as one vector) is
    at most ``max_norm``: each by min(1, max_norm / (norm + 1e-6)), as ``torch.nn.utils.clip_grad_norm_``.
    Returns the norm before clipping, a 0-d tensor left on the device (read it with ``.item()``).

    On cuda/emu the norm and the coefficient never leave the device (the learner's ``clip.cu``): a training
    step captured into a graph clips every replay by that replay's own norm. Parameters without a gradient
    are skipped. When ``params`` are exactly the parameters of a flat optimizer (``AdamW(..., flat=True)``),
    the flat gradient buffer is clipped whole: three launches (sum_squares, clip_coefficient, scale_by).
    """
    params = list(params)
    flat = FlatParameters.of(params)
    if flat is not None and any(p.grad is not None for p in params):  # the whole flat buffer at once
        flat.check_bound("clip_grad_norm_")
        flat.fill_missing_grads()
        return ops.clip_by_global_norm_([Tensor(flat.grad, flat.device)], max_norm)
    grads = [p.grad for p in params if isinstance(p, Tensor) and p.grad is not None]
    if not grads:
        raise ValueError("clip_grad_norm_: no parameter has a gradient (call backward() first)")
    return ops.clip_by_global_norm_(grads, max_norm)


ALIGN = 64  # elements: each parameter's view starts at a multiple of 256 bytes, as cudaMalloc's blocks do


class FlatParameters:
    """The parameters of an optimizer moved into one flat device buffer, their gradients into another, and
    Adam's m and v into two more, all of the same layout: parameter i occupies elements
    [offset_i, offset_i + size_i) of each, offsets rounded up to ALIGN elements (the gaps hold zeros, which
    Adam and clipping leave at zero). Parameters are laid out group by group, the groups of one weight decay
    side by side and the decaying ones first: ``segments`` lists (start, stop, weight_decay) per decay and
    ``decay_stop`` ends the decaying part. Each parameter tensor keeps its identity; its values become a view
    of ``data`` (``Tensor._bind_flat``) and a gradient assigned to it is copied into its view of ``grad``."""

    # id(parameter) -> its buffer (a buffer holds its parameters: their ids stay theirs while it lives;
    # keyed by id because a Tensor's == is elementwise)
    _owners: dict[int, weakref.ref[FlatParameters]] = {}

    def __init__(self, name: str, groups: list[dict[str, Any]]) -> None:
        params = [p for g in groups for p in g["params"]]
        device, dtype = params[0].device, params[0].dtype
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise TypeError(f"{name}(flat=True): the flat buffer holds float32 (or float64 on cpu) parameters, "
                            f"got {dtype}")
        for i, p in enumerate(params):
            if p.device != device or p.dtype != dtype:
                raise ValueError(f"{name}(flat=True): every parameter must be on one device in one dtype; "
                                 f"parameter 0 is {dtype} on {device!r}, parameter {i} (shape {p.shape}) "
                                 f"{p.dtype} on {p.device!r}")
            if FlatParameters.owner(p) is not None:
                raise ValueError(f"{name}(flat=True): parameter {i} (shape {p.shape}) already lives in the flat "
                                 f"buffer of another optimizer")
        decays = sorted({g["weight_decay"] for g in groups}, reverse=True)  # decaying first
        order = [p for wd in decays for g in groups if g["weight_decay"] == wd for p in g["params"]]
        self.device, self.params = device, order
        self.offsets, self.segments, end = [], [], 0
        for wd in decays:
            start = end
            for g in groups:
                if g["weight_decay"] != wd:
                    continue
                for p in g["params"]:
                    self.offsets.append(end)
                    end += -(-p.size // ALIGN) * ALIGN
            if end > start:
                self.segments.append((start, end, wd))
        self.decay_stop = sum(stop - start for start, stop, wd in self.segments if wd)
        target = backend.get_backend(device)
        self.data, self.grad = target.zeros((end,), dtype), target.zeros((end,), dtype)
        self.m, self.v = target.zeros((end,), dtype), target.zeros((end,), dtype)
        self.views = []
        for p, off in zip(self.params, self.offsets, strict=True):
            view = self._view(self.data, p, off)
            target.copy_into(view, p.data)
            p._bind_flat(view, Tensor(self._view(self.grad, p, off), device))
            self.views.append(view)
            FlatParameters._owners[id(p)] = weakref.ref(self)

    @staticmethod
    def _view(buffer: Any, p: Tensor, offset: int) -> Any:
        return buffer[offset:offset + p.size].reshape(p.shape)

    def views_of(self, buffer: Any) -> dict[int, Tensor]:
        """{id(param): its view of ``buffer``} (``m`` or ``v``: Adam's state, per parameter as without flat)."""
        return {id(p): Tensor(self._view(buffer, p, off), self.device)
                for p, off in zip(self.params, self.offsets, strict=True)}

    @classmethod
    def owner(cls, p: Any) -> FlatParameters | None:
        """The live flat buffer that holds parameter ``p``, or None."""
        ref = cls._owners.get(id(p))
        flat = ref() if ref is not None else None
        return flat if flat is not None and any(q is p for q in flat.params) else None

    @classmethod
    def of(cls, params: list[Any]) -> FlatParameters | None:
        """The flat buffer that holds exactly these parameters (in any order), or None."""
        flat = cls.owner(params[0]) if params else None
        if flat is None or any(cls.owner(p) is not flat for p in params):
            return None
        return flat if len({id(p) for p in params}) == len(flat.params) else None

    def check_bound(self, name: str) -> None:
        """Refuse parameters that left the buffer (moved, converted: their values would no longer be updated)."""
        for i, (p, view) in enumerate(zip(self.params, self.views, strict=True)):
            if p.data is not view:
                raise RuntimeError(f"{name}: parameter {i} (shape {p.shape}) no longer lives in the flat buffer "
                                   f"(the model was moved or converted after the flat optimizer was made): make "
                                   f"the optimizer after model.to(...)")

    def fill_missing_grads(self) -> None:
        """A parameter without a gradient gets zeros in its view of ``grad`` (a fill launch each): the buffer
        may hold an earlier step's values there. (Under a capture, which parameters get one is fixed.)"""
        for p in self.params:
            if p.grad is None:
                p.grad = p._grad_view.fill_(0.0) if p._grad_view is not None else None
