"""The phase registry: names, titles, order, labs and graded files of every phase.

The order of ``PHASES`` is the order of the course: each phase requires the one before it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Phase:
    name: str
    title: str
    requires: str | None
    # Lab notebook stem (solutions/<lab>.ipynb -> labs/<lab>.ipynb); None while unpublished.
    lab: str | None = None
    # Graded test module(s) inside grader/tests/; None while unpublished. A phase may list several
    # files; one not written yet is skipped (see ``test_files``).
    tests: str | tuple[str, ...] | None = None
    # Learner files (relative to the workspace) whose sha256 is recorded when the phase passes.
    learner_files: tuple[str, ...] = field(default_factory=tuple)
    # Phases whose checks run CUDA C: they need --device cuda or emu.
    needs_cuda_c: bool = True

    @property
    def published(self) -> bool:
        return self.lab is not None and self.tests is not None

    @property
    def test_files(self) -> tuple[str, ...]:
        """The graded test modules, as a tuple (empty while unpublished)."""
        if self.tests is None:
            return ()
        return (self.tests,) if isinstance(self.tests, str) else tuple(self.tests)

    @property
    def number(self) -> str:
        return self.name.removeprefix("phase")


def _chain(*specs: tuple[str, str, dict]) -> dict[str, Phase]:
    phases: dict[str, Phase] = {}
    previous = None
    for name, title, extra in specs:
        phases[name] = Phase(name=name, title=title, requires=previous, **extra)
        previous = name
    return phases


PHASES: dict[str, Phase] = _chain(
    ("phase1", "GPU memory", dict(
        lab="phase1_memory", tests="test_phase1.py", learner_files=("memory.cu", "memory.py"))),
    ("phase2", "First kernels and naive matmul", dict(
        lab="phase2_kernels", tests="test_phase2.py",
        learner_files=("elementwise.cu", "elementwise.py", "transpose.cu", "transpose.py", "matmul.cu", "matmul.py"))),
    ("phase3a", "Forward pass", dict(
        lab="phase3a_forward", tests="test_phase3a.py", learner_files=("forward.cu", "forward.py"))),
    ("phase3b", "Backward pass, autograd and XOR", dict(
        lab="phase3b_backward", tests="test_phase3b.py",
        learner_files=("backward.cu", "backward.py", "sgd.cu", "sgd.py", "backprop.py"))),
    ("phase4", "Reductions and real data (sales.tsv)", dict(
        lab="phase4_reductions", tests="test_phase4.py", learner_files=("reduce.cu", "reduce.py"))),
    ("phase5", "Making it fast (GEMM ladder, memory pool, Sequential, Adam, init)", dict(
        lab="phase5_fast", tests=("test_phase5.py", "test_phase5_training.py"),
        learner_files=("gemm.cu", "gemm.py", "adam.cu", "adam.py", "pool.py", "init.cu", "init.py"))),
    ("phase6", "CNNs and MNIST", dict(
        lab="phase6_cnn", tests=("test_phase6_softmax.py", "test_phase6_conv.py", "test_phase6_mnist.py"),
        learner_files=("softmax.cu", "softmax.py", "conv.cu", "conv.py", "maxpool.cu", "maxpool.py"))),
    ("phase7", "Transformers and Tiny Shakespeare GPT", dict(
        lab="phase7_gpt", tests=("test_phase7.py", "test_phase7_gpt.py"),
        learner_files=("gelu.cu", "gelu.py", "layernorm.cu", "layernorm.py", "embedding.cu", "embedding.py",
                       "attention.cu", "attention.py", "online_softmax.cu", "clip.cu", "clip.py", "recipe.cu",
                       "recipe.py"))),
    ("phase8a", "Tensor cores (16-bit conversions, the HGEMM ladder, mixed precision)", dict(
        lab="phase8a_tensor_cores", tests=("test_phase8a.py", "test_phase8a_wgmma.py", "test_phase8a_amp.py",
                                                   "test_phase8a_gpt.py", "test_phase8a_cnn.py"),
        learner_files=("convert.cu", "convert.py", "hgemm.cu", "hgemm.py", "hgemm_wgmma.cu", "scaler.cu",
                       "scaler.py"))),
    ("phase8b", "FlashAttention (forward ladder, backward, dropout)", dict(
        lab="phase8b_flash", tests=("test_phase8b.py", "test_phase8b_capstone.py"),
        learner_files=("flash.cu", "flash.py", "flash_wgmma.cu"))),
)


@dataclass(frozen=True)
class Deliverable:
    """A project that belongs to a phase: it unlocks with that phase, when the phase before it has passed,
    and `grader check <phase>` verifies it."""

    name: str
    title: str
    phase: str

    @property
    def unlocked_by(self) -> str:
        required = PHASES[self.phase].requires
        assert required is not None, f"{self.phase} has no phase before it"
        return required


DELIVERABLES: dict[str, Deliverable] = {d.name: d for d in (
    Deliverable("xor", "XOR network", "phase3b"),
    Deliverable("sales", "sales.tsv regression", "phase4"),
    Deliverable("mnist", "MNIST CNN", "phase6"),
    Deliverable("shakespeare", "Tiny Shakespeare GPT", "phase7"),
)}


class UnknownPhaseError(KeyError):
    def __str__(self) -> str:
        return (f"unknown phase {self.args[0]!r}; phases are: {', '.join(PHASES)}; "
                f"deliverables are: {', '.join(DELIVERABLES)}")


def get_phase(name: str) -> Phase:
    key = name.strip().lower()
    if key.isdigit() or key[:1].isdigit():  # allow `grader check 1` / `3a`
        key = "phase" + key
    try:
        return PHASES[key]
    except KeyError:
        raise UnknownPhaseError(name) from None
