"""``:reference`` against the authors' published PyTorch code, number for number.

Loads the model classes of a checkout of github vladyorsh/lra_efficient_transformers (their
``lra/layers.py`` and ``lra/models.py``; the Lightning/TensorFlow training stack they import is
replaced by inert stand-ins, nothing of it runs), builds their Luna and ConvLuna models with the
settings their ``lra_run.py`` passes for the paper, copies every weight into the parameters of
our ``configs/<task>_<luna|convluna>.py:reference`` model, and compares on one padded batch in
eval mode: the logits, and the gradient of a cross-entropy loss with respect to every
parameter. Parameter counts are compared too (their trainable parameters; their unpacking
attention's fixed ``log_temp`` buffer-parameter is reported apart).

Their code runs without padding masks (``--mask_inputs False``), pads every input to the full
``seq_len`` and embeds padding as a fixed zero; ``:reference`` does the same, so the batch here
is padded to the config's full length.

torch is needed (not a dependency of lra): e.g. ``python -m venv --system-site-packages ENV &&
ENV/bin/pip install torch einops``, then ``ENV/bin/python scripts/check_published_code.py
--authors-repo PATH``. Their code is loaded and their models built in :mod:`lra_lab.reference.authors_models`;
the weight mapping (ours, written from their module layout) is :mod:`lra_lab.reference.weight_map`.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any, cast

import numpy as np

from lra_lab.reference.authors_models import (
    AUTHORS_REPO,
    CASES,
    Case,
    attention_options,
    authors_commit,
    build_authors_model,
    load_authors_models,
)
from lra_lab.reference.weight_map import weight_map

REPO_ROOT = Path(__file__).resolve().parents[2]

# ----------------------------------------------------------------------------- the comparison


def _batch(config: Any, vocab_size: int, num_classes: int, batch: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens padded to the full length (lengths from a quarter to all of it) and labels."""
    rng = np.random.default_rng(seed)
    n = config.data.max_len
    shape = (batch, 2, n) if config.task == "matching" else (batch, n)
    tokens = rng.integers(1, vocab_size, size=shape).astype(np.int32)
    lengths = rng.integers(n // 4, n + 1, size=shape[:-1])
    tokens[np.arange(n) >= lengths[..., None]] = 0
    return tokens, rng.integers(0, num_classes, size=batch).astype(np.int32)


# Their position table starts at zero, so every padding position embeds to exactly zero and has
# the same key: max-pool windows over padding then hold exact ties, where PyTorch's MaxPool gives
# the gradient to one element and JAX's maximum splits it evenly (the same sum, another
# distribution over the tied positions' position rows). The comparison draws their positions from
# N(0, 0.02) before copying, which leaves no ties; the tie rule is the one difference it then hides.
TIES = "their positions drawn N(0, 0.02) before copying (zero positions make max-pool ties over padding)"


def _flip_insensitive_diff(ours_NxD: np.ndarray, theirs_NxD: np.ndarray, kernel: int) -> float:
    """Max |difference| of a position table's gradient, insensitive to max-pool argmax flips.

    Where two values of one K-window are within float32 rounding of each other, the frameworks
    may pick different maxima, moving a gradient between two positions less than K apart. Sums
    over blocks of 2K positions cancel such a move; blocks at offsets 0 and K between them hold
    every such pair whole, so each position takes the smaller of its two blocks' differences.
    """
    d = ours_NxD - theirs_NxD
    n, block = d.shape[0], 2 * kernel
    per_position = []
    for offset in (0, kernel):
        padded = np.concatenate(
            [np.zeros((offset,) + d.shape[1:], d.dtype), d, np.zeros(((-(n + offset)) % block,) + d.shape[1:], d.dtype)]
        )
        sums = np.abs(padded.reshape(-1, block, *d.shape[1:]).sum(1)).max(-1)
        per_position.append(np.repeat(sums, block)[offset : offset + n])
    return float(np.max(np.minimum(*per_position)))


def compare(
    case: Case, models: types.ModuleType, batch: int = 2, seed: int = 0, override: tuple[str, Any] | None = None
) -> dict[str, Any]:
    """Max |logit difference| and max |gradient difference| of ``case``; parameter counts.
    ``override``: (dotted config field, value) set after ``:reference`` (an ablation)."""
    import flax
    import jax
    import jax.numpy as jnp
    import optax
    import torch

    from lra.defaults import load_config_file
    from lra.model import build_model

    config = load_config_file(REPO_ROOT / "configs" / f"{case.config}.py").get_config("reference")
    if override is not None:
        *parents, leaf = override[0].split(".")
        node = config
        for part in parents:
            node = node[part]
        node[leaf] = override[1]
    vocab_size, num_classes = 32, 2 if case.task == "matching" else 10
    torch.manual_seed(seed)
    theirs = build_authors_model(models, case, config, vocab_size, num_classes).eval()
    with torch.no_grad():  # see TIES: any weights compare the two functions; these avoid exact ties
        theirs.embed_layer.pos_embeds.normal_(0.0, 0.02)
    ours = build_model(config.model, vocab_size, num_classes, dual=case.task == "matching")
    tokens, labels = _batch(config, vocab_size, num_classes, batch, seed)

    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    mapping = weight_map(case, config)
    shapes = flax.traverse_util.flatten_dict(jax.eval_shape(lambda: ours.init(jax.random.key(0), tokens))["params"])
    unmapped = sorted("/".join(p) for p in shapes if p not in mapping)
    extra = sorted("/".join(p) for p in mapping if p not in shapes)
    if unmapped or extra:
        raise RuntimeError(f"{case.name}: parameters without a counterpart: ours {unmapped}, mapped but absent {extra}")
    flat = {p: jnp.asarray(fn(state[name]), jnp.float32) for p, (name, fn) in mapping.items()}
    for p, a in flat.items():
        if a.shape != shapes[p].shape:
            raise RuntimeError(f"{case.name}: {'/'.join(p)} is {shapes[p].shape}, theirs maps to {a.shape}")
    params = flax.traverse_util.unflatten_dict(flat)

    def loss(p: Any) -> tuple[jax.Array, jax.Array]:
        # flax types apply as output-or-(output, mutated collections); with no mutable= it is the output
        logits = cast(jax.Array, ours.apply({"params": p}, tokens))
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), logits

    (our_loss, our_logits), our_grads = jax.value_and_grad(loss, has_aux=True)(params)

    torch_tokens = torch.from_numpy(tokens.astype(np.int64))
    inputs = (torch_tokens[:, 0], torch_tokens[:, 1]) if case.task == "matching" else torch_tokens
    their_logits, _, _ = theirs(inputs, None)  # --mask_inputs False: no masks
    their_loss = torch.nn.functional.cross_entropy(their_logits, torch.from_numpy(labels.astype(np.int64)))
    theirs.zero_grad()
    their_loss.backward()
    their_grads = {
        n: (p.grad.numpy() if p.grad is not None else np.zeros(p.shape, np.float32))
        for n, p in theirs.named_parameters(remove_duplicate=False)
    }
    flat_grads = flax.traverse_util.flatten_dict(our_grads)
    grad_diffs, grad_rel = {}, {}
    pairs = {"/".join(p): (np.asarray(flat_grads[p]), fn(their_grads[name])) for p, (name, fn) in mapping.items()}
    # A parameter whose true gradient is 0 (a key bias: softmax ignores it) has float noise on both
    # sides; it is measured against a thousandth of the model's largest gradient instead.
    floor = 1e-3 * max(float(np.max(np.abs(theirs_g))) for _, theirs_g in pairs.values())
    options = attention_options(config)
    for key, (ours_g, theirs_g) in pairs.items():
        grad_diffs[key] = float(np.max(np.abs(ours_g - theirs_g)))
        diff = grad_diffs[key]
        if key == "encoder/pos_embedding" and options.filter == "maxpool":
            diff = _flip_insensitive_diff(ours_g, theirs_g, options.kernel_size)
        grad_rel[key] = diff / max(float(np.max(np.abs(theirs_g))), floor)
    worst = max(grad_diffs, key=lambda key: grad_diffs[key])
    worst_rel = max(grad_rel, key=lambda key: grad_rel[key])

    trainable = sum(p.numel() for p in theirs.parameters() if p.requires_grad)
    fixed = sum(p.numel() for p in theirs.parameters() if not p.requires_grad)
    our_count = sum(int(np.prod(s.shape)) for s in shapes.values())
    return {
        "case": case.name,
        "their_class": type(theirs).__name__,
        "batch": list(tokens.shape),
        "max_abs_logit_diff": float(np.max(np.abs(np.asarray(our_logits) - their_logits.detach().numpy()))),
        "max_abs_logit": float(np.max(np.abs(their_logits.detach().numpy()))),
        "loss": [float(our_loss), float(their_loss.detach())],
        "max_abs_grad_diff": grad_diffs[worst],
        "worst_grad": worst,
        "max_rel_grad_diff": grad_rel[worst_rel],
        "worst_rel_grad": worst_rel,
        "params_ours": our_count,
        "params_theirs_trainable": trainable,
        "params_theirs_fixed": fixed,
    }


# Each `:reference` switch that keeps the parameters' shapes, set back to this suite's default: the
# distance from their logits measures what the switch is worth (the divergence table's claim).
ABLATIONS: tuple[tuple[str, Any, str], ...] = (
    ("model.gelu_approximate", True, "tanh GELU instead of exact"),
    ("model.zero_padding_embedding", False, "padding embeds to its (here zero) learned row, which then trains"),
    ("model.mask_padding", True, "padding masked"),
    ("model.attention_kwargs.scale_unpacking", True, "ConvLuna unpacking logits x d^-1/2"),
)


def ablations(models: types.ModuleType) -> list[dict[str, Any]]:
    """ListOps Luna-16 and ConvLuna-16 with one switch at a time back at our default."""
    rows = []
    for case in CASES[:2]:
        for field, value, what in ABLATIONS:
            if field.endswith("scale_unpacking") and case.family != "convluna":
                continue
            r = compare(case, models, override=(field, value))
            rows.append(
                {
                    "case": case.name,
                    "field": field,
                    "value": value,
                    "what": what,
                    "max_abs_logit_diff": r["max_abs_logit_diff"],
                    "max_rel_grad_diff": r["max_rel_grad_diff"],
                }
            )
            print(f"  {case.name} with {field}={value}: max |logit diff| {r['max_abs_logit_diff']:.2e}", flush=True)
    return rows


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "# `:reference` against the authors' published code",
        "",
        f"Their code: {AUTHORS_REPO} at `{report['authors_commit']}`; ours: `{report['git_commit']}`. "
        f"torch {report['torch']}, jax {report['jax']}, float32, eval mode, one batch padded to the full length, "
        f"no masks (their `--mask_inputs False`); {TIES}. Gradients: of the mean cross-entropy, every parameter; "
        f"relative = max |difference| / max |their gradient| of that parameter (at least a thousandth of the "
        f"model's largest gradient: key biases have a zero gradient and float noise); for max-pool models the "
        f"position table's gradient is compared in sums over 2K positions, which cancel argmax flips at "
        f"near-ties (two values of a window within float32 rounding). Verdict: logits within "
        f"{report['tolerance']:g}, relative gradient differences within {report['grad_tolerance']:g}, and the same "
        f"number of trainable parameters.",
        "",
        "| config | their class | batch | max \\|logit diff\\| | max \\|grad diff\\| (where) | max relative grad diff "
        "(where) | params ours | params theirs (trainable + fixed) | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["cases"]:
        lines.append(
            f"| `{r['case']}` | `{r['their_class']}` | {'x'.join(map(str, r['batch']))} | "
            f"{r['max_abs_logit_diff']:.2e} | "
            f"{r['max_abs_grad_diff']:.2e} (`{r['worst_grad']}`) | {r['max_rel_grad_diff']:.2e} "
            f"(`{r['worst_rel_grad']}`) | "
            f"{r['params_ours']:,} | "
            f"{r['params_theirs_trainable']:,} + {r['params_theirs_fixed']} | {'ok' if r['ok'] else 'FAIL'} |"
        )
    if report.get("ablations"):
        lines += [
            "",
            "## One `:reference` switch back at this suite's default",
            "",
            "Each of these must move the logits away from theirs (the check can fail, and the "
            "divergence table's rows matter):",
            "",
            "| config | field = value | what | max \\|logit diff\\| | max relative grad diff |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| `{a['case']}` | `{a['field']}={a['value']}` | {a['what']} | {a['max_abs_logit_diff']:.2e} | "
            f"{a['max_rel_grad_diff']:.2e} |"
            for a in report["ablations"]
        ]
    lines += ["", f"Command: `{report['command']}`", ""]
    return "\n".join(lines)


def run(
    repo: Path, out: Path | None, tolerance: float, grad_tolerance: float, command: str, with_ablations: bool = False
) -> int:
    """Every case; writes OUT.json and OUT.md; 0 if all agree (logits within ``tolerance``,
    relative gradient differences within ``grad_tolerance``, equal parameter counts), else 1."""
    import jax
    import torch

    from lra.training.run_files import git_commit

    jax.config.update("jax_default_matmul_precision", "highest")
    torch.set_grad_enabled(True)
    models = load_authors_models(repo)
    rows = []
    for case in CASES:
        print(f"{case.name}: building both models, comparing ...", flush=True)
        r = compare(case, models)
        r["ok"] = (
            r["max_abs_logit_diff"] <= tolerance
            and r["max_rel_grad_diff"] <= grad_tolerance
            and r["params_ours"] == r["params_theirs_trainable"]
        )
        print(
            f"  max |logit diff| {r['max_abs_logit_diff']:.2e}, max |grad diff| {r['max_abs_grad_diff']:.2e} "
            f"({r['worst_grad']}), relative {r['max_rel_grad_diff']:.2e} ({r['worst_rel_grad']}), params "
            f"ours {r['params_ours']:,} theirs {r['params_theirs_trainable']:,}"
            f" -> {'ok' if r['ok'] else 'FAIL'}",
            flush=True,
        )
        rows.append(r)
    report = {
        "authors_commit": authors_commit(repo),
        "git_commit": git_commit(),
        "torch": torch.__version__,
        "ablations": ablations(models) if with_ablations else [],
        "jax": jax.__version__,
        "tolerance": tolerance,
        "grad_tolerance": grad_tolerance,
        "command": command,
        "cases": rows,
    }
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(report, indent=1) + "\n")
        out.with_suffix(".md").write_text(markdown(report))
        print(f"wrote {out.with_suffix('.md')} and .json")
    return 0 if all(r["ok"] for r in rows) else 1
