"""Graded test of Phase 7's deliverable: the Tiny Shakespeare GPT saved by the lab.

The grader trusts no number the lab printed. It loads ``shakespeare_model.npz`` and ``shakespeare_model.json``
from the workspace, rebuilds the validation split of Tiny Shakespeare itself (the file's SHA-256 must be the
course's), and computes the validation loss with its own forward pass in float64 NumPy, written here from the
model's definition (ARCHITECTURE.md, "Phase 7"), on 256 windows of the validation text spread evenly over it. It
then samples 200 characters from the model with a fixed seed and shows them in the report.

On a GPU the full configuration (the seed's GPT: 2 layers, 4 heads, d_model 64, context 64 or 128) must reach the
bar ``phase7.shakespeare_val_loss``; on the emulator a reduced configuration may be graded against
``phase7.shakespeare_val_loss_reduced``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from grader import checks
from grader.checks import GradeError
from grader.tests.saved_models import load_saved_pair
from minitorch import backend

MODEL_FILE, RECORD_FILE = "shakespeare_model.npz", "shakespeare_model.json"
LAB_SECTION = '"The deliverable: a character-level GPT on Tiny Shakespeare" in labs/phase7_gpt.ipynb'
TRAIN_FRACTION = 0.9
EVAL_WINDOWS = 256
SAMPLE_CHARS, SAMPLE_SEED, SAMPLE_PROMPT = 200, 0, "\n"
FULL = {"d_model": 64, "n_head": 4, "n_layer": 2}  # and block_size 64 or 128
FULL_BLOCK_SIZES = (64, 128)


def load_saved_model() -> tuple[dict, dict[str, np.ndarray]]:
    return load_saved_pair(MODEL_FILE, RECORD_FILE, "Shakespeare model", LAB_SECTION, ("config", "chars", "data_sha256"))


def config_of(record: dict) -> dict[str, int]:
    """The model's configuration; ``tie_weights`` is False for a record written before tying existed."""
    keys = ("vocab_size", "block_size", "d_model", "n_head", "n_layer")
    try:
        config = {k: int(record["config"][k]) for k in keys}
    except (KeyError, TypeError, ValueError):
        raise GradeError(f"{RECORD_FILE}: config must hold {', '.join(keys)} (model.config), got "
                         f"{record.get('config')!r}") from None
    if min(config.values()) < 1 or config["d_model"] % config["n_head"]:
        raise GradeError(f"{RECORD_FILE}: an impossible configuration {config}")
    tied = record["config"].get("tie_weights", False)
    if not isinstance(tied, bool):
        raise GradeError(f"{RECORD_FILE}: config.tie_weights must be true or false (model.config), got {tied!r}")
    config["tie_weights"] = tied  # a bool (an int to Python): the note shows True or False
    return config


def expected_shapes(config: dict[str, int]) -> dict[str, tuple[int, ...]]:
    v, t, c = config["vocab_size"], config["block_size"], config["d_model"]
    shapes = {"wte.weight": (v, c), "wpe.weight": (t, c), "ln_f.weight": (c,), "ln_f.bias": (c,),
              "lm_head.bias": (v,)}
    if not config["tie_weights"]:  # tied: the head multiplies by wte.weight's transpose
        shapes["lm_head.weight"] = (c, v)
    for i in range(config["n_layer"]):
        p = f"blocks.{i}."
        shapes.update({p + "ln1.weight": (c,), p + "ln1.bias": (c,), p + "attn.c_attn.weight": (c, 3 * c),
                       p + "attn.c_attn.bias": (3 * c,), p + "attn.c_proj.weight": (c, c),
                       p + "attn.c_proj.bias": (c,), p + "ln2.weight": (c,), p + "ln2.bias": (c,),
                       p + "fc.weight": (c, 4 * c), p + "fc.bias": (4 * c,), p + "proj.weight": (4 * c, c),
                       p + "proj.bias": (c,)})
    return shapes


def check_parameters(config: dict[str, int], params: dict[str, np.ndarray]) -> None:
    shapes = expected_shapes(config)
    if config["tie_weights"] and "lm_head.weight" in params:
        raise GradeError(f"{MODEL_FILE} holds lm_head.weight, but {RECORD_FILE} says the head is tied to wte.weight "
                         f"(config.tie_weights): which one is the head? Save model.config and the model of one run")
    missing = sorted(set(shapes) - set(params))
    if missing:
        raise GradeError(f"{MODEL_FILE} lacks {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}: save the "
                         f"lab's nn.GPT with model.save(...) (it holds {', '.join(sorted(params)[:5])} ...)")
    for name, shape in shapes.items():
        if params[name].shape != shape:
            raise GradeError(f"{MODEL_FILE}: {name} has shape {params[name].shape}, the configuration {config} "
                             f"needs {shape}")
        if not np.all(np.isfinite(params[name])):
            raise GradeError(f"{MODEL_FILE}: {name} holds non-finite values (training diverged?)")


def validation_ids(record: dict) -> tuple[np.ndarray, list[str]]:
    from minitorch import data

    expected_sha = data.DATASETS["tinyshakespeare"][0].sha256
    if record["data_sha256"] != expected_sha:
        raise GradeError(f"the saved model was trained on another text (sha256 {str(record['data_sha256'])[:12]}…) "
                         f"than Tiny Shakespeare (sha256 {expected_sha[:12]}…): run the deliverable section again")
    try:
        corpus = data.load_tinyshakespeare()  # checks the file's SHA-256
    except data.DataError as exc:
        raise GradeError(f"Tiny Shakespeare is not available to the grader: {exc}") from None
    chars = sorted(set(corpus))
    if list(record["chars"]) != chars:
        raise GradeError(f"{RECORD_FILE}: the vocabulary {''.join(record['chars'])!r} is not the sorted characters of "
                         f"Tiny Shakespeare ({len(chars)} of them)")
    lookup = {ch: i for i, ch in enumerate(chars)}
    ids = np.fromiter((lookup[ch] for ch in corpus), dtype=np.int64, count=len(corpus))
    return ids[int(TRAIN_FRACTION * len(ids)):], chars


# ---------------------------------------------------------------- the grader's own forward pass (float64)


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x: np.ndarray) -> np.ndarray:
    # x * x * x, not x**3: NumPy's float power is ~5x slower, and GELU was half of the full capstone's float64
    # evaluation (Phase 8b: 256 windows of 256 positions through 6 layers)
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * (x * x * x))))


def logits_of(params: dict[str, np.ndarray], config: dict[str, int], ids: np.ndarray) -> np.ndarray:
    """Logits (N, T, vocab) of windows ids (N, T), T <= block_size."""
    n, t = ids.shape
    c, h = config["d_model"], config["n_head"]
    d = c // h
    x = params["wte.weight"][ids] + params["wpe.weight"][:t]
    future = ~np.tril(np.ones((t, t), bool))
    for i in range(config["n_layer"]):
        p = lambda name, i=i: params[f"blocks.{i}.{name}"]  # noqa: E731
        qkv = layer_norm(x, p("ln1.weight"), p("ln1.bias")) @ p("attn.c_attn.weight") + p("attn.c_attn.bias")
        q, k, v = (qkv[..., j * c:(j + 1) * c].reshape(n, t, h, d).transpose(0, 2, 1, 3) for j in range(3))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d)
        s[..., future] = -np.inf
        a = np.exp(s - s.max(axis=-1, keepdims=True))
        a /= a.sum(axis=-1, keepdims=True)
        y = (a @ v).transpose(0, 2, 1, 3).reshape(n, t, c)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        m = gelu(layer_norm(x, p("ln2.weight"), p("ln2.bias")) @ p("fc.weight") + p("fc.bias"))
        x = x + m @ p("proj.weight") + p("proj.bias")
    head = params["wte.weight"].T if config["tie_weights"] else params["lm_head.weight"]
    return layer_norm(x, params["ln_f.weight"], params["ln_f.bias"]) @ head + params["lm_head.bias"]


def validation_loss(params: dict[str, np.ndarray], config: dict[str, int], val: np.ndarray) -> float:
    """The mean cross-entropy over every position of EVAL_WINDOWS windows spread evenly over the validation text."""
    t = config["block_size"]
    starts = np.linspace(0, len(val) - t - 1, EVAL_WINDOWS).round().astype(np.int64)
    offsets = starts[:, None] + np.arange(t)
    x, y = val[offsets], val[offsets + 1]
    total = 0.0
    for lo in range(0, EVAL_WINDOWS, 32):
        z = logits_of(params, config, x[lo:lo + 32])
        z = z - z.max(axis=-1, keepdims=True)
        log_p = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
        total -= float(np.take_along_axis(log_p, y[lo:lo + 32, :, None], axis=-1).sum())
    return total / y.size


def sample(params: dict[str, np.ndarray], config: dict[str, int], chars: list[str]) -> str:
    """SAMPLE_CHARS characters after SAMPLE_PROMPT, drawn from softmax(logits) (temperature 1) with a fixed seed."""
    rng = np.random.default_rng(SAMPLE_SEED)
    ids = [chars.index(ch) for ch in SAMPLE_PROMPT]
    for _ in range(SAMPLE_CHARS):
        z = logits_of(params, config, np.array([ids[-config["block_size"]:]]))[0, -1]
        p = np.exp(z - z.max())
        cdf = np.cumsum(p / p.sum())
        ids.append(int(min(np.searchsorted(cdf, rng.random()), len(chars) - 1)))
    return "".join(chars[i] for i in ids[len(SAMPLE_PROMPT):])


def full_configuration(config: dict) -> bool:
    """Is ``config`` the full deliverable (tied or not)? A GPU must train it: GradeError there otherwise."""
    full = all(config[k] == v for k, v in FULL.items()) and config["block_size"] in FULL_BLOCK_SIZES
    if backend.get_device() == "cuda" and not full:
        raise GradeError(f"the saved model has the configuration {config}; on a GPU the deliverable is the seed's "
                         f"GPT: {FULL} with block_size 64 or 128 (the reduced configuration is for the emulator): "
                         f"run the deliverable section on the GPU")
    return full


def scored_loss(record: dict, config: dict, params: dict[str, np.ndarray],
                record_file: str) -> tuple[float, list[str]]:
    """(the saved model's validation loss by the grader's float64 forward pass, the corpus's characters), once its
    vocabulary and parameter shapes are checked against the record's configuration."""
    val, chars = validation_ids(record)
    if config["vocab_size"] != len(chars):
        raise GradeError(f"{record_file}: vocab_size {config['vocab_size']}, but Tiny Shakespeare has {len(chars)} "
                         f"characters")
    check_parameters(config, params)
    return validation_loss(params, config, val), chars


# ---------------------------------------------------------------- the check


@pytest.mark.hint(f"run the section {LAB_SECTION} to its end (it trains and saves the model); the lab's recipe "
                  f"comes well under the bar")
def test_shakespeare_model_validation_loss(record_property):
    record, params = load_saved_model()
    config = config_of(record)
    full = full_configuration(config)
    loss, chars = scored_loss(record, config, params, RECORD_FILE)
    key = "phase7.shakespeare_val_loss" if full else "phase7.shakespeare_val_loss_reduced"
    bar = checks.threshold(key)
    record_property("perf", {"name": "validation loss (float64, the grader's own forward pass)", "unit": "nats",
                             "measured": loss, "threshold": bar, "threshold_key": key, "direction": "at most",
                             "configuration": "full" if full else "reduced"})
    text = sample(params, config, chars)
    record_property("note", f"the saved model ({'full' if full else 'reduced'} configuration {config}): validation "
                            f"loss {loss:.4f} (at most {bar}); {SAMPLE_CHARS} characters sampled by the grader "
                            f"(seed {SAMPLE_SEED}, temperature 1):\n{text}")
    if not math.isfinite(loss) or loss > bar:
        raise GradeError(f"the validation loss of the saved model is {loss:.4f} nats, computed by the grader in "
                         f"float64 on {EVAL_WINDOWS} windows of the validation text; at most {bar} is needed ({key} "
                         f"in grader/thresholds.toml)")
