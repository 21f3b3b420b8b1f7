"""Kernels split at their barriers: each CUDA thread a C++ coroutine instead of a fiber.

A kernel with ``__syncthreads()`` runs each CUDA thread on a fiber (a stack of its own and a context switch at
every barrier: ``runtime.cpp``). Most barrier kernels of the course are tiled loops, ``for (tile...) { load;
__syncthreads(); compute; __syncthreads(); }``, where a thread runs a few dozen instructions between two
barriers, so the switches and the cold stacks of 256 fibers are a large part of the time. Splitting the body at
its barriers (as MCUDA and POCL do) makes the code between two barriers a plain function of the thread, its
live variables kept per thread. The C++ compiler does that transformation itself when the kernel is a coroutine:
each barrier becomes ``co_await``, a thread's variables live in a small frame (from an arena of the block), and
moving to the next thread is a return and a call. ``runtime.cpp``'s ``emu_rt_split_block`` runs the threads in
the fibers' order with the fibers' barrier bookkeeping, so a divergent barrier, a thread that exits early and a
deadlock are reported the same way (a kernel with a barrier in a thread-dependent branch is split too: the
bookkeeping, not the shape of the code, finds the divergence).

The rewrite is textual and keeps every line where it was (compiler messages and fault reports keep the learner's
line numbers): ``extern "C"`` becomes ``template <class __emu_V>`` (the kernel's integer parameters, renamed
``__emu_p_<name>``, are read again at the top of the body as ``const`` copies that are constants in a
specialisation, ``specialize.py``), ``void`` becomes ``__emu_split::task``, each ``__syncthreads()`` a
``co_await``, each ``return`` a ``co_return``. GCC keeps every variable of a coroutine's body in its frame, in
memory that any store of the kernel may alias, so a loop's sum would be loaded and stored at every step (the
split convolutions ran slower than on fibers): each outermost ``for`` loop without a barrier (or return, goto,
case label, ``__shared__``) is therefore wrapped in an inlined lambda, ``[&]() { <copies> for (...) {...}
<write-backs> }();``, that works on copies of the kernel variables it uses (``_frame_variables``: never those
named in a macro or a lambda of the learner, whose address is taken, or an array used as a pointer). A kernel is
split only when nothing else in it synchronises:
no warp primitive, no ``__syncthreads_count/and/or``, no device function or macro that uses one, no inline
PTX or emulator built-in, no barrier inside a lambda, no local class, and its name is not used elsewhere.
Everything else keeps its fibers; check mode always uses them (its race detectors and barrier diagnosis are
the fibers'); ``MINITORCH_EMU_SPLIT=0`` (or ``MINITORCH_EMU_FIBERS=1``) turns splitting off. A split module
that does not compile is compiled again without splitting (``compiler.build_module``), so a learner never sees
an error of the rewrite.
"""

from __future__ import annotations

import os
import re
from typing import Any

_INTEGRAL = re.compile(r"\b(u?int(8|16|32|64)_t|size_t|ptrdiff_t|int|unsigned|signed|long|short|char|bool)\b")
# Names that make a kernel keep its fibers: emulator built-ins (inline PTX, cp.async, collectives), assembly,
# non-local jumps, coroutine keywords of its own.
_REFUSED_NAMES = re.compile(r"^(__emu_\w*|__pipeline\w*|asm|__asm|__asm__|setjmp|longjmp|_setjmp|alloca|"
                            r"__builtin_alloca\w*|wmma|nvcuda|co_await|co_return|co_yield|__builtin_coro\w*)$")
_LAMBDA = re.compile(r"\[[^\[\];{}]*\]\s*(?:\([^()]*\)\s*)?(?:mutable\s*)?(?:->[^{;]*)?\{")
_LOCAL_CLASS = re.compile(r"\b(struct|class|union)\b[^;{}]*\{")
_BARRIER = re.compile(r"\b__syncthreads\s*\(\s*\)")


def coroutines(compiler_version: str) -> bool:
    """Whether the compiler has C++ coroutines in C++17 mode: g++ 10 or later, with -fcoroutines."""
    if "clang" in compiler_version.lower():
        return False
    m = re.search(r"(\d+)\.\d+(\.\d+)?", compiler_version)
    return bool(m) and int(m.group(1)) >= 10


def split_enabled(compiler_version: str) -> bool:
    """MINITORCH_EMU_SPLIT unset or not 0/off, and a compiler with coroutines."""
    if os.environ.get("MINITORCH_EMU_SPLIT", "").strip().lower() in ("0", "off", "no", "false"):
        return False
    return coroutines(compiler_version)


def match_close(s: str, i: int, open_c: str, close_c: str) -> int:
    """Index just after the bracket matching the one at s[i] (the compiler's scans use it too)."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == open_c:
            depth += 1
        elif s[j] == close_c:
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def _params(s: str, lo: int, hi: int) -> list[tuple[int, int]]:
    """(start, end) of each parameter declaration of s[lo:hi] (a parameter list without its parentheses)."""
    out, depth, start = [], 0, lo
    for j in range(lo, hi):
        c = s[j]
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append((start, j))
            start = j + 1
    if s[start:hi].strip():
        out.append((start, hi))
    return out


def _assigned(body: str, name: str) -> bool:
    """Whether the body may change ``name``: an assignment, an increment, or its address taken."""
    n = re.escape(name)
    return bool(re.search(rf"(?<![\w.>]){n}\s*(?:[-+*/%&|^]|<<|>>)?=(?!=)|(?:\+\+|--)\s*{n}\b|"
                          rf"(?<![\w.>]){n}\s*(?:\+\+|--)|&\s*{n}\b", body))


def plan(stripped: str, f: Any, sync: set[str]) -> list[tuple[int, int, str]] | None:
    """The edits (start, end, replacement) that make kernel ``f`` (a compiler.FuncDef of the stripped source)
    a coroutine, or None when it must keep its fibers."""
    idents = set(re.findall(r"\w+", f.body))
    if "__syncthreads" not in idents or idents & (sync - {"__syncthreads"}):
        return None
    if any(_REFUSED_NAMES.match(i) for i in idents) or _LOCAL_CLASS.search(f.body):
        return None
    if len(re.findall(rf"\b{re.escape(f.name)}\b", stripped)) != 1:  # a prototype, a call, a pointer to it
        return None
    body_at = stripped.find(f.body, f.start)
    body = f.body
    if body_at < 0 or len(re.findall(r"\b__syncthreads\b", body)) != len(_BARRIER.findall(body)):
        return None
    lambdas = []
    for m in _LAMBDA.finditer(body):
        lambdas.append((m.end() - 1, match_close(body, m.end() - 1, "{", "}")))
    if any(a <= m.start() < b for m in _BARRIER.finditer(body) for a, b in lambdas):
        return None
    # the declaration: extern "C" ... void name(params)
    head_lo = max(stripped.rfind(";", 0, f.start), stripped.rfind("}", 0, f.start),
                  stripped.rfind("{", 0, f.start)) + 1
    name_m = re.compile(rf"\b{re.escape(f.name)}\s*\(").search(stripped, f.start, body_at)
    if not name_m:
        return None
    ext = list(re.finditer(r'\bextern\s*"C"', stripped[head_lo:name_m.start()]))
    void = list(re.finditer(r"\bvoid\b", stripped[head_lo:name_m.start()]))
    if len(ext) != 1 or len(void) != 1 or re.search(r"\btemplate\b", stripped[head_lo:name_m.start()]):
        return None
    edits = [(head_lo + ext[0].start(), head_lo + ext[0].end(), "template <class __emu_V>"),
             (head_lo + void[0].start(), head_lo + void[0].end(), "__emu_split::task")]
    open_p = name_m.end() - 1
    close_p = match_close(stripped, open_p, "(", ")") - 1
    prologue = []
    const_params: set[str] = set()
    params = _params(stripped, open_p + 1, close_p)
    if len(params) == 1 and stripped[params[0][0]:params[0][1]].strip() == "void":
        params = []
    for index, (a, b) in enumerate(params):
        decl = stripped[a:b]
        if "=" in decl:  # a default argument: not in a kernel
            return None
        ids = list(re.finditer(r"[A-Za-z_]\w*", decl))
        if len(ids) < 2 or ids[-1].group() in ("const", "volatile", "__restrict__", "__restrict", "restrict"):
            return None  # unnamed
        if any(c in decl for c in "*&[(") or not _INTEGRAL.search(decl[:ids[-1].start()]):
            continue
        name = ids[-1].group()
        edits.append((a + ids[-1].start(), a + ids[-1].end(), f"__emu_p_{name}"))
        t = f"decltype(__emu_p_{name})"
        const = "" if _assigned(body, name) else "const "
        if const:
            const_params.add(name)
        prologue.append(f"{const}{t} {name} = __emu_V::template has<{index}>() ? "
                        f"__emu_V::template val<{index}, {t}>() : __emu_p_{name};")
    edits.append((body_at + 1, body_at + 1, " ".join(prologue)))
    for m in _BARRIER.finditer(body):
        if "\n" in m.group():
            return None
        edits.append((body_at + m.start(), body_at + m.end(), "co_await __emu_split::barrier{__FILE__, __LINE__}"))
    for m in re.finditer(r"\breturn\b", body):
        if not any(a <= m.start() < b for a, b in lambdas):
            edits.append((body_at + m.start(), body_at + m.end(), "co_return"))
    # the lambdas get the kernel's alignment-check exemption (compiler.without_scalar_alignment_checks)
    exempt = " no_sanitize(\"alignment\")," if re.search(r"\bno_sanitize\s*\(", stripped[head_lo:name_m.start()]) else ""
    loops = _barrier_free_loops(body)
    owned = _frame_variables(stripped, body, loops, lambdas, [stripped[a:b] for a, b in params], const_params)
    for a, b in loops:
        text = body[a:b]
        # the variables in scope at the loop (a declaration inside it is renamed too: it shadows the copy)
        names = sorted(n for n, (_, _, lo, hi) in owned.items() if lo < a < hi
                       and re.search(rf"(?<![\w.>:]){n}\b", text))
        enter, leave = [], []
        for n in names:
            kind, const, _, _ = owned[n]
            if kind == "array":
                enter.append(f"std::remove_cv_t<decltype({n})> __l_{n}; memcpy(&__l_{n}, &{n}, sizeof({n}));")
                if not const:
                    leave.append(f"memcpy(&{n}, &__l_{n}, sizeof({n}));")
            else:
                enter.append(f"auto __l_{n} = {n};")
                if not const:  # (a function may take it by reference: written back even if never assigned here)
                    leave.append(f"{n} = __l_{n};")
            for m in re.finditer(rf"(?<![\w.>:]){n}\b", text):
                edits.append((body_at + a + m.start(), body_at + a + m.end(), f"__l_{n}"))
        edits += [(body_at + a, body_at + a, f"[&]() __attribute__(({exempt} always_inline)) {{ {' '.join(enter)} "),
                  (body_at + b, body_at + b, f" {' '.join(leave)} }}();")]
    return edits


_DECL = re.compile(r"(?:^|(?<=[;{}]))\s*(?P<type>(?:(?:const|volatile|unsigned|signed)\s+)*"
                   r"(?:long\s+long|int|float|double|long|short|char|bool|size_t|unsigned|u?int[1-4]|float[1-4]|"
                   r"u?int(?:8|16|32|64)_t)\b(?:\s+const\b)?)"
                   r"(?P<decls>(?:[^;{}]|\{[^;{}]*(?:\{[^;{}]*\}[^;{}]*)*\})*);")  # brace initialisers too
_DECLARATOR = re.compile(r"^\s*(?P<ptr>(?:\*\s*(?:const\s+|__restrict__\s+)*)*)(?P<name>[A-Za-z_]\w*)\s*"
                         r"(?P<dims>(?:\[[^\]]*\]\s*)*)(?:=.*)?$", re.S)


def _frame_variables(stripped: str, body: str, loops: list[tuple[int, int]], lambdas: list[tuple[int, int]],
                     stripped_params: list[str], const_params: set[str]) -> dict[str, tuple[str, bool, int, int]]:
    """The kernel's own variables (declared in its body outside the loops that lambdas hold, or its parameters)
    that a held loop may work on in a copy of its own, {name: ("array" or "scalar", const, where its scope begins
    and ends in the body)}: never named in a
    macro or in one of the learner's lambdas, their address never taken, an array never used without an index
    (a pointer to it), no reference declared anywhere in the kernel. GCC keeps a coroutine's variables in its
    frame, in memory that every store of the kernel may alias: a sum kept there is loaded and stored at every
    step of the loop; the lambda's copy lives in registers, and goes back to the frame after the loop."""
    if re.search(r"[\w>]\s*&\s*[A-Za-z_]\w*\s*[=;,)]", body):  # a reference (or a bitwise and): no copies
        return {}
    found: dict[str, tuple[str, bool, int, int]] = {}
    for text in stripped_params:  # an integer parameter never assigned is a const copy (plan's prologue)
        ids = re.findall(r"[A-Za-z_]\w*", text)
        if ids:
            found[ids[-1]] = ("scalar", ids[-1] in const_params, -1, len(body))
    declared_twice: set[str] = set()
    outside = body
    for a, b in loops:
        outside = outside[:a] + " " * (b - a) + outside[b:]
    for m in _DECL.finditer(outside):
        if re.search(r"\b(__shared__|static|volatile|extern)\b", m.group(0)) or "(" in m.group("decls").split("=")[0]:
            for part in re.findall(r"[A-Za-z_]\w*", m.group("decls")):
                declared_twice.add(part)  # never copied (a volatile's every access must happen)
            continue
        const = re.search(r"\bconst\b", m.group("type")) is not None
        depth, cur, parts = 0, "", []
        for ch in m.group("decls"):
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for part in parts:
            d = _DECLARATOR.match(part)
            if not d:
                continue
            ptr = bool(d.group("ptr").strip())
            kind = "array" if d.group("dims").strip() else "scalar"
            if d.group("name") in found:
                declared_twice.add(d.group("name"))
            found[d.group("name")] = (kind, const and not ptr, m.end(), _scope_end(body, m.start()))
    macros = set(re.findall(r"\w+", " ".join(re.findall(r"^[ \t]*#[ \t]*define[^\n]*", stripped, re.M))))
    owned = {}
    for name, (kind, const, lo, hi) in found.items():
        n = re.escape(name)
        if name in macros or name in declared_twice or any(re.search(rf"\b{n}\b", body[a:b]) for a, b in lambdas):
            continue
        if re.search(rf"&\s*{n}\b", body):
            continue  # its address taken
        if kind == "array" and re.search(rf"(?<![\w.>:]){n}\b(?!\s*\[)", body):
            continue  # used as a pointer
        owned[name] = (kind, const, lo, hi)
    return owned


def _scope_end(body: str, pos: int) -> int:
    """Where the innermost block around ``pos`` ends."""
    depth = 0
    for j in range(pos - 1, -1, -1):
        if body[j] == "}":
            depth += 1
        elif body[j] == "{":
            if depth == 0:
                return match_close(body, j, "{", "}")
            depth -= 1
    return len(body)


_NOT_IN_A_LAMBDA = re.compile(r"\b(return|goto|__shared__|case|default|__syncthreads)\b")


def _barrier_free_loops(body: str) -> list[tuple[int, int]]:
    """The outermost ``for`` loops (with a braced body) of a kernel body that a lambda can hold: no barrier, no
    return, goto, case label or __shared__ declaration inside. GCC keeps every variable of a coroutine's body in
    its frame, in memory that any store of the kernel may alias, so a loop's counters and temporaries would be
    stored at every iteration; a lambda's own variables are ordinary ones (registers), and it is inlined."""
    out: list[tuple[int, int]] = []
    covered = 0
    for m in re.finditer(r"\bfor\s*\(", body):
        if m.start() < covered:
            continue
        k = match_close(body, m.end() - 1, "(", ")")
        while k < len(body) and body[k] in " \t\r\n":
            k += 1
        if k >= len(body) or body[k] != "{":
            continue
        end = match_close(body, k, "{", "}")
        if _NOT_IN_A_LAMBDA.search(body, m.start(), end):
            continue  # a loop inside it may still be held
        out.append((m.start(), end))
        covered = end
    return out


def split_kernels(src: str, stripped: str, candidates: list[Any], sync: set[str]) -> tuple[str, set[str]]:
    """The source with every candidate kernel that can be split rewritten as a coroutine, and their names."""
    edits: list[tuple[int, int, str]] = []
    names = set()
    for f in candidates:
        e = plan(stripped, f, sync)
        if e is not None:
            edits += e
            names.add(f.name)
    for a, b, rep in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        src = src[:a] + rep + src[b:]
    return src, names


def split_spec_struct(name: str, consts: tuple[tuple[int, int, int], ...]) -> str:
    """A ``__emu_V`` of the split kernels' template: the integer parameters of one launch signature as
    constants (specialize.py)."""
    has = " || ".join(f"I == {i}" for i, _, _ in consts) or "false"
    cases = "".join(f"if constexpr (I == {i}) return (T)0x{val & ((1 << (8 * size)) - 1):x}ULL; else "
                    for i, size, val in consts)
    return (f"struct {name} {{ template <size_t I> static constexpr bool has() {{ return {has}; }} "
            f"template <size_t I, class T> static constexpr T val() {{ {cases}return T(); }} }};")
