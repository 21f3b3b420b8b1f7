"""Phase 7 generation benchmark: 1,000 characters from the Tiny Shakespeare GPT with and without the KV cache.

Runs on the reference solution files of Phases 1-7 (a temporary workspace). Trains the lab's model (the recipe of
``benchmarks/phase7_gpt.py``: 2 layers, 4 heads, d_model 64, context 64, 1,000 captured steps), then:

1. validates: the cached generation (``GPT.generate(..., use_cache=True)``) writes the same characters as the
   uncached one (a forward pass of the whole context a character) for the same seed, for each batch size;
   a difference is reported (position and count) and the script exits with status 1 before writing anything;
2. times, in wall-clock seconds with the device synchronised (sampling runs on the host, so the host's time is
   part of generation's): ``generate`` of 1,000 characters after the prompt "\\n", cached (median of 3 calls, each
   capturing its own graphs) and uncached (median of 2), for 1 and 4 sequences;
3. times one token of each kind: a replay of the cached step (positions below block_size), a replay of the
   captured cropped window (past block_size: nothing cached can be reused there, see minitorch/nn/kv_cache.py) and
   the uncached forward pass of a full context launched from Python.

Writes ``benchmarks/results/phase7_generate-<gpu>.json``. On a GPU: ``python benchmarks/phase7_generate.py``
(about a minute on an H100). ``--small`` runs the same lines on the emulator with the reduced model, 20 training
steps and 40 characters, and writes its JSON into a temporary directory: a check of the script only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import emulator_name, gpu_name, software, solution_sources, write_results
from phase7_gpt import FULL, LABS, SEED, SMALL, WEIGHT_DECAY, minitorch_step, shakespeare_ids

CHARS, SMALL_CHARS, BATCHES = 1000, 40, (1, 4)


def seconds_of(fn, repeats: int) -> list[float]:
    """Wall-clock seconds of each of ``repeats`` calls of fn, the device synchronised before and after."""
    from minitorch import backend

    times = []
    for _ in range(repeats):
        backend.synchronize()
        start = time.perf_counter()
        fn()
        backend.synchronize()
        times.append(time.perf_counter() - start)
    return times


def trained_model(setup: dict):
    """The lab's GPT trained by its recipe (captured steps), and the tokenizer."""
    import minitorch
    from minitorch import graph, nn, optim, text

    model_cfg, train_cfg = setup["model"], setup["train"]
    tokenizer, train_ids, _ = shakespeare_ids()
    vocab, b, t = tokenizer.vocab_size, train_cfg["batch_size"], model_cfg["block_size"]
    model = nn.GPT(vocab, **model_cfg, seed=SEED)
    opt = optim.AdamW(model.parameters(), lr=train_cfg["lr"], weight_decay=WEIGHT_DECAY)
    xb, yb = minitorch.zeros((b, t), dtype="int32"), minitorch.zeros((b, t), dtype="int32")
    captured = graph.capture(minitorch_step(model, opt, xb, yb, vocab))
    windows = text.RandomWindows(train_ids, t, b, seed=SEED)
    for _ in range(train_cfg["steps"]):
        x, y = windows.sample()
        xb.copy_from(x)
        yb.copy_from(y)
        captured.replay()
    print(f"trained {train_cfg['steps']} steps: loss {captured.output.item():.4f}", flush=True)
    return model, tokenizer


def generation_rows(model, tokenizer, chars: int) -> tuple[list[dict], list[str]]:
    """Validation, then the timings of generate; the problems found (empty when cached == uncached)."""
    rows, problems = [], []
    prompt = tokenizer.encode("\n")[None, :]
    for batch in BATCHES:
        start = np.repeat(prompt, batch, axis=0)
        outputs: dict[bool, np.ndarray] = {}

        def run(use_cache: bool, start: np.ndarray = start, outputs: dict = outputs) -> None:
            outputs[use_cache] = model.generate(start, chars, temperature=1.0, seed=SEED, use_cache=use_cache).numpy()

        uncached = seconds_of(lambda: run(False), 2)
        cached = seconds_of(lambda: run(True), 3)
        differ = outputs[True] != outputs[False]
        if differ.any():
            first = int(np.argwhere(differ)[0][1])
            problems.append(f"batch {batch}: {int(differ.sum())} of {differ.size} ids differ, the first at "
                            f"position {first}")
        for mode, times in (("uncached", uncached), ("cached", cached)):
            seconds = statistics.median(times)
            rows.append({"kind": "generate", "mode": mode, "batch": batch, "chars": chars, "seconds": seconds,
                         "runs": times, "chars_per_second": batch * chars / seconds,
                         "same_as_uncached": not differ.any()})
            print(f"{mode:>9}, {batch} x {chars} characters: {seconds:.3f} s ({batch * chars / seconds:,.0f} "
                  f"characters/s)", flush=True)
        if batch == 1:
            rows.append({"kind": "sample", "batch": 1, "text": tokenizer.decode(outputs[True][0, 1:])})
    return rows, problems


def token_rows(model, repeats: int) -> list[dict]:
    """Seconds of one token a sequence (batch 1): the cached step's replay at each position below block_size
    (their median), the captured window's replay, and the uncached forward pass of a full context."""
    import minitorch
    from minitorch.nn.kv_cache import KVCacheDecoder

    t = model.block_size
    ids = np.random.default_rng(SEED).integers(0, model.vocab_size, (1, t)).astype(np.int32)
    rows = []
    with minitorch.no_grad():
        decoder = KVCacheDecoder(model, 1)
        decoder.step(ids[:, 0], 0)                                    # the capture, off the clock
        steps = [seconds_of(lambda p=p: decoder.step(ids[:, p], p), 1)[0] for p in range(1, t)]
        decoder.window(ids)
        window = seconds_of(lambda: decoder.window(ids), repeats)
        context = minitorch.tensor(ids, dtype="int32")
        eager = seconds_of(lambda: model(context).numpy(), repeats)
    for what, times in (("cached_step", steps), ("window_replay", window), ("uncached_forward", eager)):
        rows.append({"kind": "token", "what": what, "batch": 1, "seconds": statistics.median(times)})
        print(f"one token, {what:>16}: {statistics.median(times) * 1e3:.3f} ms", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--small", action="store_true",
                        help="the emulator, the reduced model, 40 characters: a check of this script")
    parser.add_argument("--workspace", help="a workspace that already holds the Phase 1-7 files")
    args = parser.parse_args(argv)
    os.environ["MINITORCH_WORKSPACE"] = str(args.workspace or tempfile.mkdtemp(prefix="minitorch-bench-"))
    import minitorch
    from minitorch.kernels import write_source

    device = "emu" if args.small else "cuda"
    if device == "cuda" and not minitorch.cuda_available():
        print("no usable GPU: run with --small for a check of the script on the emulator", file=sys.stderr)
        return 1
    minitorch.set_device(device)
    if not args.workspace:
        for lab in LABS:
            for name, source in solution_sources(f"{lab}.ipynb").items():
                write_source(name, source)
    name = gpu_name() if device == "cuda" else emulator_name()
    print(f"device: {name}", flush=True)
    setup = SMALL if args.small else FULL
    model, tokenizer = trained_model(setup)
    chars = SMALL_CHARS if args.small else CHARS
    rows, problems = generation_rows(model, tokenizer, chars)
    if problems:
        print("cached generation differs from uncached generation:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    rows += token_rows(model, 3 if args.small else 20)
    meta = {"configuration": "small" if args.small else "full", "config": setup["model"], "train": setup["train"],
            "prompt": "\\n", "seed": SEED, "temperature": 1.0}
    if args.small:  # a check of the script: its numbers are no figure for the book
        path = Path(tempfile.mkdtemp(prefix="phase7-generate-small-")) / "phase7_generate-small.json"
        doc = {"benchmark": "phase7_generate", "device": name, "date": datetime.date.today().isoformat(),
               "software": software(), **meta, "results": rows}
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path} (not a result for the book)")
        return 0
    write_results("phase7_generate", name, rows, **meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
