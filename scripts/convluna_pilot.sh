#!/usr/bin/env bash
# ConvLuna ListOps pilot (issue 35; EXPLORATORY: it chooses the confirmatory budget, it judges nothing).
#
# One long run per row, seed 100 (no committed ListOps record uses it), 12,000 steps, validation
# every 250 steps, Table 2's warmup (1,000 steps), LRA's 96k-example training split generated
# locally (the cpu preset's 20k would be seen 19 times in 12,000 steps of 32). One extra row,
# ConvLuna-16 (reference) on the 20k split, shows whether the split size matters.
#
# Two lanes, one per core, each process pinned to its core after its first compile
# (LRA_PIN_CORE; lra.cpu_speed). Every run resumes from its checkpoint: rerunning this
# script after an interruption loses nothing. Run it from a work tree at a fixed commit:
#     git worktree add ../pilot <commit> && cd ../pilot && bash scripts/convluna_pilot.sh
set -uo pipefail
OUT=${PILOT_OUT:-runs/convluna_listops_pilot}
STEPS=${PILOT_STEPS:-12000}
COMMON=(--config.seed=100 --config.num_train_steps="$STEPS" --config.eval_every=250 --config.checkpoint_every=250
        --config.warmup_steps=1000)
BIG=(--config.data.num_train=96000)

run() {  # core, row name, config, extra flags...
  local core=$1 name=$2 config=$3; shift 3
  LRA_PIN_CORE=$core python -m lra.train --config "$config" "${COMMON[@]}" "$@" --workdir "$OUT/$name/seed100" \
    >> "$OUT/$name.log" 2>&1
  echo "$(date -u +%FT%TZ) $name exit $?" >> "$OUT/lanes.log"
}

mkdir -p "$OUT"
(
  run 0 convluna-16_reference configs/listops_convluna.py:cpu,mem=16,reference "${BIG[@]}"
  run 0 transformer configs/listops_transformer.py:cpu "${BIG[@]}"
  run 0 convluna-16 configs/listops_convluna.py:cpu,mem=16 "${BIG[@]}"
) &
(
  run 1 luna-16_reference configs/listops_luna.py:cpu,mem=16,reference "${BIG[@]}"
  run 1 convluna-16_reference_train20k configs/listops_convluna.py:cpu,mem=16,reference
  run 1 luna-16 configs/listops_luna.py:cpu,mem=16 "${BIG[@]}"
) &
wait
