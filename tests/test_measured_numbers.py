"""Numbers typed in the chapters with the ``{measured}`` role hold in their committed result files
(book/_ext/measured.py checks the same at build time)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("measured", ROOT / "book" / "_ext" / "measured.py")
measured = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measured)
CHAPTERS = sorted((ROOT / "book").glob("*.md"))


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_measured_numbers_match_their_files(chapter):
    assert measured.problems(chapter.read_text()) == []


def test_the_check_rejects_a_number_its_file_does_not_hold():
    """The check can fail: a mistyped digit, a file that does not exist, a number on another line, a scale."""
    ncu = "phase5_gemm_ncu_cublas-nvidia-h100-80gb-hbm3.txt"  # Compute (SM) Throughput 87.23, DRAM 4.47
    assert measured.check("87%", f"{ncu}, near=Compute (SM) Throughput") is None
    assert measured.check("87.2%", f"{ncu}, near=Compute (SM) Throughput") is None
    assert "rounds to 88" in measured.check("88%", f"{ncu}, near=Compute (SM) Throughput")
    assert "rounds to 87.3" in measured.check("87.3%", ncu)
    assert "on a line with 'DRAM Throughput'" in measured.check("87%", f"{ncu}, near=DRAM Throughput")
    assert measured.check("0.0872", f"{ncu}, scale=1e-3, near=Compute (SM) Throughput") is None
    assert "does not exist" in measured.check("1", "no_such_result.json")
    assert "no number" in measured.check("many", ncu)
    assert "target must be" in measured.check("87%", f"{ncu}, nearby=Compute")
    assert measured.problems("It ran {measured}`88% <" + ncu + ", near=Compute (SM)>`.") != []


def test_a_key_picks_one_value_of_a_json_or_toml_file():
    """key= reads one field (a selector narrows a list to its matching entries); a file with a folder is read from
    the repository's root; a missing key or a value elsewhere in the file does not count."""
    race = "phase5_sales_optim-nvidia-h100-80gb-hbm3.json"  # config.epochs 50, sgd.momentum 0.9
    assert measured.check("50", f"{race}, key=config.epochs") is None
    assert "rounds to 51" in measured.check("51", f"{race}, key=config.epochs")
    assert measured.check("0.9", f"{race}, key=sgd.momentum") is None
    assert "rounds to 0.05" in measured.check("0.05", f"{race}, key=sgd.momentum")  # sgd.lr's value, not momentum's
    assert "has no value at 'config.epoch'" in measured.check("50", f"{race}, key=config.epoch")
    loss = f"{race}, key=results[kind=summary&framework=minitorch&optimizer=sgd].final_loss"
    assert measured.check("3.3e-05", loss) is None and "rounds" in measured.check("2.1e-05", loss)  # Adam's
    assert measured.check("98%", "grader/thresholds.toml, scale=100, key=phase6.mnist_accuracy") is None
    assert "rounds to 99" in measured.check("99%", "grader/thresholds.toml, scale=100, key=phase6.mnist_accuracy")
    assert "target must be" in measured.check("50", f"{race}, key=config.epochs, near=epochs")


def test_the_chapter_counts_the_parameters_of_the_lab_network(monkeypatch):
    """book/figures_phase6_model.py's layers are the lab's network (benchmarks/phase6_mnist.py): the same count."""
    from minitorch import nn

    cnn = nn.Sequential(  # mnist_cnn() of benchmarks/phase6_mnist.py, on the host
        nn.Conv2d(1, 8, 3, padding=1, device="cpu"), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1, device="cpu"), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(784, 64, device="cpu"), nn.ReLU(), nn.Linear(64, 10, device="cpu"))
    monkeypatch.syspath_prepend(str(ROOT / "book"))
    model = importlib.import_module("figures_phase6_model")
    assert model.parameters() == sum(p.size for p in cnn.parameters())
    assert model.forward_flops_per_image() == 2 * (28 * 28 * 8 * 9 + 14 * 14 * 16 * 72 + 784 * 64 + 64 * 10)


def test_a_selector_may_match_part_of_a_kernel_name_and_every_role_must_parse():
    """``name*=`` keeps the entries whose field contains the (%-escaped) text: a kernel's template arguments hold
    commas and angle brackets, which a role's target cannot; a role that does not parse is a problem, not a pass."""
    step = "phase8b_nanogpt_step-nvidia-h100-80gb-hbm3.json"
    weight_grads = f"{step}, key=results[kind=kernel&name*=hgemm_6_wgmma%3C__nv_bfloat16%2C float%2C true].calls_per_step"
    assert measured.check("24", weight_grads) is None
    assert "rounds to 25" in measured.check("25", weight_grads)
    assert "has no value" in measured.check("1", f"{step}, key=results[kind=kernel&name*=no_such_kernel].calls_per_step")
    assert measured.problems("{measured}`24 <" + step + ", key=results[kind=kernel&name=void f<float>].x>`") != []
