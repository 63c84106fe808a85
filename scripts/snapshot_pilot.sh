#!/usr/bin/env bash
# Copy the ListOps pilot's records (issue 35; finished and running runs: config, metrics, sessions,
# result when there) from its work tree into results/runs/convluna_listops_pilot, then redraw its
# curves from the committed copy. Usage: bash scripts/snapshot_pilot.sh [PILOT_TREE] (default ../pilot).
set -euo pipefail
SRC=${1:-../pilot}/runs/convluna_listops_pilot
DST=results/runs/convluna_listops_pilot
for run in "$SRC"/*/seed*; do
  rel=${run#"$SRC"/}
  mkdir -p "$DST/$rel"
  for f in config.json metrics.jsonl sessions.jsonl result.json; do
    [ -f "$run/$f" ] && cp "$run/$f" "$DST/$rel/$f.tmp.$$" && mv "$DST/$rel/$f.tmp.$$" "$DST/$rel/$f"
  done
done
python -m lra_lab.reports.learning_curves "$DST" --out results/listops_pilot \
  --title "ListOps pilot (EXPLORATORY; seed 100, 12,000 steps, 96k training examples; running rows marked)" \
  --baseline-config configs/listops_convluna.py:cpu --baseline-set data.num_train=96000
