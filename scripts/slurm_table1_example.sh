#!/bin/bash
# Example: ConvLuna's Table 1 at paper scale as a SLURM job array, one GPU per array task
# (docs/gpu_runbook.md). Array task i trains run i of the sweep's list: one setup (task x variant)
# with its five seeds vmapped in one program. Submit from the repository root (SLURM opens the
# log file before the script runs, so its folder must exist):
#
#     mkdir -p runs/sweeps/convluna_table1_paper/slurm && sbatch scripts/slurm_table1_example.sh
#
# Yours, for your cluster, is one command (it writes the logs folder and the sweep manifest too):
#
#     python scripts/sweep.py convluna_table1 --slurm table1.sh --sbatch=--partition=gpu \
#         --setup 'source .venv/bin/activate' --max-parallel 8
#
# This file is that command's output with the absolute paths made relative to the submit folder.
# On SIGTERM (2 minutes before --time) lra.train saves a checkpoint; submitting again resumes the
# unfinished runs and skips the finished ones. Then: python scripts/make_tables.py --results runs/sweeps
#SBATCH --job-name=lra-convluna_table1-paper
#SBATCH --array=0-27%8
#SBATCH --nodes=1
#SBATCH --ntasks=1
#SBATCH --gres=gpu:1
#SBATCH --cpus-per-task=8
#SBATCH --time=24:00:00
#SBATCH --output=runs/sweeps/convluna_table1_paper/slurm/%A_%a.out
#SBATCH --signal=B:TERM@120
#SBATCH --partition=gpu

# 28 runs; run i is line i of: python scripts/sweep.py convluna_table1 --preset paper --root runs/sweeps/convluna_table1_paper --group-seeds on --list
set -euo pipefail
source .venv/bin/activate
cd "${SLURM_SUBMIT_DIR:-.}"
exec python scripts/sweep.py convluna_table1 --preset paper --root runs/sweeps/convluna_table1_paper --group-seeds on --index "$SLURM_ARRAY_TASK_ID"
