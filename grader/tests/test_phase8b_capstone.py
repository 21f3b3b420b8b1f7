"""Graded test of Phase 8b's capstone: nanoGPT's Shakespeare-char model, trained by the lab on the learner's kernels.

The grader trusts no number the lab printed. It reads ``nanogpt_model.npz`` and ``nanogpt_model.json`` from the
workspace as untrusted files (grader/deliverables.py: a regular file of bounded size, the ``.npz`` without pickles,
the pair saved by one run), rebuilds the validation split of Tiny Shakespeare itself (the file's SHA-256 must be the
course's), and computes the validation loss with its own float64 NumPy forward pass: Phase 7's
(grader/tests/test_phase7_gpt.py: ``logits_of``, ``validation_loss``, on the same 256 windows of the validation
text), which is the function FlashAttention computes too: flash and materialised attention differ in how they
compute softmax(Q Kᵀ / √D) V, not in what. It then samples 500 characters from the saved model with a fixed seed, in
float64 with a key/value cache (``sample``: the context's last half kept when it fills), into the report.

What the grader accepts as the capstone (``config`` in the record, checked against the arrays' shapes):
- on a GPU, the full configuration, nanoGPT's Shakespeare-char model: 6 layers, 6 heads, d_model 384, context 256;
  its bar is ``phase8b.capstone_val_loss`` (1.50);
- on the emulator, the full configuration or the reduced one the lab trains there (``REDUCED``), whose bar is
  ``phase8b.capstone_val_loss_reduced`` (calibrated: grader/thresholds.toml says how).
A smaller or otherwise different model is refused, whatever its loss.

Which attention trained it: the record's ``config`` must say ``"attention": "flash"`` (``nn.GPT(...,
attention="flash")``'s config; the parameters of a flash GPT and a materialised one are the same, so the files
alone cannot tell more). That the FlashAttention the model ran is the learner's own is what the rest of ``grader
check phase8b`` establishes: ``flash.py`` is graded against float64 at awkward lengths, its results must come from
launches of ``flash.cu``'s kernels, and a ``flash.py`` that imports PyTorch (its
``scaled_dot_product_attention``) is refused by name (test_phase8b.py: ``test_results_come_from_your_kernels``).
When the grader runs the lab's notebook, the capstone's cells train the model again on the learner's kernels.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

import numpy as np
import pytest

from grader import checks, deliverables
from grader.checks import GradeError
from grader.tests import test_phase7_gpt as phase7
from minitorch import backend, kernels

MODEL_FILE, RECORD_FILE = "nanogpt_model.npz", "nanogpt_model.json"
LAB_SECTION = '"The capstone: nanoGPT\'s Shakespeare model on your kernels" in labs/phase8b_flash.ipynb'
# nanoGPT's config/train_shakespeare_char.py: n_layer 6, n_head 6, n_embd 384, block_size 256
FULL = {"block_size": 256, "d_model": 384, "n_head": 6, "n_layer": 6}
# what the lab trains on the emulator (its cell "The capstone's configuration"): one head of 64 (FlashAttention's
# smallest head dim), one layer, a context of 32
REDUCED = {"block_size": 32, "d_model": 64, "n_head": 1, "n_layer": 1}
SAMPLE_CHARS, SAMPLE_SEED, SAMPLE_PROMPT = 500, 0, "\n"


@contextlib.contextmanager
def _capstone_files() -> Iterator[None]:
    """Phase 7's checks, reused, name Phase 7's files in their messages: name the capstone's."""
    try:
        yield
    except GradeError as err:
        text = str(err).replace(phase7.RECORD_FILE, RECORD_FILE).replace(phase7.MODEL_FILE, MODEL_FILE)
        raise GradeError(text.replace(phase7.LAB_SECTION, LAB_SECTION)) from None


def load_saved_model() -> tuple[dict, dict[str, np.ndarray]]:
    """The record and the parameters (float64), read as untrusted files."""
    workspace = kernels.workspace_dir()
    try:
        record_bytes = deliverables.read_untrusted(workspace, RECORD_FILE)
        model_bytes = deliverables.read_untrusted(workspace, MODEL_FILE, deliverables.CAPSTONE_FILE_BYTES)
    except FileNotFoundError:
        missing = [n for n in (MODEL_FILE, RECORD_FILE) if not (workspace / n).exists()]
        raise GradeError(f"no saved capstone model: {' and '.join(missing)} not found in your workspace ({workspace}). "
                         f"Run the section {LAB_SECTION} to its end: it trains nanoGPT's model and saves the best "
                         f"checkpoint there as both files. Then grade again.") from None
    record = deliverables.load_record(record_bytes, RECORD_FILE)
    absent = [k for k in ("config", "chars", "data_sha256") if k not in record]
    if absent:
        raise GradeError(f"{RECORD_FILE} lacks {', '.join(absent)}: save it as the lab's last capstone cell does")
    with _capstone_files():
        config = phase7.config_of(record)
    shapes = phase7.expected_shapes(config)
    params = deliverables.load_npz(model_bytes, MODEL_FILE, {name: len(shape) for name, shape in shapes.items()},
                                   max_members=deliverables.CAPSTONE_NPZ_MEMBERS)
    return record, params


def configuration_of(record: dict, config: dict) -> str:
    """"full" or "reduced", or GradeError: a model that is not the capstone's, or not a FlashAttention GPT."""
    dims = {k: config[k] for k in FULL}
    if dims == FULL:
        kind = "full"
    elif dims == REDUCED:
        kind = "reduced"
    else:
        raise GradeError(f"the saved model has the configuration {dims}; the capstone is nanoGPT's Shakespeare-char "
                         f"model, {FULL} (the reduced configuration {REDUCED} on the emulator only), and no other "
                         f"size is graded: train the configuration of the section {LAB_SECTION}")
    if backend.get_device() == "cuda" and kind != "full":
        raise GradeError(f"the saved model is the reduced configuration {dims}; on a GPU the capstone is nanoGPT's "
                         f"model, {FULL}: run the section {LAB_SECTION} on the GPU")
    attention = record["config"].get("attention", "materialised")
    if attention != "flash":
        raise GradeError(f"{RECORD_FILE}: the model's config says attention {attention!r}; the capstone trains "
                         f"nn.GPT(..., attention=\"flash\") (your FlashAttention, whose config says \"attention\": "
                         f"\"flash\"), not Phase 7's materialised attention: save model.config of the model you trained")
    return kind


# ---------------------------------------------------------------- sampling in float64


def _new_cache(config: dict) -> dict:
    """Keys and values of every layer, (n_layer, 2, n_head, block_size, head dim), and how many positions they hold."""
    h = config["n_head"]
    return {"kv": np.empty((config["n_layer"], 2, h, config["block_size"], config["d_model"] // h)), "length": 0}


def _next_logits_cached(params: dict[str, np.ndarray], config: dict, token: int, cache: dict) -> np.ndarray:
    """The logits after one more token at position cache["length"] (the keys and values of the positions before it
    in `cache`, extended here): Phase 7's forward pass, one row at a time."""
    c, h = config["d_model"], config["n_head"]
    d = c // h
    pos = cache["length"]
    x = params["wte.weight"][token] + params["wpe.weight"][pos]
    for i in range(config["n_layer"]):
        p = lambda name, i=i: params[f"blocks.{i}.{name}"]  # noqa: E731
        qkv = phase7.layer_norm(x, p("ln1.weight"), p("ln1.bias")) @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = (qkv[j * c:(j + 1) * c].reshape(h, d) for j in range(3))
        cache["kv"][i, 0, :, pos], cache["kv"][i, 1, :, pos] = k, v
        keys, values = cache["kv"][i, 0, :, :pos + 1], cache["kv"][i, 1, :, :pos + 1]   # (h, t, d)
        s = np.einsum("hd,htd->ht", q, keys) / math.sqrt(d)
        a = np.exp(s - s.max(axis=-1, keepdims=True))
        a /= a.sum(axis=-1, keepdims=True)
        y = np.einsum("ht,htd->hd", a, values).reshape(c)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = phase7.gelu(phase7.layer_norm(x, p("ln2.weight"), p("ln2.bias")) @ p("fc.weight") + p("fc.bias"))
        x = x + m @ p("proj.weight") + p("proj.bias")
    cache["length"] = pos + 1
    head = params["wte.weight"].T if config["tie_weights"] else params["lm_head.weight"]
    return phase7.layer_norm(x, params["ln_f.weight"], params["ln_f.bias"]) @ head + params["lm_head.bias"]


def sample(params: dict[str, np.ndarray], config: dict, chars: list[str], n: int = SAMPLE_CHARS) -> str:
    """`n` characters after SAMPLE_PROMPT drawn from softmax(logits) (temperature 1, seed SAMPLE_SEED, Phase 7's
    inverse-CDF draw), one position at a time with a key/value cache. When the context fills block_size, its last
    half is kept and fed again into a fresh cache (positions from 0), then the cache grows again: the model always
    sees between half and all of its context. (nanoGPT recomputes the last block_size characters for every new
    one; for the full model that is about 80 times the work here, minutes of float64 on the host.)"""
    rng = np.random.default_rng(SAMPLE_SEED)
    ids = [chars.index(ch) for ch in SAMPLE_PROMPT]
    start, fed = 0, 0  # the context is ids[start:]; the cache holds its first `fed`
    cache = _new_cache(config)
    for _ in range(n):
        if len(ids) - start > config["block_size"]:
            start, fed = len(ids) - config["block_size"] // 2, 0
            cache = _new_cache(config)
        while start + fed < len(ids):
            z = _next_logits_cached(params, config, ids[start + fed], cache)
            fed += 1
        p = np.exp(z - z.max())
        cdf = np.cumsum(p / p.sum())
        ids.append(int(min(np.searchsorted(cdf, rng.random()), len(chars) - 1)))
    return "".join(chars[i] for i in ids[len(SAMPLE_PROMPT):])


# ---------------------------------------------------------------- the check


@pytest.mark.timeout(900)  # the full model in float64 on the host: 256 windows of 256 characters, then 500 draws
@pytest.mark.hint(f"run the section {LAB_SECTION} to its end (it trains nanoGPT's model with your FlashAttention and "
                  f"saves the best checkpoint); the lab's recipe comes under the bar")
def test_capstone_validation_loss(record_property):
    record, params = load_saved_model()
    with _capstone_files():
        config = phase7.config_of(record)
        kind = configuration_of(record, config)
        val, chars = phase7.validation_ids(record)
        if config["vocab_size"] != len(chars):
            raise GradeError(f"{RECORD_FILE}: vocab_size {config['vocab_size']}, but Tiny Shakespeare has "
                             f"{len(chars)} characters")
        phase7.check_parameters(config, params)
    loss = phase7.validation_loss(params, config, val)
    key = "phase8b.capstone_val_loss" if kind == "full" else "phase8b.capstone_val_loss_reduced"
    bar = checks.threshold(key)
    record_property("perf", {"name": "validation loss (float64, the grader's own forward pass)", "unit": "nats",
                             "measured": loss, "threshold": bar, "threshold_key": key, "direction": "at most",
                             "configuration": kind})
    if not math.isfinite(loss) or loss > bar:
        raise GradeError(f"the validation loss of the saved model is {loss:.4f} nats, computed by the grader in "
                         f"float64 on {phase7.EVAL_WINDOWS} windows of the validation text; at most {bar} is needed "
                         f"({key} in grader/thresholds.toml). The loss {RECORD_FILE} reports is not used.")
    text = sample(params, config, chars)
    record_property("note", f"the saved capstone ({kind} configuration {config}): validation loss {loss:.4f} (at most "
                            f"{bar}); {SAMPLE_CHARS} characters sampled by the grader in float64 (seed {SAMPLE_SEED}, "
                            f"temperature 1):\n{text}")
