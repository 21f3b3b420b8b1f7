"""Phase 7's attention launches on the emulator: the GPU's kernels (softmax_forward / softmax_backward, a warp a
row; bmm, shared-memory tiles and barriers) against the emulator's (softmax_forward_rows / softmax_backward_rows, a
thread a row; bmm_regtile, a thread's 4 x 4 outputs in registers), at the shapes of one training step of the lab's
GPT (2 layers, 4 heads, d_model 64, context 64, batch 64: 256 matrices of 64 x 64 scores).

Each launch goes through the reference solution's attention.py with ``variant=`` naming the kernel, checked against
NumPy in float64, then timed: CPU time of the process (``time.thread_time``; one worker, so the blocks run on this
thread), the best of 3 runs once the emulator has compiled the launch for its integer arguments
(``minitorch.emu.specialize.specialize_now``), as a training loop's steps run. A row per launch and variant, and a
``step`` row per variant: the sum over the step's launches (per layer: 1 softmax forward, 1 backward, 6 products;
``--layers`` layers). With ``--step N``, also the whole training step of the lab's GPT (emu_speed.py's ``gpt``
row, 1 worker, N steps timed, the step's CPU time by kernel), once with the GPU's kernels forced (attention.py's
``pick_variant`` made to answer as on a GPU) and once as the emulator picks. Writes ``benchmarks/results/phase7_emu_attention-<device>.json`` (``--out`` for another
directory) with the date, the machine and its load average.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from common import emu_cpu_seconds, emulator_name, solution_sources, write_results

BH, T, D = 256, 64, 16  # batch 64 x 4 heads; context 64; d_model 64 / 4 heads
# the step's batched products (minitorch/ops/attention.py): name, (M, K, N), transpose_a, transpose_b, launches a
# layer (Q Kᵀ's shape is dY Vᵀ's too)
PRODUCTS = [("QKt", (T, D, T), False, True, 2),
            ("PV", (T, T, D), False, False, 1),
            ("PtdY", (T, T, D), True, False, 1),
            ("dSK", (T, T, D), False, False, 1),
            ("dStQ", (T, T, D), True, False, 1),
            # heads of 64 (not the lab's GPT: no launch in its step): 64 x 64 x 64, as Q K^T and as dS^T Q
            ("QKt_d64", (T, 64, T), False, True, 0),
            ("dStQ_d64", (T, T, 64), True, False, 0)]
PAIRS = {"bmm": ("tiled", "regtile"), "softmax": ("warp", "rows")}
KERNEL = {("bmm", "tiled"): "bmm", ("bmm", "regtile"): "bmm_regtile",
          ("softmax_forward", "warp"): "softmax_forward", ("softmax_forward", "rows"): "softmax_forward_rows",
          ("softmax_backward", "warp"): "softmax_backward", ("softmax_backward", "rows"): "softmax_backward_rows"}


def step_rows(am, steps: int, rounds: int = 2) -> list[dict]:
    """The lab's whole GPT step (emu_speed.py's gpt row, 1 worker) with the GPU's attention kernels and with the
    emulator's (pick_variant as the solution has it), alternately, `rounds` times each (the machine is shared: its
    load changes within minutes); a "gpt step (best)" row per side gives the round of least CPU time."""
    from emu_speed import GPT_FULL, gpt_row

    from minitorch import emu

    chosen = am.pick_variant
    rows = []
    for round_ in range(rounds):
        for side, pick in (("gpu kernels", lambda name, variant, variants: variants[0] if variant == "best"
                            else variant), ("emulator kernels", chosen)):
            am.pick_variant = pick  # before the step is captured: its launches are recorded with their kernels
            load = os.getloadavg()[0]
            with emu.workers(1):
                row = gpt_row(1, steps, "lab (full)", GPT_FULL)
            rows.append({**row, "kind": "gpt step", "variant": side, "round": round_, "load_average_before": load})
            print(f"GPT step with the {side}: {row['step_cpu_seconds']:.2f} s of CPU time (load {load:.2f})",
                  flush=True)
    am.pick_variant = chosen
    for side in ("gpu kernels", "emulator kernels"):
        best = min((r for r in rows if r["variant"] == side), key=lambda r: r["step_cpu_seconds"])
        rows.append({**best, "kind": "gpt step (best)"})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", help="directory for the JSON (default: benchmarks/results)")
    parser.add_argument("--layers", type=int, default=2, help="layers of the GPT whose step is summed (default 2)")
    parser.add_argument("--step", type=int, default=0, help="also time N whole training steps, both ways")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = tempfile.mkdtemp(prefix="minitorch-bench-")
    os.environ.setdefault("MINITORCH_DEVICE", "emu")
    from minitorch import backend, emu
    from minitorch.kernels import load_module, write_source

    if backend.get_device() != "emu":
        raise SystemExit(f"this benchmark measures the emulator; the device is {backend.get_device()!r}")
    from emu_speed import LABS

    for lab in LABS:  # the GPT's step runs every earlier lab's kernels too
        for name, text in solution_sources(f"{lab}.ipynb").items():
            write_source(name, text)
    am = load_module("attention.py")
    rng = np.random.default_rng(0)
    load = os.getloadavg()[0]
    rows: list[dict] = []

    def record(kind: str, name: str, variant: str, seconds: float, flops: float, count: int, shape: str) -> None:
        rows.append({"kind": kind, "launch": name, "variant": variant, "kernel": KERNEL[(kind, variant)],
                     "shape": shape,
                     "seconds": seconds, "launches_per_layer": count, "gflop_per_second": flops / seconds / 1e9,
                     "load_average_before": load})
        print(f"{kind:16s} {name:6s} {variant:8s} {seconds * 1e3:8.1f} ms  {flops / seconds / 1e9:6.2f} GFLOP/s",
              flush=True)

    with emu.workers(1):
        for name, (m, k, n), ta, tb, count in PRODUCTS:
            a = rng.standard_normal((BH, k, m) if ta else (BH, m, k)).astype(np.float32)
            b = rng.standard_normal((BH, n, k) if tb else (BH, k, n)).astype(np.float32)
            want = (np.swapaxes(a, 1, 2) if ta else a).astype(np.float64) @ (np.swapaxes(b, 1, 2) if tb else b)
            ad, bd = backend.asarray(a), backend.asarray(b)
            for variant in PAIRS["bmm"]:
                out = backend.empty((BH, m, n))
                seconds = emu_cpu_seconds(partial(am.bmm, ad, bd, out, ta, tb, variant=variant), warm=1)
                np.testing.assert_allclose(backend.asnumpy(out), want, rtol=1e-4, atol=1e-4)
                record("bmm", name, variant, seconds, 2.0 * BH * m * n * k, count,
                       f"{BH} x ({m} x {k}) @ ({k} x {n})" + " A transposed" * ta + " B transposed" * tb)
        s = (rng.standard_normal((BH, T, T)) * 3).astype(np.float32)
        z = np.where(np.tril(np.ones((T, T), bool)), s.astype(np.float64) * 0.25, -np.inf)
        e = np.exp(z - z.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)
        dp = rng.standard_normal((BH, T, T)).astype(np.float32)
        p32 = want.astype(np.float32).astype(np.float64)
        want_ds = 0.25 * p32 * (dp - (p32 * dp).sum(-1, keepdims=True))
        sd, pd, dpd = backend.asarray(s), backend.asarray(want.astype(np.float32)), backend.asarray(dp)
        flops = 5.0 * BH * T * (T + 1) / 2  # the visible entries, a few operations each: a rate to compare only
        for variant in PAIRS["softmax"]:
            probs, ds = backend.empty((BH, T, T)), backend.empty((BH, T, T))
            seconds = emu_cpu_seconds(partial(am.softmax_forward, sd, probs, 0.25, True, variant=variant), warm=1)
            np.testing.assert_allclose(backend.asnumpy(probs), want, rtol=1e-5, atol=1e-7)
            record("softmax_forward", "causal", variant, seconds, flops, 1, f"{BH} x {T} x {T}")
            seconds = emu_cpu_seconds(partial(am.softmax_backward, pd, dpd, ds, 0.25, True, variant=variant), warm=1)
            np.testing.assert_allclose(backend.asnumpy(ds), want_ds, rtol=1e-4, atol=1e-6)
            record("softmax_backward", "causal", variant, seconds, flops, 1, f"{BH} x {T} x {T}")
    for side, (bmm_variant, softmax_variant) in (("gpu kernels", ("tiled", "warp")),
                                                 ("emulator kernels", ("regtile", "rows"))):
        mine = [r for r in rows if r["variant"] in (bmm_variant, softmax_variant)]
        per_layer = {r["kind"]: 0.0 for r in mine}
        for r in mine:
            per_layer[r["kind"]] += r["seconds"] * r["launches_per_layer"]
        rows.append({"kind": "step", "variant": side, "layers": args.layers,
                     **{f"{kind}_seconds": v * args.layers for kind, v in per_layer.items()},
                     "seconds": sum(per_layer.values()) * args.layers, "load_average_before": load})
        print(f"step ({args.layers} layers) on the {side}: {rows[-1]['seconds']:.3f} s", flush=True)
    if args.step:
        rows += step_rows(am, args.step)
    import common

    if args.out:
        common.RESULTS = Path(args.out)
    write_results("phase7_emu_attention", emulator_name(), rows, machine=os.uname().nodename,
                  load_average=list(os.getloadavg()),
                  notes=[f"attention's launches of one training step of the lab's GPT ({BH} matrices, T = {T}, "
                         f"D = {D}), on the emulator, 1 worker: CPU time (thread_time), the best of 3 runs after "
                         "specialize_now(); 'step' rows sum the launches of the step's layers"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
