"""minitorch.watch: one poll tells whether anything in a watched directory changed, however it changed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from minitorch import kernels, watch

pytestmark = pytest.mark.skipif(watch._LIBC is None, reason="no inotify here: stamps are read every time")


def moved(directory: Path, change) -> bool:
    before = watch.generation(str(directory))
    assert before is not None
    assert watch.generation(str(directory)) == before, "no change, no new generation"
    change()
    return watch.generation(str(directory)) != before


@pytest.mark.parametrize("how", ["rewrite", "append", "create", "delete", "rename_over", "chmod"])
def test_every_kind_of_change_moves_the_generation(tmp_path, how):
    f = tmp_path / "add.cu"
    f.write_text("one")
    changes = {
        "rewrite": lambda: f.write_text("two"),
        "append": lambda: f.open("a").write("more"),
        "create": lambda: (tmp_path / "pool.py").write_text(""),
        "delete": f.unlink,
        "rename_over": lambda: ((tmp_path / "new").write_text("new"), os.replace(tmp_path / "new", f)),
        "chmod": lambda: f.chmod(0o600),
    }
    assert moved(tmp_path, changes[how])


def test_a_change_by_another_process_is_seen_at_once(tmp_path):
    f = tmp_path / "add.cu"
    f.write_text("one")
    assert moved(tmp_path, lambda: subprocess.run(
        [sys.executable, "-c", f"open({str(f)!r}, 'w').write('two!')"], check=True))


def test_a_file_stamp_follows_a_rewrite_without_waiting(tmp_path):
    f = tmp_path / "add.cu"
    f.write_text("one")
    first = kernels.file_stamp(str(f))
    assert kernels.file_stamp(str(f)) == first  # from the cache now
    f.write_text("three")  # a different size: a different stamp even within one clock tick
    assert kernels.file_stamp(str(f)) != first
    f.unlink()
    with pytest.raises(FileNotFoundError):
        kernels.file_stamp(str(f))


def test_a_deleted_and_recreated_directory_is_watched_again(tmp_path):
    d = tmp_path / "ws"
    d.mkdir()
    (d / "a.cu").write_text("1")
    stamp = kernels.file_stamp(str(d / "a.cu"))
    (d / "a.cu").unlink()
    d.rmdir()
    watch.generation(str(d))  # the IGNORED event: the watch is dropped
    d.mkdir()
    (d / "a.cu").write_text("22")
    assert kernels.file_stamp(str(d / "a.cu")) != stamp
    assert moved(d, lambda: (d / "a.cu").write_text("333"))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_does_not_take_its_parents_events(tmp_path):
    """The child starts its own queue: had it read the inherited one, the parent would miss the change."""
    before = watch.generation(str(tmp_path))
    pid = os.fork()
    if pid == 0:  # the child: change the directory and look at it itself
        code = 1
        try:
            (tmp_path / "child.cu").write_text("x")
            code = 0 if watch.generation(str(tmp_path)) is not None else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert watch.generation(str(tmp_path)) != before


def test_minitorch_watch_0_turns_it_off(tmp_path):
    code = "import sys; from minitorch import watch; sys.exit(watch.generation(sys.argv[1]) is not None)"
    env = {**os.environ, "MINITORCH_WATCH": "0"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], env=env, check=True)
