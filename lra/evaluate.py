"""Evaluate a finished run's best checkpoint on test, optionally with another attention.

    python -m lra.evaluate --workdir runs/listops_transformer_cpu/seed0
    python -m lra.evaluate --workdir W --attention clustered --config.model.attention_kwargs.clusters=16
    python -m lra.evaluate --workdir W --config.max_eval_batches=4

Families with softmax's parameter tree (softmax, clustered, improved_clustered, dispersed, linear) can evaluate each
other's weights. Each evaluation is printed and appended to ``W/evaluations.jsonl``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import jax
import ml_collections

from lra.attention.trees import parameter_tree, swap_groups, tree_difference
from lra.config_args import FAMILY_PREFIX, split_config_args
from lra.data import load_task
from lra.defaults import apply_override, parse_option
from lra.errors import EXIT_INVALID, InputError, describe, exit_code
from lra.model import build_model
from lra.training import hosts
from lra.training.checkpoints import Checkpoints, CorruptCheckpointError
from lra.training.checks import validate_config
from lra.training.loop import evaluate_split
from lra.training.run_files import RunFileError, append_jsonl, load_run_config
from lra.training.step import make_steps


def error_line(error: BaseException) -> tuple[int, str]:
    """(exit code, one ``error:`` line) of a failure to read a run (lra.errors); TypeError for a bug."""
    if isinstance(error, FileNotFoundError):
        return EXIT_INVALID, f"error: {error}"
    code, line = exit_code(error), f"error: {describe(error)}"
    if isinstance(error, CorruptCheckpointError):
        line += (
            ". Nothing was changed; a best checkpoint cannot be rebuilt: restore it from a copy, or retrain "
            "the run (its lra.train command with --start_over)"
        )
    return code, line


def fail(error: BaseException) -> NoReturn:
    """Print :func:`error_line` and exit with its code (a bug keeps its traceback)."""
    try:
        code, line = error_line(error)
    except TypeError:
        raise error from None
    print(line, file=sys.stderr)
    sys.exit(code)


def parse_options(attention: str, tokens: list[str]) -> dict[str, Any]:
    """``["clusters=16", "topk=8"]`` -> ``{"num_clusters": 16, "topk": 8}``, typed by the family."""
    out = {}
    for token in filter(None, (t.strip() for t in tokens)):
        if "=" not in token:
            raise InputError(f"a family option is key=value, got {token!r}")
        field, value = parse_option(attention, token)
        out[field] = value
    return out


def check_swap(workdir: Path, model: ml_collections.ConfigDict, attention: str, options: dict[str, Any]) -> None:
    """Refuse, before anything else, a family whose parameter tree differs (a later error would point elsewhere)."""
    dims = _tree_dims(model)
    try:
        target = parameter_tree(attention, options, **dims)
    except (TypeError, ValueError):
        return
    trained = parameter_tree(model.attention, dict(model.attention_kwargs), **dims)
    if trained == target:
        return
    raise InputError(
        f"the checkpoint in {workdir} was trained with {model.attention!r} and cannot be evaluated with "
        f"{attention!r}: their parameter trees differ ({tree_difference(trained, target, model.attention, attention)})."
        f" {_who_can_swap(model)}"
    )


def _tree_dims(model: ml_collections.ConfigDict) -> dict[str, int]:
    """The sizes a parameter tree depends on, as lra.attention.trees takes them."""
    return {"num_heads": model.num_heads, "qkv_dim": model.qkv_dim, "features": model.emb_dim}


def _who_can_swap(model: ml_collections.ConfigDict) -> str:
    groups = swap_groups(**_tree_dims(model))
    shared = "; ".join(", ".join(g) for g in groups if len(g) > 1) or "none"
    alone = ", ".join(g[0] for g in groups if len(g) == 1)
    return f"Families that share a tree and can swap: {shared}" + (
        f"; {alone} each have a tree of their own" if alone else ""
    )


def evaluation_config(
    workdir: Path,
    config: ml_collections.ConfigDict,
    attention: str | None = None,
    options: dict[str, Any] | None = None,
) -> ml_collections.ConfigDict:
    """``config`` with the swap applied, checked before any data is read (scripts/swap_eval.py checks all first)."""
    config = ml_collections.ConfigDict(config.to_dict())
    if attention is not None:
        check_swap(workdir, config.model, attention, options or {})
        config.model.attention = attention
        config.model.attention_kwargs = ml_collections.ConfigDict(options or {})
    elif options:
        config.model.attention_kwargs.update(options)
    validate_config(config, num_devices=jax.device_count())
    return config


def evaluate_run(
    workdir: Path,
    config: ml_collections.ConfigDict,
    attention: str | None = None,
    options: dict[str, Any] | None = None,
    split: str = "test",
) -> dict[str, Any]:
    """Accuracy of ``workdir``'s best checkpoint on ``split`` under ``config`` (+ attention swap)."""
    trained_with = config.model.attention
    config = evaluation_config(workdir, config, attention, options)
    data = load_task(config)
    model = build_model(config.model, data.vocab_size, data.num_classes, data.dual)
    mesh = hosts.data_mesh()
    sample = jax.numpy.zeros((1,) + data.train.inputs.shape[1:], jax.numpy.int32)
    params = jax.jit(lambda: model.init(jax.random.key(0), sample)["params"], out_shardings=hosts.replicated(mesh))()

    checkpoints = Checkpoints(workdir)
    try:
        try:
            best = checkpoints.restore_best({"params": params, "step": jax.numpy.zeros((), jax.numpy.int32)})
        except (ValueError, KeyError):
            raise InputError(
                f"the checkpoint in {workdir} (trained with {trained_with!r}) does not fit attention "
                f"{config.model.attention!r}: their parameter trees differ. {_who_can_swap(config.model)}"
            ) from None
    finally:
        checkpoints.close()
    if best is None:
        raise FileNotFoundError(f"no best checkpoint in {workdir}/checkpoints/best: has the run evaluated yet?")
    _, eval_step = make_steps(model, None, config, mesh, (int(config.seed),))  # one seed's run: its seed's keys
    params_S = jax.tree.map(lambda x: x[None], best["params"])  # the steps carry a seed axis: one seed
    split_data = data.splits()[split]
    metrics = evaluate_split(eval_step, params_S, split_data, config, hosts.batch_sharded(mesh), examples=True)[0]
    return {
        "trained_with": trained_with,
        "attention": config.model.attention,
        "attention_kwargs": config.model.attention_kwargs.to_dict(),
        "split": split,
        "step": int(best["step"]),
        "max_eval_batches": int(config.max_eval_batches),
        "split_examples": int(len(split_data.labels)),
        **metrics,
    }


def main(
    argv: list[str],
    config: ml_collections.ConfigDict,
    family_options: list[str],
    overrides: dict[str, str] | None = None,
) -> None:
    """Evaluate, print (so a read-only run still shows it), then append the row with its overrides and examples."""
    from absl import flags, logging

    logging.set_verbosity(logging.WARNING)
    f = flags.FLAGS
    workdir = Path(f.workdir)
    try:
        options = parse_options(f.attention or config.model.attention, [*f.options.split(","), *family_options])
        result = evaluate_run(workdir, config, f.attention, options, f.split)
    except (ValueError, RuntimeError, OSError) as e:  # a damaged checkpoint, data, a wrong option
        fail(e)
    result["overrides"] = dict(overrides or {})
    kwargs = ",".join(f"{k}={v}" for k, v in result["attention_kwargs"].items())
    part = (
        ""
        if result["examples"] >= result["split_examples"]
        else (
            f", on {result['examples']} of its {result['split_examples']} examples (max_eval_batches="
            f"{result['max_eval_batches']})"
        )
    )
    print(
        f"{result['split']} accuracy {result['accuracy']:.4f} (loss {result['loss']:.4f}) of the step-"
        f"{result['step']} checkpoint trained with {result['trained_with']}, evaluated with "
        f"{result['attention']}{'(' + kwargs + ')' if kwargs else ''}{part}",
        flush=True,
    )
    try:
        append_jsonl(workdir / "evaluations.jsonl", result)
    except OSError as e:  # a read-only run, a full disk: the accuracy above stands, unrecorded
        fail(e)


FLAG_HELP = (  # (flag, one line): for absl, and for --help, which needs no run
    ("workdir", "a finished run's directory (required; its config.json gives the model and the data)"),
    ("attention", "evaluate with this attention instead of the run's (one with the same parameter tree)"),
    ("split", "the split to evaluate: test (default) or validation"),
    ("config.FIELD", "override a field of the run's config.json, e.g. --config.max_eval_batches=4"),
    (
        "config.model.attention_kwargs.KEY",
        "an option of the evaluated attention (aliases allowed), e.g. ...attention_kwargs.clusters=16",
    ),
    ("options", "old spelling of the family options: key=value,..., e.g. clusters=16,topk=8"),
)
HELP_FLAGS = ("-h", "--help", "--helpshort", "--helpfull")


def usage() -> str:
    """The docstring's commands and every flag with its one-line description."""
    width = max(len(name) for name, _ in FLAG_HELP) + 4
    lines = [__doc__.strip(), "", "flags:"]
    lines += [f"  --{name:<{width}}{text}" for name, text in FLAG_HELP]
    return "\n".join(lines) + "\n"


def cli(argv: list[str]) -> None:
    """``python -m lra.evaluate``: --help needs no run; else --workdir's config is read before the flags."""
    if any(a in HELP_FLAGS for a in argv[1:]):
        print(usage(), end="")
        sys.exit(0)
    from functools import partial

    from absl import app, flags

    # The config comes from the run itself; --workdir must be known before flags are parsed.
    workdir_arg = next((a.split("=", 1)[1] for a in argv if a.startswith("--workdir=")), None)
    if workdir_arg is None and "--workdir" in argv[:-1]:
        workdir_arg = argv[argv.index("--workdir") + 1]
    if workdir_arg is None:
        print("error: --workdir is required\n\n" + usage(), end="", file=sys.stderr)
        sys.exit(2)
    try:
        run_config = load_run_config(Path(workdir_arg))
    except (FileNotFoundError, RunFileError) as e:
        fail(e)
    try:
        spec, overrides, rest = split_config_args(argv)
        if spec is not None:
            raise InputError("--config: the run's config.json is the config; set its fields with --config.FIELD=VALUE")
        for dotted, text in overrides:
            if not dotted.startswith(FAMILY_PREFIX):
                apply_override(run_config, dotted, text)
    except InputError as e:
        fail(e)
    family_options = [f"{d[len(FAMILY_PREFIX) :]}={v}" for d, v in overrides if d.startswith(FAMILY_PREFIX)]
    described = dict(FLAG_HELP)
    flags.DEFINE_string("workdir", None, described["workdir"])
    flags.DEFINE_string("attention", None, described["attention"])
    flags.DEFINE_string("options", "", described["options"])
    flags.DEFINE_enum("split", "test", ["test", "validation"], described["split"])
    given = {dotted: text for dotted, text in overrides}
    app.run(partial(main, config=run_config, family_options=family_options, overrides=given), argv=rest)


if __name__ == "__main__":
    cli(sys.argv)
