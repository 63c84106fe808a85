"""Path-X with gated linear attention (options: gate_on=key|value|both).

Task defaults (lra/defaults.py, _TABLE2 and _pathfinder_task): LRA's Transformer settings from
lra_benchmarks/image/configs/pathfinder128/{base_pathfinder128_config,transformer_base}.py;
presets paper | cpu | smoke (cpu and smoke: 16 x 16 generated images, curv_baseline).
Data: the LRA release under <data_dir>/lra_release/pathfinder128/, else generated locally
(lra/data/pathfinder.py).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("pathx", "gated_linear", arg)
