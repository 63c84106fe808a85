#!/usr/bin/env bash
# ConvLuna's confirmatory ListOps study (issue 35; design and rules: lra/reproduce/convluna_confirm.py,
# registered before any of its runs). Runs the four registered sweeps in order (the Table 1 pair, the
# Transformer, Table 3's rows, Figure 2's rows) in two lanes, one per core: each lane walks the same
# list, a run the other lane holds is skipped ("in use"), so the lanes share the work. Each process is
# pinned to its lane's core after its first compile (LRA_PIN_CORE). Every run resumes from its
# checkpoint: rerunning this script after an interruption loses nothing. Run it from a work tree at
# the registration commit (or a later fixed one), e.g.
#     git worktree add ../confirm <commit> && cd ../confirm && pip install -e . && bash scripts/convluna_confirm.sh
# then export finished records with `python scripts/export_runs.py runs/sweeps/convluna_listops_confirm
# results/runs/convluna_listops_confirm` and judge them with `python -m lra.reproduce convluna --report-only`.
# NICE=19 runs the lanes at low priority on a shared machine (it changes no number).
set -uo pipefail
mapfile -t COMMANDS < <(python -m lra.reproduce.convluna_confirm --commands)
mkdir -p runs/sweeps/convluna_listops_confirm
lane() {  # core
  local core=$1
  for cmd in "${COMMANDS[@]}"; do
    LRA_PIN_CORE=$core nice -n "${NICE:-0}" bash -c "$cmd" >> "runs/sweeps/convluna_listops_confirm/lane$core.log" 2>&1
    echo "$(date -u +%FT%TZ) lane $core: exit $? from: $cmd" >> runs/sweeps/convluna_listops_confirm/lanes.log
  done
}
lane 0 &
sleep 60  # the first lane claims its run (and builds the data cache) before the second starts
lane 1 &
wait
