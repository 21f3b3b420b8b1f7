"""Kernels compiled again for the integer arguments they are launched with, over and over (a training loop).

A kernel's sizes are run-time arguments, so the compiled code divides by them: ``i / (H * W)``, ``i % W``, the
index arithmetic of every CUDA kernel, are hardware divisions (26 cycles each on the Xeons of cloud machines). On
a GPU these are cheap next to the memory traffic; on a CPU, running one CUDA thread after another, they are a
large part of the time (61% of the max-pooling backward pass's, ``benchmarks/results/emu_profile-*.json``). A
training loop launches the same kernels with the same sizes at every step. So once a module has spent
``config.specialize_after_s()`` seconds in launches, every launch signature (kernel, integer arguments) seen
three times or more is compiled again with those arguments as constants (``compiler.build_module(specs=...)``:
the kernel inlined into a thunk that passes them, ``prelude.h``'s ``run1v``/``plainv``), in a background thread,
and later launches with that signature run the specialised code. The compiler then divides by constants (a
multiplication and a shift), unrolls loops of known trip count and drops tests it can decide. That is usually
faster, not always (a kernel inlined whole into its thunk, its loops unrolled, can run slower: more code, bigger
stack frames for the fibers to switch between): the first TRIALS launches of the specialised code are timed, and
if the fastest is not 3% faster than the generic code's fastest, that signature goes back to the generic code.

Nothing else changes: the same source compiled with the same flags and checks (alignment faults, bounds, the
barrier checks of the runtime), the same diagnostics (faults are located in the specialised module's own debug
information); floating-point results are bit for bit the same (no flag allows reassociation or contraction).
Check mode never uses specialised code. A specialised module is cached on disk as any other.
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from . import compiler, config

REPEATS = 3  # launches of one signature before it is worth compiling for
TRIALS = 3  # launches of the specialised code before it is compared with the generic code's
_all: weakref.WeakSet[Specializer] = weakref.WeakSet()


def specialize_now(timeout: float | None = None) -> float:
    """Specialise every module's signatures launched REPEATS times or more, whatever time they took (unless
    specialising is off), and wait for the compiles (at most ``timeout`` seconds); returns the seconds waited.
    For benchmarks, which time the steady state of a training loop."""
    start = time.perf_counter()
    for sp in list(_all):
        sp.request()
    for sp in list(_all):
        sp.wait(None if timeout is None else max(0.0, timeout - (time.perf_counter() - start)))
    return time.perf_counter() - start


class Specializer:
    """The launch statistics and specialised variant of one RawModule (normal mode)."""

    def __init__(self, module: Any) -> None:
        self._module = module
        self._lock = threading.Lock()
        # (export index, constants) -> [launches, seconds, the fastest launch's seconds]
        self._stats: dict[tuple[int, tuple], list] = {}
        self._total = 0.0
        self._checked_at = 0.0
        self._wanted: set[tuple[int, tuple]] = set()
        self._busy = False
        self.failed: str | None = None  # the compiler's message, if specialising this module failed
        # published as one tuple, read without the lock: (loaded variant, {(index, constants): spec number})
        self.ready: tuple[Any, dict[tuple[int, tuple], int]] | None = None
        self.compile_seconds = 0.0  # of the last specialised build (0 when it came from the disk cache quickly)
        self._idle = threading.Event()
        self._idle.set()
        self._trials: dict[tuple[int, tuple], list] = {}  # specialised launches: [launches, fastest seconds]
        self.rejected: set[tuple[int, tuple]] = set()  # signatures whose specialised code was not faster
        _all.add(self)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until no compile is running; False if ``timeout`` passed first."""
        return self._idle.wait(timeout)

    def lookup(self, index: int, consts: tuple) -> tuple[Any, int] | None:
        """(specialised variant, spec number) for this launch signature, if compiled and specialising is on."""
        ready = self.ready
        if ready is None or config.specialize_after_s() is None or (index, consts) in self.rejected:
            return None
        j = ready[1].get((index, consts))
        return None if j is None else (ready[0], j)

    def record(self, index: int, consts: tuple, seconds: float) -> None:
        """Count one launch of kernel ``index`` with integer arguments ``consts``."""
        after = config.specialize_after_s()
        if after is None or self.failed is not None:
            return
        with self._lock:
            st = self._stats.get((index, consts))
            if st is None:
                st = self._stats[(index, consts)] = [0, 0.0, seconds]
            st[0] += 1
            st[1] += seconds
            st[2] = min(st[2], seconds)
            self._total += seconds
            if self._total < after or self._total < 2 * self._checked_at:
                return
            self._checked_at = self._total  # look again when twice the time has passed
        self.request()

    def record_specialised(self, index: int, consts: tuple, seconds: float) -> None:
        """Count one launch of the specialised code; after TRIALS of them, keep it only if it is faster than the
        generic code was (a kernel inlined whole can also be slower: more code, bigger frames)."""
        sig = (index, consts)
        with self._lock:
            trial = self._trials.setdefault(sig, [0, seconds])
            trial[0] += 1
            trial[1] = min(trial[1], seconds)
            if trial[0] != TRIALS or sig not in self._stats:
                return
            if trial[1] > 0.97 * self._stats[sig][2]:  # the fastest launch of each, robust to a busy machine
                self.rejected.add(sig)

    def request(self) -> None:
        """Compile (in the background) for the signatures launched REPEATS times that have no code yet."""
        if self.failed is not None or config.specialize_after_s() is None:
            return
        with self._lock:
            ready = self.ready[1] if self.ready else {}
            new = {sig for sig, (n, _, _) in self._stats.items() if n >= REPEATS and sig not in ready}
            if not new - self._wanted:
                return
            self._wanted |= new
            if self._busy:
                return  # the running compile picks them up when it is done
            self._busy = True
            self._idle.clear()
        threading.Thread(target=self._compile, name="emu-specialize", daemon=True).start()

    def _compile(self) -> None:
        from .launch import _Loaded  # launch imports this module

        while True:
            with self._lock:
                sigs = sorted(self._wanted | set(self.ready[1] if self.ready else ()))
                if self.ready is not None and set(sigs) == set(self.ready[1]):
                    self._busy = False
                    self._idle.set()
                    return
            m = self._module
            specs = tuple((index, consts) for index, consts in sigs)
            t0 = time.perf_counter()
            try:
                built = compiler.build_module(m.code, m.options, m.name_expressions, m.filename, False, specs)
                loaded = _Loaded(built)
            except Exception as e:  # noqa: BLE001 - a failed specialisation only leaves the generic code running
                with self._lock:
                    self.failed = str(e) or type(e).__name__
                    self._busy = False
                    self._idle.set()
                return
            self.compile_seconds = time.perf_counter() - t0
            self.ready = (loaded, {sig: j for j, sig in enumerate(sigs)})
