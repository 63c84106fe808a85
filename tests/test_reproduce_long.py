"""ConvLuna's pre-registered 8,000-step follow-up (issue 35): each judge, fed synthetic records, gives every verdict.

``LONG_CASES`` joins ``tests/test_reproduce_rules.py``'s per-claim cases, so the registry-wide
checks (every branch covered, words and code naming the same branches) cover these claims too.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import result_record
from lra_lab.reproduce import convluna_long as cl
from lra_lab.reproduce import registry
from lra_lab.reproduce.registry import INCOMPLETE, NOT_REPRODUCED, PARTLY, REPRODUCED
from test_reproduce_confirm import _config

Writer = Callable[[Path], None]
BASE = [45.0 + 0.1 * (k % 7) - 0.2 * (k % 3) for k in range(20)]  # percent, seeds 30-49
JITTER = [0.3, -0.2, 0.1, -0.3, 0.2, 0.0, -0.1, 0.25, -0.15, 0.05] * 2


def _row(root: Path, label: str, accs: list[float], settings: dict | None = None, rise: float = 0.5) -> None:
    """Finished runs of ``label`` at this design (percent), validation rising by ``rise`` points at the end."""
    for k, acc in zip(cl.SEEDS, accs, strict=True):
        folder = root / cl.run_dir(label) / f"seed{k}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "result.json").write_text(
            json.dumps(
                result_record(variant=label, seed=k, task="listops", test_accuracy=acc / 100, num_train_steps=cl.STEPS)
            )
        )
        (folder / "config.json").write_text(json.dumps(_config(settings or cl.SETTINGS)))
        val = [
            {"split": "validation", "step": s, "accuracy": (acc - rise * (s < cl.STEPS)) / 100}
            for s in range(cl.EVAL_EVERY, cl.STEPS + 1, cl.EVAL_EVERY)
        ]
        (folder / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in val) + "\n")


def _shift(points: float, jitter: float = 1.0) -> list[float]:
    return [b + points + jitter * j for b, j in zip(BASE, JITTER, strict=True)]


def _pair(gain: float) -> Writer:
    def write(root: Path) -> None:
        _row(root, cl.PAIR[1], BASE)
        _row(root, cl.PAIR[0], _shift(gain))

    return write


def _fig2(one: float, big: float, jitter: float = 0.5) -> Writer:
    def write(root: Path) -> None:
        _row(root, cl.MEMORY_ROWS[1], BASE)
        _row(root, cl.MEMORY_ROWS[0], _shift(one, jitter))
        _row(root, cl.MEMORY_ROWS[2], _shift(big, -jitter))

    return write


LONG_CASES: dict[str, dict[str, tuple[Writer, str]]] = {
    "long-table1-listops": {
        "reproduced": (_pair(5.0), REPRODUCED),
        "partly": (_pair(1.0), PARTLY),
        "not reproduced": (_pair(0.0), NOT_REPRODUCED),
    },
    "long-fig2-memory-size": {
        "reproduced": (_fig2(0.3, -0.4), REPRODUCED),
        "not reproduced": (_fig2(-6.0, 0.2), NOT_REPRODUCED),
    },
}


def _outcome(root: Path, claim_id: str):
    return registry.find("convluna", claim_id)[1][0].outcome(root)


@pytest.mark.parametrize("claim_id, branch", [(c, b) for c, branches in LONG_CASES.items() for b in branches])
def test_each_branch_gives_its_verdict(tmp_path, claim_id, branch):
    write, expected = LONG_CASES[claim_id][branch]
    write(tmp_path)
    assert _outcome(tmp_path, claim_id).verdict == expected


def test_fig2_difference_and_inconclusive_are_said(tmp_path):
    _fig2(-6.0, 0.2)(tmp_path)
    assert "at least 2 points" in _outcome(tmp_path, "long-fig2-memory-size").detail
    other = tmp_path / "other"
    _fig2(1.0, 0.0, jitter=25.0)(other)  # a 1-point shift with a wide spread: neither shown
    outcome = _outcome(other, "long-fig2-memory-size")
    assert outcome.verdict == registry.INCONCLUSIVE and outcome.detail.startswith("inconclusive"), outcome
    assert (
        registry.find("convluna", "long-fig2-memory-size")[1][0].judge(other).verdict == NOT_REPRODUCED
    )  # the registered judge's own words, unchanged


def test_the_statistic_describes_the_late_curve(tmp_path):
    _pair(5.0)(tmp_path)
    assert "validation gain over the last 2,000 steps ConvLuna-16 +0.50 (20 of 20 seeds rose)" in (
        _outcome(tmp_path, "long-table1-listops").statistic
    )


def test_records_of_another_design_or_seed_set_are_missing_by_name(tmp_path):
    _pair(5.0)(tmp_path)
    _row(tmp_path, cl.PAIR[1], BASE, settings={**cl.SETTINGS, "num_train_steps": 4000})
    outcome = _outcome(tmp_path, "long-table1-listops")
    assert outcome.verdict == INCOMPLETE and any("num_train_steps" in m and "4000" in m for m in outcome.missing)


def test_seeds_are_fresh():
    from lra_lab.reproduce import convluna, convluna_appendix, convluna_confirm

    used = set(convluna.SEEDS) | set(convluna_confirm.SEEDS) | set(convluna_appendix.SEEDS) | {100, 101}
    assert not set(cl.SEEDS) & used and len(cl.SEEDS) == 20


def test_commands_name_the_design_and_every_row():
    gpu = cl.gpu_command(*cl.ROWS)
    for field, value in cl.SETTINGS.items():
        spelled = f"--config.{field}={value}"  # the suite's override spelling (lra.config_args), not --set
        assert spelled in gpu and spelled in cl.sweep_command(*cl.ROWS)
    assert all(f'"{label}"' in gpu for label in cl.ROWS) and "--seeds 30 31" in gpu and "49 --config." in gpu
    assert "--set" not in cl.sweep_command(*cl.ROWS)
    assert "--group-seeds on" in cl.sweep_command(*cl.ROWS)


def test_plan_sweeps_only_missing_rows(tmp_path):
    claim = registry.find("convluna", "long-table1-listops")[1][0]
    _row(tmp_path, cl.PAIR[0], BASE)
    commands = claim.commands_needed(tmp_path)
    assert commands and '"Luna-16 (reference)"' in commands[0] and "ConvLuna-16" not in commands[0]
    _row(tmp_path, cl.PAIR[1], BASE)
    assert claim.commands_needed(tmp_path) == ()
