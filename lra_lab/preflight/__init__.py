"""Preflight: on a laptop, whether a config fits an accelerator and what a run will cost.

``python -m lra_lab.preflight --config configs/X.py[:OPTIONS] --target TARGET`` compiles the config's
real train step (the code path of ``lra.train``: the model, the optimiser, the seed axis and the
data sharding) for the target on abstract inputs, in a child process, and reports memory per
device, FLOPs and bytes per step, a roofline estimate of the step and run time, and a verdict.

Reading order:

1. ``targets``: the known targets (this CPU, TPU topologies, GPUs) and their specs, with sources.
2. ``compile_step``: the child process: environment first, then JAX, then lower and compile.
3. ``estimate``: roofline and verdict from a compilation's numbers and a target's specs.
4. ``cache``: compilations keyed by (config digest, target, jax and libtpu versions).
5. ``bench_check``: the CPU target against the committed CPU step benchmark (results/bench).
6. ``__main__``: the command line, one config or a whole sweep grid (``sweep GRID``).
"""
