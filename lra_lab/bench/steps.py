"""Training-step benchmark: steps/s, peak memory, FLOPs and MFU of whole train steps.

One case = (family, length, dtype, seeds) for every registered family (``families()``): the model
of that family's ListOps config (``configs/listops_<family>.py``, or ``configs/listops.py:family=NAME``
for a family without files) at paper scale (Table 2's 6 layers, width 128, 4 heads, MLP 512,
batch 32, and the family's own filter, norms, pooling and dropout) at sequence length N, trained
with the suite's own compiled step (lra.training.step, AdamW, dropout on) on random tokens, with
S seeds vmapped.

* Speed: ``steps`` timed steps after one compiling step and one warm-up step; the median of
  ``repeats`` timed windows. Steps/s counts program steps; seed-steps/s = S x steps/s.
* FLOPs: XLA's cost analysis of the compiled step (all S seeds), i.e. what the program asks of the
  device, recomputation included.
* MFU: achieved FLOP/s (FLOPs x steps/s) over the rate of a dense matmul of the same dtype
  (``matmul_size`` squared, measured in the same process), so the ratio does not depend on a
  datasheet number; and over the device's datasheet peak (``mfu_datasheet``, :func:`datasheet_peaks`:
  an H100 or H200 SXM's 989 TFLOP/s dense bfloat16, 495 TF32 for float32), which a step of width
  128 and head size 32 cannot approach (issue 50: its matmuls are memory-bound).
* Launches: the compiled step's kernels per step (:mod:`lra_lab.bench.hlo_launches`), with the XLA
  flags of the run and its command-buffer setting (:func:`xla_settings`).
* ``Transformer (flash)`` (:data:`VARIANTS`): the Transformer on cuDNN's fused attention,
  bfloat16 and no attention dropout, beside the paper's Transformer row.
* Memory: XLA's compiled memory analysis (arguments + outputs + temporaries - aliased); with
  ``isolate`` (the default where the device reports memory_stats, e.g. GPU) each case runs in a
  fresh process and the device's ``peak_bytes_in_use`` is recorded too.

``python scripts/bench_training.py steps --help`` for the grid flags. The report (tables, figure) is
:mod:`lra_lab.bench.steps_report`; ``seeds`` (5 seeds vmapped against 5 sequential runs of the real
training loop) is :mod:`lra_lab.bench.seeds_vs_sequential`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lra import attention
from lra_lab.bench import device_turns
from lra_lab.bench.device_info import compiled_bytes, environment, memory_stats


def families() -> tuple[str, ...]:
    """Every registered family, in registration order: a family registered later is benchmarked too."""
    return tuple(attention.FAMILIES)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A row of the grid that is a registered family with settings of its own (not a family)."""

    family: str  # the registered family whose ListOps config it starts from
    label: str
    overrides: tuple[tuple[str, Any], ...]  # config fields set before the case's own overrides
    dtypes: tuple[str, ...]  # the dtypes it runs in (the grid skips it in the others)


# The Transformer on cuDNN's fused (flash) attention: what a GPU user runs where it applies
# (bfloat16, no attention dropout; lra/attention/softmax.py), beside the paper's Transformer row
# (XLA's attention, with the paper's attention dropout), so every family is compared with both.
VARIANTS = {
    "softmax_flash": Variant(
        "softmax",
        "Transformer (flash)",
        (("model.attention_kwargs.implementation", "cudnn"), ("model.attention_dropout_rate", 0.0)),
        ("bfloat16",),
    )
}


def grid_families() -> tuple[str, ...]:
    """The rows of the benchmark's grid: every registered family, then the :data:`VARIANTS`."""
    return (*families(), *VARIANTS)


def runs_in(family: str, dtype: str) -> bool:
    """Whether the grid has ``family`` (or variant) in ``dtype`` (the flash Transformer: bfloat16 only)."""
    return family not in VARIANTS or dtype in VARIANTS[family].dtypes


def label(family: str) -> str:
    """The family's table row at its defaults (``Luna-16``); a name no longer registered (an old record's) as is."""
    if family in VARIANTS:
        return VARIANTS[family].label
    return attention.FAMILIES[family].default_label() if family in attention.FAMILIES else family


@dataclasses.dataclass(frozen=True)
class Case:
    family: str
    length: int
    dtype: str  # "float32" | "bfloat16"
    seeds: int
    steps: int = 10
    repeats: int = 2
    # config fields with the values the config types them as, e.g. (("batch_size", 4),): what
    # --config.batch_size=4 sets (typed_overrides); a record's identity (case_key) compares values
    overrides: tuple[tuple[str, Any], ...] = ()


def case_config(case: Case) -> Any:
    """The family's own ListOps config at paper scale (what ``lra.train`` would train with
    ``configs/listops_<family>.py``, or ``configs/listops.py:family=NAME`` for a family without
    files: its filter, norms, pooling, dropout), at the case's length, dtype and seed count, then
    the case's overrides: every field set as ``--config.FIELD=VALUE`` sets it (lra.config_args)."""
    from lra.config_args import config_from_args
    from lra.config_fields import value_text
    from lra.family_configs import config_spec

    variant = VARIANTS.get(case.family)
    path, first = config_spec("listops", variant.family if variant else case.family)
    fields = [
        ("data.max_len", str(case.length)),
        ("model.max_len", str(case.length)),
        ("model.dtype", case.dtype),
        ("seeds", ",".join(str(s) for s in range(case.seeds))),
        *((dotted, value_text(value)) for dotted, value in (variant.overrides if variant else ())),
        *((dotted, value_text(value)) for dotted, value in case.overrides),
    ]
    return config_from_args(f"{path}:{','.join(filter(None, [first, 'paper']))}", fields)


def typed_overrides(families: Sequence[str], fields: Sequence[tuple[str, str]]) -> tuple[tuple[str, Any], ...]:
    """``--config.FIELD=VALUE`` texts as the (field, value) pairs of a :class:`Case`, each value the
    type its config gives it (``batch_size=4`` -> 4, as the records before the one grammar hold it),
    a family option under its field name (``model.attention_kwargs.mem`` -> ``...memory_size``).
    Every family's config is built with them first: a misspelt field, a mistyped value or an option
    a family lacks is one InputError naming it, before any case runs. The last of repeats wins."""
    from lra.config_args import FAMILY_PREFIX, field_value
    from lra.config_fields import OPTION_ALIASES

    def canonical(dotted: str) -> str:
        if not dotted.startswith(FAMILY_PREFIX):
            return dotted
        option = dotted[len(FAMILY_PREFIX) :]
        return FAMILY_PREFIX + OPTION_ALIASES.get(option, option)

    typed: dict[str, Any] = {}
    for family in families:
        config = case_config(Case(family, 16, "float32", 1, overrides=tuple(fields)))
        typed.update({canonical(d): field_value(config, canonical(d)) for d, _ in fields})
    return tuple(typed.items())


def matmul_rate(dtype: str, size: int) -> float:
    """FLOP/s of a dense ``size`` x ``size`` matmul in ``dtype`` (median of 5 timed calls)."""
    a = jax.random.normal(jax.random.key(0), (size, size), jnp.dtype(dtype))
    f = jax.jit(lambda x, y: x @ y)
    jax.block_until_ready(f(a, a))
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        jax.block_until_ready(f(a, a))
        times.append(time.perf_counter() - t0)
    return 2 * size**3 / statistics.median(times)


def compile_case(case: Case) -> dict[str, Any]:
    """Compile the case's init and train step from shapes alone (no device memory is allocated,
    so other cases can compile while one is timed); what ``time_case`` needs."""
    from lra.data import task_shapes
    from lra.model import build_model
    from lra.training import hosts
    from lra.training.checks import validate_config
    from lra.training.step import make_init, make_optimizer, make_steps

    config = case_config(case)
    validate_config(config, num_devices=jax.device_count())
    mesh = hosts.data_mesh()
    vocab, classes, dual = task_shapes(config.task)
    model = build_model(config.model, vocab, classes, dual)
    tx = make_optimizer(config.learning_rate, config.warmup_steps, config.weight_decay, config.grad_clip_norm)
    seeds = list(range(case.seeds))
    train, _ = make_steps(model, tx, config, mesh, seeds)
    init = make_init(model, tx, seeds, jnp.zeros((1, case.length), jnp.int32), hosts.replicated(mesh))
    shape_SxB = (case.seeds, config.batch_size, case.length)
    batch = {
        "inputs": jax.ShapeDtypeStruct(shape_SxB, jnp.int32),
        "labels": jax.ShapeDtypeStruct(shape_SxB[:2], jnp.int32),
        "weights": jax.ShapeDtypeStruct(shape_SxB[:2], jnp.float32),
    }
    t0 = time.perf_counter()
    init_compiled = init.lower().compile()
    train_compiled = train.lower(jax.eval_shape(init), batch).compile()
    compile_seconds = time.perf_counter() - t0
    cost = train_compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    from lra_lab.bench.hlo_launches import summary

    launches = summary(train_compiled.as_text() or "")
    return {
        "config": config,
        "mesh": mesh,
        "init": init.bind(init_compiled),  # the seeds' keys, the programs' last argument (step.Seeded)
        "train": train.bind(train_compiled),
        "compile_seconds": compile_seconds,
        "flops": float(cost.get("flops", 0.0)) if cost else 0.0,
        "memory": compiled_bytes(train_compiled),
        # the compiled step's launches (lra_lab.bench.hlo_launches): on a GPU, the kernels a step runs
        "launches": {k: launches[k] for k in ("kernels", "while_loops", "sorts", "scatters")},
        "vocab": vocab,
        "classes": classes,
    }


def time_case(case: Case, compiled: dict[str, Any]) -> dict[str, Any]:
    """Allocate the state and a random batch, then time the compiled step."""
    from lra.training import hosts

    config, train = compiled["config"], compiled["train"]
    state = compiled["init"]()
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, compiled["vocab"], (case.seeds, config.batch_size, case.length)).astype(np.int32)
    batch = {
        "inputs": tokens,
        "labels": rng.integers(0, compiled["classes"], tokens.shape[:2]).astype(np.int32),
        "weights": np.ones(tokens.shape[:2], np.float32),
    }
    placed = hosts.shard_batch(batch, hosts.seed_batch_sharded(compiled["mesh"]))
    state, metrics = train(state, placed)  # warm-up
    jax.block_until_ready(metrics)
    windows = []
    for _ in range(case.repeats):
        t0 = time.perf_counter()
        for _ in range(case.steps):
            state, metrics = train(state, batch)
        jax.block_until_ready(metrics)
        windows.append(case.steps / (time.perf_counter() - t0))
    loss = float(np.mean(jax.device_get(metrics["loss"])))
    num_params = int(sum(np.prod(x.shape) for x in jax.tree.leaves(state["params"])) // case.seeds)
    return {
        **dataclasses.asdict(case),
        "status": "ok",
        "num_params": num_params,
        "batch_size": int(config.batch_size),
        "num_layers": int(config.model.num_layers),
        "emb_dim": int(config.model.emb_dim),
        "compile_seconds": compiled["compile_seconds"],
        "steps_per_second": statistics.median(windows),
        "steps_per_second_runs": windows,
        "seed_steps_per_second": case.seeds * statistics.median(windows),
        "flops_per_step": compiled["flops"],
        "loss_finite": bool(np.isfinite(loss)),
        "memory": compiled["memory"],
        "launches": compiled["launches"],
        "implementation": dict(config.model.attention_kwargs).get("implementation"),
        "attention_dropout_rate": float(config.model.attention_dropout_rate),
    }


def measure(case: Case) -> dict[str, Any]:
    """Compile and time one case in this process. Under ``$LRA_BENCH_TURNS`` (lra_lab.bench.device_turns)
    the compilation shares the device with other processes' and the timing has it alone; the
    windows of both are in the result."""
    with device_turns.compiling() as compile_window:
        compiled = compile_case(case)
    with device_turns.timing() as timed_window:
        result = time_case(case, compiled)
    return {**result, "compile_window": compile_window, "timed_window": timed_window}


def _error(case: Case, reason: str) -> dict[str, Any]:
    return {**dataclasses.asdict(case), "status": "error", "reason": reason}


def _child(payload: dict[str, Any], timeout: float | None, turns: Path | None) -> dict[str, Any]:
    """``python -m lra_lab.bench.steps PAYLOAD`` in a fresh process; its last JSON line. The device
    is left to allocate on demand, so that several such processes fit on one GPU at once."""
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if turns is not None:
        env[device_turns.ENV] = str(turns)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "lra_lab.bench.steps", json.dumps(payload)],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"timed out after {timeout:.0f} s (--case-timeout)") from None
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"subprocess exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    return json.loads(lines[-1])


def _isolated(case: Case, timeout: float | None = None, turns: Path | None = None) -> dict[str, Any]:
    """One case in a fresh process: the device's peak memory is then the case's own."""
    try:
        return _child({"case": dataclasses.asdict(case)}, timeout, turns)
    except (TimeoutError, RuntimeError) as e:
        return _error(case, str(e))


def probe(dtypes: Sequence[str], matmul_size: int, command: Sequence[str], isolate: bool) -> dict[str, Any]:
    """The environment, whether the device reports memory, and the dense matmul rate of each
    dtype; in a child process when ``isolate`` (the parent then never holds device memory that
    the cases' processes would lack)."""
    payload: dict[str, Any] = {
        "probe": {"dtypes": sorted(set(dtypes)), "matmul_size": matmul_size, "command": list(command)}
    }
    return _child(payload, None, None) if isolate else _probe_here(**payload["probe"])


def datasheet_peaks(device_kind: str) -> dict[str, Any] | None:
    """The device's datasheet peak FLOP/s per dtype (lra_lab.preflight.targets: dense bfloat16; for
    float32 the TF32 tensor-core rate, which XLA's default precision uses for float32 matmuls on
    NVIDIA GPUs, and the non-tensor float32 rate beside it), None for a device not listed there."""
    from lra_lab.preflight.targets import chip_of_device

    chip = chip_of_device(device_kind)
    if chip is None:
        return None
    return {
        "chip": chip.name,
        "bfloat16": chip.bf16_flops,
        "float32": chip.f32_flops,
        "float32_non_tensor": chip.f32_non_tensor_flops,
        "source": "lra_lab/preflight/targets.py (vendor datasheets, dense)",
    }


def xla_settings() -> dict[str, Any]:
    """The XLA flags this process runs with and the command-buffer (CUDA graph) settings among
    them: XLA's own defaults (jaxlib's) where ``--xla_gpu_enable_command_buffer`` and
    ``--xla_gpu_graph_min_graph_size`` are not set. XLA groups a step's kernels into command
    buffers after the compiled HLO (a pass over the thunk sequence), so which were grouped is not
    read back here: the settings are what decides it."""
    flags = os.environ.get("XLA_FLAGS", "")
    given = [f for f in flags.split() if f.startswith("--xla_gpu_enable_command_buffer")]
    from importlib.metadata import version

    return {
        "XLA_FLAGS": flags,
        "command_buffer": given[-1].partition("=")[2] if given else f"XLA default (jaxlib {version('jaxlib')})",
        "graph_min_size": next(
            (f.partition("=")[2] for f in reversed(flags.split()) if f.startswith("--xla_gpu_graph_min_graph_size")),
            "XLA default",
        ),
    }


def _probe_here(dtypes: Sequence[str], matmul_size: int, command: Sequence[str]) -> dict[str, Any]:
    env = environment(command)
    return {
        "environment": {**env, "xla": xla_settings()},
        "memory_stats": bool(memory_stats()),
        "matmul_rates": {d: matmul_rate(d, matmul_size) for d in dtypes},
        "datasheet_peaks": datasheet_peaks(env["device_kind"]),
    }


def _child_main(payload: str) -> None:
    spec = json.loads(payload)
    if "probe" in spec:
        print(json.dumps(_probe_here(**spec["probe"])))
        return
    case = spec["case"]
    case["overrides"] = tuple(tuple(kv) for kv in case["overrides"])
    result = _safe_measure(Case(**case))
    stats = memory_stats()  # this process ran one case: its peak is the case's
    if result["status"] == "ok" and stats and "peak_bytes_in_use" in stats:
        result["device_peak_bytes"] = int(stats["peak_bytes_in_use"])
    print(json.dumps(result))


def _safe_measure(case: Case) -> dict[str, Any]:
    try:
        return measure(case)
    except Exception as e:  # an out-of-memory case is a row, not the end of the benchmark
        return _error(case, f"{type(e).__name__}: {str(e)[:300]}")


def case_key(row: dict[str, Any]) -> str:
    """A case's identity in the partial file (its Case fields)."""
    fields = {f.name: row[f.name] for f in dataclasses.fields(Case)}
    fields["overrides"] = [list(kv) for kv in fields["overrides"]]
    return json.dumps(fields, sort_keys=True)


def read_partial(path: Path) -> list[dict[str, Any]]:
    """The rows a previous (perhaps killed) run of the same grid wrote; a torn last line is dropped."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def run_grid(
    cases: Sequence[Case],
    isolate: bool,
    rates: dict[str, float],
    jobs: int = 1,
    peaks: dict[str, Any] | None = None,
    case_timeout: float | None = None,
    partial: Path | None = None,
    retry_errors: bool = False,
    on_row: Callable[[list[dict[str, Any]]], None] | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Every case's row, in the order of ``cases``.

    ``rates``: the measured matmul FLOP/s per dtype (MFU's base); ``peaks``: the device's datasheet
    FLOP/s per dtype (:func:`datasheet_peaks`; ``mfu_datasheet``), None where it has none.
    ``jobs`` > 1 (isolated only): that many case processes at once, compiling together and timed
    one at a time (lra_lab.bench.device_turns). ``partial``: a JSON-lines file that gets each row as it is
    measured; rows already there are kept and their cases skipped (errors are retried with
    ``retry_errors``), so a killed grid resumes. ``on_row(rows so far)`` after each new row."""
    import concurrent.futures
    import tempfile

    if jobs > 1 and not isolate:
        raise ValueError("--jobs > 1 runs each case in its own process: use --isolate on (or auto)")
    if partial is not None and partial.exists() and not partial.read_bytes().endswith(b"\n"):
        with open(partial, "a") as f:  # a kill cut the last line: new rows start on a line of their own
            f.write("\n")
    done = {case_key(r): r for r in read_partial(partial)} if partial else {}
    if retry_errors:
        done = {k: r for k, r in done.items() if r.get("status") == "ok"}
    keys = [case_key(dataclasses.asdict(c)) for c in cases]
    todo = [(c, k) for c, k in zip(cases, keys, strict=False) if k not in done]
    rows = {k: done[k] for k in keys if k in done}
    if rows:
        log(f"{len(rows)} of {len(cases)} cases already measured in {partial}; measuring the other {len(todo)}")

    def finish(case: Case, key: str, r: dict[str, Any], seconds: str) -> None:
        name = f"{case.family} N={case.length} {case.dtype} x{case.seeds} seeds"
        if r["status"] == "ok":
            achieved = r["flops_per_step"] * r["steps_per_second"]
            r["achieved_flops_per_second"] = achieved
            r["matmul_flops_per_second"] = rates.get(case.dtype)
            r["mfu"] = achieved / rates[case.dtype] if rates.get(case.dtype) else None
            # against the datasheet (bfloat16: dense tensor cores; float32: TF32, see datasheet_peaks)
            r["peak_flops_per_second"] = (peaks or {}).get(case.dtype)
            r["mfu_datasheet"] = achieved / r["peak_flops_per_second"] if r["peak_flops_per_second"] else None
            log(
                f"[{len(rows) + 1}/{len(cases)}] {name}: {r['steps_per_second']:.3g} steps/s, "
                f"MFU {100 * r['mfu']:.1f}% ({seconds})"
            )
        else:
            log(f"[{len(rows) + 1}/{len(cases)}] {name}: {r['reason']}")
        rows[key] = r
        if partial is not None:
            partial.parent.mkdir(parents=True, exist_ok=True)
            with open(partial, "a") as f:
                f.write(json.dumps(r) + "\n")
                f.flush()
                os.fsync(f.fileno())
        if on_row is not None:
            on_row(ordered())

    def ordered() -> list[dict[str, Any]]:
        return [rows[k] for k in keys if k in rows]

    if not isolate:
        for case, key in todo:
            t0 = time.perf_counter()
            finish(case, key, _safe_measure(case), f"{time.perf_counter() - t0:.0f} s")
        return ordered()
    with (
        tempfile.TemporaryDirectory(prefix="lra_bench_turns_") as turns,
        concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool,
    ):
        started = time.perf_counter()
        futures = {pool.submit(_isolated, c, case_timeout, Path(turns) if jobs > 1 else None): (c, k) for c, k in todo}
        for future in concurrent.futures.as_completed(futures):
            finish(*futures[future], future.result(), f"{time.perf_counter() - started:.0f} s since the start")
    return ordered()


if __name__ == "__main__":
    _child_main(sys.argv[1])
