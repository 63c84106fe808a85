"""The child process: set the target's environment, then import JAX, build the train step, compile.

Run as ``python -m lra_lab.preflight.compile_step PAYLOAD_JSON`` by ``__main__`` (never in the parent:
``JAX_PLATFORMS``, XLA flags and libtpu are process-wide and must not leak into another target or
into training). Prints one line ``PREFLIGHT_RESULT {json}`` at the end; a failure prints
``PREFLIGHT_ERROR {json}`` with the stage that failed (config, model, lowering, compilation).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from typing import Any

RESULT, ERROR = "PREFLIGHT_RESULT ", "PREFLIGHT_ERROR "


def load_config(path: str, options: str | None, overrides: dict[str, Any]) -> Any:
    """The config as ``lra.train --config path:options`` builds it, with ``overrides`` (dotted keys) set."""
    from lra.defaults import existing_field, load_config_file

    config = load_config_file(path).get_config(options or None)
    for key, value in overrides.items():
        node = existing_field(config, key)  # a misspelt field fails naming it (ConfigDict would add it)
        leaf = key.split(".")[-1]
        node[leaf] = tuple(value) if isinstance(value, list) and isinstance(node[leaf], tuple) else value
    return config


def devices_for(target: dict[str, Any]) -> list[Any]:
    import jax

    if target["kind"] == "cpu":
        return jax.devices()
    from jax.experimental import topologies

    if target["kind"] == "tpu":
        topo = topologies.get_topology_desc(
            topology_name=f"{target['topology_name']}:{target['topology']}",
            platform="tpu",
            chip_config_name=target["chip_config_name"],
        )
    else:  # experimental: XLA's GPU target description, no driver needed (jax issues #23971, #28376)
        topo = topologies.get_topology_desc(
            platform="cuda", target_config=target["target_config"], topology=f"1x1x{target['devices']}"
        )
    return list(topo.devices)


@dataclasses.dataclass(frozen=True)
class AbstractStep:
    """lra.train's train step for some devices (jitted, not compiled), its state's initialiser and the
    abstract state and batch it is lowered with (shapes only), the mesh and the batch's shape."""

    train: Any
    init: Any
    state: Any
    batch: dict[str, Any]
    mesh: Any
    shape: tuple[int, ...]


def abstract_step(config: Any, devices: list[Any], seeds: list[int]) -> AbstractStep:
    """:class:`AbstractStep` of ``config`` on ``devices``, nothing allocated (preflight's compile, and
    lra_lab.bench.launch_diff's)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh

    from lra.data import task_shapes
    from lra.model import build_model
    from lra.training import hosts
    from lra.training.step import make_init, make_optimizer, make_steps

    vocab, classes, dual = task_shapes(config.task)
    mesh = Mesh(np.asarray(devices), ("data",))
    model = build_model(config.model, vocab, classes, dual)
    tx = make_optimizer(config.learning_rate, config.warmup_steps, config.weight_decay, config.grad_clip_norm)
    example = (2, config.model.max_len) if dual else (config.model.max_len,)
    init = make_init(model, tx, seeds, jnp.zeros((1, *example), jnp.int32), hosts.replicated(mesh))
    train, _ = make_steps(model, tx, config, mesh, seeds)
    shape = (len(seeds), int(config.batch_size), *example)
    batch = {
        "inputs": jax.ShapeDtypeStruct(shape, jnp.int32),
        "labels": jax.ShapeDtypeStruct(shape[:2], jnp.int32),
        "weights": jax.ShapeDtypeStruct(shape[:2], jnp.float32),
    }
    return AbstractStep(train, init, jax.eval_shape(init), batch, mesh, shape)


def _memory(compiled: Any) -> dict[str, int] | None:
    stats = compiled.memory_analysis()
    if stats is None:
        return None
    fields = (
        "argument_size_in_bytes",
        "output_size_in_bytes",
        "temp_size_in_bytes",
        "generated_code_size_in_bytes",
        "alias_size_in_bytes",
    )
    out = {f.replace("_size_in_bytes", ""): int(getattr(stats, f, 0) or 0) for f in fields}
    # donated arguments alias outputs: count them once
    out["total"] = out["argument"] + out["output"] + out["temp"] + out["generated_code"] - out["alias"]
    return out


def _cost(compiled: Any, lowered: Any, devices: int) -> dict[str, Any]:
    """FLOPs and bytes per step and device.

    TPU and CPU: the compiled (partitioned, fused) program's analysis. The deviceless GPU path gives
    none, compiled or lowered (measured with jax 0.10.2), so the FLOPs come from the unoptimised,
    unpartitioned program through XLA's generic HLO cost analysis (the CPU backend's), divided by the
    device count. Its byte count is of the unfused program, an overcount of the traffic, so it is kept
    apart (``bytes_unfused``) and never used for the roofline bound."""
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) and cost else cost
    if cost:
        return {
            "flops": float(cost.get("flops", 0.0)),
            "bytes_accessed": float(cost.get("bytes accessed", 0.0)),
            "source": "compiled",
        }
    from jax._src import xla_bridge
    from jax._src.lib import _jax  # Lowered.cost_analysis's own route, with the CPU backend's analysis

    cost = _jax.hlo_module_cost_analysis(xla_bridge.get_backend("cpu"), lowered.compiler_ir("hlo").as_hlo_module())
    return {
        "flops": float(cost.get("flops", 0.0)) / devices,
        "bytes_accessed": 0.0,
        "bytes_unfused": float(cost.get("bytes accessed", 0.0)) / devices,
        "source": f"unoptimised program / {devices} device(s)",
    }


def run(payload: dict[str, Any]) -> dict[str, Any]:
    stage = "config"
    try:
        config = load_config(payload["config"], payload.get("options"), payload.get("overrides", {}))
        import jax
        import numpy as np

        from lra.training.checks import validate_config

        stage = "devices"
        devices = devices_for(payload["target"])
        stage = "config"
        validate_config(config, num_devices=len(devices))
        seeds = list(range(int(payload.get("seeds", 1))))
        stage = "model"
        step = abstract_step(config, devices, seeds)
        train, state, batch, init, mesh, shape = step.train, step.state, step.batch, step.init, step.mesh, step.shape
        params = state["params"]
        num_params = int(sum(int(np.prod(x.shape)) for x in jax.tree.leaves(params)) // len(seeds))
        stage = "lowering"
        t0 = time.perf_counter()
        lowered = train.lower(state, batch)
        stage = "compilation"
        compiled = lowered.compile()
        compile_seconds = time.perf_counter() - t0
        result = dict(
            status="ok",
            num_params=num_params,
            devices=len(devices),
            seeds=len(seeds),
            global_batch=int(config.batch_size),
            length=int(config.model.max_len),
            dtype=str(config.model.dtype),
            num_train_steps=int(config.num_train_steps),
            variant=str(config.variant),
            task=str(config.task),
            memory=_memory(compiled),
            cost=_cost(compiled, lowered, len(devices)),
            compile_seconds=compile_seconds,
            jax_version=jax.__version__,
        )
        if payload["target"]["kind"] == "gpu":  # kernel launches per step (lra_lab.bench.hlo_launches)
            from lra_lab.bench.hlo_launches import summary

            result["launches"] = summary(compiled.as_text() or "")
            result["xla_flags"] = os.environ.get("XLA_FLAGS", "")
        if payload.get("measure_steps") and payload["target"]["kind"] == "cpu":
            stage = "measurement"
            result["measured"] = _measure(compiled, init, config, shape, mesh, int(payload["measure_steps"]))
        return result
    except Exception as e:  # reported to the parent with the stage
        return dict(
            status="error",
            stage=stage,
            error=f"{type(e).__name__}: {e}",
            resource_exhausted="RESOURCE_EXHAUSTED" in str(e) or "Ran out of memory" in str(e),
            traceback=traceback.format_exc(limit=4),
        )


def _measure(compiled: Any, init: Any, config: Any, shape: tuple[int, ...], mesh: Any, steps: int) -> dict[str, Any]:
    """Time real steps on this CPU (random tokens): what the estimate is checked against."""
    import jax
    import numpy as np

    from lra.training import hosts

    state = init()
    rng = np.random.default_rng(0)
    batch = {
        "inputs": rng.integers(1, 10, shape).astype(np.int32),
        "labels": rng.integers(0, 2, shape[:2]).astype(np.int32),
        "weights": np.ones(shape[:2], np.float32),
    }
    placed = hosts.shard_batch(batch, hosts.seed_batch_sharded(mesh))
    state, metrics = compiled(state, placed)
    jax.block_until_ready(metrics)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
        times.append(time.perf_counter() - t0)
    times.sort()
    return {"step_seconds_median": times[len(times) // 2], "step_seconds": times, "steps": steps}


def main() -> int:
    payload = json.loads(sys.argv[1])
    result = run(payload)
    print((RESULT if result["status"] == "ok" else ERROR) + json.dumps(result), flush=True)
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    raise SystemExit(main())
