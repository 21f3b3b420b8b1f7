"""What a submission can still forge when `grader grade-all` grades it, and what it cannot.

grader/sandbox.py contains what a submission does to the machine (tests/grader/test_grader_sandbox.py).
This file is about the grade itself:

- the report travels on a channel only the sandboxed grader holds, authenticated with a key only it
  knows, from a process the submission can neither read nor write (non-dumpable): a submission that
  writes a forged report wherever it can, or that ships its own ``grader`` package, gets its real
  grade (test_forged_reports_are_not_believed);
- the deliverable is re-evaluated outside the sandbox from the saved files only: a submission that
  patches the graded test from inside gets FAIL from the grader (test_a_forged_deliverable_fails_outside);
  in Phase 4 its patch does not even reach the test, whose launcher modules run in a learner process of
  their own (grader/learner_process.py; tests/grader/test_grader_tamper.py);
- the saved files are read as untrusted input (the test_outside_* unit tests below).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import numpy as np
import pytest

from grader import deliverables, sandbox
from minitorch.nn import save_deliverable
from tests.solution_files import solution_files

REPO = Path(__file__).resolve().parents[2]
LAB1 = REPO / "labs" / "phase1_memory.ipynb"
needs_bwrap = pytest.mark.skipif(sandbox.bwrap_path() is None, reason="bubblewrap (bwrap) is not installed")

FORGED = {"phase": "phase1", "title": "forged", "device": "FORGED", "seed": 777, "passed": True,
          "require_perf": False, "checks": [{"name": "forged", "result": "PASS"}]}

# A notebook cell (to be run only inside the sandbox: it targets every grader process it can see):
# write a passing report into every pipe of the grader process it can open through
# /proc (the sandbox's output, and the report channel if it could reach it), as a bare report and as
# an envelope with a made-up MAC; try to read the grader's memory and environment (the key); if any
# write got through, kill the grader so that the forgery is its last word.
FORGER_CELL = f"""
import json, os, signal
FORGED = json.dumps({FORGED!r})
ENVELOPE = json.dumps({{"report": FORGED, "mac": "0" * 64}})
graders = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        argv = open(f"/proc/{{pid}}/cmdline", "rb").read().split(b"\\0")
    except OSError:
        continue
    if (os.path.basename(argv[0]).startswith(b"python") and b"grader" in argv and b"check" in argv
            and int(pid) != os.getpid()):
        graders.append(int(pid))
print("grader processes:", graders)
wrote, opened = [], []
for pid in graders:
    for fd in range(64):
        path = f"/proc/{{pid}}/fd/{{fd}}"
        try:
            if not os.readlink(path).startswith("pipe:"):
                continue
            out = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            os.write(out, ("\\n" + ENVELOPE + "\\n" + FORGED + "\\n").encode())
            wrote.append(path)
        except OSError:
            pass
        finally:
            os.close(out)
    for name in ("environ", "mem"):
        try:
            open(f"/proc/{{pid}}/{{name}}", "rb").close()
            opened.append(f"/proc/{{pid}}/{{name}}")
        except OSError:
            pass
print("forged report written to:", wrote, "grader memory/environment opened:", opened)
if wrote:
    for pid in graders:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""

# A `grader` package in the submission's directory, which is the sandboxed grader's working
# directory: were it imported instead of the course's, it would print a passing report and send
# it, properly authenticated, on the report channel (it would hold the key).
SHADOW_MAIN = f"""
import hashlib, hmac, json, os, sys
text = json.dumps({FORGED!r})
print(text)
argv = sys.argv
if "--report-fd" in argv:
    key = os.read(int(argv[argv.index("--report-key-fd") + 1]), 32)
    mac = hmac.new(key, text.encode(), hashlib.sha256).hexdigest()
    os.write(int(argv[argv.index("--report-fd") + 1]), json.dumps({{"report": text, "mac": mac}}).encode())
"""


def _grade_all(subs: Path, phase: str, out: Path, env_extra: dict[str, str] | None = None,
               timeout: float = 600) -> dict[str, dict[str, str]]:
    env = {**os.environ, "GRADER_PROGRESS": str(out.parent / "progress.json"), **(env_extra or {}),
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.run([sys.executable, "-m", "grader", "grade-all", str(subs), "--phase", phase,
                           "--csv", str(out), "--device", "emu", "--timeout", "120", "--seed", "4242"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {r["submission"]: r for r in csv.DictReader(out.open())}


@needs_bwrap
@pytest.mark.skipif(not LAB1.exists(), reason="labs/phase1_memory.ipynb not generated")
def test_forged_reports_are_not_believed(tmp_path):
    """An unsolved Lab 1 that forges a passing report two ways (its notebook writes one into every
    pipe of the grader it can open; its directory holds a `grader` package that would send one, signed,
    were it imported) gets its real grade: NOT PASSED, with the checks that really failed. Either
    defence alone failing fails this test: without the report channel the grader is killed after the
    forged write (no authentic report), without `python -P` the forged package answers."""
    forger = tmp_path / "submissions" / "forger"
    (forger / "grader").mkdir(parents=True)
    (forger / "grader" / "__init__.py").write_text("")
    (forger / "grader" / "__main__.py").write_text(SHADOW_MAIN)
    nb = nbformat.read(LAB1, as_version=4)
    nb.cells.insert(1, nbformat.v4.new_code_cell(FORGER_CELL))
    nbformat.write(nb, forger / "phase1_memory.ipynb")

    row = _grade_all(tmp_path / "submissions", "phase1", tmp_path / "grades.csv")["forger"]
    assert row["passed"] == "False", row
    assert row["device"] != "FORGED" and row["seed"] == "4242", row  # the grader's own report...
    assert "sandbox:" not in row["failed_checks"], row                # ...arrived, authenticated...
    assert "test_fill_odd_sizes" in row["failed_checks"], row         # ...with what really failed


def test_the_grader_process_cannot_be_read_or_written_by_its_peers(tmp_path):
    """The mechanism the report channel rests on: a process that called protect_this_process() keeps
    another process of the same user out of its /proc/<pid>/fd and memory; one that did not, does not."""
    # As root (a CI container), both processes become user nobody: root may read any process. They start as
    # root and drop their credentials themselves, so that a clone root alone can read (under /root) works too;
    # a change of credentials makes a process non-dumpable, so the holder first becomes an ordinary one again.
    # (everything imported first: the interpreter's own files may be root's alone too)
    drop = ("import ctypes, ctypes.util\nlibc = ctypes.CDLL(ctypes.util.find_library('c') or None)\n"
            f"os.setgroups([]); os.setresgid({sandbox.NOBODY}, {sandbox.NOBODY}, {sandbox.NOBODY}); "
            f"os.setresuid({sandbox.NOBODY}, {sandbox.NOBODY}, {sandbox.NOBODY})\n"
            "libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, 1\n"
            if os.geteuid() == 0 else "")
    holder = ("import os, sys, time\nfrom grader import sandbox\n" + drop + "r, w = os.pipe()\n"
              "if sys.argv[1] == 'protect':\n    sandbox.protect_this_process()\n"
              "print(w, flush=True)\ntime.sleep(60)\n")
    probe = ("import os, sys\n" + drop + "pid, fd = sys.argv[1], sys.argv[2]\nreached = []\n"
             "for path in (f'/proc/{pid}/fd/{fd}', f'/proc/{pid}/environ', f'/proc/{pid}/mem'):\n"
             "    try:\n        os.close(os.open(path, os.O_WRONLY if '/fd/' in path else os.O_RDONLY))\n"
             "        reached.append(path.rsplit('/', 1)[-1])\n    except OSError:\n        pass\n"
             "print(' '.join(reached))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    seen = {}
    for mode in ("protect", "plain"):
        proc = subprocess.Popen([sys.executable, "-c", holder, mode], stdout=subprocess.PIPE, text=True, env=env,
                                cwd=tmp_path)
        try:
            fd = proc.stdout.readline().strip()
            out = subprocess.run([sys.executable, "-c", probe, str(proc.pid), fd], capture_output=True, text=True,
                                 env=env, cwd=tmp_path, timeout=60)
            assert fd and out.returncode == 0, (mode, fd, out.stderr)
            seen[mode] = out.stdout.split()
        finally:
            proc.kill()
            proc.wait()
    assert seen["plain"] == [seen["plain"][0], "environ", "mem"], seen  # the control: a peer gets in
    assert seen["protect"] == [], seen


def test_only_an_envelope_under_the_key_is_a_report():
    key, other = os.urandom(32), os.urandom(32)
    report = json.dumps({"phase": "phase1", "passed": False, "checks": []})
    good = json.dumps({"report": report, "mac": sandbox._mac(key, report)}).encode()
    assert sandbox.open_envelope(good, key) == json.loads(report)
    forged = json.dumps(FORGED)
    assert sandbox.open_envelope(json.dumps({"report": forged, "mac": "0" * 64}).encode(), key) is None
    assert sandbox.open_envelope(json.dumps({"report": forged, "mac": sandbox._mac(other, forged)}).encode(),
                                 key) is None
    assert sandbox.open_envelope(good + b"\n" + good, key) is None          # something else was written too
    assert sandbox.open_envelope(forged.encode(), key) is None              # a bare report is no envelope
    assert sandbox.open_envelope(good[:-1], key) is None
    extra = json.dumps({"report": report, "mac": sandbox._mac(key, report), "passed": True}).encode()
    assert sandbox.open_envelope(extra, key) is None


# ---------------------------------------------------------------- the deliverable, outside


@pytest.fixture(scope="module")
def sales_dir(tmp_path_factory) -> Path:
    """A data directory with the generated sales.tsv (the repository's data/ is never touched)."""
    folder = tmp_path_factory.mktemp("sales-data")
    subprocess.run([sys.executable, str(REPO / "data" / "make_sales.py"), "--out", str(folder / "sales.tsv")],
                   check=True, capture_output=True, timeout=120)
    folder.chmod(0o755)  # as root the sandbox grades as nobody, who must be able to read the data
    (folder / "sales.tsv").chmod(0o644)
    return folder


# The cell a submission uses to save a model without training one: exact (log total = log quantity +
# log unit price, which a Linear layer computes and a ReLU passes) or one constant price.
SAVE_MODEL_CELL = """
import numpy as np
import minitorch
from minitorch.data import load_sales, sales_features, sales_path, sha256_file

PERFECT = {perfect}
_, _, names = sales_features(load_sales(sales_path()))
n = len(names)
w1, b1 = np.zeros((n, 2)), np.array([50.0, 0.0])
if PERFECT:
    w1[names.index("quantity"), 0] = w1[names.index("unit_price"), 0] = 1.0
w2, b2 = np.array([[1.0], [0.0]]), np.array([-50.0 if PERFECT else -47.0])
ws = minitorch.workspace_dir()
record = {{"format": 1, "features": names, "log_features": ["quantity", "unit_price"],
          "log_target": True, "feature_mean": [0.0] * n, "feature_std": [1.0] * n,
          "target_mean": 0.0, "target_std": 1.0, "sales_sha256": sha256_file(sales_path()),
          "test_mae": 0.001}}
minitorch.nn.save_deliverable(ws, "sales_model.json", record, {{"sales_model.npz": {{
    "hidden.weight": w1, "hidden.bias": b1, "out.weight": w2, "out.bias": b2}}}})
"""

# Appended to the forger's reduce.py, which the graded tests import (and so run) before the
# deliverable's test: that test's code is replaced by a function that does nothing.
PATCH_THE_TEST = """

import sys as _sys

for _name, _module in list(_sys.modules.items()):
    _test = getattr(_module, "test_sales_model_beats_the_mean_predictor", None)
    if _name.endswith("test_phase4") and _test is not None:
        _test.__code__ = (lambda: None).__code__
"""


def save_model(workspace: Path, sales: Path, *, perfect: bool) -> None:
    """What SAVE_MODEL_CELL writes, written here (for the outside-evaluation unit tests)."""
    env = {**os.environ, "MINITORCH_WORKSPACE": str(workspace), "MINITORCH_DATA_DIR": str(sales),
           "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", SAVE_MODEL_CELL.format(perfect=perfect)], check=True, env=env,
                   capture_output=True, timeout=120)


def _phase4_notebook(*, perfect: bool, reduce_py_extra: str = "") -> nbformat.NotebookNode:
    files = solution_files("phase4_reductions.ipynb")
    cells = ["import minitorch\n%load_ext minitorch",
             "%%kernel reduce.cu\n" + files["reduce.cu"],
             "%%module reduce.py\n" + files["reduce.py"] + reduce_py_extra,
             SAVE_MODEL_CELL.format(perfect=perfect)]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])


@needs_bwrap
@pytest.mark.slow
def test_a_forged_deliverable_fails_outside(tmp_path, sales_dir):
    """Phase 4 with the reference kernels, a model that always predicts one price, and a reduce.py
    that patches the deliverable's graded test. The patch runs in the learner process, not in the graded
    tests' (Phase 4 is isolated): the deliverable's test still FAILs inside; and outside, the grader
    re-evaluates the saved files: FAIL, not passed. Everything else passing also shows that an honest Phase 4
    submission gets the earlier phases' files it builds on (the exact model passes outside: the unit test
    below)."""
    trudy = tmp_path / "submissions" / "trudy"
    trudy.mkdir(parents=True)
    nbformat.write(_phase4_notebook(perfect=False, reduce_py_extra=PATCH_THE_TEST), trudy / "phase4_reductions.ipynb")
    row = _grade_all(tmp_path / "submissions", "phase4", tmp_path / "grades.csv",
                     {"MINITORCH_DATA_DIR": str(sales_dir)})["trudy"]
    assert row["passed"] == "False", row
    assert row["deliverable"].startswith("sales: FAIL: test MAE"), row
    assert "x the mean predictor's" in row["deliverable"], row
    # What the forgery achieved inside: nothing. The only failures are the deliverable's graded test, unpatched
    # (before the isolation it was patched to pass), and the grader's own re-evaluation.
    failed = row["failed_checks"]
    assert int(row["passed_checks"]) > 50 and failed.count(" [") == 1, row
    assert failed.startswith("test_sales_model_beats_the_mean_predictor [FAIL]; "
                             "sales (re-evaluated by the grader): test MAE"), row


# ---------------------------------------------------------------- the saved files are untrusted


@pytest.fixture(scope="module")
def honest(tmp_path_factory, sales_dir) -> Path:
    ws = tmp_path_factory.mktemp("honest")
    save_model(ws, sales_dir, perfect=True)
    return ws


@pytest.fixture
def data_env(monkeypatch, sales_dir):
    monkeypatch.setenv("MINITORCH_DATA_DIR", str(sales_dir))


def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir(exist_ok=True)
    for name in (deliverables.SALES_MODEL, deliverables.SALES_RECORD):
        (dst / name).write_bytes((src / name).read_bytes())
    return dst


def test_outside_an_exact_model_passes_and_a_constant_one_fails(tmp_path, honest, sales_dir, data_env):
    verdict = deliverables.verify("phase4", honest)
    assert verdict is not None and verdict.passed, verdict
    save_model(tmp_path, sales_dir, perfect=False)
    verdict = deliverables.verify("phase4", tmp_path)
    assert not verdict.passed and "x the mean predictor's" in verdict.message, verdict
    assert deliverables.verify("phase1", tmp_path) is None  # no deliverable evaluated from files


class _Payload:
    """Unpickling this runs `touch <marker>`: what a pickled object array in a model file could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_outside_a_pickle_in_the_model_is_refused_unrun(tmp_path, honest, data_env):
    ws = _copy(honest, tmp_path / "ws")
    marker = tmp_path / "pickle-ran"
    with np.load(honest / deliverables.SALES_MODEL) as saved:
        arrays = {k: saved[k] for k in saved.files}
    arrays["out.bias"] = np.array([_Payload(marker)], dtype=object)
    np.savez(ws / deliverables.SALES_MODEL, **arrays)
    verdict = deliverables.verify("phase4", ws)
    assert not verdict.passed and "allow_pickle=False" in verdict.message, verdict
    assert not marker.exists()


def test_outside_links_are_refused(tmp_path, honest, data_env):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / deliverables.SALES_RECORD).write_bytes((honest / deliverables.SALES_RECORD).read_bytes())
    (ws / deliverables.SALES_MODEL).symlink_to(honest / deliverables.SALES_MODEL)  # someone else's model
    verdict = deliverables.verify("phase4", ws)
    assert not verdict.passed and "cannot be opened as a regular file" in verdict.message, verdict
    (ws / deliverables.SALES_MODEL).unlink()
    os.link(honest / deliverables.SALES_MODEL, ws / deliverables.SALES_MODEL)
    verdict = deliverables.verify("phase4", ws)
    assert not verdict.passed and "hard links" in verdict.message, verdict


def test_outside_sizes_are_checked_before_reading(tmp_path, honest, data_env, monkeypatch):
    ws = _copy(honest, tmp_path / "ws")
    monkeypatch.setattr(deliverables, "MAX_ARRAY_BYTES", 64)  # hidden.weight is larger
    verdict = deliverables.verify("phase4", ws)
    assert not verdict.passed and "would decompress to" in verdict.message, verdict
    monkeypatch.setattr(deliverables, "MAX_FILE_BYTES", 100)
    verdict = deliverables.verify("phase4", ws)
    assert not verdict.passed and "more than the 100 a saved model" in verdict.message, verdict


@pytest.mark.parametrize("damage, message", [
    (lambda a, r: a.update({"hidden.weight": np.full_like(a["hidden.weight"], np.nan)}), "NaN or infinite"),
    (lambda a, r: a.update({"hidden.weight": np.zeros((a["hidden.weight"].shape[0], 5000))}), "0 < H <= 4096"),
    (lambda a, r: a.update({"out.bias": np.array([1], np.int64)}), "floating-point array"),
    (lambda a, r: a.pop("out.weight"), "lacks out.weight"),
    (lambda a, r: r.update({"target_std": "1.0"}), "target_std must be a finite number"),
    (lambda a, r: r.update({"log_target": "yes"}), "log_target must be true or false"),
    (lambda a, r: r.update({"feature_mean": {"x": 1}}), "feature_mean must be a list"),
    (lambda a, r: r.update({"features": 7}), "features must be a list of names"),
    (lambda a, r: r.update({"sales_sha256": "0" * 64}), "trained on another sales.tsv"),
], ids=["nan", "huge-hidden", "int-array", "missing-array", "string-number", "log-target", "mean-dict",
        "features", "other-data"])
def test_outside_malformed_files_fail_with_a_reason(tmp_path, honest, data_env, damage, message):
    ws = tmp_path / "ws"
    ws.mkdir()
    with np.load(honest / deliverables.SALES_MODEL) as saved:
        arrays = {k: saved[k] for k in saved.files}
    record = json.loads((honest / deliverables.SALES_RECORD).read_text())
    record.pop(deliverables.PARAMETERS_HASHES)
    damage(arrays, record)
    save_deliverable(ws, deliverables.SALES_RECORD, record, {deliverables.SALES_MODEL: arrays})  # one pair
    verdict = deliverables.verify("phase4", ws)
    assert not verdict.passed and message in verdict.message, verdict


def test_outside_non_json_numbers_and_garbage_fail(tmp_path, honest, data_env):
    ws = _copy(honest, tmp_path / "ws")
    text = (ws / deliverables.SALES_RECORD).read_text().replace('"target_std": 1.0', '"target_std": NaN')
    (ws / deliverables.SALES_RECORD).write_text(text)
    verdict = deliverables.verify("phase4", ws)
    assert not verdict.passed and "NaN is not a number JSON allows" in verdict.message, verdict
    ws = _copy(honest, tmp_path / "ws2")
    (ws / deliverables.SALES_MODEL).write_bytes(os.urandom(4096))
    verdict = deliverables.verify("phase4", ws)
    assert not verdict.passed and "is not a NumPy .npz archive" in verdict.message, verdict
