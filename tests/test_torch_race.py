"""benchmarks/torch_race.py: every way PyTorch cannot race here is a row with its reason, and the captured
step's set-up (the optimizer's state made by one zero-gradient step) changes no number of the training."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import torch_race  # noqa: E402


def test_without_pytorch_every_way_is_skipped_with_its_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    rows = torch_race.skipped_rows("cuda", features="log")
    assert [r["framework"] for r in rows] == ["pytorch", "pytorch_graph", "pytorch_compile"]
    assert all(r["kind"] == "skipped" and r["reason"] == "PyTorch is not installed" and r["features"] == "log"
               for r in rows)


def test_on_the_cpu_only_eager_races():
    pytest.importorskip("torch")
    available = torch_race.availability("cpu")
    assert available["eager"] is None and "GPU" in available["graph"] and available["compile"]


@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_the_state_made_before_a_capture_changes_no_step(kind):
    """The optimizer's state created by a step on zero gradients (then Adam's count put back to 0), as before
    a capture: the training that follows is bit for bit the one without it (on the CPU: the same code)."""
    torch = pytest.importorskip("torch")
    finals = []
    for prepared in (False, True):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
        opt = (torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9) if kind == "sgd"
               else torch.optim.Adam(net.parameters(), lr=1e-2))
        if prepared:
            torch_race._CapturedSteps(net, opt, None, None, None)._init_optimizer_state()
            opt.zero_grad(set_to_none=True)
        rng = np.random.default_rng(1)
        batches = [(rng.standard_normal((16, 5)).astype(np.float32), rng.standard_normal((16, 1)).astype(np.float32))
                   for _ in range(5)]
        torch_race.train("eager", net, opt, torch.nn.functional.mse_loss, 1, "cpu", lambda epoch, batches=batches: batches)
        finals.append([p.detach().clone() for p in net.parameters()])
    assert all(torch.equal(a, b) for a, b in zip(*finals, strict=True))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["sgd", "adam"])
@pytest.mark.parametrize("recapture", [False, True])
def test_captured_pytorch_trains_as_eager_does(kind, recapture):
    """On a GPU: PyTorch's step captured in a CUDA graph (two batch sizes, so two graphs sharing a pool;
    recaptured every epoch as the MNIST race does) ends at eager's weights and losses.

    torch.compile is not run here: inside this pytest process, after the other GPU tests, Inductor failed with
    an internal PyTorch assertion (translate_exception_to_python, H100, torch 2.11, 2026-11-27), while the same
    compiled step ran in the race benchmarks, whose JSON keeps each mode's losses beside eager's."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU for PyTorch")
    rng = np.random.default_rng(2)
    data = [(rng.standard_normal((n, 5)).astype(np.float32), rng.standard_normal((n, 1)).astype(np.float32))
            for n in (32, 32, 32, 7)]  # an epoch's last batch is smaller
    results = {}
    for mode in ("eager", "graph"):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).cuda()
        opt = (torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9) if kind == "sgd"
               else torch.optim.Adam(net.parameters(), lr=1e-2, capturable=mode == "graph"))
        rows, _ = torch_race.train(mode, net, opt, torch.nn.functional.mse_loss, 3, "cuda", lambda epoch: data,
                                   after_epoch=lambda epoch, model, loss_sum: {"loss_sum": loss_sum},
                                   loss_weight=float, recapture_each_epoch=recapture)
        results[mode] = ([r["loss_sum"] for r in rows], torch.cat([p.detach().flatten() for p in net.parameters()]))
    eager_losses, eager_weights = results["eager"]
    graph_losses, graph_weights = results["graph"]
    np.testing.assert_allclose(graph_losses, eager_losses, rtol=1e-5)
    torch.testing.assert_close(graph_weights, eager_weights, rtol=1e-5, atol=1e-6)
