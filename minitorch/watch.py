"""Noticing that a learner file changed without asking the file system on every launch.

A rewritten ``%%kernel`` cell must take effect at the next launch, so everything derived from a learner
file (a compiled kernel, an imported launcher, a launch plan, the pool) is checked against the file
before use: an ``fstat`` per file, several per op. On Linux the kernel can tell us instead: an inotify
watch on the workspace directory queues an event for every write, rename, creation or deletion in it,
before the writing call returns. So one ``poll`` of the queue answers "did anything in the workspace
change?" for every file at once, and only when something did are the files looked at again.

:func:`generation` returns a counter that moves whenever an event arrived for any watched directory;
a stamp read while the counter had some value is still the file's stamp while the counter keeps it.
Where inotify is missing (not Linux, no more watches allowed, a file system without events) or
``MINITORCH_WATCH=0``, :func:`generation` returns None and callers read the stamps as before.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import sys
import threading

__all__ = ["generation"]

# inotify(7): what changes a file or the directory's list of files.
_MASK = (0x2 | 0x4 | 0x8 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800)  # MODIFY ATTRIB CLOSE_WRITE MOVED_* CREATE
# DELETE DELETE_SELF MOVE_SELF
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len (then len bytes of name)

_lock = threading.Lock()
_fd = -1  # the inotify descriptor; -1 before the first watch, None where inotify is unavailable
_poller: select.poll | None = None
_watched: dict[str, int] = {}  # directory -> watch descriptor
_count = 0  # the generation: moves when any event arrives


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux") or os.environ.get("MINITORCH_WATCH") == "0":
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch  # noqa: B018 (present in glibc and musl)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _libc()


def _open() -> bool:
    global _fd, _poller
    fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC) if _LIBC is not None else -1
    if fd < 0:
        _fd = None
        return False
    _fd, _poller = fd, select.poll()
    _poller.register(fd, select.POLLIN)
    return True


def _drain() -> None:
    """Read every queued event; any event moves the generation. A directory deleted or moved loses its
    watch (the kernel says so with IN_IGNORED): it is watched again when next asked about."""
    global _count
    _count += 1
    while True:
        try:
            data = os.read(_fd, 65536)
        except BlockingIOError:
            return
        offset = 0
        while offset + 16 <= len(data):
            wd, mask, _cookie, length = _EVENT.unpack_from(data, offset)
            if mask & (0x8000 | 0x400 | 0x800):  # IGNORED, DELETE_SELF, MOVE_SELF: the watch is gone
                for directory, watch in list(_watched.items()):
                    if watch == wd:
                        del _watched[directory]
            offset += 16 + length


def generation(directory: str) -> int | None:
    """The current generation if ``directory`` is watched (a watch is added the first time), else None.

    Polls the event queue: a change made before this call, by this process or any other, is seen."""
    if _fd is None:
        return None
    if directory not in _watched:
        with _lock:
            if _fd == -1 and not _open():
                return None
            wd = _LIBC.inotify_add_watch(_fd, os.fsencode(directory), _MASK)
            if wd < 0:
                return None
            _watched[directory] = wd
    if _poller.poll(0):
        with _lock:
            _drain()
    return _count


def _forget_after_fork() -> None:
    """A forked child must not read its parent's queue (the parent would miss those events): it starts
    its own."""
    global _fd, _poller, _count
    if _fd not in (None, -1):
        os.close(_fd)
        _fd, _poller = -1, None
    _watched.clear()
    _count += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)
