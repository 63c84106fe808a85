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
--authors-repo PATH``. The weight mapping below is ours, written from their module layout.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

REPO_ROOT = Path(__file__).resolve().parents[2]
AUTHORS_REPO = "github.com/vladyorsh/lra_efficient_transformers"
# Modules their lra/models.py and lra/utils.py import for training and logging only.
_TRAINING_STACK = (
    "lightning",
    "lightning.pytorch",
    "lightning.pytorch.utilities",
    "lightning.pytorch.utilities.rank_zero",
    "lightning.fabric",
    "lightning.fabric.utilities",
    "lightning.fabric.utilities.rank_zero",
    "torchmetrics",
    "tensorflow_datasets",
    "tensorflow",
    "matplotlib",
    "matplotlib.pyplot",
)


@dataclasses.dataclass(frozen=True)
class Case:
    """One comparison: our config file (with ``:reference``) against their model class."""

    config: str  # configs/<config>.py
    family: str  # luna | convluna
    task: str  # listops | matching

    @property
    def name(self) -> str:
        return f"{self.config}:reference"


CASES = (
    Case("listops_luna", "luna", "listops"),
    Case("listops_convluna", "convluna", "listops"),
    Case("matching_luna", "luna", "matching"),
    Case("matching_convluna", "convluna", "matching"),
)


class _InertMeta(type):
    """Attributes of an inert class are inert classes too (``pl.callbacks.TQDMProgressBar``)."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _InertMeta(name, (), {"__init__": lambda self, *a, **k: None})


class _Inert(types.ModuleType):
    """A stand-in module: every attribute is an inert class (a base class, a decorator target)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return sys.modules.get(f"{self.__name__}.{name}") or _InertMeta(name, (), {"__init__": lambda s, *a, **k: None})


def _importable(top: str) -> bool:
    try:
        return top not in sys.modules and importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def load_authors_models(repo: Path) -> types.ModuleType:
    """Their ``lra/models.py`` (with ``lra/layers.py``), imported as package ``authors_lra``."""
    package = repo / "lra"
    if not (package / "models.py").is_file() or not (package / "layers.py").is_file():
        raise FileNotFoundError(
            f"{repo} is not a checkout of {AUTHORS_REPO}: no lra/models.py and lra/layers.py "
            f"(git clone it, then pass its folder to --authors-repo)"
        )
    for name in _TRAINING_STACK:
        if name not in sys.modules and not _importable(name.split(".")[0]):
            sys.modules[name] = _Inert(name)
    spec = importlib.util.spec_from_file_location(
        "authors_lra", package / "__init__.py", submodule_search_locations=[str(package)]
    )
    if not (package / "__init__.py").exists():  # a namespace-style folder: an empty package
        spec = importlib.util.spec_from_loader("authors_lra", loader=None, is_package=True)
        assert spec is not None  # a name and is_package are all a spec needs
        module = importlib.util.module_from_spec(spec)
        module.__path__ = [str(package)]
    else:
        assert spec is not None  # a .py file path always has a spec
        module = importlib.util.module_from_spec(spec)
    sys.modules["authors_lra"] = module
    if spec.loader is not None:
        spec.loader.exec_module(module)
    return importlib.import_module("authors_lra.models")


def authors_commit(repo: Path) -> str:
    try:
        return subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def build_authors_model(models: types.ModuleType, case: Case, config: Any, vocab_size: int, num_classes: int) -> Any:
    """Their model as ``lra_run.py`` builds it for the paper (``--biases True``, layernorm, learned
    packing temperature, ``--use_mem_repr True`` for ConvLuna, ``--use_cls True``)."""
    m, kw = config.model, attention_options(config)
    args = dict(
        classes=num_classes,
        num_embeddings=vocab_size,
        seq_len=config.data.max_len,
        hidden_dim=m.emb_dim,
        qkv_dim=m.qkv_dim,
        mlp_dim=m.mlp_dim,
        num_heads=m.num_heads,
        num_blocks=m.num_layers,
        internal_dropout_rate=m.dropout_rate,
        output_dropout_rate=0.0,
        affine=True,
        use_cls=True,
        norm_type="layernorm",
        mem_size=kw.memory_size,
    )
    if case.family == "luna":
        cls = models.LunaMatcher if case.task == "matching" else models.LunaClassifier
        return cls(**args)
    cls = models.SimplifiedConvLunaMatcher if case.task == "matching" else models.SimplifiedConvLunaClassifier
    return cls(
        **args,
        kernel=kw.kernel_size,
        stride=kw.stride,
        pool=kw.filter == "maxpool",
        temperature_pack="learn",
        temperature_unpack="learn",
        use_mem_repr=True,
    )


def attention_options(config: Any) -> types.SimpleNamespace:
    """The attention's fields: its class defaults, then the config's kwargs."""
    from lra.defaults import _field_defaults

    return types.SimpleNamespace(**{**_field_defaults(config.model.attention), **dict(config.model.attention_kwargs)})


# ----------------------------------------------------------------------------- the weight mapping

Tensor = Any  # torch.Tensor
Mapping = dict[tuple[str, ...], tuple[str, Callable[[np.ndarray], np.ndarray]]]


def _linear(our: tuple[str, ...], their: str, heads: tuple[int, int] | None = None, to_heads: bool = False) -> Mapping:
    """nn.Linear(in, out) -> Dense / DenseGeneral: weight (out, in) -> kernel (in, out), reshaped to
    (D, H, Dh) for W^Q/W^K/W^V (``to_heads``) or (H, Dh, D) for W^O (``heads`` given)."""

    def kernel(w: np.ndarray) -> np.ndarray:
        k = w.T
        if to_heads:
            return k.reshape(k.shape[0], *heads)
        if heads is not None:
            return k.reshape(*heads, k.shape[1])
        return k

    def bias(b: np.ndarray) -> np.ndarray:
        return b.reshape(heads) if to_heads else b

    return {our + ("kernel",): (f"{their}.weight", kernel), our + ("bias",): (f"{their}.bias", bias)}


def _norm(our: tuple[str, ...], their: str) -> Mapping:
    same = lambda a: a  # noqa: E731
    return {our + ("scale",): (f"{their}.weight", same), our + ("bias",): (f"{their}.bias", same)}


def weight_map(case: Case, config: Any) -> Mapping:
    """Our parameter path -> (their state_dict name, how to turn their array into ours)."""
    m = config.model
    heads = (m.num_heads, m.qkv_dim // m.num_heads)
    same = lambda a: a  # noqa: E731
    enc = ("encoder",)
    out: Mapping = {
        enc + ("embed", "embedding"): ("embed_layer.embedding.weight", same),
        enc + ("pos_embedding",): ("embed_layer.pos_embeds", lambda a: a[0]),
        enc + ("memory",): ("mem", lambda a: a[0]),
    }
    if m.pooling == "cls":
        out[enc + ("cls",)] = ("embed_layer.cls", lambda a: a.reshape(-1))
    for i in range(m.num_layers):
        ours, theirs = enc + (f"block_{i}",), f"encoder.blocks.{i}"
        out.update(_norm(ours + ("attention_norm",), f"{theirs}.norm_input"))
        out.update(_norm(ours + ("mlp_norm",), f"{theirs}.norm_inter"))
        out.update(_norm(ours + ("memory_norm",), f"{theirs}.norm_mem"))
        out.update(_linear(ours + ("mlp", "Dense_0"), f"{theirs}.ffn.0"))
        out.update(_linear(ours + ("mlp", "Dense_1"), f"{theirs}.ffn.3"))
        attn = ours + ("attention",)
        projections = ("q", "k", "v") if case.family == "luna" else ("q", "k")  # ConvLuna: W^V = I
        for letter, name in zip(projections, ("query", "key", "value"), strict=False):
            out.update(_linear(attn + (name,), f"{theirs}.attention.{letter}", heads, to_heads=True))
        out.update(_linear(attn + ("out",), f"{theirs}.attention.lin", heads))
        if case.family == "convluna":
            out[attn + ("log_temperature",)] = (f"{theirs}.attention.log_temp", lambda a: a.reshape(()))
            if attention_options(config).filter == "conv":  # Conv2d(H, H, (K, 1), groups=H): (H, 1, K, 1)
                out[attn + ("filter_kernel",)] = (f"{theirs}.attention.kernel.weight", lambda a: a[:, 0, :, 0].T)
    if config.task == "matching":  # DualClassifier: two GELU layers, no norm
        out.update(_linear(("head_hidden",), "classifier.ffn.0"))
        out.update(_linear(("head_hidden2",), "classifier.ffn.2"))
    else:  # TClassifier: LayerNorm, pool, one GELU layer
        out.update(_norm(enc + ("pool_norm",), "classifier.norm"))
        out.update(_linear(("head_hidden",), "classifier.ffn.0"))
    out.update(_linear(("logits",), "classifier.output"))
    return out


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
