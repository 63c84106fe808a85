"""ListOps at the paper's scale: the exploratory pilot's commands (one seed per row, Table 2's settings).

Why: at laptop scale (2 blocks of width 64, lengths 32-256, 4,000 steps) Luna-16 learns nothing beyond
ListOps's structure-free rule, so the paper's gap between two learners cannot show there. The paper's
rows (Table 2: 6 layers, width 128, 4 heads, lengths up to 2,000, batch 32, 50,000 steps; the ``paper``
preset) need a GPU. Before a paper-scale study is registered, this pilot asks, on one fresh seed per
row: does Luna-16 learn beyond the structure-free baseline at this scale (36.5% on the 96,000 generated
training examples, 37.6% on the 2,000 test ones: ``results/listops_paper_scale``), where do the curves
flatten, and how fast does each row run (the cost of a registered study per row)?

**EXPLORATORY.** It judges no claim: its seed and its numbers must never decide a registered verdict
(the registered study, ``lra_lab.reproduce.listops_paper_study``, uses others of
``STUDY_SEEDS_RESERVED``: 310-323).

* **Rows.** The Transformer, Luna-16 and ConvLuna-16, both ``reference`` (the published code's choices).
* **Seed.** 300, used by no committed ListOps record (0-4, 10-49, 100).
* **Settings.** The ``paper`` preset, 10,000 steps (the pilot's floor; more where the time allows: the
  schedule does not depend on the step count, so a longer run extends the same curve), validation every
  500 steps, a checkpoint every 500. Compute in bfloat16 (``model.dtype``: parameters, optimizer state
  and softmax statistics stay float32), attention dropout as the paper's rows have it, so the
  Transformer runs XLA's softmax (cuDNN's flash attention has no dropout).
* **Data.** The generated paper-scale split (``lra.data prepare listops``: lengths 500-2,000,
  96,000 / 2,000 / 2,000), prepared once before the rows start.

``python -m lra_lab.reproduce.listops_paper --commands`` prints, in order: the job on a GPU machine (a
time-boxed ``scripts/gpu_call.sh sweep`` on a copy of the tree; it returns the finished records, and
the state to resume from when its time ran out), the same runs as a plain sweep for any machine, the
export of finished records, and the curves with the baseline drawn.
"""

from __future__ import annotations

import sys

GRID = "convluna_listops"
ROWS = ("Transformer", "Luna-16 (reference)", "ConvLuna-16 (reference)")
PILOT_SEED = 300
STUDY_SEEDS_RESERVED = tuple(range(310, 330))  # for the registered study that follows; never the pilot's
STEPS = 10000
EVAL_EVERY = 500
SETTINGS = {
    "num_train_steps": STEPS,
    "eval_every": EVAL_EVERY,
    "checkpoint_every": EVAL_EVERY,
    "model.dtype": "bfloat16",
}
NAME = "listops_paper_pilot"
SWEEP_ROOT = f"runs/sweeps/{NAME}"
RUNS = f"results/runs/{NAME}"
CURVES = "results/listops_paper_scale/pilot"
TITLE = "ListOps at the paper's scale: pilot (EXPLORATORY; seed 300, Table 2's model, bfloat16)"


def sweep_arguments(preset: str = "paper") -> str:
    """``scripts/sweep.py`` arguments after the grid's name (``scripts/gpu_call.sh sweep`` takes the same)."""
    sets = " ".join(f"--set {k}={v}" for k, v in SETTINGS.items())
    rows = " ".join(f'"{label}"' for label in ROWS)
    return f"--preset {preset} --seeds {PILOT_SEED} {sets} --variants {rows}"


def job_command(budget_s: int = 540) -> str:
    """The time-boxed job on a GPU machine's copy of the tree: every row at once, the data prepared first."""
    return (
        f"LRA_GIT_COMMIT=$(git rev-parse HEAD) KIND=gpu JOBS={len(ROWS)} BUDGET={budget_s} NAME={NAME} "
        f'PREPARE="listops" bash scripts/gpu_call.sh sweep {GRID} {sweep_arguments()}'
    )


def commands() -> list[str]:
    return [
        job_command(),
        f"python scripts/sweep.py {GRID} {sweep_arguments()} --group-seeds on --root {SWEEP_ROOT} --run",
        f"python scripts/export_runs.py {SWEEP_ROOT} {RUNS}",
        f'python -m lra_lab.reports.learning_curves {RUNS} --out {CURVES} --title "{TITLE}" '
        f"--baseline-config configs/listops_convluna.py",
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["--commands"]:
        print(__doc__)
        return 0 if argv in ([], ["-h"], ["--help"]) else 2
    print("\n".join(commands()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
