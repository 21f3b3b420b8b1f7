"""A 32-bit fast path for the 64-bit integer divisions of a compiled kernel (x86-64 assembly rewrite).

The course's kernels index with ``long long`` (``i % W``, ``i / ((long long)H * W)``), which g++ compiles to
``idivq``: 40 to 90 cycles on the Skylake-era Xeons of cloud machines and laptops, against about 26 for the
32-bit ``divl``, so that a pooling backward kernel spends 70% of its time dividing. The operands almost
always fit in 32 bits. clang emits this test by itself on x86-64 ("bypass slow division"); g++ does not, so
the emulator compiles a module to assembly and rewrites each

    cqto                      (or: xorl %edx, %edx)
    idivq OP                  (or: divq OP)

into

    movq %rax, %rdx           rdx is free: cqto / xorl only set it to the dividend's high half
    orq  OP, %rdx
    shrq $32, %rdx            zero: both operands are in [0, 2^32)
    jne  .Lemu_div_slowN
    divl OP32                 edx = 0 here: eax / OP32; quotient in eax, remainder in edx, both zero-extended
    jmp  .Lemu_div_doneN
  .Lemu_div_slowN:
    cqto                      (or: xorl %edx, %edx)
    idivq OP                  (or: divq OP)
  .Lemu_div_doneN:

Both operands non-negative and below 2^32: the unsigned 32-bit division gives the same quotient and remainder
as the signed (or unsigned) 64-bit one. Anything else (a negative operand, a large one, INT64_MIN / -1) takes
the original instructions. A zero divisor faults in either path with SIGFPE at an instruction of the same
source line, so "integer division by zero" is reported as before. Flags are undefined after a division, so
the compiler never reads them; no register but rdx (which the division overwrites anyway) is touched.
Only the exact pairs above are rewritten: a division whose rdx was set some other way is left alone.
"""

from __future__ import annotations

import re

_REG32 = {"rax": "eax", "rbx": "ebx", "rcx": "ecx", "rsi": "esi", "rdi": "edi", "rbp": "ebp", "rsp": "esp",
          **{f"r{i}": f"r{i}d" for i in range(8, 16)}}
_DIV = re.compile(r"^(\s*)(idivq|divq)\s+(\S.*?)\s*$")
_SETUP = {"idivq": re.compile(r"^\s*(cqto|cqo)\s*$"), "divq": re.compile(r"^\s*xorl\s+%edx,\s*%edx\s*$")}


def _operand32(op: str) -> str | None:
    """The low 32 bits of a register or memory operand; None for one this rewrite must not touch."""
    if "%rdx" in op or "%edx" in op or "%dx" in op:
        return None  # rdx holds the dividend's high half: it cannot also be the divisor or address it
    if op.startswith("%"):
        return "%" + _REG32[op[1:]] if op[1:] in _REG32 and op[1:] != "rax" else None
    return op  # a memory operand: its first 4 bytes are the low half (little endian)


def rewrite(asm: str) -> tuple[str, int]:
    """(assembly with the fast path before every rewritable 64-bit division, how many were rewritten)."""
    lines = asm.split("\n")
    out: list[str] = []
    count = 0
    for line in lines:
        m = _DIV.match(line)
        if m is None or not out or not _SETUP[m.group(2)].match(out[-1]):
            out.append(line)
            continue
        ind, op_name, op = m.groups()
        op32 = _operand32(op)
        if op32 is None:
            out.append(line)
            continue
        setup = out.pop()
        slow, done = f".Lemu_div_slow{count}", f".Lemu_div_done{count}"
        out += [f"{ind}movq\t%rax, %rdx", f"{ind}orq\t{op}, %rdx", f"{ind}shrq\t$32, %rdx", f"{ind}jne\t{slow}",
                f"{ind}divl\t{op32}", f"{ind}jmp\t{done}", f"{slow}:", setup, line, f"{done}:"]
        count += 1
    return "\n".join(out), count
