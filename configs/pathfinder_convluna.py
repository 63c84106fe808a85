"""Pathfinder with ConvLuna: MaxPool K=4, stride 1, the image task's filter (Table 2 of the
ConvLuna paper, arXiv:2404.00798, has no Pathfinder row; both tasks are pixel sequences).

Options: mem=1|16|256, only_scaling | only_filtering (Appendix E), and reference (the
published code's choices, lra_lab/reference/).

Task defaults (lra/defaults.py, _TABLE2 and _pathfinder_task): LRA's Transformer settings from
lra_benchmarks/image/configs/pathfinder32/{base_pathfinder32_config,transformer_base}.py;
presets paper | cpu | smoke (cpu and smoke: 16 x 16 generated images, curv_baseline).
Data: the LRA release under <data_dir>/lra_release/pathfinder32/, else generated locally
(lra/data/pathfinder.py).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("pathfinder", "convluna", arg)
