"""The masked-copy task of Vyas et al. (arXiv:2007.04825, Appendix C.2) and its small model: the
tokens, the settings (a frozen dataclass, and its scalar fields as the ConfigDict that
``--config.FIELD=VALUE`` sets) and their checks, batches, the pre-LN encoder and the variant names
(``clustered:15``). Trained and reported by :mod:`lra_lab.experiments.masked_copy`, which re-exports
these names."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lra import attention
from lra.errors import InputError

SEPARATOR, MASK_TOKEN, NUM_SYMBOLS = 0, 11, 10
VOCAB = 12  # separator, symbols 1..10, mask


@dataclasses.dataclass(frozen=True)
class Settings:
    """One experiment: the task size, the model, the training budget and the variants to train.

    ``variants`` entries: ``"softmax"``, ``"clustered:C"`` or ``"improved_clustered:C"``, or with the
    family's options after the colon (``"clustered:clusters=C"``, :func:`parse_variant`).
    """

    seq_len: int = 31  # L; the input length is N = 2 (L + 1)
    mask_fraction: float = 0.2  # of the symbols; at most 0.5 (one copy of each position)
    num_layers: int = 2
    num_heads: int = 4
    head_dim: int = 16
    mlp_dim: int = 128
    batch_size: int = 32
    steps: int = 800
    learning_rate: float = 3e-3
    warmup_steps: int = 50
    eval_batches: int = 8
    log_every: int = 50
    seed: int = 0
    topk: int = 16
    bits: int = 63
    iterations: int = 10
    variants: tuple[str, ...] = ("softmax", "clustered:4", "clustered:16", "improved_clustered:4")
    # Table 1 of the paper, "train with one, evaluate with another": the trained softmax variant is also
    # evaluated with each of these (clustered:C, improved_clustered:C), on the same batches. Left out of
    # the recorded settings when empty, so records from before the option still match.
    swap_eval: tuple[str, ...] = ()


# The settings that name several models, each set by its own flag (``--variants``, ``--swap-eval``), not as
# a config field: a variant's options hold commas (``clustered:clusters=8,topk=4``), a field's list splits on them.
MODEL_LISTS = ("variants", "swap_eval")


def settings_config() -> ml_collections.ConfigDict:
    """The settings ``--config.FIELD=VALUE`` sets (every field but :data:`MODEL_LISTS`) at
    :class:`Settings`' defaults, the one source of them; each field is typed by its default
    (``lra.config_fields.apply_override`` casts the text to it: ``steps=1.5`` is refused)."""
    defaults = Settings()
    fields = (f.name for f in dataclasses.fields(Settings) if f.name not in MODEL_LISTS)
    return ml_collections.ConfigDict({name: getattr(defaults, name) for name in fields}, sort_keys=False)


def settings_from_config(
    config: ml_collections.ConfigDict, variants: tuple[str, ...], swap_eval: tuple[str, ...] = ()
) -> Settings:
    """The frozen settings of ``config`` (:func:`settings_config`, overridden) and the variants to train
    and swap-evaluate, each in its one spelling (:func:`canonical_variant`: ``clustered:clusters=15``
    is recorded as ``clustered:15``, so a call in either spelling resumes the other's runs)."""
    settings = Settings(**config.to_dict(), variants=tuple(variants), swap_eval=tuple(swap_eval))
    return dataclasses.replace(
        settings,
        variants=tuple(canonical_variant(v, settings) for v in settings.variants),
        swap_eval=tuple(canonical_variant(v, settings) for v in settings.swap_eval),
    )


def settings_record(settings: Settings) -> dict[str, Any]:
    """The settings as a record stores them (JSON types; ``swap_eval`` only when used)."""
    record = json.loads(json.dumps(dataclasses.asdict(settings)))
    if not settings.swap_eval:
        del record["swap_eval"]
    return record


MAX_TOKENS = 1 << 16  # 2 (L + 1) tokens per example: beyond this the attention arrays outgrow a laptop


def settings_problem(settings: Settings) -> str | None:
    """Why ``settings`` cannot run (None: they can): checked before anything is compiled or written."""
    positive = (
        "seq_len",
        "num_layers",
        "num_heads",
        "head_dim",
        "mlp_dim",
        "batch_size",
        "steps",
        "eval_batches",
        "log_every",
        "bits",
        "iterations",
        "topk",
    )
    for name in positive:
        value = getattr(settings, name)
        if not isinstance(value, int) or value < 1:
            return f"--config.{name} must be a positive integer, got {value!r}"
    if not 0.0 < settings.mask_fraction <= 0.5:
        return f"--config.mask_fraction must be in (0, 0.5] (one copy of each position), got {settings.mask_fraction}"
    if 2 * (settings.seq_len + 1) > MAX_TOKENS:
        tokens = 2 * (settings.seq_len + 1)
        return f"--config.seq_len={settings.seq_len} gives {tokens:,} tokens per example; at most {MAX_TOKENS:,}"
    if not settings.learning_rate > 0 or settings.warmup_steps < 0:
        return "--config.learning_rate must be > 0 and --config.warmup_steps >= 0"
    if not settings.variants:
        return "--variants: name at least one"
    labels = []
    for spec in settings.variants:
        try:
            labels.append(parse_variant(spec, settings)[0])
        except InputError as e:
            return f"--variants {e}"
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        return f"--variants names {', '.join(twice)} twice (one spelling each: clustered:C is clustered:clusters=C)"
    if settings.swap_eval:
        if "softmax" not in settings.variants:
            return "--swap-eval evaluates the trained softmax variant: add softmax to --variants"
        for spec in settings.swap_eval:
            if spec.partition(":")[0] == "softmax":
                return f"--swap-eval {spec}: name clustered:C or improved_clustered:C"
            try:
                parse_variant(spec, settings)
            except ValueError as e:
                return f"--swap-eval {e}"
    return None


def make_batch(settings: Settings, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(inputs, targets, masked) int/bool arrays of shape batch x N."""
    b, length = settings.batch_size, settings.seq_len
    w = rng.integers(1, NUM_SYMBOLS + 1, size=(b, length))
    sep = np.full((b, 1), SEPARATOR)
    target = np.concatenate([sep, w, sep, w], axis=1)
    hide = rng.random((b, length)) < 2 * settings.mask_fraction
    second = rng.random((b, length)) < 0.5
    zero = np.zeros((b, 1), bool)
    masked = np.concatenate([zero, hide & ~second, zero, hide & second], axis=1)
    return np.where(masked, MASK_TOKEN, target), target, masked


def sinusoids(length: int, width: int) -> jax.Array:
    """Fixed sinusoidal positions (length x width): a shift by L+1 is a linear map of them."""
    freqs = 1.0 / (10_000 ** (jnp.arange(0, width, 2) / width))
    angles = jnp.arange(length)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.sin(angles), jnp.cos(angles)], axis=-1)


class CopyModel(nn.Module):
    """Pre-LN encoder: token embeddings + fixed sinusoidal positions, attention/MLP blocks."""

    attention_cls: type[attention.Attention]
    attention_kwargs: dict[str, Any]
    num_layers: int
    num_heads: int
    head_dim: int
    mlp_dim: int

    @nn.compact
    def __call__(self, tokens_BxN: jax.Array) -> jax.Array:
        width = self.num_heads * self.head_dim
        mask_BxN = jnp.ones(tokens_BxN.shape, bool)
        x = nn.Embed(VOCAB, width)(tokens_BxN) + sinusoids(tokens_BxN.shape[1], width)
        for _ in range(self.num_layers):
            attn = self.attention_cls(num_heads=self.num_heads, qkv_dim=width, **self.attention_kwargs)
            x = x + attn(nn.LayerNorm()(x), mask_BxN)[0]
            h = nn.Dense(self.mlp_dim)(nn.LayerNorm()(x))
            x = x + nn.Dense(width)(nn.gelu(h))
        return nn.Dense(VOCAB)(nn.LayerNorm()(x))


VARIANT_FAMILIES = ("softmax", "clustered", "improved_clustered")


def parse_variant(spec: str, settings: Settings) -> tuple[str, str, dict[str, Any]]:
    """``"clustered:15"`` -> (label, registry name, attention kwargs); labels follow the paper.

    After the colon: the number of clusters C (``clustered:15``, the paper's short name) or the
    family's options as a config's short form takes them (``clustered:clusters=15``,
    ``clustered:num_clusters=15``: lra.config_fields.parse_options, typed by the family's fields),
    one variant under either spelling. Bits, iterations and top-k come from ``settings`` unless
    given; an option given at another value than the settings' (or the family's default) joins
    the label, ``i-clustered-100 (topk=8)``."""
    name, kwargs, changed = _variant(spec, settings)
    label = "full" if name == "softmax" else f"{'i-' if name == 'improved_clustered' else ''}clustered-"
    label += "" if name == "softmax" else str(kwargs["num_clusters"])
    return label + (f" ({', '.join(f'{k}={v}' for k, v in changed.items())})" if changed else ""), name, kwargs


def canonical_variant(spec: str, settings: Settings) -> str:
    """The one spelling of ``spec``'s variant that a record and its resume use: ``clustered:15`` for
    ``clustered:clusters=15`` too, so a call in either spelling finds the other's finished runs."""
    name, kwargs, changed = _variant(spec, settings)
    short = name if name == "softmax" else f"{name}:{kwargs['num_clusters']}"
    if not changed:
        return short
    clusters = [] if name == "softmax" else [f"num_clusters={kwargs['num_clusters']}"]
    return f"{name}:{','.join([*clusters, *(f'{k}={v}' for k, v in changed.items())])}"


def _variant(spec: str, settings: Settings) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(registry name, attention kwargs, the options given at other values than the defaults)."""
    from lra.config_fields import parse_options

    name, _, text = spec.partition(":")
    if name not in VARIANT_FAMILIES:
        raise InputError(f"variant {spec!r}: use softmax, clustered:C or improved_clustered:C")
    clustered = name != "softmax"
    try:
        options = parse_options(name, f"num_clusters={text}" if clustered and text.strip().isdigit() else text, spec)
    except InputError as e:
        raise InputError(f"variant {e}" + (f"; or {name}:C" if clustered and "=" not in text else "")) from None
    kwargs: dict[str, Any] = {}
    if clustered:
        if "num_clusters" not in options:
            raise InputError(f"variant {spec!r}: name the clusters, {name}:C or {name}:clusters=C")
        kwargs = dict(num_clusters=options["num_clusters"], bits=settings.bits, iterations=settings.iterations)
        if name == "improved_clustered":
            kwargs["topk"] = settings.topk
    defaults = {**attention.option_defaults(name), **kwargs}
    changed = {k: v for k, v in options.items() if k != "num_clusters" and (k not in defaults or defaults[k] != v)}
    return name, {**kwargs, **options}, changed
