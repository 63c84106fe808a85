"""Path-X with dispersed hierarchical attention (Mukund S & Easwarakumar): a sliding window of w
tokens plus keys at cumulative gaps 2, 3, ..., 180 beyond it on each side (paper: w = 4).

Options: window=W, max_gap=G, scale_scores=false, block_size=K (offsets per step), chunk_size=C (positions
per chunk; both speed only), implementation=auto|chunks|gather (auto: chunks on a CPU, gather on
GPU/TPU; the same function). Same parameter tree as the
Transformer baseline (pre-norm, the task's mean pooling), so softmax-trained weights evaluate with it.

Task defaults (lra/defaults.py, _TABLE2 and _pathfinder_task): LRA's Transformer settings from
lra_benchmarks/image/configs/pathfinder128/{base_pathfinder128_config,transformer_base}.py;
presets paper | cpu | smoke (cpu and smoke: 16 x 16 generated images, curv_baseline).
Data: the LRA release under <data_dir>/lra_release/pathfinder128/, else generated locally
(lra/data/pathfinder.py).

bf16: --config.model.dtype=bfloat16 (GPU/TPU).
"""

from lra.family_configs import family_config


def get_config(arg: str | None = None):
    return family_config("pathx", "dispersed", arg)
