"""A structure-free ListOps baseline: "the outermost operator's most frequent answer".

Answer the first token's (the outermost operator's) most frequent *training* label: fitted on train, scored on
validation and test. The floor a ListOps accuracy must clear to show learned structure (about a third on the cpu
preset's splits, well above the majority class); every ListOps table, curve figure and reproduction report draws it.

``python -m lra.reports.listops_baseline --config configs/listops_convluna.py:cpu [--json OUT]``
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from lra.data.listops import OPERATORS, VOCAB
from lra.data.types import PAD_ID, Split

_NAMES = {token_id: word for word, token_id in VOCAB.items()}


def outermost_tokens(split: Split) -> np.ndarray:
    """The first real token of each example (the root operator; a digit for a one-number tree)."""
    inputs = np.asarray(split.inputs)
    first = np.argmax(inputs != PAD_ID, axis=1)  # leading padding, if any, is skipped
    return inputs[np.arange(len(inputs)), first]


def fit(train: Split, num_classes: int) -> dict[int, int]:
    """token id -> the most frequent training label after it (ties: the smaller label)."""
    tokens, labels = outermost_tokens(train), np.asarray(train.labels)
    rule = {}
    for token in np.unique(tokens):
        counts = np.bincount(labels[tokens == token], minlength=num_classes)
        rule[int(token)] = int(np.argmax(counts))
    return rule


def accuracy(rule: dict[int, int], split: Split, fallback: int) -> float:
    """Accuracy of ``rule`` on ``split``; a first token unseen in training gets ``fallback``."""
    tokens = outermost_tokens(split)
    guess = np.array([rule.get(int(t), fallback) for t in tokens])
    return float(np.mean(guess == np.asarray(split.labels)))


def baseline(data: Any) -> dict[str, Any]:
    """The rule, its accuracy per split, and the majority class's, for a loaded ListOps TaskData."""
    labels = np.asarray(data.train.labels)
    majority = int(np.argmax(np.bincount(labels, minlength=data.num_classes)))
    rule = fit(data.train, data.num_classes)
    out: dict[str, Any] = {"rule": {_NAMES.get(t, str(t)): label for t, label in sorted(rule.items())}}
    for name, split in data.splits().items():
        out[f"{name}_accuracy"] = accuracy(rule, split, majority)
        out[f"{name}_examples"] = len(split.labels)
        out[f"{name}_majority_accuracy"] = float(np.mean(np.asarray(split.labels) == majority))
    out["operators"] = list(OPERATORS)
    return out


def config_key(config: Any) -> tuple:
    """What of a ListOps config decides its data (the baseline is a function of the data only)."""
    d = config.data
    return (
        config.task,
        d.source,
        d.max_len,
        d.min_len,
        d.num_train,
        d.num_val,
        d.num_test,
        d.generator_seed,
        str(config.data_dir),
    )


@functools.lru_cache(maxsize=8)
def _cached(key: tuple, config_json: str) -> dict[str, Any]:
    import ml_collections

    from lra.data import load_task

    return baseline(load_task(ml_collections.ConfigDict(json.loads(config_json))))


def for_config(config: Any) -> dict[str, Any]:
    """The baseline on the data a ListOps config trains on (loaded once per data set and process)."""
    if config.task != "listops":
        raise ValueError(f"the structure-free baseline is ListOps's; got task {config.task!r}")
    return _cached(config_key(config), config.to_json_best_effort())


def line(result: dict[str, Any], split: str = "test") -> str:
    """One sentence for tables and reports."""
    return (
        f"structure-free baseline (the outermost operator's most frequent training answer, "
        f"{', '.join(f'{k}->{v}' for k, v in result['rule'].items() if k.startswith('['))}): "
        f"{100 * result[f'{split}_accuracy']:.1f}% {split} accuracy; always answering the training split's "
        f"most frequent label: {100 * result[f'{split}_majority_accuracy']:.1f}%"
    )


def beside_baseline(config: Any, test_accuracy: float) -> str | None:
    """A ListOps run's last line: its test accuracy beside this baseline, with a normal-approximation binomial
    interval over the test examples (the test set's noise, not the seed's); None for another task."""
    if config.task != "listops":
        return None
    from lra.data.types import DataError

    try:
        result = for_config(config)
    except (DataError, OSError, ValueError) as e:
        return f"structure-free baseline not computed: the run's ListOps data could not be read ({e})"
    ours, base = 100 * test_accuracy, 100 * result["test_accuracy"]
    n = int(config.data.num_test)
    half = 196 * float(np.sqrt(test_accuracy * (1 - test_accuracy) / max(n, 1)))
    return (
        f"{config.variant}: test accuracy {ours:.1f}% (95% interval over {n:,} test examples +-{half:.1f}) "
        f"against {base:.1f}% for the structure-free baseline on the same data (the outermost operator's "
        f"most frequent training answer): {ours - base:+.1f} points"
    )


def main(argv: list[str] | None = None) -> int:
    from lra.defaults import load_config_file

    parser = argparse.ArgumentParser(
        prog="python -m lra.reports.listops_baseline",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", required=True, help="a ListOps config, e.g. configs/listops_convluna.py:cpu")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="old spelling of --config.FIELD=VALUE, a config field as lra.train takes it (e.g. "
        "--config.data.num_train=96000)",
    )
    parser.add_argument("--json", type=Path, help="write the result here")
    from lra.config_args import as_old_spelling

    args = parser.parse_args(as_old_spelling(sys.argv[1:] if argv is None else argv, "--set"))
    path, _, options = args.config.partition(":")
    if not Path(path).is_file():
        print(f"error: --config {path}: no such file", file=sys.stderr)
        return 2
    config = load_config_file(path).get_config(options or None)
    from lra.defaults import apply_override

    for item in args.set:
        field, _, text = item.partition("=")
        try:
            apply_override(config, field, text)
        except ValueError as e:
            print(f"error: --config.{item}: {e}", file=sys.stderr)
            return 2
    from lra.training.provenance import mark_start

    mark_start()
    result = for_config(config)
    print(line(result, "validation"))
    print(line(result, "test"))
    if args.json:
        from lra.training.provenance import stamp
        from lra.training.run_files import write_json_atomic

        write_json_atomic(args.json, {**stamp(), "config": args.config, "set": args.set, **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
