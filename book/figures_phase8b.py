"""Figures of the Phase 8b chapter (FlashAttention), drawn at build time.

Everything measured comes from ``benchmarks/results/phase8b_flash-<gpu>.json`` (``benchmarks/phase8b_flash.py``:
every forward rung and the backward against PyTorch's FlashAttention-2 and cuDNN backends in the same run),
``benchmarks/results/phase8b_memory-<gpu>.json`` (``benchmarks/phase8b_memory.py``: peak device memory of a
forward + backward, FlashAttention against Phase 7's materialised attention) and, for the memory bandwidth of the
card, ``phase1_kernels-<gpu>.json``. Without results the chapter still builds, with a note saying which script
to run.
"""

from __future__ import annotations

import json
import math

import matplotlib.pyplot as plt
from figures import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    PURPLE,
    VERMILLION,
    Results,
    every_card,
    glue_figure,
    glue_md,
    missing_figure,
    missing_md,
)
from figures_phase8a import _file, _short, copy_gbps

BENCH = "phase8b_flash"
MEMORY = "phase8b_memory"
SKY = "#56B4E9"  # Okabe-Ito's sky blue: rung 8, the one rung on Hopper's wgmma
RUNGS = [  # (kernel in the JSON, label, colour)
    ("1_scalar", "1 scalar", GREY),
    ("2_mma", "2 mma.sync", ORANGE),
    ("3_mma_ldmatrix_swizzled", "3 + swizzle, ldmatrix", VERMILLION),
    ("4_mma_cp_async", "4 + cp.async", PURPLE),
    ("5_mma_tuned", "5 tuned tiles", BLUE),
    ("6_mma_lean_softmax", "6 lean softmax", BLUE),
    ("7_mma_split_kv_pipeline", "7 split K/V", BLUE),
    ("8_wgmma", "8 wgmma (Hopper)", SKY),
    ("bwd", "backward", GREEN),
]
SHAPES = {128: "16x16x4096x128", 64: "16x32x4096x64"}


def ladder_results() -> list[Results]:
    """Every committed ladder, the H100 first (the chapter's reference card)."""
    return sorted(every_card(BENCH), key=lambda r: ("H100" not in r.device, r.device))


def _row(res: Results, kernel: str, d: int, dtype: str = "bf16", causal: bool = False) -> dict | None:
    for row in res.rows:
        if (row.get("kernel"), row.get("shape"), row.get("dtype"), row.get("causal")) == (
                kernel, SHAPES[d], dtype, causal) and row.get("tflops"):
            return row
    return None


def _ratios(res: Results, kernels: tuple[str, ...], key: str = "ratio_fa2") -> list[float]:
    return [r[key] for r in res.rows if r.get("kernel") in kernels and r.get(key)]


def _span(values: list[float]) -> str:
    return f"{min(values):.2f}–{max(values):.2f}"


def _wgmma_text(res: Results) -> str:
    """Rung 8's ratios to FlashAttention-2 and cuDNN at both sizes, or why it has none on this card."""
    fa2, cudnn = _ratios(res, ("8_wgmma",)), _ratios(res, ("8_wgmma",), "ratio_cudnn")
    if fa2:
        d128 = [r["ratio_fa2"] for r in res.rows if r.get("kernel") == "8_wgmma" and r.get("d") == 128
                and r.get("ratio_fa2")]
        return (f"; rung 8 (`wgmma`, what `\"best\"` runs on an sm_90 GPU without dropout) {_span(fa2)}"
                + (f" ({_span(d128)} at D = 128)" if d128 else "")
                + (f", and {_span(cudnn)} of cuDNN's" if cudnn else ""))
    note = next((r.get("note") for r in res.rows if r.get("kernel") == "8_wgmma" and r.get("note")), None)
    return f"; rung 8 (`wgmma`): {note}" if note else ""


def phase8b_ladder() -> None:
    results = ladder_results()
    if not results:
        glue_figure("fig-phase8b-ladder", missing_figure(BENCH, "the FlashAttention ladder",
                                                         "benchmarks/phase8b_flash.py"))
        glue_md("phase8b-ladder-text", missing_md(BENCH, "benchmarks/phase8b_flash.py"))
        return
    ref = results[0]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6), sharey=True)
    for ax, d in zip(axes, (128, 64), strict=True):
        shown = [(label, colour, _row(ref, kernel, d)) for kernel, label, colour in RUNGS]
        shown = [(label, colour, row) for label, colour, row in shown if row]
        xs = range(len(shown))
        ax.bar(xs, [row["tflops"] for _, _, row in shown], color=[c for _, c, _ in shown])
        for x, (label, _, row) in zip(xs, shown, strict=True):
            ax.text(x, row["tflops"] + 5, f"{row['ratio_fa2']:.2f}", ha="center", fontsize=7)
            if label == "backward" and row.get("fa2_tflops"):  # its own reference: FA2's backward
                ax.hlines(row["fa2_tflops"], x - 0.45, x + 0.45, color=GREEN, lw=2.5,
                          label="FlashAttention-2 (backward)")
        fa2 = next(row for _, _, row in shown if row.get("fa2_tflops"))
        ax.axhline(fa2["fa2_tflops"], color=GREEN, ls="--", lw=1, label="FlashAttention-2 (forward)")
        if fa2.get("cudnn_tflops"):
            ax.axhline(fa2["cudnn_tflops"], color=GREY, ls=":", lw=1, label="cuDNN (forward)")
        ax.set_xticks(list(xs), [label for label, _, _ in shown], rotation=40, ha="right", fontsize=8)
        ax.set_title(f"D = {d}, B·H·T·D = {SHAPES[d].replace('x', '·')}, bf16", fontsize=9)
    axes[0].set_ylabel("TFLOP/s")
    axes[0].legend(fontsize=7, loc="upper left")
    fig.suptitle(f"The ladder on the {_short(ref)} (numbers: ratio to FlashAttention-2 in the same run)",
                 fontsize=9)
    fig.tight_layout()
    glue_figure("fig-phase8b-ladder", fig)

    fwd = _ratios(ref, ("5_mma_tuned",))
    best = _ratios(ref, ("5_mma_tuned", "6_mma_lean_softmax", "7_mma_split_kv_pipeline"))
    bwd = _ratios(ref, ("bwd",))
    lo = _row(ref, "2_mma", 128)
    up = _row(ref, "3_mma_ldmatrix_swizzled", 128)
    text = (f"On the {_short(ref)}, at both benchmark sizes, both dtypes, causal and not, rung 5 (what "
            f"`variant=\"best\"` runs with dropout or off Hopper) reaches {_span(fwd)} of FlashAttention-2's "
            f"forward, and the best of rungs 5–7 {_span(best)}{_wgmma_text(ref)}; the backward {_span(bwd)}. "
            f"The largest single step is swizzling and `ldmatrix` (rung 2 → 3 at D = 128, bf16: "
            f"{lo['tflops']:.0f} → {up['tflops']:.0f} TFLOP/s). {ref.provenance}")
    if len(results) > 1:
        other = results[1]
        text += (f" On the {_short(other)} ({_file(other.path)}): rung 5 {_span(_ratios(other, ('5_mma_tuned',)))}"
                 f"{_wgmma_text(other)}, the backward {_span(_ratios(other, ('bwd',)))}.")
    glue_md("phase8b-ladder-text", text)


def phase8b_traffic() -> None:
    """Why FlashAttention wins although it computes more: the traffic Phase 7's attention adds, in time."""
    results = ladder_results()
    if not results:
        glue_md("phase8b-traffic-text", missing_md(BENCH, "benchmarks/phase8b_flash.py"))
        return
    ref = results[0]
    b, h, t, d = 16, 16, 4096, 128
    matrix = b * h * t * t * 4  # one T x T float32 matrix of every head
    forward_passes, backward_passes = 4, 6  # S written, read; P written, read / P, dP, dS: at least 6 passes
    flop = 4 * b * h * t * t * d
    row = _row(ref, "5_mma_tuned", 128)
    text = (f"At B·H·T·D = 16·16·4096·128 one T×T float32 matrix of every head is {matrix / 1e9:.1f} GB. A "
            f"materialised forward writes the scores and reads them for the softmax, writes the probabilities "
            f"and reads them for P·V: {forward_passes * matrix / 1e9:.0f} GB; its backward moves P, dP and dS "
            f"at least {backward_passes} times over ({backward_passes * matrix / 1e9:.0f} GB). The forward's arithmetic is {flop / 1e12:.1f} TFLOP, "
            f"which rung 5 does in {flop / (row['tflops'] * 1e12) * 1e3:.1f} ms")
    copy = copy_gbps(ref)
    if copy:
        gbps, path = copy
        text += (f"; the materialised forward's traffic alone, at the {gbps:,.0f} GB/s a copy reaches on the same "
                 f"card ({_file(path)}), takes {forward_passes * matrix / (gbps * 1e9) * 1e3:.1f} ms")
    text += (". FlashAttention's backward recomputes S and P from the logsumexp: five products instead of four, "
             "25% more tensor work, traded for none of that traffic.")
    glue_md("phase8b-traffic-text", text)


def phase8b_memory() -> None:
    results = sorted(every_card(MEMORY), key=lambda r: ("H100" not in r.device, r.device))
    if not results:
        glue_figure("fig-phase8b-memory", missing_figure(MEMORY, "attention's peak memory",
                                                         "benchmarks/phase8b_memory.py"))
        glue_md("phase8b-memory-text", missing_md(MEMORY, "benchmarks/phase8b_memory.py"))
        return
    ref = results[0]
    fig, ax = plt.subplots(figsize=(6.5, 3.6))
    style = {"flash": dict(color=BLUE, marker="o", label="FlashAttention (bf16, flash.py)"),
             "materialised": dict(color=VERMILLION, marker="s", label="Phase 7, materialised (float32)")}
    by_method: dict[str, list[dict]] = {}
    for row in ref.rows:
        by_method.setdefault(row["method"], []).append(row)
    for method, rows in by_method.items():
        ok = [r for r in rows if not r.get("out_of_memory")]
        ax.plot([r["t"] for r in ok], [r["extra_bytes"] / 2 ** 30 for r in ok], **style[method])
        oom = [r for r in rows if r.get("out_of_memory")]
        if oom:  # what it would have needed (computed, not measured): hollow markers, labelled
            ax.plot([r["t"] for r in oom], [r["needed_bytes"] / 2 ** 30 for r in oom], ls="none",
                    marker=style[method]["marker"], mfc="none", color=style[method]["color"],
                    label=f"{style[method]['label'].split(',')[0]}: out of memory (needed, computed)")
            for r in oom:
                ax.annotate("out of memory", (r["t"], r["needed_bytes"] / 2 ** 30), textcoords="offset points",
                            xytext=(-7, -3), ha="right", color=style[method]["color"], fontsize=8)
    ts = sorted({r["t"] for r in ref.rows})
    ax.plot(ts, [ref.rows[0]["b"] * ref.rows[0]["h"] * t * t * 4 / 2 ** 30 for t in ts], color=GREY, ls=":",
            label="one T×T float32 matrix of every head")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(ts, [str(t) for t in ts])
    ax.set_xlabel("sequence length T")
    ax.set_ylabel("peak memory of forward + backward, GiB")
    ax.legend(fontsize=8)
    row0 = ref.rows[0]
    ax.set_title(f"B = {row0['b']}, H = {row0['h']}, D = {row0['d']}, causal; {_short(ref)}", fontsize=9)
    fig.tight_layout()
    glue_figure("fig-phase8b-memory", fig)
    pairs = []
    for t in (8192, 16384):
        f = next((r for r in by_method.get("flash", []) if r["t"] == t and not r.get("out_of_memory")), None)
        m = next((r for r in by_method.get("materialised", []) if r["t"] == t), None)
        if f:
            mat = ("not measured (the run ended first)" if m is None else
                   f"out of memory (it needs {m['needed_bytes'] / 2 ** 30:.0f} GiB, computed)"
                   if m.get("out_of_memory") else f"{m['extra_bytes'] / 2 ** 30:.2f} GiB")
            pairs.append(f"T = {t}: FlashAttention {f['extra_bytes'] / 2 ** 20:.0f} MiB, the materialised "
                         f"attention {mat}")
    glue_md("phase8b-memory-text", "Peak memory of one forward + backward beyond its inputs, " + "; ".join(pairs)
            + f". {ref.provenance}")


# ---------------------------------------------------------------- the capstone: nanoGPT's Shakespeare model

CAPSTONE = "phase8b_nanogpt"
CAPSTONE_SCRIPT = "benchmarks/phase8b_nanogpt.py"
SAMPLE_STEPS = (0, 500, 1000, 2000)
FRAMEWORK_STYLE = {"minitorch": dict(color=BLUE, label="minitorch (your kernels)"),
                   "pytorch": dict(color=GREY, label="PyTorch (bf16 autocast, SDPA)")}


def capstone_results() -> list[Results]:
    """Every committed capstone run on a GPU, the H100 first."""
    return sorted(every_card(CAPSTONE), key=lambda r: ("H100" not in r.device, r.device))


def _kind(res: Results, kind: str) -> list[dict]:
    return [r for r in res.rows if r.get("kind") == kind]


def _capstone_missing() -> None:
    what = "nanoGPT's Shakespeare model on the lab's kernels"
    for name in ("fig-phase8b-capstone-curves", "fig-phase8b-capstone-kernels", "fig-phase8b-capstone-maps"):
        glue_figure(name, missing_figure(CAPSTONE, what, CAPSTONE_SCRIPT))
    note = missing_md(CAPSTONE, CAPSTONE_SCRIPT) + " Not measured yet: no number is shown until then."
    for name in ("phase8b-capstone-text", "phase8b-capstone-samples", "phase8b-capstone-kernels-text"):
        glue_md(name, note)


def phase8b_capstone() -> None:
    """The capstone's curves beside PyTorch's, its samples, its step split by kernel and its attention maps, all
    from benchmarks/results/phase8b_nanogpt-<gpu>.json; a note saying what to run while none is committed."""
    results = capstone_results()
    if not results:
        _capstone_missing()
        return
    ref = results[0]
    timed = _step_results(ref)
    _capstone_curves(ref, timed)
    _capstone_samples(ref)
    _capstone_kernels(timed)
    _capstone_maps(ref)


CAPSTONE_STEP = "phase8b_nanogpt_step"  # benchmarks/phase8b_nanogpt.py --step-only: the step timed, no training


def _step_results(ref: Results) -> Results:
    """Where the step's time and its split by kernel come from: the newest step-only run on the training run's card
    (``--step-only``, after the training run: the step as the kernels and ops stand now), else the training run."""
    later = [r for r in every_card(CAPSTONE_STEP) if r.device == ref.device and r.date >= ref.date
             and _kind(r, "step")]
    return max(later, key=lambda r: (r.date, r.path.name)) if later else ref


def _capstone_curves(ref: Results, timed: Results) -> None:
    summary = next(iter(_kind(ref, "summary")), {})
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for framework, style in FRAMEWORK_STYLE.items():
        rows = sorted((r for r in _kind(ref, "curve") if r.get("framework") == framework), key=lambda r: r["step"])
        if not rows:
            continue
        rows = [r for r in rows if _finite(r.get("val_loss"))]
        ax.plot([r["step"] for r in rows], [r["val_loss"] for r in rows], marker="o", ms=3, **style)
        trained = [r for r in rows if r["step"] and _finite(r.get("train_loss"))]
        ax.plot([r["step"] for r in trained], [r["train_loss"] for r in trained], ls="--", lw=1,
                color=style["color"], label=f"{style['label'].split(' (')[0]}, training batches")
    if _finite(summary.get("val_bar")):
        ax.axhline(summary["val_bar"], color=VERMILLION, lw=0.8, ls=":", label=f"the bar, {summary['val_bar']}")
    ax.set(xlabel="step", ylabel="cross-entropy (nats)", ylim=(0.9, 2.8))
    ax.set_title(f"nanoGPT Shakespeare-char, same batches and initial weights; {_short(ref)}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    glue_figure("fig-phase8b-capstone-curves", fig)

    parts = []
    if _finite(summary.get("best_val_loss")):
        f64 = summary.get("best_val_loss_float64")
        parts.append(f"Trained by minitorch on the lab's kernels, the model's best validation loss is "
                     f"{summary['best_val_loss']:.3f} at step {summary['best_step']:,}"
                     + (f" (that checkpoint re-evaluated in float64 on the grader's windows: {f64:.3f}; the bar "
                        f"{summary['val_bar']:.2f})" if _finite(f64) else ""))
        if _finite(summary.get("pytorch_best_val_loss")):
            parts.append(f"PyTorch's, on the same batches from the same weights, {summary['pytorch_best_val_loss']:.3f} "
                         f"at step {summary['pytorch_best_step']:,}")
    init = _run_config(ref).get("init")
    if parts and init:
        parts[-1] += (f". The run started from {INIT_NAMES.get(init, repr(init))} initial values "
                      f"(`init=\"{init}\"`)" + ("; the lab trains from GPT-2's (`init=\"gpt2\"`)" if init != "gpt2"
                                                 else ""))
    text = "; ".join(parts) + f". {ref.provenance}" if parts else ""
    step = next(iter(_kind(timed, "step")), {})
    if _finite(step.get("minitorch_captured_seconds")) and "batch" in step:
        ours = step["minitorch_captured_seconds"] * 1e3
        ways = [(w, step[f"pytorch_{w}_seconds"] * 1e3) for w in ("eager", "compiled", "captured")
                if _finite(step.get(f"pytorch_{w}_seconds"))]
        timing = (f"one training step (batch {step['batch']}, context {step['context']}, host time included, the same "
                  f"weights and batch for both) takes {ours:.1f} ms captured ({step.get('launches', '?')} launches)"
                  + ("; PyTorch " + ", ".join(f"{w} {ms:.1f} ms ({ours / ms:.2f}×)" for w, ms in ways)
                     if ways else ""))
        if timed is ref:
            text = "; ".join(parts + [timing]) + f". {ref.provenance}"
        else:  # timed apart, after the training run
            text = (text + " " if text else "") + timing[:1].upper() + timing[1:] + f". {timed.provenance}"
    text = text or missing_md(CAPSTONE, CAPSTONE_SCRIPT)
    glue_md("phase8b-capstone-text", text[:1].upper() + text[1:])


INIT_NAMES = {"phase7": "Phase 7's", "gpt2": "GPT-2's"}


def _run_config(ref: Results) -> dict:
    """The run's configuration (the JSON's top-level ``config``), empty when absent."""
    config = json.loads(ref.path.read_text()).get("config")
    return config if isinstance(config, dict) else {}


def _finite(value: object) -> bool:
    """A number the run measured (a part of the run that failed leaves None or NaN)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _capstone_samples(ref: Results) -> None:
    rows = {r["step"]: r for r in _kind(ref, "sample") if r.get("framework", "minitorch") == "minitorch"}
    if not rows:
        glue_md("phase8b-capstone-samples", missing_md(CAPSTONE, CAPSTONE_SCRIPT) + " (no samples in the file)")
        return
    blocks = []
    for step in sorted(rows):
        if step not in SAMPLE_STEPS and step != max(rows):
            continue
        row = rows[step]
        body = row["text"].replace("```", "'''")
        blocks.append(f"**After {step:,} steps** ({len(row['text'])} characters, temperature "
                      f"{row.get('temperature', 1.0)}, seed {row.get('seed', 0)}):\n\n```text\n{body}\n```")
    glue_md("phase8b-capstone-samples", "\n\n".join(blocks) + f"\n\n{ref.provenance}")


def _capstone_kernels(ref: Results) -> None:
    rows = sorted(_kind(ref, "kernel"), key=lambda r: -r.get("us_per_step", 0.0))
    busy = next(iter(_kind(ref, "kernel_busy")), {}).get("busy_us_per_step")
    if not rows or not busy:
        glue_figure("fig-phase8b-capstone-kernels", missing_figure(CAPSTONE, "the step's split by kernel",
                                                                    CAPSTONE_SCRIPT))
        glue_md("phase8b-capstone-kernels-text", missing_md(CAPSTONE, CAPSTONE_SCRIPT) + " (no kernel split)")
        return
    groups: dict[str, float] = {}
    for r in rows:
        groups[_kernel_group(r["name"])] = groups.get(_kernel_group(r["name"]), 0.0) + r["us_per_step"]
    shown = sorted(groups.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(7, 0.35 * len(shown) + 1.2))
    ax.barh(range(len(shown)), [us / 1e3 for _, us in shown], color=BLUE)
    for y, (_, us) in enumerate(shown):
        ax.text(us / 1e3, y, f" {us / busy:.0%}", va="center", fontsize=7)
    ax.set_yticks(range(len(shown)), [name for name, _ in shown], fontsize=8)
    ax.set_xlabel("ms of GPU time in one captured step")
    ax.set_title(f"One training step by kernel (their times add up to {busy / 1e3:.1f} ms); {_short(ref)}", fontsize=9)
    fig.tight_layout()
    glue_figure("fig-phase8b-capstone-kernels", fig)
    top = sorted(groups.items(), key=lambda kv: -kv[1])[:3]
    theirs = next(iter(_kind(ref, "torch_kernel_busy")), {}).get("busy_us_per_step")
    wall = next(iter(_kind(ref, "step")), {}).get("minitorch_captured_seconds")
    overlap = _finite(wall) and busy > wall * 1e6  # kernels on a side branch of the graph ran concurrently
    glue_md("phase8b-capstone-kernels-text",
            f"The kernels' times add up to {busy / 1e3:.2f} ms a step"
            + (f", more than the step's {wall * 1e3:.2f} ms: the weight gradients run on a side branch of the graph, "
               f"concurrently with the rest of the backward pass" if overlap else "")
            + "; the largest shares: " + ", ".join(f"{name} {us / busy:.0%}" for name, us in top)
            + (f". PyTorch's eager step keeps the GPU busy {theirs / 1e3:.2f} ms" if _finite(theirs) else "")
            + f". {ref.provenance}")


def _kernel_group(name: str) -> str:
    """A kernel's family, from its (demangled) name: the learner's files name their kernels."""
    lowered = name.lower()
    for key, label in (("flash_bwd", "FlashAttention backward"), ("flash_fwd", "FlashAttention forward"),
                       ("hgemm", "tensor-core GEMM (hgemm)"), ("layernorm", "LayerNorm"), ("gelu", "GELU"),
                       ("adam", "AdamW"), ("embedding", "embeddings"), ("dropout", "dropout"),
                       ("cross_entropy", "cross-entropy"), ("softmax", "cross-entropy"), ("sum_squares", "clipping"),
                       ("clip", "clipping"), ("column_sums", "dy in bf16 + bias gradients"),
                       ("bfloat16", "bf16 conversions"), ("float_to", "bf16 conversions"),
                       ("to_float", "bf16 conversions"), ("add_bias", "biases (add, gradient)"),
                       ("bias_grad", "biases (add, gradient)"), ("split_heads", "heads split and merged"),
                       ("merge_heads", "heads split and merged"), ("scale_by", "clipping"),
                       ("tensor_map", "tensor-core GEMM (hgemm)"), ("lr_schedule", "AdamW"),
                       ("add", "residual adds")):
        if key in lowered:
            return label
    return "other"


def _capstone_maps(ref: Results) -> None:
    maps = _kind(ref, "attention_map")
    if not maps:
        glue_figure("fig-phase8b-capstone-maps", missing_figure(CAPSTONE, "the attention maps", CAPSTONE_SCRIPT))
        return
    layers = sorted({m["layer"] for m in maps})
    heads = sorted({m["head"] for m in maps})
    fig, axes = plt.subplots(len(layers), len(heads), figsize=(2.6 * len(heads), 2.6 * len(layers)), squeeze=False)
    for m in maps:
        ax = axes[layers.index(m["layer"])][heads.index(m["head"])]
        ax.imshow(m["probs"], cmap="viridis", vmin=0, vmax=1)
        ax.grid(False)
        labels = [repr(c)[1:-1] for c in m["text"]]
        ax.set_xticks(range(len(labels)), labels, fontsize=4)
        ax.set_yticks(range(len(labels)), labels, fontsize=4)
        ax.set_title(f"layer {m['layer']}, head {m['head']}", fontsize=8)
    fig.suptitle(f"What the best checkpoint's heads read (row: a query, column: a key); {_short(ref)}", fontsize=9)
    fig.tight_layout()
    glue_figure("fig-phase8b-capstone-maps", fig)
