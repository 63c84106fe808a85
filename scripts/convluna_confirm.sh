#!/usr/bin/env bash
# ConvLuna's confirmatory ListOps study (issue 35; design and rules: lra_lab/reproduce/convluna_confirm.py,
# registered before any of its runs). Runs the four registered sweeps in order (the Table 1 pair, the
# Transformer, Table 3's rows, Figure 2's rows) in two lanes, one per core: each lane walks the same
# list, a run the other lane holds is skipped ("in use"), so the lanes share the work. Each process is
# pinned to its lane's core after its first compile (LRA_PIN_CORE). Every run resumes from its
# checkpoint: rerunning this script after an interruption loses nothing. Run it from a work tree at
# the registration commit (or a later fixed one), e.g.
#     git worktree add ../confirm 93fbbb9 && cd ../confirm && bash scripts/convluna_confirm.sh
# PYTHONPATH is set to the work tree below, so the sweep (a script: its own folder is first on sys.path,
# not the tree) and every training process import the work tree's lra and read its configs, not those of
# whichever checkout `pip install -e` points at. (The study's first runs resolved their config files in
# the main checkout, identical to 93fbbb9's then; lra.train compares each resumed run's config with the
# config.json it sealed, so a config that changed would have been refused, never mixed.)
# then export finished records with `python scripts/export_runs.py runs/sweeps/convluna_listops_confirm
# results/runs/convluna_listops_confirm` and judge them with `python -m lra_lab.reproduce convluna --report-only`.
# NICE=19 runs the lanes at low priority on a shared machine (it changes no number).
set -uo pipefail
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
mapfile -t COMMANDS < <(python -m lra_lab.reproduce.convluna_confirm --commands)
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
