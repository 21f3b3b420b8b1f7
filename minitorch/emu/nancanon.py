"""The GPU's NaN for the float32 arithmetic of the learner's code (x86-64 assembly rewrite).

An NVIDIA GPU's float32 add, subtract, multiply, divide and square root return one NaN, 0x7fffffff, whatever
NaN went in and for the invalid operations (0 * inf, inf - inf, 0 / 0, sqrt(-1)). x86 SSE keeps the payload and
sign of the NaN operand, and makes the negative 0xffc00000 from an invalid operation; so a kernel storing a NaN
it computed stores other bits on the emulator than on a GPU, which a bit-for-bit comparison (a parity test, a
float16 conversion keeping a NaN's sign) sees. Moves keep a NaN's bits on both; negation and fabsf keep them
here but give 0x7fffffff on an H100 (measured: benchmarks/results/nvrtc_fidelity-*.json), a gap not closed.

The emulator compiles a module to assembly (``compiler._compile_object``) and this rewrite follows each scalar
float32 ``addss``, ``subss``, ``mulss``, ``divss`` and ``sqrtss`` whose result is in a register, and each call of
a float function of the C library (``expf``, ``logf``, ``fmaf``, ...: result in %xmm0), with

    ucomiss %xmmD, %xmmD      unordered (parity set) only for a NaN
    jp      .Lemu_nan_fixN    out of line, in another section: lane 0 := 0x7fffffff, upper lanes kept
  .Lemu_nan_backN:

``ucomiss`` writes the flags, so the check is inserted only where the flags are dead: the instructions after the
arithmetic, up to the next that writes the flags, read none (no conditional jump, set, cmov, adc/sbb) and the
path follows unconditional jumps to their label (an indirect jump, a loop back or 64 instructions end the
search: flags assumed live). Elsewhere (rare: the compiler rarely schedules float arithmetic
between a compare and its branch) the instruction is left as it was, and counted. Vectorised (packed) float
arithmetic and double precision are left as they are.

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


def rewrite(asm: str) -> tuple[str, int, int]:
    """(assembly with the check after every rewritable instruction, how many rewritten, how many left alone)."""
    lines = asm.split("\n")
    labels = {ln.strip()[:-1]: k for k, ln in enumerate(lines) if re.match(r"^[.\w$]+:\s*$", ln.strip())}
    out: list[str] = []
    done = skipped = 0
    for i, line in enumerate(lines):
        out.append(line)
        m = _ARITH.match(line)
        reg = m.group(2) if m else None
        if m is None:
            c = _CALL.match(line)
            if c is None or c.group(1) not in _LIBM:
                continue
            reg = "%xmm0"
        if not _flags_dead_after(lines, i, labels):
            skipped += 1
            continue
        ind = re.match(r"\s*", line).group(0)
        fix, back = f".Lemu_nan_fix{done}", f".Lemu_nan_back{done}"
        out += [f"{ind}ucomiss\t{reg}, {reg}", f"{ind}jp\t{fix}", f"{back}:",
                f'{ind}.pushsection\t.text.emu_nan,"ax",@progbits', f"{fix}:",
                f"{ind}andps\t.Lemu_nan_keep(%rip), {reg}", f"{ind}orps\t.Lemu_nan_canon(%rip), {reg}",
                f"{ind}jmp\t{back}", f"{ind}.popsection"]
        done += 1
    if done:
        out.append(CONSTANTS)
    return "\n".join(out), done, skipped
