"""ListOps at the paper's scale, a registered study (issue 54 item 4): ConvLuna-16 against Luna-16 and
against the Transformer, its rule registered as data before any of its runs.

Why: at laptop scale Luna-16 ``:reference`` learns nothing beyond ListOps's structure-free rule, so the
laptop verdicts show "ConvLuna learns where Luna does not", not the paper's gap between two learners
(Table 1 of arXiv:2404.00798: ConvLuna-16 44.14 +- 0.69, Luna-16 36.98 +- 0.30, the Transformer 36.37
from LRA). This study runs the paper's model, lengths and batch (Table 2, the ``paper`` preset: 6
blocks, width 128, 4 heads, MLP 512, lengths 500-2,000, batch 32, warmup 1,000, Conv K=32 filter).

**Registered before any run; no pilot ran.** The exploratory pilot (``lra_lab.reproduce.listops_paper``,
seed 300) has no record yet, so the spread and the rates below are assumptions from committed records
of other designs, stated and printed by ``python -m lra_lab.reproduce.listops_paper_study``:

* **Rows.** ConvLuna-16 and Luna-16 with the published code's choices (``reference``), and the
  ``Transformer`` row of the ``convluna_listops`` grid (this suite's Transformer: the published
  ConvLuna code has none, and the paper takes its number from LRA), as in the confirmatory study.
* **Endpoint and tests.** Test accuracy at the best validation step (``result.json``). Two claims,
  each its own family at alpha 0.05 (as the paper states them separately; as the confirmatory study):
  ConvLuna-16 beats Luna-16, and ConvLuna-16 beats the Transformer, by >= 2 points on the paired
  mean with a one-sided paired t p < 0.05 (reproduced); positive and significant but smaller: partly;
  else not reproduced. The judge is ``rules.Superiority`` (one shared judge for every paired
  superiority rule). Descriptive, never deciding: each row's validation gain over the last 2,500
  steps, and each row's distance from the structure-free rule on this test split
  (``results/listops_paper_scale/baseline.json``, 37.6%).
* **Seeds.** 310-323 (14), from the 310-329 reserved for this study by ``listops_paper`` and disjoint
  from every committed ListOps record (a test checks); 324-329 stay unused.
* **Seed count by power** (:func:`power_table`). The assumed paired spread is the largest paired
  standard deviation of the same comparisons in the committed confirmatory records (4,000 steps,
  laptop model, seeds 10-19): ConvLuna-16 - Luna-16 2.69 (CPU) / 2.72 (H100), ConvLuna-16 - the
  Transformer 2.81 / 2.75, so 2.81 points. For reference, smaller spreads: the paper's own (its rows'
  SDs 0.69 and 0.30 give a paired 0.75 if independent) and the binomial floor of two rows' test
  accuracy at the structure-free level on 2,000 test examples (1.53). A 2-point gain at 80% power
  (one-sided paired t at 0.05) needs 14 seeds at 2.81 (81%; 16 seeds 86%). The paper's gaps (7.2 and
  7.8 points) would show with near certainty at any of these spreads.
* **Budget** (:func:`cost_table`). 12,500 steps (validation and a checkpoint every 500), float32:
  the largest multiple of 2,500 steps whose estimated cost for all three rows fits the GPU time assumed
  for this study, 480 GPU-minutes (8 H100-hours; an assumption, to be changed, if at all, before any
  run). The paper's 50,000 steps would cost about 4x as much. Cost per seed from the committed H100
  training-step rates at length 2,048, float32, one seed (``results/bench/training_steps_h100.json``,
  recorded before the accelerator implementations: ConvLuna-16 55.5, Luna-16 57.0, the Transformer
  10.4 steps/s) with 10% for validation and checkpoints: **an estimate until the pilot runs**. The
  schedule (Table 2's inverse square root after warmup) does not depend on the step count, so these
  runs are the first 12,500 steps of the paper's 50,000.
* **Programs and calls.** ConvLuna-16 and Luna-16 run two seeds per program, the Transformer one (33
  GB of memory per seed at length 2,048): the training state a stopped call returns to be resumed
  (parameters and two Adam moments, about 17 MB a seed) then stays under about 35 MB per call for a
  copy-back path that limits what a call carries. Each program is a time-boxed ``scripts/gpu_call.sh
  sweep`` job (``--commands``), called again with its state until its seeds are done; every seed of a
  row must run on one kind of device (``evidence.program_problems`` names any other).

Nothing here may change after its runs start: ``python -m lra_lab.reproduce --audit`` checks the
registration's digest (its rule signature) against every record's start commit.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from lra_lab.reproduce import listops_paper, rules
from lra_lab.reproduce.claims import REPO, Claim

GRID = "convluna_listops"
CONVLUNA, LUNA, TRANSFORMER = "ConvLuna-16 (reference)", "Luna-16 (reference)", "Transformer"
ROWS = (CONVLUNA, LUNA, TRANSFORMER)
SEEDS = tuple(range(310, 324))
STEPS = 12_500
EVAL_EVERY = 500
CURVE_WINDOW = 2_500  # descriptive: each row's validation gain over the last 2,500 steps
MIN_GAIN = 2.0  # points, as every registered ListOps study
ALPHA = 0.05
SETTINGS = {
    "num_train_steps": STEPS,
    "eval_every": EVAL_EVERY,
    "checkpoint_every": EVAL_EVERY,
    "model.dtype": "float32",
    "preset": "paper",  # Table 2's model, lengths and batch; the fields below say so in the record itself
    "batch_size": 32,
    "data.max_len": 2000,
    "model.num_layers": 6,
    "model.emb_dim": 128,
}
NAME = "listops_paper_study"
SWEEP_ROOT = f"runs/sweeps/{NAME}"
RUNS = f"results/runs/{NAME}"
CURVES = "results/listops_paper_scale/study"
BASELINE = "results/listops_paper_scale/baseline.json"
SEEDS_PER_PROGRAM = {CONVLUNA: 2, LUNA: 2, TRANSFORMER: 1}

# The power calculation's inputs: the committed records whose paired spreads are assumed here.
SPREAD_SOURCES = ("results/runs/convluna_listops_confirm", "results/runs/convluna_listops_confirm_h100")
PAPER_SDS = (0.69, 0.30)  # Table 1: ConvLuna-16 and Luna-16 over five runs at the paper's scale
TARGET_POWER = 0.80
# The cost calculation's inputs: the H100 training-step record, the GPU time assumed for the study.
RATES = "results/bench/training_steps_h100.json"
RATE_LENGTH = 2048
FAMILY = {CONVLUNA: "convluna", LUNA: "luna", TRANSFORMER: "softmax"}
OVERHEAD = 1.10  # validation every 500 steps (63 forward batches, about 4% of the steps' compute) and checkpoints
ALLOWANCE_GPU_MINUTES = 480.0
STEP_QUANTUM = 2_500

DESIGN = rules.Design(RUNS, "listops", SEEDS, STEPS, rules.settings(SETTINGS))
_NAMES = ((CONVLUNA, "ConvLuna-16"), (LUNA, "Luna-16"), (TRANSFORMER, "Transformer"))
_BASELINE = rules.Baseline(BASELINE, "test_accuracy", "the structure-free rule")
TABLE1 = rules.Registration(
    DESIGN, rules.Superiority(CONVLUNA, LUNA, MIN_GAIN, ALPHA, _NAMES, curve_window=CURVE_WINDOW), baseline=_BASELINE
)
VS_TRANSFORMER = rules.Registration(
    DESIGN,
    rules.Superiority(CONVLUNA, TRANSFORMER, MIN_GAIN, ALPHA, _NAMES, curve_window=CURVE_WINDOW),
    baseline=_BASELINE,
)
SCALE = (
    f"ListOps at the paper's scale (Table 2: 6 blocks, width 128, lengths 500-2,000, batch 32), {STEPS:,} "
    f"steps (warmup 1,000), float32, the 96k generated training split, seeds {SEEDS[0]}-{SEEDS[-1]} "
    "(PRE-REGISTERED as data before any run; planned for a GPU)"
)


def run_dir(label: str) -> str:
    return DESIGN.run_dir(label)


def sweep_arguments(*labels: str, seeds: tuple[int, ...] = SEEDS, preset: str = "paper") -> str:
    """``scripts/sweep.py`` arguments after the grid's name (``scripts/gpu_call.sh sweep`` takes the same)."""
    sets = " ".join(f"--config.{k}={v}" for k, v in SETTINGS.items() if k != "preset")
    rows = " ".join(f'"{label}"' for label in labels)
    return f"--preset {preset} --seeds {' '.join(map(str, seeds))} {sets} --variants {rows}"


def programs() -> list[tuple[str, tuple[int, ...]]]:
    """(row, seeds) of each program, in the order to run: the Table 1 pair's programs alternating (a
    study stopped half way has paired seeds), then the Transformer's."""

    def groups(label: str) -> list[tuple[int, ...]]:
        k = SEEDS_PER_PROGRAM[label]
        return [SEEDS[i : i + k] for i in range(0, len(SEEDS), k)]

    pair = [p for both in zip(groups(CONVLUNA), groups(LUNA), strict=True) for p in zip((CONVLUNA, LUNA), both)]
    return pair + [(TRANSFORMER, g) for g in groups(TRANSFORMER)]


def job_command(label: str, seeds: tuple[int, ...], budget_s: int = 540) -> str:
    """One time-boxed program on a GPU machine's copy of the tree; the same command again resumes it
    (carry ``.gpu/sweeps`` back, or unpack the returned ``sweep_state_*.tgz`` into ``.gpu/`` first)."""
    return (
        f"LRA_GIT_COMMIT=$(git rev-parse HEAD) KIND=gpu JOBS=1 BUDGET={budget_s} NAME={NAME} "
        f'PREPARE="listops" bash scripts/gpu_call.sh sweep {GRID} {sweep_arguments(label, seeds=seeds)}'
    )


def sweep_command(label: str, seeds: tuple[int, ...]) -> str:
    """One program as a plain sweep, on any machine (the same grouping of seeds as the GPU jobs: a row's
    records must share their program)."""
    return (
        f"python scripts/sweep.py {GRID} {sweep_arguments(label, seeds=seeds)} --group-seeds on "
        f"--root {SWEEP_ROOT} --run"
    )


EXPORT = f"python scripts/export_runs.py {SWEEP_ROOT} {RUNS}"


def commands() -> list[str]:
    """Every program's GPU job in order, the same programs as plain sweeps, the export and the curves."""
    title = f"ListOps at the paper's scale: registered study (seeds {SEEDS[0]}-{SEEDS[-1]}, {STEPS:,} steps)"
    return [
        *(job_command(label, seeds) for label, seeds in programs()),
        *(sweep_command(label, seeds) for label, seeds in programs()),
        EXPORT,
        f'python -m lra_lab.reports.learning_curves {RUNS} --out {CURVES} --title "{title}" '
        "--baseline-config configs/listops_convluna.py",
    ]


def _claim_commands(*labels: str) -> tuple[str, ...]:
    return (*(sweep_command(label, seeds) for label, seeds in programs() if label in labels), EXPORT)


def paired_sds(root: Path = REPO) -> dict[str, float]:
    """The committed paired spreads this design assumes: ConvLuna-16 - Luna-16 and ConvLuna-16 - the
    Transformer, in the confirmatory study's records (CPU) and its H100 replication."""
    import dataclasses
    import statistics

    from lra_lab.reproduce import convluna_confirm, evidence

    out = {}
    token = evidence.DESIGN_PROGRAM.set(False)  # the replication ran on another device by design
    try:
        for runs in SPREAD_SOURCES:
            design = dataclasses.replace(convluna_confirm.DESIGN, runs=runs, program=None)
            for other in (LUNA, TRANSFORMER):
                a = rules.accuracies(root, design, CONVLUNA)[0]
                b = rules.accuracies(root, design, other)[0]
                seeds = sorted(set(a) & set(b))
                if len(seeds) > 1:
                    out[f"{runs}: ConvLuna-16 - {other.split(' ')[0]}"] = statistics.stdev(a[k] - b[k] for k in seeds)
    finally:
        evidence.DESIGN_PROGRAM.reset(token)
    return out


def power(sd: float, n: int, gain: float = MIN_GAIN) -> float:
    from statsmodels.stats.power import TTestPower

    return float(TTestPower().power(effect_size=gain / sd, nobs=n, alpha=ALPHA, alternative="larger"))


def seeds_needed(sd: float) -> int:
    """The fewest seeds, a multiple of the programs' sizes, with TARGET_POWER for MIN_GAIN at ``sd``."""
    step = math.lcm(*SEEDS_PER_PROGRAM.values())
    n = step * max(1, math.ceil(2 / step))
    while power(sd, n) < TARGET_POWER:
        n += step
    return n


def power_table(root: Path = REPO) -> str:
    sds = paired_sds(root)
    if not sds:
        return "power: the committed confirmatory records are absent here, so the assumed spread cannot be recomputed"
    planning = max(sds.values())
    baseline = json.loads((root / BASELINE).read_text())
    p, n_test = baseline["test_accuracy"], baseline["test_examples"]
    floor = 100 * math.sqrt(2 * p * (1 - p) / n_test)
    paper = math.hypot(*PAPER_SDS)
    lines = ["Power (one-sided paired t at alpha 0.05, a 2-point gain; statsmodels TTestPower). Paired spreads:"]
    lines += [f"  {name}: {sd:.2f} points" for name, sd in sds.items()]
    lines.append(
        f"  assumed: the largest, {planning:.2f}; for reference the paper's rows give {paper:.2f} if "
        f"independent, and two rows at the structure-free level ({100 * p:.1f}%) on {n_test:,} test examples "
        f"{floor:.2f} (binomial)"
    )
    for sd in (paper, floor, planning):
        cells = ", ".join(f"n={n}: {power(sd, n):.0%}" for n in (6, 10, 12, 14, 16, 20))
        lines.append(f"  sd {sd:.2f}: {cells}")
    lines.append(
        f"seeds needed for {TARGET_POWER:.0%} at {planning:.2f} (a multiple of the programs' sizes): "
        f"{seeds_needed(planning)}; registered: {len(SEEDS)} ({SEEDS[0]}-{SEEDS[-1]})"
    )
    return "\n".join(lines)


def step_rates(root: Path = REPO) -> dict[str, float]:
    """Training steps/s per row from the committed H100 record (length 2,048, float32, one seed)."""
    record = json.loads((root / RATES).read_text())
    rates = {}
    for label, family in FAMILY.items():
        for case in record["cases"]:
            if (case.get("family"), case.get("length"), case.get("dtype"), case.get("seeds")) == (
                family,
                RATE_LENGTH,
                "float32",
                1,
            ) and case.get("steps_per_second"):
                rates[label] = float(case["steps_per_second"])
    return rates


def row_minutes(rates: dict[str, float], steps: int, seeds: int) -> dict[str, float]:
    """Estimated GPU-minutes per row: seeds x steps at the row's rate, plus OVERHEAD."""
    return {label: seeds * steps / rate * OVERHEAD / 60 for label, rate in rates.items()}


def affordable_steps(rates: dict[str, float], seeds: int) -> int:
    """The largest multiple of STEP_QUANTUM whose three rows' estimated cost fits ALLOWANCE_GPU_MINUTES."""
    steps = 0
    while sum(row_minutes(rates, steps + STEP_QUANTUM, seeds).values()) <= ALLOWANCE_GPU_MINUTES:
        steps += STEP_QUANTUM
    return steps


def cost_table(root: Path = REPO) -> str:
    rates = step_rates(root)
    lines = [
        f"Cost (ESTIMATE until the pilot runs): {RATES} at length {RATE_LENGTH}, float32, one seed per program "
        f"(recorded before the accelerator implementations), x{OVERHEAD:.2f} for validation and checkpoints:"
    ]
    for steps in (10_000, STEPS, 25_000, 50_000):
        per_row = row_minutes(rates, steps, len(SEEDS))
        cells = ", ".join(f"{label.split(' ')[0]} {m:.0f}" for label, m in per_row.items())
        lines.append(f"  {steps:,} steps x {len(SEEDS)} seeds: {cells} GPU-minutes; all {sum(per_row.values()):.0f}")
    per_seed = row_minutes(rates, STEPS, 1)
    lines.append(
        "  per seed at the registered budget: "
        + ", ".join(f"{label.split(' ')[0]} {m:.1f}" for label, m in per_seed.items())
        + " GPU-minutes"
    )
    lines.append(
        f"largest multiple of {STEP_QUANTUM:,} steps within the assumed {ALLOWANCE_GPU_MINUTES:.0f} "
        f"GPU-minutes: {affordable_steps(rates, len(SEEDS)):,}; registered: {STEPS:,}"
    )
    state = {label: 12 * case_params(root, label) / 2**20 for label in ROWS}
    lines.append(
        "training state per seed (parameters and two Adam moments, float32): "
        + ", ".join(f"{label.split(' ')[0]} {mb:.0f} MB" for label, mb in state.items())
        + "; programs of "
        + ", ".join(f"{label.split(' ')[0]} {k}" for label, k in SEEDS_PER_PROGRAM.items())
        + " seeds"
    )
    return "\n".join(lines)


def case_params(root: Path, label: str) -> int:
    record = json.loads((root / RATES).read_text())
    for case in record["cases"]:
        if (case.get("family"), case.get("length")) == (FAMILY[label], RATE_LENGTH) and case.get("num_params"):
            return int(case["num_params"])
    raise ValueError(f"{RATES} has no {FAMILY[label]} case at length {RATE_LENGTH}")


CLAIMS: tuple[Claim, ...] = (
    rules.claim(
        "paper-table1-listops", "Table 1 (ListOps), paper scale, pre-registered",
        "ConvLuna-16 is more accurate on ListOps than Luna-16 (both with the published code's choices), at the "
        "paper's model, lengths and batch.",
        "ConvLuna-16 44.14 +- 0.69 vs Luna-16 36.98 +- 0.30 (5 runs each)",
        f"{SCALE}; rows `listops_convluna.py:paper,mem=16,reference` and `listops_luna.py:paper,mem=16,reference`",
        f"reproduced if ConvLuna-16 beats Luna-16 by >= {MIN_GAIN} points of test accuracy on the paired mean over "
        f"seeds {SEEDS[0]}-{SEEDS[-1]} with a one-sided paired t-test p < {ALPHA}; partly if the gain is positive "
        "and significant but smaller; else not reproduced. Descriptive (not deciding): each row's validation gain "
        f"over the last {CURVE_WINDOW:,} steps and its distance from the structure-free rule",
        TABLE1, _claim_commands(CONVLUNA, LUNA),
    ),
    rules.claim(
        "paper-vs-transformer", "Table 1 (ListOps), paper scale, pre-registered",
        "ConvLuna-16 is more accurate on ListOps than the Transformer, at the paper's model, lengths and batch.",
        "ConvLuna-16 44.14 +- 0.69 vs Transformer 36.37 (from the LRA paper)",
        f"{SCALE}; `listops_transformer.py:paper` (this suite's defaults) against ConvLuna-16 `:reference`",
        f"as paper-table1-listops: reproduced if ConvLuna-16 beats the Transformer by >= {MIN_GAIN} points, "
        f"one-sided paired t p < {ALPHA} over seeds {SEEDS[0]}-{SEEDS[-1]}; partly if positive and significant "
        "but smaller; else not reproduced",
        VS_TRANSFORMER, _claim_commands(TRANSFORMER),
    ),
)  # fmt: skip
assert set(SEEDS) <= set(listops_paper.STUDY_SEEDS_RESERVED), "the study's seeds are the ones reserved for it"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--commands"]:
        print("\n".join(commands()))
        return 0
    if argv not in ([], ["--status"]):
        print(__doc__)
        return 0 if argv in (["-h"], ["--help"]) else 2
    if argv == []:
        print(power_table())
        print(cost_table())
    for claim in CLAIMS:
        outcome = claim.judge(REPO)
        print(f"{claim.id}: {outcome.verdict}" + (f" ({outcome.detail})" if outcome.detail else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
