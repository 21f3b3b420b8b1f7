"""Known-bad Phase 5 training files (adam.cu / adam.py, pool.py, init.cu) and a doctored deliverable must be
rejected by `grader check phase5`, each for the right reason.

Each workspace holds the reference solution of every phase up to 5 with one deliberate mistake per file
(files that do not interact: a broken pool would allocate for every other test, so it is graded alone),
graded on the emulator with only the tests that matter. The deliverable's checks grade models trained by
PyTorch on the CPU, with the lab's settings, and then the same files doctored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from minitorch.nn import save_deliverable
from tests.grader.test_grader_fixtures import _emu_available, grade_workspace, replace_once, results

REPO = Path(__file__).resolve().parents[2]
SOLUTION = REPO / "solutions" / "phase5_fast.ipynb"

pytestmark = [
    pytest.mark.skipif(not SOLUTION.exists(), reason="solutions/phase5_fast.ipynb not written yet"),
    pytest.mark.skipif(not _emu_available(), reason="minitorch.emu (the CUDA C emulator) is not available"),
    pytest.mark.timeout(300),
    pytest.mark.slow,
]

BIAS_CORRECTED = "param[i] = p - lr * (mi / bias1) / (sqrtf(vi / bias2) + eps);"
BIAS_IN_DOUBLE = """        bias[0] = (float)(1.0 - pow((double)beta1, (double)t));
        bias[1] = (float)(1.0 - pow((double)beta2, (double)t));"""
ADAM_STEP_LAUNCH = "    kernel((1,), (1,), (step, bias, np.float32(beta1), np.float32(beta2)))\n"
POP_FREE_BLOCK = "handle = self.free_blocks[size].pop()"
RELEASE_CACHED = """        for size, handles in self.free_blocks.items():
            for handle in handles:
                self.raw_free(handle)
                released += size"""
BUMP_KEY = """        if (r > 0) {
            k.x += PHILOX_W0;
            k.y += PHILOX_W1;
        }"""
ANGLE = "double angle = two_pi * (double)to_uniform(words[2 * pair + 1]);"
TO_UNIFORM = "return (float)(2u * (word >> 9) + 1u) * 5.9604644775390625e-8f;"


def solution_sources() -> dict[str, str]:
    """Every phase's reference files up to Phase 5."""
    from grader.labs import learner_files
    from grader.phases import PHASES

    files: dict[str, str] = {}
    for phase in PHASES.values():
        if phase.lab is not None and (REPO / "solutions" / f"{phase.lab}.ipynb").exists():
            files.update(learner_files(REPO / "solutions" / f"{phase.lab}.ipynb"))
        if phase.name == "phase5":
            break
    return files


def grade(tmp_path: Path, files: dict[str, str], tests: str, **kw) -> dict:
    return grade_workspace(tmp_path, "phase5", files, "--no-notebook", "-k", tests, timeout=120, **kw)


def failed(report: dict, prefix: str, *reasons: str) -> None:
    """Every check named prefix* failed, each reason naming all of `reasons`."""
    for check in results(report, prefix):
        assert check["result"] in ("FAIL", "CRASH"), check
        for reason in reasons:
            assert reason in check["reason"], (reason, check)


def passed(report: dict, prefix: str) -> None:
    for check in results(report, prefix):
        assert check["result"] == "PASS", check


def test_adam_without_bias_correction_and_philox_with_a_wrong_multiplier(tmp_path):
    files = solution_sources()
    files["adam.cu"] = replace_once(files["adam.cu"], BIAS_CORRECTED, "param[i] = p - lr * mi / (sqrtf(vi) + eps);")
    files["init.cu"] = replace_once(files["init.cu"], "#define PHILOX_M1 0xCD9E8D57u", "#define PHILOX_M1 0xCD9E8D59u")
    report = grade(tmp_path, files, "test_adam_matches_float64_reference or test_adam_first_step or "
                                    "test_adam_step_kernel or test_philox_known_answer or test_uniforms_bit_for_bit "
                                    "or test_normal_statistics")
    failed(report, "test_adam_matches_float64_reference", "WITHOUT bias correction")
    failed(report, "test_adam_first_step_moves_every_weight_by_lr", "3.16 lr")
    passed(report, "test_adam_step_kernel_counts_and_corrects")  # adam_step is right: only the update is wrong
    failed(report, "test_philox_known_answer", "Random123's known answer")
    failed(report, "test_uniforms_bit_for_bit", "a different word", "round multipliers")


def test_adam_step_count_on_the_host_and_philox_key_bumped_before_the_first_round(tmp_path):
    """adam_step writing corrections computed in Python: right eagerly, refused when captured (a host
    copy inside the step). Philox's key schedule one round early: every word differs."""
    files = solution_sources()
    files["adam.py"] = replace_once(files["adam.py"], ADAM_STEP_LAUNCH,
                                    "    t = int(step.get()[0]) + 1\n"
                                    "    step.set(np.array([t], np.int64))\n"
                                    "    bias.set(np.array([1 - beta1**t, 1 - beta2**t], np.float32))\n")
    files["init.cu"] = replace_once(files["init.cu"], BUMP_KEY, "        k.x += PHILOX_W0;\n        k.y += PHILOX_W1;")
    report = grade(tmp_path, files, "test_adam_matches_float64_reference or test_adam_captured_step_replays_exactly "
                                    "or test_philox_known_answer or test_uniforms_bit_for_bit")
    passed(report, "test_adam_matches_float64_reference")
    failed(report, "test_adam_captured_step_replays_exactly", "into a graph failed", "copy between host and device")
    failed(report, "test_philox_known_answer", "Random123's known answer")
    failed(report, "test_uniforms_bit_for_bit", "a different word", "key increments between rounds")


def test_bias_corrections_in_float_and_normals_from_one_uniform(tmp_path):
    """1 - powf(beta, t) in float keeps a few digits of 1 - 0.9999^t; Box-Muller with the radius and the
    angle from the same uniform is not normal."""
    files = solution_sources()
    files["adam.cu"] = replace_once(files["adam.cu"], BIAS_IN_DOUBLE,
                                    "        bias[0] = 1.0f - powf(beta1, (float)t);\n"
                                    "        bias[1] = 1.0f - powf(beta2, (float)t);")
    files["init.cu"] = replace_once(files["init.cu"], ANGLE, "double angle = two_pi * (double)to_uniform(words[2 * pair]);")
    report = grade(tmp_path, files, "test_adam_step_kernel or test_normals_within_one_ulp or test_normal_statistics "
                                    "or test_uniforms_bit_for_bit")
    checks = results(report, "test_adam_step_kernel_counts_and_corrects")
    assert [c["name"].split("[")[1] for c in checks if c["result"] == "FAIL"] == ["0.9999-1]", "0.9999-6]"], checks
    assert all("bias corrections at t = " in c["reason"] for c in checks if c["result"] == "FAIL"), checks
    failed(report, "test_normals_within_one_ulp", "ulp apart")
    failed(report, "test_normal_statistics", "N(0, 1)")
    passed(report, "test_uniforms_bit_for_bit")


def test_pool_handing_out_a_block_in_use(tmp_path):
    """A pool that hands out a cached block without taking it off the free list: two tensors would share
    it. Rejected by the recording device and, as the emulator's allocator, by the emulator itself."""
    files = solution_sources()
    files["pool.py"] = replace_once(files["pool.py"], POP_FREE_BLOCK, "handle = self.free_blocks[size][-1]")
    report = grade(tmp_path, files, "test_pool_never_hands_out_a_block_in_use or test_pool_is_the_device_allocator "
                                    "or test_pool_size_classes")
    failed(report, "test_pool_never_hands_out_a_block_in_use", "still in use", "handed out twice")
    failed(report, "test_pool_is_the_device_allocator_over_a_training_loop", "while it still backs a live array")
    passed(report, "test_pool_size_classes")


def test_pool_release_freeing_blocks_in_use_and_uniforms_from_a_whole_word(tmp_path):
    """release() that frees the blocks in use too (the pool allocates normally until then). Uniforms as
    word * 2^-32: the right words, made into floats differently."""
    files = solution_sources()
    files["pool.py"] = replace_once(files["pool.py"], RELEASE_CACHED, RELEASE_CACHED + """
        for handle, size in list(self.in_use.items()):
            self.raw_free(handle)
            released += size""")
    files["init.cu"] = replace_once(files["init.cu"], TO_UNIFORM, "return (float)word * 2.3283064365386963e-10f;")
    report = grade(tmp_path, files, "test_pool_release or test_uniforms_bit_for_bit")
    failed(report, "test_pool_release_returns_the_cached_memory", "release() returned")
    # One element may come out right by chance (the top bits agree); 31 or more never do.
    many = [c for c in results(report, "test_uniforms_bit_for_bit") if int(c["name"].split("[")[1].split("-")[0]) >= 31]
    assert len(many) == 12 and all(c["result"] == "FAIL" and "turned into a float differently" in c["reason"]
                                   for c in many), many


# ---------------------------------------------------------------- the deliverable


def torch_trained_deliverable(workspace: Path) -> dict:
    """The lab's deliverable files, trained by PyTorch on the CPU with the lab's reduced settings (same
    features, normalisation, initial weights, batches): an independent run the grader must accept."""
    torch = pytest.importorskip("torch")
    import minitorch
    from minitorch import data, init
    from minitorch.batches import MiniBatches, train_test_split

    config = dict(epochs=10, batch_size=256, train_rows=12_000, adam_lr=0.03)
    path = data.ensure_sales()
    features, target, names = data.sales_features(data.load_sales(path))
    x = features.astype(np.float64)
    for name in ("quantity", "unit_price"):
        x[:, names.index(name)] = np.log(x[:, names.index(name)])
    x_train, _, y_train, _ = train_test_split(x, np.log(target.astype(np.float64)).reshape(-1, 1))
    step = len(x_train) // config["train_rows"]
    x_train, y_train = x_train[::step][:config["train_rows"]], y_train[::step][:config["train_rows"]]
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    std[std == 0] = 1
    y_mean, y_std = float(y_train.mean()), float(y_train.std())
    xn, yn = ((x_train - mean) / std).astype(np.float32), ((y_train - y_mean) / y_std).astype(np.float32)
    start = {"0.weight": init.kaiming_uniform_(minitorch.zeros((x.shape[1], 32), device="cpu"), nonlinearity="relu",
                                               seed=5).numpy(),
             "0.bias": np.zeros(32, np.float32), "2.bias": np.zeros(1, np.float32),
             "2.weight": init.xavier_uniform_(minitorch.zeros((32, 1), device="cpu"), seed=6).numpy()}
    torch.manual_seed(0)

    def run(adam: bool, target_loss: float = float("-inf")) -> tuple[list[float], dict, tuple | None]:
        net = torch.nn.Sequential(torch.nn.Linear(x.shape[1], 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).double()
        with torch.no_grad():
            for i in (0, 2):
                net[i].weight.copy_(torch.from_numpy(start[f"{i}.weight"].T.astype(np.float64)))
                net[i].bias.zero_()
        opt = (torch.optim.Adam(net.parameters(), lr=config["adam_lr"]) if adam
               else torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9))
        all_x, all_y = torch.from_numpy(xn.astype(np.float64)), torch.from_numpy(yn.astype(np.float64))
        losses, reached = [], None
        for epoch in range(config["epochs"]):
            for xb, yb in MiniBatches(xn, yn, config["batch_size"], seed=epoch, device="cpu"):
                opt.zero_grad()
                torch.nn.functional.mse_loss(net(torch.from_numpy(xb.numpy().astype(np.float64))),
                                             torch.from_numpy(yb.numpy().astype(np.float64))).backward()
                opt.step()
            with torch.no_grad():
                losses.append(float(torch.nn.functional.mse_loss(net(all_x), all_y)))
            state = {f"{i}.{k}": (getattr(net[i], k).detach().numpy().T if k == "weight" else
                                  getattr(net[i], k).detach().numpy()).copy() for i in (0, 2) for k in ("weight", "bias")}
            if reached is None and losses[-1] <= target_loss:
                reached = (epoch + 1, state)
        return losses, state, reached

    sgd_losses, sgd_state, _ = run(adam=False)
    adam_losses, adam_state, reached = run(adam=True, target_loss=sgd_losses[-1])
    assert reached is not None and reached[0] < config["epochs"], (sgd_losses, adam_losses)
    states = {f"sales_{name}.npz": state for name, state in (("start", start), ("sgd", sgd_state),
                                                              ("adam", adam_state), ("adam_at_sgd_loss", reached[1]))}
    record = {"features": names, "log_features": ["quantity", "unit_price"], "log_target": True,
              "feature_mean": mean.tolist(), "feature_std": std.tolist(), "target_mean": y_mean, "target_std": y_std,
              "train_fraction": 0.8, "sales_sha256": data.sha256_file(path), "config": config, "init_seed": 5,
              "sgd_losses": sgd_losses, "adam_losses": adam_losses, "adam_epoch_at_sgd_loss": reached[0]}
    save_deliverable(workspace, "sales_optim.json", record, states)
    return record


def _saved_states(workspace: Path) -> dict[str, dict[str, np.ndarray]]:
    states = {}
    for name in ("sales_start.npz", "sales_sgd.npz", "sales_adam.npz", "sales_adam_at_sgd_loss.npz"):
        with np.load(workspace / name) as saved:
            states[name] = dict(saved)
    return states


DELIVERABLE_TESTS = ("test_sales_sequential_models_pass_phase4_mae_bar or test_adam_reaches_sgd_final_loss or "
                     "test_deliverable_starts_from_your_initialisation")


def test_deliverable_trained_elsewhere_passes_and_doctored_ones_do_not(tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    record = torch_trained_deliverable(workspace)
    report = grade(tmp_path, {}, DELIVERABLE_TESTS)  # exit 1 only because -k ran part of the phase
    passed(report, "test_")

    # Adam's curve reported lower than its models are; the start is another seed's draw.
    record["adam_losses"] = [loss / 3 for loss in record["adam_losses"]]
    record["adam_epoch_at_sgd_loss"] = next(e + 1 for e, loss in enumerate(record["adam_losses"])
                                            if loss <= record["sgd_losses"][-1])
    states = _saved_states(workspace)
    states["sales_start.npz"]["0.weight"] = states["sales_start.npz"]["0.weight"][::-1].copy()
    save_deliverable(workspace, "sales_optim.json", record, states)  # doctored, but saved as one set
    report = grade(tmp_path, {}, DELIVERABLE_TESTS)  # the files already in the workspace
    failed(report, "test_adam_reaches_sgd_final_loss_in_fewer_epochs", "recomputed in float64",
           "not the one whose loss was recorded")
    failed(report, "test_deliverable_starts_from_your_initialisation", "He-uniform (relu) draw of seed 5")
    passed(report, "test_sales_sequential_models_pass_phase4_mae_bar")

