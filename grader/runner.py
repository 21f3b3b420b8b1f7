"""`grader check`: run a phase's lab notebook (nbval), then its graded tests, each in a subprocess.

Nothing a learner's kernel does (crash, illegal address, hang) can take the grader down: both
steps (grader.notebook_step, grader.tests_step) run in their own process group with a timeout.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

from grader import learner_process, paths, progress
from grader.notebook_step import run_notebook_step
from grader.options import DEFAULT_TIMEOUT_S, CheckOptions
from grader.report import FAIL, NOT_MEASURED, CheckResult, PhaseReport
from grader.subprocesses import LAUNCH_TRACE
from grader.tests_step import device_of, isolated, run_tests_step

__all__ = ["DEFAULT_TIMEOUT_S", "CheckOptions", "NotPublishedError", "check_phase", "make_env"]


class NotPublishedError(RuntimeError):
    """The phase has no lab and graded tests yet."""


def make_env(opts: CheckOptions, workspace: Path, seed: int, work: Path, phase: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if phase:
        env["MINITORCH_PHASE"] = phase  # the framework runs this phase's kernels (no later phase's GEMM)
    root = str(paths.repo_root())
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["MINITORCH_WORKSPACE"] = str(workspace)
    env["GRADER_SEED"] = str(seed)
    env["GRADER_RUNNING"] = "1"  # lets grader/tests/conftest.py collect the graded tests
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a segfault prints the Python stack (the learner's line)
    env["MINITORCH_SYNC_LAUNCHES"] = "1"  # a fault surfaces at its own launch, naming its kernel
    env["MINITORCH_LAUNCH_TRACE"] = str(work / LAUNCH_TRACE)  # last launch: named when a test hangs or dies
    if opts.device:
        env["MINITORCH_DEVICE"] = opts.device
    if opts.sanitize:
        env["MINITORCH_EMU_CHECK"] = "1"
    # the emulator's generic code: a graded step is too short to repay recompiling its kernels for their sizes in
    # the background (minitorch/emu/specialize.py), and grading time stays what it was; a caller's setting is kept
    env.setdefault("MINITORCH_EMU_SPECIALIZE", "0")
    if opts.solutions:
        env["GRADER_SKIP_GATES"] = "1"  # reference solutions are graded whatever the instructor's progress
    return env


def _cuda_unusable() -> str | None:
    """Why CuPy cannot use a GPU here (checked once, up front, instead of failing every test)."""
    try:
        from minitorch.backend import cuda_status
    except ImportError as err:
        return f"minitorch cannot be imported ({err})"
    ok, why = cuda_status()
    return None if ok else why


def write_solution_files(workspace: Path, phase, *, include_own: bool) -> None:
    """Put the reference files of every phase before `phase` (and of `phase` itself when its notebook
    does not run) into `workspace`: a later phase builds on the files of the earlier ones."""
    from grader.labs import learner_files
    from grader.phases import PHASES

    workspace.mkdir(parents=True, exist_ok=True)
    for earlier in PHASES.values():
        if earlier.name == phase.name and not include_own:
            break
        if earlier.lab is not None:
            for name, text in learner_files(paths.solutions_dir() / f"{earlier.lab}.ipynb").items():
                (workspace / name).write_text(text)
        if earlier.name == phase.name:
            break


def resolve_notebook(opts: CheckOptions) -> Path:
    if opts.notebook:
        return Path(opts.notebook).resolve()
    base = paths.solutions_dir() if opts.solutions else paths.labs_dir()
    return base / f"{opts.phase.lab}.ipynb"


def not_measured_notes(report: PhaseReport) -> list[str]:
    """Why performance checks were not measured: without a GPU, one note; on a GPU (PyTorch missing, say),
    each reason, so that a check that could not run is never mistaken for one that passed."""
    notes = []
    absent = [c for c in report.checks if c.result == NOT_MEASURED and c.unavailable]
    if absent:
        reason = absent[0].reason.strip().splitlines()[0].removeprefix("not measured: ")
        notes.append(f"{len(absent)} check{'s' if len(absent) > 1 else ''} of code this device cannot run not "
                     f"measured ({reason}): they never block the phase, even with --require-perf")
    skipped = [c for c in report.checks if c.result == NOT_MEASURED and not c.unavailable]
    if not skipped:
        return notes
    if not report.device.startswith("cuda"):
        return notes + ["performance checks are not measured without a GPU; they do not block the phase unless "
                        "--require-perf is given"]
    reasons: dict[str, int] = {}
    for c in skipped:
        reason = c.reason.strip().splitlines()[0] if c.reason.strip() else "no reason given"
        reasons[reason] = reasons.get(reason, 0) + 1
    return notes + [f"{n} performance check{'s' if n > 1 else ''} not measured on this GPU: {reason} (they block "
                    f"the phase only with --require-perf)" for reason, n in reasons.items()]


def check_phase(opts: CheckOptions) -> PhaseReport:
    phase = opts.phase
    if not phase.published:
        raise NotPublishedError(
            f"{phase.name} ({phase.title}): the lab of this phase is not published yet; "
            f"nothing to grade. `grader status` shows where you are.")
    seed = opts.seed if opts.seed is not None else int(os.environ.get("GRADER_SEED") or secrets.randbits(31))
    report = PhaseReport(phase.name, phase.title, device=opts.device or "default", seed=seed,
                         require_perf=opts.require_perf, solutions=opts.solutions)
    if opts.device == "cpu" and phase.needs_cuda_c:
        report.checks.append(CheckResult(
            "device", FAIL, "setup",
            f"{phase.name}'s kernel checks run CUDA C: they need --device cuda (a GPU) or --device emu "
            f"(the CPU emulator); --device cpu runs no CUDA C, so the phase cannot pass on it.",
            hint="grader check " + phase.name + " --device emu"))
        return report

    if opts.device == "cuda" and (why := _cuda_unusable()):
        report.checks.append(CheckResult("device", FAIL, "setup", f"--device cuda: {why}",
                                         hint=f"grader check {phase.name} --device emu"))
        return report

    notebook = resolve_notebook(opts)
    work = Path(tempfile.mkdtemp(prefix=f"grader-{phase.name}-"))
    try:
        if opts.solutions:
            workspace = (work / "workspace")
            write_solution_files(workspace, phase, include_own=not opts.run_notebook)
        else:
            workspace = Path(opts.workspace or paths.default_workspace()).resolve()
        workspace.mkdir(parents=True, exist_ok=True)
        report.workspace = str(workspace) if not opts.solutions else "(temporary)"
        env = make_env(opts, workspace, seed, work, phase.name)
        report.isolated = isolated(phase, env)
        if isolated(phase, env) and device_of(env) == "emu":
            env.update(learner_process.runtime_pin())  # before the notebook, the learner's code, runs
        if opts.run_notebook:
            report.notebook = str(notebook)
            if not notebook.exists():
                hint = "run `grader labs` to generate the lab" if not opts.solutions else "solutions/ is incomplete"
                report.checks.append(CheckResult("lab notebook", FAIL, "setup", f"{notebook} does not exist", hint=hint))
                return report
            before = progress.file_sha256(notebook)
            report.checks += run_notebook_step(notebook, env, work, opts)
            if progress.file_sha256(notebook) != before:  # nbval runs a copy; this must never fire
                report.notes.append(f"WARNING: {notebook} changed during grading (not by the grader)")
        tests, device = run_tests_step(phase, env, work, opts)
        report.checks += tests
        report.notes += [f"{c.name}: {n}" for c in tests for n in c.notes]
        if device:
            report.device = device
        report.notes += not_measured_notes(report)
        if opts.select:
            report.notes.append(f"only tests matching -k {opts.select!r} ran: the phase cannot pass this way")
            report.partial = True
        if opts.record and not opts.solutions and not opts.select:
            rec = progress.make_record(phase, passed=report.passed, device=report.device, workspace=workspace,
                                       notebook=notebook if opts.run_notebook else None,
                                       perf=report.perf_records(), seed=seed)
            progress.record(phase, rec)
            if report.passed:
                report.notes.append(f"progress recorded in {paths.progress_file()}")
        return report
    finally:
        if opts.keep_temp:
            report.notes.append(f"temporary files kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
