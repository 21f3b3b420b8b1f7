"""Inline PTX for the emulator: the ``asm volatile("...")`` statements of the tensor-core lab,
rewritten into calls of the emulator's functions (``runtime/emu_ptx.h``).

A GPU runs the PTX in the string; the emulator compiles host C++, so each ``asm`` statement whose
instructions it knows becomes a C++ block, on the same source line: operands become typed
temporaries (constraint ``r``: 32-bit register, ``l``: 64-bit, ``f``: float, ``h``: 16-bit,
``n``/``i``: immediate; ``=`` output, ``+`` in-out, a digit: tied to that output), each instruction
a statement on them, and the outputs are assigned back. Known instructions: ``mma.sync.aligned.
m16n8k16.row.col`` (f16/bf16 inputs, f32 or f16 accumulators), ``ldmatrix.sync.aligned.m8n8.x{1,2,4}
[.trans].shared.b16``, ``cp.async.{ca,cg}.shared.global`` (4, 8, 16 bytes, optional src-size),
``cp.async.commit_group / wait_group N / wait_all``, ``cvta.to.shared``, ``cvt`` between u32 and
u64, ``mov`` and ``.reg`` declarations. Any other instruction is a clear error naming it.
"""

from __future__ import annotations

import re

_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b(?:\s*(?:volatile|__volatile__|inline|goto))*\s*\(")
_CTYPE = {"r": "unsigned", "l": "unsigned long long", "f": "float", "d": "double", "h": "unsigned short",
          "n": "long long", "i": "long long"}
_REG_CTYPE = {"b16": "unsigned short", "u16": "unsigned short", "s16": "short", "b32": "unsigned", "u32": "unsigned",
              "s32": "int", "b64": "unsigned long long", "u64": "unsigned long long", "s64": "long long",
              "f32": "float", "f64": "double"}
SUPPORTED = ("mma.sync.aligned.m16n8k16.row.col (f16/bf16), ldmatrix.sync.aligned.m8n8, cp.async "
             "(ca/cg, commit_group, wait_group, wait_all), cvta.to.shared, cvt, mov")
NEEDS_GPU = "needs an NVIDIA GPU (or Google Colab with a GPU runtime)"


class PtxError(Exception):
    """An asm statement the emulator cannot run; the message names file, line and instruction."""


def _match_close(s: str, i: int) -> int:
    """Index just after the ')' matching the '(' at s[i] (s has string contents blanked)."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "(":
            depth += 1
        elif s[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(s)


def _split_top(s: str, sep: str) -> list[tuple[int, int]]:
    """(start, end) spans of s split at sep outside brackets (s has string contents blanked)."""
    spans, depth, start = [], 0, 0
    for j, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            spans.append((start, j))
            start = j + 1
    spans.append((start, len(s)))
    return spans


def _unescape(lit: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t", "r": "\n"}.get(m.group(1), m.group(1)), lit)


class _Stmt:
    """One asm statement being translated."""

    def __init__(self, src: str, stripped: str, where: str) -> None:
        self.src, self.stripped, self.where = src, stripped, where
        self.decls: list[str] = []
        self.code: list[str] = []
        self.assigns: list[str] = []
        self.temps: list[str] = []          # C++ name of operand i
        self.names: dict[str, int] = {}     # [symbolic] operand names
        self.regs: dict[str, str] = {}      # PTX .reg name -> C++ name

    def fail(self, what: str) -> PtxError:
        return PtxError(f"{self.where}: error: {what}")

    def _text(self, a: int, b: int) -> str:
        # the source text, or the stripped one where comments or literals differ; on one line
        t = self.src[a:b] if self.src[a:b] == self.stripped[a:b] else self.stripped[a:b]
        return re.sub(r"\\?\n", " ", t).strip()

    def template(self, a: int, b: int) -> str:
        parts, last = [], a
        for m in re.finditer(r'"[^"\n]*"', self.stripped[a:b]):
            gap = self.stripped[last:a + m.start()]
            if gap.strip(" \t\r\n\\"):
                raise self.fail("inline PTX must be written as string literals only (a macro such as #N inside the "
                                "instruction string is not supported by the emulator: pass the value as an \"n\" "
                                "operand)")
            parts.append(_unescape(self.src[a + m.start() + 1:a + m.end() - 1]))
            last = a + m.end()
        if self.stripped[last:b].strip(" \t\r\n\\"):
            raise self.fail("inline PTX must be written as string literals only")
        return "".join(parts)

    def operands(self, a: int, b: int, outputs: bool) -> None:
        seg = self.stripped[a:b]
        if not seg.strip():
            return
        for s, e in _split_top(seg, ","):
            m = re.match(r'\s*(?:\[\s*(\w+)\s*\])?\s*"[^"\n]*"\s*\(', seg[s:e])
            if not m:
                raise self.fail(f"cannot read the asm operand `{self._text(a + s, a + e)}`")
            q = seg.index('"', s)
            cons = self.src[a + q + 1:a + seg.index('"', q + 1)].strip()
            po = s + m.end() - 1
            pe = _match_close(seg, po)
            expr = self._text(a + po + 1, a + pe - 1)
            self._operand(m.group(1), cons, expr, outputs)

    def _operand(self, name: str | None, cons: str, expr: str, output: bool) -> None:
        i = len(self.temps)
        letters = cons.lstrip("=+&")
        letter = letters[:1]
        if name:
            self.names[name] = i
        if letter.isdigit():  # tied to output operand `letter`: same register, initial value from here
            t = self.temps[int(letter)]
            self.temps.append(t)
            self.code.insert(0, f"{t} = ({self._ctype_of(t)})({expr});")
            return
        if letter not in _CTYPE:
            raise self.fail(f"asm operand constraint \"{cons}\" is not supported by the emulator "
                            "(r, l, f, d, h, n, i are)")
        t, ct = f"__emu_p{i}", _CTYPE[letter]
        self.temps.append(t)
        if output and cons.startswith("="):
            self.decls.append(f"{ct} {t};")
        else:
            self.decls.append(f"{ct} {t} = ({ct})({expr});")
        if output:
            self.assigns.append(f"{expr} = {t};")

    def _ctype_of(self, temp: str) -> str:
        for d in self.decls:
            if re.search(rf"\b{temp}\b", d):
                return d.split(f" {temp}")[0]
        return "unsigned"

    def substitute(self, tpl: str) -> str:
        def rep(m: re.Match[str]) -> str:
            if m.group(0) == "%%":
                return "%"
            key = m.group(1) or m.group(2)
            idx = self.names.get(key) if m.group(2) else int(key)
            if idx is None or idx >= len(self.temps):
                raise self.fail(f"inline PTX operand {m.group(0)} has no matching asm operand")
            return self.temps[idx]
        return re.sub(r"%%|%(\d+)|%\[(\w+)\]", rep, tpl)

    # ---- instructions -----------------------------------------------------------------------
    def value(self, tok: str) -> str:
        tok = tok.strip()
        if re.fullmatch(r"__emu_p\d+", tok):
            return tok
        if tok in self.regs:
            return self.regs[tok]
        if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)[uU]?", tok):
            return tok
        raise self.fail(f"inline PTX operand `{tok}` is not supported by the CUDA C emulator (special registers "
                        "such as %laneid are not: compute it from threadIdx in C++): as written, this kernel "
                        f"{NEEDS_GPU}")

    def vector(self, tok: str, n: int, what: str) -> list[str]:
        tok = tok.strip()
        if not (tok.startswith("{") and tok.endswith("}")):
            raise self.fail(f"{what}: expected a register list {{...}} of {n}, got `{tok}`")
        vals = [self.value(v) for v in tok[1:-1].split(",")]
        if len(vals) != n:
            raise self.fail(f"{what}: expected {n} registers, got {len(vals)} in `{tok}`")
        return vals

    def address(self, tok: str) -> str:
        m = re.fullmatch(r"\[\s*([^\]+]+?)\s*(?:\+\s*(-?\w+)\s*)?\]", tok.strip())
        if not m:
            raise self.fail(f"expected an address [reg] or [reg+offset], got `{tok.strip()}`")
        base = self.value(m.group(1))
        return f"({base} + {self.value(m.group(2))})" if m.group(2) else base

    def instruction(self, stmt: str) -> None:
        m = re.match(r"\s*(\S+)\s*(.*)$", stmt, re.S)
        assert m
        op, rest = m.group(1), m.group(2).strip()
        if op.startswith("@"):
            raise self.fail(f"predicated inline PTX (`{op}`) is not supported by the emulator")
        args = [rest[s:e].strip() for s, e in _split_top(rest, ",")] if rest else []
        at = "__FILE__, __LINE__"
        if op == ".reg":
            mm = re.fullmatch(r"\.(\w+)\s+(.+)", rest)
            if not mm or mm.group(1) not in _REG_CTYPE:
                raise self.fail(f"inline PTX declaration `.reg {rest}` is not supported by the emulator")
            for name in (x.strip() for x in mm.group(2).split(",")):
                if not re.fullmatch(r"[A-Za-z_$][\w$]*", name):
                    raise self.fail(f"inline PTX register `{name}` is not supported by the emulator")
                c = "__emu_r_" + name.replace("$", "_")
                self.regs[name] = c
                self.code.append(f"{_REG_CTYPE[mm.group(1)]} {c} = 0;")
            return
        mma = re.fullmatch(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.(f32|f16)\.(f16|bf16)\.(f16|bf16)\.(f32|f16)", op)
        if mma:
            dt, at_, bt, ct = mma.groups()
            if at_ != bt or dt != ct or (at_ == "bf16" and dt != "f32"):
                raise self.fail(f"inline PTX `{op}` is not supported by the emulator: A and B must have the same type, "
                                "C and D the same type, and bf16 needs f32 accumulators")
            if len(args) != 4:
                raise self.fail(f"`{op}` takes 4 operands {{d}}, {{a}}, {{b}}, {{c}}")
            nacc = 4 if dt == "f32" else 2
            d = self.vector(args[0], nacc, op)
            a, b, c = self.vector(args[1], 4, op), self.vector(args[2], 2, op), self.vector(args[3], nacc, op)
            ctyp = "float" if dt == "f32" else "unsigned"
            call = (f"__emu_mma_m16n8k16_f32({int(at_ == 'bf16')}, __emu_a, __emu_b, __emu_c, __emu_d, {at});"
                    if dt == "f32" else f"__emu_mma_m16n8k16_f16(__emu_a, __emu_b, __emu_c, __emu_d, {at});")
            self.code.append(f"{{ unsigned __emu_a[4] = {{{', '.join(a)}}}; unsigned __emu_b[2] = {{{', '.join(b)}}}; "
                             f"{ctyp} __emu_c[{nacc}] = {{{', '.join(c)}}}; {ctyp} __emu_d[{nacc}]; {call} "
                             + " ".join(f"{x} = __emu_d[{k}];" for k, x in enumerate(d)) + " }")
            return
        ldm = re.fullmatch(r"ldmatrix\.sync\.aligned\.m8n8\.x([124])(\.trans)?\.shared(?:::cta)?\.b16", op)
        if ldm:
            num, trans = int(ldm.group(1)), int(bool(ldm.group(2)))
            if len(args) != 2:
                raise self.fail(f"`{op}` takes 2 operands {{d}}, [address]")
            d = self.vector(args[0], num, op)
            addr = self.address(args[1])
            self.code.append(f"{{ unsigned __emu_d[4]; __emu_ldmatrix({num}, {trans}, (unsigned)({addr}), __emu_d, {at}); "
                             + " ".join(f"{x} = __emu_d[{k}];" for k, x in enumerate(d)) + " }")
            return
        cpa = re.fullmatch(r"cp\.async\.(ca|cg)\.shared(?:::cta)?\.global(?:\.L2::(?:64|128|256)B)?", op)
        if cpa:
            if len(args) not in (3, 4):
                raise self.fail(f"`{op}` takes [dst], [src], cp-size and an optional src-size")
            size = self.value(args[2])
            if cpa.group(1) == "cg" and re.fullmatch(r"\d+", size) and size != "16":
                raise self.fail(f"`{op}` copies 16 bytes (cp.async.cg takes cp-size 16, not {size}): use cp.async.ca "
                                "for 4 or 8 bytes")
            src_size = self.value(args[3]) if len(args) == 4 else size
            self.code.append(f"__emu_cp_async((unsigned)({self.address(args[0])}), "
                             f"(const void*)(uintptr_t)({self.address(args[1])}), (unsigned)({size}), "
                             f"(unsigned)({src_size}), {at});")
            return
        if op == "cp.async.commit_group" and not args:
            self.code.append("__emu_cp_async_commit();")
            return
        if op == "cp.async.wait_group" and len(args) == 1:
            self.code.append(f"__emu_cp_async_wait((long long)({self.value(args[0])}), {at});")
            return
        if op == "cp.async.wait_all" and not args:
            self.code.append(f"__emu_cp_async_wait_all({at});")
            return
        if re.fullmatch(r"cvta\.to\.shared(?:::cta)?\.(u32|u64)", op) and len(args) == 2:
            self.code.append(f"{self.value(args[0])} = __cvta_generic_to_shared((const void*)(uintptr_t)"
                             f"({self.value(args[1])}), {at});")
            return
        cvt = re.fullmatch(r"cvt\.(u32|u64|s32|s64)\.(u32|u64|s32|s64)", op)
        if cvt and len(args) == 2:
            self.code.append(f"{self.value(args[0])} = ({_REG_CTYPE[cvt.group(1)]})({self.value(args[1])});")
            return
        if re.fullmatch(r"mov\.(b32|u32|s32|b64|u64|s64|f32)", op) and len(args) == 2:
            self.code.append(f"{self.value(args[0])} = {self.value(args[1])};")
            return
        raise self.fail(f"inline PTX `{op}` is not supported by the CUDA C emulator (it runs {SUPPORTED}): this "
                        f"kernel {NEEDS_GPU}")

    def translate(self, a: int, b: int) -> str:
        sections = _split_top(self.stripped[a:b], ":")
        tpl = self.template(a + sections[0][0], a + sections[0][1])
        if len(sections) > 1:
            self.operands(a + sections[1][0], a + sections[1][1], outputs=True)
        if len(sections) > 2:
            self.operands(a + sections[2][0], a + sections[2][1], outputs=False)
        if len(sections) > 4:
            raise self.fail("asm goto is not supported by the emulator")
        ptx = self.substitute(tpl)
        for stmt in ptx.split(";"):
            stmt = re.sub(r"//[^\n]*", "", stmt).strip().lstrip("{").strip()
            if not stmt or set(stmt) <= set("{} \t\n"):
                continue
            self.instruction(stmt)
        return "do { " + " ".join(self.decls + self.code + self.assigns) + " } while (0)"


def rewrite_inline_ptx(src: str, stripped: str, filename: str) -> str:
    """The source with every asm statement replaced by its C++ translation on the same line (line
    numbers and macro continuations kept). Raises PtxError for PTX the emulator does not run."""
    out, last = [], 0
    for m in _ASM.finditer(stripped):
        if m.start() < last:
            continue
        open_i = m.end() - 1
        close = _match_close(stripped, open_i)
        line = src.count("\n", 0, m.start()) + 1
        col = m.start() - (src.rfind("\n", 0, m.start()) + 1) + 1
        code = _Stmt(src, stripped, f"{filename}:{line}:{col}").translate(open_i + 1, close - 1)
        span = src[m.start():close]
        breaks = "".join("\\\n" if span[:k].rstrip(" \t").endswith("\\") else "\n"
                         for k in (i for i, ch in enumerate(span) if ch == "\n"))
        out += [src[last:m.start()], code, breaks]
        last = close
    out.append(src[last:])
    return "".join(out)
