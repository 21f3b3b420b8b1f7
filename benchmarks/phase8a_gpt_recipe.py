"""Lab 8a's GPT deliverable with the lab's exact recipe, in float32 and under bf16 autocast (a GPU only).

Lab 7's untied model without dropout, AdamW over ``optimizer_groups`` with warmup + cosine, clipping at 1.0, a
captured step, 1,000 steps of batch 64, seed 0: the float32 run that ``phase8a.shakespeare_bf16_val_loss`` is
drawn from, and the bf16 run under a few product settings. Prints one line a run (validation loss in float32 on
the grader's 256 windows); ``--out`` writes them as JSON.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from common import gpu_name, solution_sources, write_results

os.environ.setdefault("MINITORCH_WORKSPACE", tempfile.mkdtemp(prefix="minitorch-bench-"))

import phase7_gpt as gpt  # noqa: E402

MODEL = dict(d_model=64, n_head=4, n_layer=2, block_size=64)
STEPS, BATCH, LR = 1000, 64, 3e-3  # Lab 8a's TRAIN (full configuration)


def train(variant: str | None = None, split: int | None = None, bf16: bool = True, capture: bool = True) -> float:
    import minitorch
    from minitorch import amp, backend, graph, nn, ops, optim, text
    from minitorch import functional as F  # noqa: N812

    tokenizer, train_ids, val_ids = gpt.shakespeare_ids()
    vocab = tokenizer.vocab_size
    val_x, val_y = text.evaluation_windows(val_ids, MODEL["block_size"], gpt.EVAL_WINDOWS)
    val_xt, val_yt = minitorch.tensor(val_x, dtype="int32"), minitorch.tensor(val_y.reshape(-1), dtype="int32")
    previous_variant = ops.set_hgemm_variant(variant)
    previous_split = ops.set_split_k(split) if split is not None else None
    schedule = optim.WarmupCosine(max_lr=LR, min_lr=LR / 10, warmup=STEPS // 10, total=STEPS)
    model = nn.GPT(vocab, **MODEL, seed=gpt.SEED, tie_weights=False, dropout=0.0)
    opt = optim.AdamW(model.optimizer_groups(gpt.WEIGHT_DECAY), lr=LR, schedule=schedule)
    t = MODEL["block_size"]
    xb, yb = minitorch.zeros((BATCH, t), dtype="int32"), minitorch.zeros((BATCH, t), dtype="int32")

    def step():
        with amp.autocast("bfloat16", enabled=bf16):
            loss = F.cross_entropy(model(xb).reshape(BATCH * t, vocab), yb.reshape(BATCH * t))
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm_(model.parameters(), gpt.CLIP)
        opt.step()
        return loss

    run_step = graph.capture(step).replay if capture else step
    windows = text.RandomWindows(train_ids, t, BATCH, seed=gpt.SEED)
    for _ in range(STEPS):
        x, y = windows.sample()
        xb.copy_from(x)
        yb.copy_from(y)
        run_step()
    backend.synchronize()
    with minitorch.no_grad():
        val = F.cross_entropy(model(val_xt).reshape(-1, vocab), val_yt).item()
    ops.set_hgemm_variant(previous_variant)
    if split is not None:
        ops.set_split_k(previous_split)
    return val


def main() -> int:
    import minitorch
    from minitorch.kernels import write_source

    if not minitorch.cuda_available():
        print("a GPU only", file=sys.stderr)
        return 1
    minitorch.set_device("cuda")
    for lab in gpt.LABS + ("phase8a_tensor_cores",):
        for name, source in solution_sources(f"{lab}.ipynb").items():
            write_source(name, source)
    runs = {"bf16, products as the rule picks (best)": {}, "bf16, rung 5 everywhere": {"variant": "pipeline"},
            "bf16, eager": {"capture": False}, "bf16, no split K": {"split": 0}, "float32": {"bf16": False}}
    rows = []
    for label, kw in runs.items():
        began = time.perf_counter()
        val = train(**kw)
        rows.append({"run": label, "val_loss": val, "seconds": time.perf_counter() - began})
        print(f"{label}: val {val:.4f}", flush=True)
    if "--out" in sys.argv:
        write_results("phase8a_gpt_recipe", gpu_name(), rows, model=MODEL, steps=STEPS, batch=BATCH, lr=LR,
                      schedule="warmup 100 + cosine to lr/10", optimizer="AdamW(optimizer_groups(0.1))")
    return 0


if __name__ == "__main__":
    sys.exit(main())
