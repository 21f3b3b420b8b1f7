"""Figures of the Phase 7 chapter (transformers and the Tiny Shakespeare GPT), drawn at build time.

Measured figures read ``benchmarks/results/phase7_gpt-*.json`` (``benchmarks/phase7_gpt.py``, on a GPU): the
loss curves of minitorch and PyTorch, the samples after 0, 250, 500 and 1,000 steps, the attention maps of the
trained model, one training step against PyTorch eager, the kernels' bandwidth against the copy and the attention
against SDPA. Without that file the chapter still builds, with a note saying which script to run. Every number
quoted in the text comes from that file or from ``grader/thresholds.toml``. The causal-mask diagram is computed
here in NumPy.
"""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
from figures import (
    BLUE,
    GREEN,
    GREY,
    ORANGE,
    REPO_ROOT,
    Results,
    fmt_time,
    glue_figure,
    glue_md,
    latest,
    missing_figure,
    missing_md,
)

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

BENCHMARK, SCRIPT = "phase7_gpt", "benchmarks/phase7_gpt.py"


def thresholds() -> dict:
    with open(REPO_ROOT / "grader" / "thresholds.toml", "rb") as fh:
        return tomllib.load(fh)["phase7"]


def _results() -> Results | None:
    return latest(BENCHMARK)


def _rows(res: Results, kind: str) -> list[dict]:
    return [r for r in res.rows if r.get("kind") == kind]


def _missing(fig_name: str, what: str, *md_names: str) -> None:
    glue_figure(fig_name, missing_figure(BENCHMARK, what, SCRIPT))
    for name in md_names:
        glue_md(name, missing_md(BENCHMARK, SCRIPT) if name.endswith("-text") else "")


# --------------------------------------------------------------------------------------
# Diagram: scores, the causal mask, the probabilities (computed here)
# --------------------------------------------------------------------------------------

def diagram_causal_mask(t: int = 8):
    """Scores S = Q Kᵀ / sqrt(D) of one head, the mask, and P = softmax over each row's visible keys."""
    rng = np.random.default_rng(3)
    scores = rng.standard_normal((t, t)) * 1.5
    visible = np.tril(np.ones((t, t), bool))
    z = np.where(visible, scores, -np.inf)
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    fig, axes = plt.subplots(1, 2, figsize=(7.2, 3.4))
    for ax, values, title in ((axes[0], np.where(visible, scores, np.nan), "scores S (query × key)"),
                              (axes[1], np.where(visible, p, np.nan), "probabilities P")):
        cmap = plt.get_cmap("viridis").copy()
        cmap.set_bad("#f2f2f2")
        ax.imshow(values, cmap=cmap)
        for i in range(t):
            for j in range(t):
                if j > i:
                    ax.text(j, i, "×", ha="center", va="center", fontsize=8, color=GREY)
                elif ax is axes[1]:
                    label = f"{p[i, j]:.2f}".removeprefix("0")  # .37; 1.00 stays whole
                    ax.text(j, i, label, ha="center", va="center", fontsize=6,
                            color="white" if p[i, j] < 0.5 else "black")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("key j")
        ax.set_ylabel("query t")
        ax.set_xticks(range(t))
        ax.set_yticks(range(t))
        ax.grid(False)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------------------
# Training: loss curves, samples, attention maps
# --------------------------------------------------------------------------------------

def phase7_curves(fig_name: str = "fig-phase7-curves", text_name: str = "phase7-curves-text",
                  caption_name: str = "phase7-curves-source") -> None:
    """Glue the training and validation loss curves of minitorch and PyTorch, and the sentence quoting them."""
    bar = thresholds()["shakespeare_val_loss"]
    res = _results()
    if res is None:
        _missing(fig_name, "the Tiny Shakespeare training", text_name, caption_name)
        return
    curves = {f: [r for r in _rows(res, "curve") if r["framework"] == f] for f in ("minitorch", "pytorch")}
    if not curves["minitorch"] or not curves["pytorch"]:
        raise ValueError(f"{res.path}: no curve rows of minitorch and PyTorch")
    fig, ax = plt.subplots(figsize=(8, 3.6))
    style = {"minitorch": dict(color=BLUE, label="minitorch"), "pytorch": dict(color=ORANGE, label="PyTorch")}
    for framework, rows in curves.items():
        steps = [r["step"] for r in rows]
        ax.plot(steps, [r["val_loss"] for r in rows], marker="o", ms=3, **style[framework],
                **({} if framework == "minitorch" else {"ls": "--"}))
        trained = [(r["step"], r["train_loss"]) for r in rows if r["step"] > 0]
        ax.plot([s for s, _ in trained], [v for _, v in trained], lw=0.8, alpha=0.5, color=style[framework]["color"])
    ax.axhline(bar, color="black", ls=":", lw=1, label=f"the bar, {bar}")
    ax.set(xlabel="training step", ylabel="cross-entropy (nats)", ylim=(1.5, 4.5))
    ax.legend(title="validation (markers), training batches (thin)", fontsize=8, title_fontsize=8)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    [summary] = _rows(res, "summary")
    glue_md(text_name, (
        f"After {summary['steps']:,} steps the minitorch model's validation loss is **{summary['val_loss']:.3f}** "
        f"nats; PyTorch, from the same initial weights on the same batches, reaches "
        f"{summary['pytorch_val_loss']:.3f}. The grader's bar is {bar}."))


def phase7_samples(fig_name: str = "fig-phase7-samples", caption_name: str = "phase7-samples-source") -> None:
    """Glue the samples after each number of steps, side by side."""
    res = _results()
    if res is None:
        _missing(fig_name, "the samples", caption_name)
        return
    samples = sorted(_rows(res, "sample"), key=lambda r: r["step"])
    if not samples:
        raise ValueError(f"{res.path}: no sample rows")
    cols = 2
    rows = (len(samples) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(9, 3.2 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, s in zip(axes.flat, samples, strict=False):
        lines = []
        for line in s["text"].split("\n"):
            lines += textwrap.wrap(line, 44, drop_whitespace=False) or [""]
        ax.set_title(f"after {s['step']:,} steps", loc="left", fontsize=10)
        ax.text(0, 1, "\n".join(lines[:14]), family="monospace", fontsize=7.5, va="top", transform=ax.transAxes)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)


def phase7_attention_maps(fig_name: str = "fig-phase7-attention", caption_name: str = "phase7-attention-source"
                          ) -> None:
    """Glue the attention probabilities of every layer and head on one line of text."""
    res = _results()
    if res is None:
        _missing(fig_name, "the attention maps", caption_name)
        return
    maps = sorted(_rows(res, "attention_map"), key=lambda r: (r["layer"], r["head"]))
    if not maps:
        raise ValueError(f"{res.path}: no attention_map rows")
    layers, heads = 1 + max(r["layer"] for r in maps), 1 + max(r["head"] for r in maps)
    text = maps[0]["text"]
    shown = min(len(text), 28)  # the first characters: a readable matrix
    labels = [c if c not in "\n " else {"\n": "⏎", " ": "␣"}[c] for c in text[:shown]]
    fig, axes = plt.subplots(layers, heads, figsize=(2.4 * heads, 2.5 * layers), squeeze=False)
    for r in maps:
        ax = axes[r["layer"]][r["head"]]
        ax.imshow(np.asarray(r["probs"])[:shown, :shown], cmap="viridis", vmin=0, vmax=1)
        ax.set_title(f"layer {r['layer']}, head {r['head']}", fontsize=8)
        ax.set_xticks(range(shown), labels, fontsize=5)
        ax.set_yticks(range(shown), labels, fontsize=5)
        ax.grid(False)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)


# --------------------------------------------------------------------------------------
# Speed: the step, the kernels, attention
# --------------------------------------------------------------------------------------

PYTORCH_STEPS = (("pytorch_seconds", "PyTorch eager", "eager"),
                 ("pytorch_captured_seconds", "PyTorch, torch.cuda.graph", "captured in a CUDA graph"),
                 ("pytorch_compiled_seconds", "PyTorch, torch.compile", "compiled by torch.compile"))


def phase7_step(fig_name: str = "fig-phase7-step", text_name: str = "phase7-step-text",
                caption_name: str = "phase7-step-source") -> None:
    """Glue one training step's time: minitorch captured and from Python; PyTorch eager, captured in a CUDA graph
    and compiled (whichever of them the results hold, with the reason for any that was skipped)."""
    res = _results()
    if res is None:
        _missing(fig_name, "the training step", text_name, caption_name)
        return
    [step] = _rows(res, "step")
    theirs = [(label, step[key], how) for key, label, how in PYTORCH_STEPS if key in step]
    bars = [("minitorch, captured graph", step["captured_seconds"], BLUE),
            ("minitorch, from Python", step["eager_seconds"], GREY)] + [
           (label, seconds, ORANGE) for label, seconds, _ in theirs]
    fig, ax = plt.subplots(figsize=(7, 0.45 * len(bars) + 0.9))
    ax.barh([b[0] for b in bars], [b[1] * 1e3 for b in bars], color=[b[2] for b in bars])
    for i, (_, seconds, _) in enumerate(bars):
        ax.text(seconds * 1e3, i, f" {fmt_time(seconds)}", va="center", fontsize=9)
    ax.invert_yaxis()
    ax.set_xlabel("one training step (ms), host time included")
    ax.grid(axis="y", visible=False)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    ours = step["captured_seconds"]
    race = "; ".join(f"PyTorch {how} {fmt_time(seconds)} (ours **{ours / seconds:.2f}×** its time)"
                     for _, seconds, how in theirs)
    skipped = "".join(f" PyTorch {how} was not raced: {step[key.replace('_seconds', '_skipped')]}."
                      for key, _, how in PYTORCH_STEPS if key.replace("_seconds", "_skipped") in step)
    best = min(theirs, key=lambda item: item[1])
    glue_md(text_name, (
        f"One replay of the captured step ({step['launches']} kernels) takes {fmt_time(ours)}; the same step "
        f"launched from Python takes {fmt_time(step['eager_seconds'])}. Against the same step in PyTorch: {race}."
        f" The fastest PyTorch here is {best[2]}, and our goal is at most 1.0× its time: we are at "
        f"**{ours / best[1]:.2f}×**." + skipped + _whole_run(res) + _dropout_step(res)))


def _dropout_step(res) -> str:
    """The step with the head tied and dropout, both frameworks alike (the step_dropout row), when it was measured."""
    rows = _rows(res, "step_dropout")
    if not rows:
        return ""
    row = rows[0]
    text = (f" With the head tied and dropout {row['dropout']:g} on the residual stream in both frameworks, the "
            f"captured step ({row['launches']} kernels) takes {fmt_time(row['captured_seconds'])}, PyTorch eager "
            f"{fmt_time(row['pytorch_seconds'])}")
    if "pytorch_captured_seconds" in row:
        text += (f" and PyTorch captured {fmt_time(row['pytorch_captured_seconds'])} (ours "
                 f"**{row['captured_ratio']:.2f}×** its time)")
    return text + "."


def _whole_run(res) -> str:
    """The whole training run against PyTorch's, when the results time both alike (samples off the clock)."""
    [summary] = _rows(res, "summary")
    if "train_ratio" not in summary:  # results from before the samples were taken off the clock
        return ""
    return (f" The whole run, {summary['steps']:,} steps with an evaluation every "
            f"{summary['eval_every']} of them, took {summary['train_seconds']:.1f} s against PyTorch eager's "
            f"{summary['pytorch_train_seconds']:.1f} s (**{summary['train_ratio']:.2f}×**).")


def phase7_bandwidth(fig_name: str = "fig-phase7-bandwidth", text_name: str = "phase7-bandwidth-text",
                     caption_name: str = "phase7-bandwidth-source") -> None:
    """Glue the bandwidth of LayerNorm and of the softmax as fractions of the copy bandwidth."""
    limits = thresholds()
    res = _results()
    if res is None:
        _missing(fig_name, "the LayerNorm and softmax bandwidth", text_name, caption_name)
        return
    rows = _rows(res, "bandwidth")
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(rows) + 1.0))
    names = [f"{r['kernel']} ({r['shape']})" for r in rows]
    ax.barh(names, [r["ratio"] for r in rows], color=[GREEN if "layernorm" in r["kernel"] else BLUE for r in rows])
    for i, r in enumerate(rows):
        ax.text(r["ratio"], i, f" {r['ratio']:.2f} ({r['gbps']:,.0f} GB/s)", va="center", fontsize=8)
        if r["kernel"] in limits:
            ax.plot([limits[r["kernel"]]] * 2, [i - 0.4, i + 0.4], color="black", lw=1)
    ax.axvline(1.0, color=GREY, ls="--", lw=1)
    ax.invert_yaxis()
    ax.set(xlim=(0, 1.25), xlabel="bytes moved per second ÷ the copy's (| the grader's bar)")
    ax.grid(axis="y", visible=False)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    copy = rows[0]["copy_gbps"]
    glue_md(text_name, "A copy of the same bytes runs at about " + f"{copy:,.0f} GB/s here; " + "; ".join(
        f"`{r['kernel']}` reaches {r['ratio']:.2f} of it" for r in rows) + ".")


def phase7_attention(fig_name: str = "fig-phase7-sdpa", text_name: str = "phase7-sdpa-text",
                     caption_name: str = "phase7-sdpa-source", long_name: str = "phase7-long-attention-text") -> None:
    """Glue the materialised attention's time against PyTorch's scaled_dot_product_attention."""
    res = _results()
    if res is None:
        _missing(fig_name, "attention against SDPA", text_name, caption_name)
        glue_md(long_name, "At long sequences the materialised S and P, and the two `bmm` calls, take the time")
        return
    rows = _rows(res, "attention")
    fig, ax = plt.subplots(figsize=(7, 2.4))
    labels = [f"B={r['B']} H={r['H']} T={r['T']} D={r['D']}" for r in rows]
    y = np.arange(len(rows))
    ax.barh(y - 0.2, [r["seconds"] * 1e3 for r in rows], 0.4, color=BLUE, label="minitorch (materialised)")
    ax.barh(y + 0.2, [r["sdpa_seconds"] * 1e3 for r in rows], 0.4, color=ORANGE, label="PyTorch SDPA (fused)")
    ax.set_yticks(y, labels)
    ax.set(xscale="log", xlabel="forward time (ms, log scale)")
    ax.invert_yaxis()
    ax.legend(fontsize=8)
    ax.grid(axis="y", visible=False)
    fig.tight_layout()
    glue_figure(fig_name, fig)
    glue_md(caption_name, res.provenance)
    glue_md(text_name, "; ".join(
        f"at T = {r['T']} (D = {r['D']}) the materialised attention takes {r['time_ratio']:.1f}× SDPA's time"
        for r in rows) + ".")
    glue_md(long_name, _long_attention(res, rows))


def _long_attention(res: Results, rows: list[dict]) -> str:
    """Where the time of the long sequence's materialised attention goes: S and P through memory at the copy
    bandwidth of the same run, the rest in the two batched products."""
    [r] = [r for r in rows if r["label"] == "long"]
    copy = _rows(res, "bandwidth")[0]["copy_gbps"] * 1e9
    matrix = 4 * r["B"] * r["H"] * r["T"] ** 2  # bytes of S (and of P)
    memory = 4 * matrix / copy  # S written and read, P written and read
    flops = 4 * r["B"] * r["H"] * r["T"] ** 2 * r["D"]
    rate = flops / (r["seconds"] - memory) if r["seconds"] > memory else float("nan")
    return (f"At T = {r['T']} (B = {r['B']}, H = {r['H']}: {fmt_time(r['seconds'])} against SDPA's "
            f"{fmt_time(r['sdpa_seconds'])} in `{res.path.name}`) the materialised S and P are "
            f"{matrix / 1e6:,.0f} MB each; writing and reading both moves {4 * matrix / 1e9:.2f} GB, about "
            f"{fmt_time(memory)} at the copy bandwidth measured in the same run ({copy / 1e12:.2f} TB/s). The rest is "
            f"the two `bmm` calls, {flops / 1e9:.1f} GFLOP at about {rate / 1e12:.1f} TFLOP/s")


def phase7_baselines(text_name: str = "phase7-baselines-text") -> None:
    """Glue the two baselines (character frequencies; the previous character) from the benchmark's file."""
    res = _results()
    rows = _rows(res, "baseline") if res is not None else []
    if not rows:
        glue_md(text_name, "the losses of two simple predictors, which `benchmarks/phase7_gpt.py` computes, give the "
                           "scale (none is committed yet)")
        return
    glue_md(text_name, f"predicting each character from the frequencies of characters alone costs "
                       f"{rows[0]['unigram']:.2f} nats; from the previous character, {rows[0]['bigram']:.2f} "
                       f"(counts of the training text, on the validation text)")


def phase7_reduced_bar(text_name: str = "phase7-reduced-text") -> None:
    """Glue the bars of the two configurations from grader/thresholds.toml."""
    t = thresholds()
    glue_md(text_name, f"at most {t['shakespeare_val_loss']} nats for the full configuration on a GPU, at most "
                       f"{t['shakespeare_val_loss_reduced']} for the emulator's reduced one")



# --------------------------------------------------------------------------------------
# Where a captured step spends its GPU time (benchmarks/phase7_step_profile.py)
# --------------------------------------------------------------------------------------

PROFILE, PROFILE_SCRIPT = "phase7_step_profile", "benchmarks/phase7_step_profile.py"


def _kernel_table(rows: list[dict], framework: str, top: int) -> str:
    kernels = sorted((r for r in rows if r.get("kind") == "kernel" and r.get("framework") == framework),
                     key=lambda r: -r["us_per_step"])
    lines = ["| kernel | µs a call | calls a step | share of the GPU time |", "|---|---:|---:|---:|"]
    for r in kernels[:top]:
        name = r["name"].split("(")[0].replace("void ", "")
        lines.append(f"| `{name}` | {r['us_per_call']:.1f} | {r['calls_per_step']:.0f} | {r['share']:.0%} |")
    return "\n".join(lines)


def _step(rows: list[dict], framework: str) -> dict | None:
    found = [r for r in rows if r.get("kind") == "step" and r.get("framework") == framework]
    return found[0] if found else None


def phase7_profile(text_name: str = "phase7-profile-text") -> None:
    """Glue the per-kernel profile of the captured step, before and after the fast paths, and PyTorch's."""
    after, before = latest(PROFILE), latest(PROFILE + "_before")
    if after is None or before is None:
        glue_md(text_name, missing_md(PROFILE, PROFILE_SCRIPT))
        return
    ours, old, theirs = _step(after.rows, "minitorch"), _step(before.rows, "minitorch"), _step(after.rows, "pytorch")
    text = [
        f"Before (the reference GEMM with its default 128 × 128 tiles and no split, Phase 3b's bias gradient of "
        f"one thread a column): a replay took **{old['captured_ms']:.2f} ms**, and the GPU was busy for "
        f"{old['busy_us'] / 1e3:.2f} ms of it. {before.provenance}", "",
        _kernel_table(before.rows, "minitorch", 5), "",
        f"After: **{ours['captured_ms']:.3f} ms** a replay ({ours['launches']} launches, the GPU busy for "
        f"{ours['busy_us'] / 1e3:.3f} ms), {old['captured_ms'] / ours['captured_ms']:.1f}× faster.", "",
        _kernel_table(after.rows, "minitorch", 10), ""]
    if theirs:
        text.append(
            f"PyTorch runs the same step (same model and weights, batch, AdamW, clipping) in "
            f"{theirs['eager_ms']:.2f} ms eager and **{theirs['captured_ms']:.3f} ms** captured with "
            f"`torch.cuda.graph` (AdamW with `capturable=True`; the GPU busy for {theirs['busy_us'] / 1e3:.3f} ms): "
            f"graph against graph, minitorch takes **{ours['captured_ms'] / theirs['captured_ms']:.2f}×** its "
            f"time. {after.provenance}")
    glue_md(text_name, "\n".join(text))


# --------------------------------------------------------------------------------------
# The reduced configuration on the emulator, with the lab's recipe (benchmarks/phase7_gpt.py --calibrate)
# --------------------------------------------------------------------------------------

REDUCED = "phase7_gpt_reduced"


def _recipe(row: dict) -> str:
    return f"head {'tied' if row['tie_weights'] else 'untied'}, dropout {row.get('dropout', 0.0):g}"


def phase7_reduced_recipe(text_name: str = "phase7-reduced-recipe-text") -> None:
    """Glue the calibration of the reduced configuration: the lab's recipe from each seed, and the variants
    trained from the first seed (the recipe before, and the full configuration's dropout)."""
    res = latest(REDUCED)
    rows = _rows(res, "reduced") if res is not None else []
    if not rows:
        glue_md(text_name, missing_md(REDUCED, f"{SCRIPT} --calibrate 0,1"))
        return
    losses = ", ".join(f"{r['val_loss']:.3f}" for r in rows)
    seeds = ", ".join(str(r["seed"]) for r in rows)
    text = (f"the lab's recipe ({_recipe(rows[0])}) ends at {losses} from the seeds {seeds} on the grader's 256 "
            f"windows")
    if all("cpu_seconds" in r for r in rows):
        text += (f", 300 steps of {rows[0]['launches']} launches in {min(r['cpu_seconds'] for r in rows):.0f} to "
                 f"{max(r['cpu_seconds'] for r in rows):.0f} s of CPU time")
    variants = [f"{v['val_loss']:.3f} with the {_recipe(v)}" for v in _rows(res, "reduced_variant")]
    if variants:
        text += f"; from seed {rows[0]['seed']}, " + " and ".join(variants)
    glue_md(text_name, f"{text} (`{res.path.name}`)")


FLAT = "phase7_gpt_flat"


def phase7_flat(text_name: str = "phase7-flat-text", recipe_name: str = "phase7-full-recipe-text") -> None:
    """Glue the captured step with AdamW per parameter and over the flat buffer, and the full recipe's training,
    from ``benchmarks/phase7_gpt.py --flat-steps`` (a GPU)."""
    res = latest(FLAT)
    steps = _rows(res, "step_flat") if res is not None else []
    if not steps:
        glue_md(text_name, missing_md(FLAT, f"{SCRIPT} --flat-steps 0,1"))
        glue_md(recipe_name, missing_md(FLAT, f"{SCRIPT} --flat-steps 0,1"))
        return
    parts = []
    for tie, dropout in sorted({(r["tie_weights"], r["dropout"]) for r in steps}):
        by = {r["flat"]: r for r in steps if (r["tie_weights"], r["dropout"]) == (tie, dropout)}
        plain, flat = by[False], by[True]
        parts.append(f"with the {_recipe(plain)}, a replay takes {plain['captured_seconds'] * 1e3:.3f} ms "
                     f"({plain['launches']} launches) with AdamW and clipping per parameter and "
                     f"{flat['captured_seconds'] * 1e3:.3f} ms ({flat['launches']} launches) over the flat buffer")
    glue_md(text_name, f"{'; '.join(parts)} ({res.device}, `{res.path.name}`)")
    full = _rows(res, "recipe_full")
    if not full:
        glue_md(recipe_name, "no GPU run of the full recipe is committed yet")
        return
    losses = ", ".join(f"{r['val_loss']:.3f} (seed {r['seed']})" for r in full)
    glue_md(recipe_name, (f"the full configuration trained with the lab's recipe ({_recipe(full[0])}, flat AdamW) "
                          f"ends at a validation loss of {losses} against the bar of "
                          f"{thresholds()['shakespeare_val_loss']} ({res.device}, `{res.path.name}`)"))


def phase7_gpu_recipe(text_name: str = "phase7-gpu-recipe-text") -> None:
    """Glue what the GPU run's configuration says about tying, and where it ended, from the benchmark's file."""
    res = _results()
    config = {}
    if res is not None:
        import json

        config = json.loads(res.path.read_text()).get("config", {})
    if res is None or "tie_weights" not in config:
        glue_md(text_name, "no GPU run of this recipe is committed yet")
        return
    [summary] = _rows(res, "summary")
    bar = thresholds()["shakespeare_val_loss"]
    # runs made before the position table was scaled with a tied token table (nn.GPT) lack the key
    early = config["tie_weights"] and "tied_wpe_std" not in config
    glue_md(text_name, (
        f"the committed GPU run of the full configuration (`{res.path.name}`) was made with the head "
        f"{'tied' if config['tie_weights'] else 'untied'}"
        f"{' (and the position table still at N(0, 1))' if early else ''} and ended at a validation loss of "
        f"{summary['val_loss']:.3f} (PyTorch, the same model from the same weights: "
        f"{summary['pytorch_val_loss']:.3f}), against the bar of {bar}"))
