"""The GPU's NaN for the float32 arithmetic of the learner's code (x86-64 assembly rewrite).

An NVIDIA GPU's float32 add, subtract, multiply, divide and square root return one NaN, 0x7fffffff, whatever
NaN went in and for the invalid operations (0 * inf, inf - inf, 0 / 0, sqrt(-1)). x86 SSE keeps the payload and
sign of the NaN operand, and makes the negative 0xffc00000 from an invalid operation; so a kernel storing a NaN
it computed stores other bits on the emulator than on a GPU, which a bit-for-bit comparison (a parity test, a
float16 conversion keeping a NaN's sign) sees. Moves keep a NaN's bits on both; negation and fabsf of a NaN give
0x7fffffff on an H100 too (measured: benchmarks/results/nvrtc_fidelity-*.json), where x86 flips or clears the sign
bit only; fminf/fmaxf of a NaN and a number give the number on both, and a double's NaN narrowed to float keeps its
payload on both: those are left alone.

The emulator compiles a module to assembly (``compiler._compile_object``) and this rewrite follows each scalar
float32 ``addss``, ``subss``, ``mulss``, ``divss`` and ``sqrtss`` whose result is in a register, and each call of
a float function of the C library (``expf``, ``logf``, ``fmaf``, ...: result in %xmm0), with

    ucomiss %xmmD, %xmmD      unordered (parity set) only for a NaN
    jp      .Lemu_nan_fixN    out of line, in another section: lane 0 := 0x7fffffff, upper lanes kept
  .Lemu_nan_backN:

The compiler negates a float with ``xorps`` of a sign-bit mask (0x80000000) and takes fabsf with ``andps`` of
0x7fffffff (or ``andnps`` of the sign mask): a constant of the module (``.LCn``), used directly or loaded into a
register first (often before a loop). A forward data-flow pass over the function's basic blocks (``_mask_states``)
knows which registers hold such a mask at each instruction (on every path into a block: the meet is the
intersection), and each of those bitwise operations gets the same check as the arithmetic. Negation done in an
integer register (``xorl $0x80000000``) cannot be told apart from integer code and is left alone (the compiler
keeps floats in SSE registers for arithmetic, so it is rare).

``ucomiss`` writes the flags, so the check alone goes only where the flags are dead: the instructions after the
arithmetic, up to the next that writes the flags, read none (no conditional jump, set, cmov, adc/sbb) and the
path follows unconditional jumps to their label (an indirect jump, a loop back or 64 instructions end the
search: flags assumed live). Elsewhere (the compiler often puts a fabsf or a negation between an alignment
check's ``andl`` and its ``jne``) the check saves and restores the flags around itself: ``pushfq`` / ``popfq``,
below the 128-byte red zone a leaf function may keep its locals in (``leaq -128(%rsp), %rsp`` first; ``leaq``
leaves the flags alone). Vectorised (packed) float arithmetic and double precision are left as they are.

A check after every operation costs about a tenth of the kernels' time (the MNIST step's kernels, one worker:
+11-12%, ``benchmarks/results/emu_speed_experiments-*.json``), and NaN bits matter only to a bit-for-bit
comparison: so the rewrite is on in check mode (where the time goes to the race checks anyway) and wherever
``MINITORCH_EMU_CANONICAL_NAN=1`` asks for it (``compiler.canonical_nan``). Checking only stores would be cheap,
but wrong: a GPU keeps the bits of a NaN it copies, and the compiler copies floats through SSE registers or not
as it pleases.
"""

from __future__ import annotations

import re

_ARITH = re.compile(r"^\s*(addss|subss|mulss|divss|sqrtss)\s+.*,\s*(%xmm\d+)\s*$")
# float functions of the C library a kernel calls (the GPU's own versions return its NaN): result in %xmm0
_LIBM = {"expf", "exp2f", "exp10f", "expm1f", "logf", "log2f", "log10f", "log1pf", "powf", "sqrtf", "cbrtf",
         "sinf", "cosf", "tanf", "asinf", "acosf", "atanf", "atan2f", "sinhf", "coshf", "tanhf", "asinhf", "acoshf",
         "atanhf", "fmaf", "fmodf", "remainderf", "hypotf", "erff", "erfcf", "lgammaf", "tgammaf", "fdimf"}
_CALL = re.compile(r"^\s*call\s+([A-Za-z_]\w*?)(?:@PLT)?\s*$")
_READS = re.compile(r"^(j(?!mp\b)[a-z]+|set[a-z]+|cmov[a-z]+|(adc|sbb|rcl|rcr)[bwlq]?|pushf[qw]?|lahf)$")
_WRITES = re.compile(r"^((add|sub|and|or|xor|cmp|test|inc|dec|neg|imul|mul|div|idiv|bt|bts|btr|btc|bsf|bsr|"
                     r"popcnt|lzcnt|tzcnt)[bwlq]?|(shl|sal|shr|sar|rol|ror)[bwlq]?|u?comis[sd]|call|ret|sahf|"
                     r"popf[qw]?)$")
_SCAN = 64  # instructions looked at after an arithmetic one before giving up (flags assumed live)

CONSTANTS = """\t.section\t.rodata.emu_nan,"a",@progbits
\t.p2align 4
.Lemu_nan_keep:
\t.long\t0, -1, -1, -1
.Lemu_nan_canon:
\t.long\t0x7fffffff, 0, 0, 0
"""


def _mnemonic(line: str) -> str | None:
    """The instruction's mnemonic; None for a label, a directive, a comment or a blank line."""
    s = line.strip()
    if not s or s.startswith((".", "#")) or s.endswith(":"):
        return None
    return s.split()[0]


def _flags_dead_after(lines: list[str], i: int, labels: dict[str, int]) -> bool:
    """Whether no instruction reads the flags, on the path after lines[i] (through unconditional jumps to a
    label), before one writes them."""
    seen, visited = 0, set()
    j = i + 1
    while j < len(lines):
        line = lines[j]
        j += 1
        op = _mnemonic(line)
        if op is None:
            continue
        seen += 1
        if seen > _SCAN:
            return False
        if op[:3] in ("shl", "sal", "shr", "sar", "rol", "ror") and "%cl" in line:
            continue  # a shift by %cl leaves the flags alone when cl is 0: not a write
        if op == "jmp":
            target = line.split(None, 1)[1].strip() if len(line.split()) > 1 else ""
            if target not in labels or target in visited:
                return False  # an indirect jump, or a loop back: give up
            visited.add(target)
            j = labels[target] + 1
            continue
        if _READS.match(op):
            return False
        if _WRITES.match(op):
            return True
    return True


_LONG = re.compile(r"^\s*\.long\s+(-?(?:0x[0-9a-fA-F]+|\d+))\s*$")
_SIGN, _ABS = 0x80000000, 0x7FFFFFFF
_XMM = re.compile(r"^%xmm\d+$")
_JUMP = re.compile(r"^j[a-z]+$")
_NO_WRITE = re.compile(r"^(v?u?comis[sd]|v?ptest|v?movmskp[sd])$")  # read their last operand only


def _mask_constants(lines: list[str]) -> dict[str, int]:
    """{label: _SIGN or _ABS} of the module's constants whose first 32-bit lane is a float sign or magnitude mask
    and whose other lanes are that mask or 0 (the compiler's constants for -x and fabsf)."""
    out: dict[str, int] = {}
    for k, line in enumerate(lines):
        s = line.strip()
        if not re.match(r"^\.LC\d+:$", s):
            continue
        vals = []
        for nxt in lines[k + 1:k + 17]:
            m = _LONG.match(nxt)
            if not m:
                break
            vals.append(int(m.group(1), 0) & 0xFFFFFFFF)
        if vals and vals[0] in (_SIGN, _ABS) and all(v in (0, vals[0]) for v in vals[1:]):
            out[s[:-1]] = vals[0]
    return out


def _operands(line: str) -> list[str]:
    """The instruction's operands (AT&T order: the destination last), split at top-level commas."""
    parts = line.strip().split(None, 1)
    if len(parts) < 2:
        return []
    out, depth, cur = [], 0, ""
    for ch in parts[1]:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*out, cur.strip()] if cur.strip() else out


def _mask_of(operand: str, state: dict[str, int], consts: dict[str, int]) -> int | None:
    m = re.match(r"^(\.LC\d+)\(%rip\)$", operand)
    if m:
        return consts.get(m.group(1))
    return state.get(operand)


def _step(line: str, state: dict[str, int], consts: dict[str, int]) -> str | None:
    """Update ``state`` (register -> mask it holds) for one instruction; the register that then holds -x or
    fabsf(x) of a float, if the instruction computes one."""
    op = _mnemonic(line)
    if op is None:
        return None
    if op == "call":
        state.clear()
        return None
    ops = _operands(line)
    dst = ops[-1] if ops else ""
    if not _XMM.match(dst) or _NO_WRITE.match(op):
        return None
    made = None
    if len(ops) == 2 and op in ("movss", "movaps", "movups", "movd", "movdqa", "movdqu", "movapd"):
        kind = _mask_of(ops[0], state, consts)
        if kind is not None:
            state[dst] = kind
            return None
    elif len(ops) == 2 and ops[0] != dst:
        src, dmask = _mask_of(ops[0], state, consts), state.get(dst)
        if op == "xorps" and _SIGN in (src, dmask):
            made = dst
        elif op == "andps" and _ABS in (src, dmask):
            made = dst
        elif op == "andnps" and dmask == _SIGN:
            made = dst
    state.pop(dst, None)
    return made


def _mask_states(lines: list[str], labels: dict[str, int]) -> dict[int, str]:
    """{line index: register} of every -x and fabsf(x) (a bitwise operation with a sign or magnitude mask), by a
    forward data-flow pass over the basic blocks: a register holds a mask at a block's start only if it does at
    the end of every block jumping or falling into it (a function's first block, or a label reached from where
    this pass cannot see, starts with none)."""
    consts = _mask_constants(lines)
    if not consts:
        return {}
    starts = sorted({0, *labels.values()} | {k + 1 for k, ln in enumerate(lines)
                                               if (_mnemonic(ln) or "").startswith(("j", "ret"))})
    starts = [k for k in starts if k < len(lines)]
    block_of = {s: b for b, s in enumerate(starts)}
    ends = [*starts[1:], len(lines)]
    preds: list[list[int]] = [[] for _ in starts]
    opaque = [False] * len(starts)  # entered from where the pass cannot see: no masks
    for b, (s, e) in enumerate(zip(starts, ends, strict=True)):
        label = lines[s].strip()[:-1] if lines[s].strip().endswith(":") else ""
        if label and not label.startswith(".L"):
            opaque[b] = True  # a function symbol
        last = next((ln for ln in reversed(lines[s:e]) if _mnemonic(ln)), "")
        op = _mnemonic(last) or ""
        if op.startswith("j"):
            target = last.split(None, 1)[1].strip() if len(last.split()) > 1 else ""
            if target in labels and labels[target] in block_of:
                preds[block_of[labels[target]]].append(b)
        if op not in ("jmp", "ret", "ud2") and b + 1 < len(starts):
            preds[b + 1].append(b)
    opaque[0] = True
    # a label used elsewhere than as a jump target (a jump table, an address taken): entered from anywhere
    for ln in lines:
        op = _mnemonic(ln)
        if op and not op.startswith("j"):
            for ref in re.findall(r"\.L\w+", ln):
                if ref in labels and labels[ref] in block_of:
                    opaque[block_of[labels[ref]]] = True
    top = None  # not yet reached: the identity of the meet
    outs: list[dict[str, int] | None] = [top] * len(starts)
    made: dict[int, str] = {}
    changed = True
    while changed:
        changed = False
        for b, (s, e) in enumerate(zip(starts, ends, strict=True)):
            if opaque[b] or not preds[b]:
                state: dict[str, int] = {}
            else:
                known = [outs[p] for p in preds[b] if outs[p] is not None]
                if not known:
                    continue
                state = dict(known[0])
                for o in known[1:]:
                    state = {r: m for r, m in state.items() if o.get(r) == m}
            for k in range(s, e):
                reg = _step(lines[k], state, consts)
                if reg is not None:
                    made[k] = reg
            if outs[b] != state:
                outs[b] = state
                changed = True
    return made


def rewrite(asm: str) -> tuple[str, int, int]:
    """(assembly with the check after every rewritable instruction, how many rewritten, how many of those save
    and restore the flags around the check)."""
    lines = asm.split("\n")
    labels = {ln.strip()[:-1]: k for k, ln in enumerate(lines) if re.match(r"^[.\w$]+:\s*$", ln.strip())}
    signs = _mask_states(lines, labels)
    out: list[str] = []
    done = saved = 0
    for i, line in enumerate(lines):
        out.append(line)
        m = _ARITH.match(line)
        reg = m.group(2) if m else signs.get(i)
        if reg is None:
            c = _CALL.match(line)
            if c is None or c.group(1) not in _LIBM:
                continue
            reg = "%xmm0"
        live = not _flags_dead_after(lines, i, labels)
        ind = re.match(r"\s*", line).group(0)
        fix, back = f".Lemu_nan_fix{done}", f".Lemu_nan_back{done}"
        save = [f"{ind}leaq\t-128(%rsp), %rsp", f"{ind}pushfq"] if live else []
        restore = [f"{ind}popfq", f"{ind}leaq\t128(%rsp), %rsp"] if live else []
        out += [*save, f"{ind}ucomiss\t{reg}, {reg}", f"{ind}jp\t{fix}", f"{back}:", *restore,
                f'{ind}.pushsection\t.text.emu_nan,"ax",@progbits', f"{fix}:",
                f"{ind}andps\t.Lemu_nan_keep(%rip), {reg}", f"{ind}orps\t.Lemu_nan_canon(%rip), {reg}",
                f"{ind}jmp\t{back}", f"{ind}.popsection"]
        done += 1
        saved += live
    if done:
        out.append(CONSTANTS)
    return "\n".join(out), done, saved
