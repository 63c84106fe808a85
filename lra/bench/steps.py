"""Training-step benchmark: steps/s, peak memory, FLOPs and MFU of whole train steps.

One case = (family, length, dtype, seeds) for every registered family (``families()``): the model
of that family's ListOps config (``configs/listops_<family>.py``, or ``configs/listops.py:family=NAME``
for a family without files) at paper scale (Table 2's 6 layers, width 128, 4 heads, MLP 512,
batch 32, and the family's own filter, norms, pooling and dropout) at sequence length N, trained
with the suite's own compiled step (lra.training.steps, AdamW, dropout on) on random tokens, with
S seeds vmapped.

* Speed: ``steps`` timed steps after one compiling step and one warm-up step; the median of
  ``repeats`` timed windows. Steps/s counts program steps; seed-steps/s = S x steps/s.
* FLOPs: XLA's cost analysis of the compiled step (all S seeds), i.e. what the program asks of the
  device, recomputation included.
* MFU: achieved FLOP/s (FLOPs x steps/s) over the rate of a dense matmul of the same dtype
  (``matmul_size`` squared, measured in the same process), so the ratio does not depend on a
  datasheet number.
* Memory: XLA's compiled memory analysis (arguments + outputs + temporaries - aliased); with
  ``isolate`` (the default where the device reports memory_stats, e.g. GPU) each case runs in a
  fresh process and the device's ``peak_bytes_in_use`` is recorded too.

``python scripts/bench_training.py steps --help`` for the grid flags; ``seeds`` measures 5 seeds
vmapped against 5 sequential runs of the real training loop.
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
from lra.bench import device_turns
from lra.bench.device_info import compiled_bytes, environment, memory_stats
from lra.console import mib_cell


def families() -> tuple[str, ...]:
    """Every registered family, in registration order: a family registered later is benchmarked too."""
    return tuple(attention.FAMILIES)


def label(family: str) -> str:
    """The family's table row at its defaults (``Luna-16``); a name no longer registered (an old record's) as is."""
    return attention.FAMILIES[family].default_label() if family in attention.FAMILIES else family


@dataclasses.dataclass(frozen=True)
class Case:
    family: str
    length: int
    dtype: str  # "float32" | "bfloat16"
    seeds: int
    steps: int = 10
    repeats: int = 2
    overrides: tuple[tuple[str, Any], ...] = ()  # config fields, e.g. (("batch_size", 4),)


def case_config(case: Case) -> Any:
    """The family's own ListOps config at paper scale (what ``lra.train`` would train with
    ``configs/listops_<family>.py``, or ``configs/listops.py:family=NAME`` for a family without
    files: its filter, norms, pooling, dropout), at the case's length, dtype and seed count."""
    from lra.family_configs import family_config

    c = family_config("listops", case.family, "paper")
    c.data.max_len = c.model.max_len = case.length
    c.model.dtype = case.dtype
    c.seeds = tuple(range(case.seeds))
    for key, value in case.overrides:
        node = c
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return c


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
    from lra.training import distributed
    from lra.training.schedules import make_optimizer
    from lra.training.steps import make_init, make_steps
    from lra.training.validation import validate_config

    config = case_config(case)
    validate_config(config, num_devices=jax.device_count())
    mesh = distributed.data_mesh()
    vocab, classes, dual = task_shapes(config.task)
    model = build_model(config.model, vocab, classes, dual)
    tx = make_optimizer(config.learning_rate, config.warmup_steps, config.weight_decay, config.grad_clip_norm)
    seeds = list(range(case.seeds))
    train, _ = make_steps(model, tx, config, mesh, seeds)
    init = make_init(model, tx, seeds, jnp.zeros((1, case.length), jnp.int32), distributed.replicated(mesh))
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
    return {
        "config": config,
        "mesh": mesh,
        "init": init_compiled,
        "train": train_compiled,
        "compile_seconds": compile_seconds,
        "flops": float(cost.get("flops", 0.0)) if cost else 0.0,
        "memory": compiled_bytes(train_compiled),
        "vocab": vocab,
        "classes": classes,
    }


def time_case(case: Case, compiled: dict[str, Any]) -> dict[str, Any]:
    """Allocate the state and a random batch, then time the compiled step."""
    from lra.training import distributed

    config, train = compiled["config"], compiled["train"]
    state = compiled["init"]()
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, compiled["vocab"], (case.seeds, config.batch_size, case.length)).astype(np.int32)
    batch = {
        "inputs": tokens,
        "labels": rng.integers(0, compiled["classes"], tokens.shape[:2]).astype(np.int32),
        "weights": np.ones(tokens.shape[:2], np.float32),
    }
    placed = distributed.shard_batch(batch, distributed.seed_batch_sharded(compiled["mesh"]))
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
    }


def measure(case: Case) -> dict[str, Any]:
    """Compile and time one case in this process. Under ``$LRA_BENCH_TURNS`` (lra.bench.device_turns)
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
    """``python -m lra.bench.steps PAYLOAD`` in a fresh process; its last JSON line. The device
    is left to allocate on demand, so that several such processes fit on one GPU at once."""
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    if turns is not None:
        env[device_turns.ENV] = str(turns)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "lra.bench.steps", json.dumps(payload)],
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


def _probe_here(dtypes: Sequence[str], matmul_size: int, command: Sequence[str]) -> dict[str, Any]:
    return {
        "environment": environment(command),
        "memory_stats": bool(memory_stats()),
        "matmul_rates": {d: matmul_rate(d, matmul_size) for d in dtypes},
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
    case_timeout: float | None = None,
    partial: Path | None = None,
    retry_errors: bool = False,
    on_row: Callable[[list[dict[str, Any]]], None] | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Every case's row, in the order of ``cases``.

    ``jobs`` > 1 (isolated only): that many case processes at once, compiling together and timed
    one at a time (lra.bench.device_turns). ``partial``: a JSON-lines file that gets each row as it is
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


def markdown(report: dict[str, Any]) -> str:
    env, s = report["environment"], report["settings"]
    lines = [
        f"# Training-step benchmark: {env['device_kind']} ({env['backend']})",
        "",
        f"Command: `{env['command']}` (git {env['git_commit']}, jax {env['jax_version']}, {env['date']}; "
        f"load average at the end {'/'.join(f'{x:.1f}' for x in env.get('load_average_1_5_15min', []))}).",
        f"Model: paper-scale ListOps of each family (Table 2), overrides {s['overrides'] or 'none'}; "
        f"{s['steps']} timed steps after compilation, median of {s['repeats']} windows. "
        "Steps/s: program steps (all seeds at once); seed-steps/s = seeds x steps/s. MFU: XLA's FLOPs of the "
        "step x steps/s over a dense matmul's rate of the same dtype measured in the same run ("
        + ", ".join(f"{d}: {r / 1e12:.3g} TFLOP/s" for d, r in report["matmul_rates"].items())
        + "). "
        "Memory: XLA's compiled memory analysis"
        + (" and the device's peak (each case in its own process)." if s["isolate"] else ".")
        + (
            f" {s['jobs']} case processes ran at once: they compiled side by side and each was timed with "
            "the device to itself (lra/bench/device_turns.py), so compile seconds include that sharing."
            if s.get("jobs", 1) > 1
            else ""
        ),
        *_earlier_rates_note(report),
        "",
        "| family | N | dtype | seeds | steps/s | seed-steps/s | GFLOP/step | MFU | memory MiB (XLA) | "
        "device peak MiB | compile s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["cases"]:
        head = f"| {label(r['family'])} | {r['length']} | {r['dtype']} | {r['seeds']} "
        if r["status"] != "ok":
            lines.append(head + f"| {r['status']}: {r['reason'][:80]} |||||||")
            continue
        mem = (r.get("memory") or {}).get("total_bytes")
        lines.append(
            head + f"| {r['steps_per_second']:.3g} | {r['seed_steps_per_second']:.3g} | "
            f"{r['flops_per_step'] / 1e9:,.1f} | {100 * r['mfu']:.1f}% | {mib_cell(mem, digits=0)} | "
            f"{mib_cell(r.get('device_peak_bytes'), digits=0)} | {r['compile_seconds']:.1f} |"
        )
    lines += ["", *table2_view(report)]
    return "\n".join(lines) + "\n"


def _earlier_rates_note(report: dict[str, Any]) -> list[str]:
    """Rows resumed from an earlier invocation keep that invocation's matmul rate as their MFU base."""
    rates = report["matmul_rates"]
    earlier = {
        (r["dtype"], r["matmul_flops_per_second"])
        for r in report["cases"]
        if r["status"] == "ok"
        and r.get("matmul_flops_per_second")
        and abs(r["matmul_flops_per_second"] / rates.get(r["dtype"], float("inf")) - 1) > 1e-9
    }
    if not earlier:
        return []
    return [
        "Some rows were measured by an earlier invocation of the same grid (resumed from its partial "
        "file); their MFU is relative to that invocation's matmul rate ("
        + ", ".join(f"{d}: {r / 1e12:.3g} TFLOP/s" for d, r in sorted(earlier))
        + ")."
    ]


def table2_view(report: dict[str, Any]) -> list[str]:
    """The LRA paper's Table 2 layout: speed and memory relative to the Transformer, per length
    (float32, one seed; rows whose Transformer case is missing are left out)."""
    ok = {(r["family"], r["length"], r["dtype"], r["seeds"]): r for r in report["cases"] if r["status"] == "ok"}
    lengths = sorted({r["length"] for r in report["cases"]})
    for dtype, seeds in (("float32", 1), ("bfloat16", 1)):
        if not any(("softmax", n, dtype, seeds) in ok for n in lengths):
            continue
        out = [
            f"Relative to the Transformer ({dtype}, 1 seed; as the LRA paper's Table 2): steps/s ratio "
            "(higher is faster) / memory ratio (XLA, lower is smaller).",
            "",
            "| family | " + " | ".join(f"{n} speed | {n} memory" for n in lengths) + " |",
            "|---|" + "---:|---:|" * len(lengths),
        ]
        for family in dict.fromkeys(r["family"] for r in report["cases"]):
            cells = []
            for n in lengths:
                base, row = ok.get(("softmax", n, dtype, seeds)), ok.get((family, n, dtype, seeds))
                if base is None or row is None:
                    cells += ["", ""]
                    continue
                mb, mr = (base.get("memory") or {}).get("total_bytes"), (row.get("memory") or {}).get("total_bytes")
                cells += [
                    f"{row['steps_per_second'] / base['steps_per_second']:.2f}x",
                    f"{mr / mb:.2f}x" if mb and mr else "",
                ]
            out.append(f"| {label(family)} | " + " | ".join(cells) + " |")
        return out + [""]
    return []


def plot(report: dict[str, Any], path: Path) -> None:
    """Seed-steps/s against length, one panel per (dtype, seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in report["cases"] if r["status"] == "ok"]
    panels = sorted({(r["dtype"], r["seeds"]) for r in ok})
    if not panels:
        return
    fig, axes = plt.subplots(1, len(panels), figsize=(4.5 * len(panels) + 2.5, 4), squeeze=False, sharey=True)
    families = list(dict.fromkeys(r["family"] for r in ok))
    colours = {f: plt.get_cmap("tab10")(i % 10) for i, f in enumerate(families)}  # one colour per family in every panel
    handles: dict[str, Any] = {}  # the legend lists every family, not only the last panel's
    for ax, (dtype, seeds) in zip(axes[0], panels, strict=False):
        for family in families:
            rows = sorted(
                (r for r in ok if (r["family"], r["dtype"], r["seeds"]) == (family, dtype, seeds)),
                key=lambda r: r["length"],
            )
            if rows:
                (handles[family],) = ax.plot(
                    [r["length"] for r in rows],
                    [r["seed_steps_per_second"] for r in rows],
                    marker="o",
                    color=colours[family],
                    label=label(family),
                )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length N")
        ax.set_title(f"{dtype}, {seeds} seed{'s' if seeds > 1 else ''}")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("seed-steps per second")
    axes[0][-1].legend(
        [handles[f] for f in families],
        [label(f) for f in families],
        loc="center left",
        bbox_to_anchor=(1.02, 0.5),
        fontsize=8,
    )
    env, s = report["environment"], report["settings"]
    fig.suptitle(
        f"Training steps, paper-scale ListOps models, {env['device_kind']}"
        + (f" (overrides: {s['overrides']})" if s["overrides"] else ""),
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def write_report(
    cases: list[dict[str, Any]], probed: dict[str, Any], settings: dict[str, Any], out: Path, name: str
) -> dict[str, Any]:
    """``<name>.json``, ``.md`` and ``.png`` under ``out`` (rewritten after every case, so a killed
    grid leaves a report of what it measured)."""
    report = {
        "environment": {**probed["environment"], "load_average_1_5_15min": list(os.getloadavg())},
        "settings": settings,
        "matmul_rates": probed["matmul_rates"],
        "cases": cases,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / f"{name}.md").write_text(markdown(report))
    plot(report, out / f"{name}.png")
    return report


# -- several seeds in one program against one after another (the real training loop) -------------


def _train_cli(config_path: Path, workdir: Path, seeds: Sequence[int], steps: int, data_dir: str) -> dict[str, Any]:
    """One ``python -m lra.train`` process; its wall time and each seed's result.json."""
    flag = f"--config.seeds={','.join(map(str, seeds))}" if len(seeds) > 1 else f"--config.seed={seeds[0]}"
    cmd = [
        sys.executable,
        "-m",
        "lra.train",
        f"--config={config_path}:cpu",
        f"--workdir={workdir}",
        flag,
        f"--config.num_train_steps={steps}",
        f"--config.eval_every={steps}",
        f"--config.checkpoint_every={steps}",
        *([f"--config.data_dir={data_dir}"] if data_dir else []),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    dirs = [workdir] if len(seeds) == 1 else [workdir / f"seed{k}" for k in seeds]
    return {"wall_seconds": wall, "results": [json.loads((d / "result.json").read_text()) for d in dirs]}


def bucket_padding_cost(config: Any, seeds: Sequence[int], steps: int) -> dict[str, float]:
    """Mean padded tokens per seed-step: each seed's own bucket order, the shared order the
    bundle uses, and padding every step to the longest bucket any seed drew (the alternative)."""
    from lra.data import load_task
    from lra.data.batching import TrainBatches

    train = load_task(config).train
    own = [TrainBatches(train, config.batch_size, s, config.data.buckets, config.data.max_len) for s in seeds]
    shared = [
        TrainBatches(train, config.batch_size, s, config.data.buckets, config.data.max_len, seeds[0]) for s in seeds
    ]
    own_len = np.mean([[b.plan(t)[1] for b in own] for t in range(steps)])
    shared_len = np.mean([[b.plan(t)[1] for b in shared] for t in range(steps)])
    padded_len = np.mean([max(b.plan(t)[1] for b in own) for t in range(steps)])
    return {"own_order": float(own_len), "shared_order": float(shared_len), "pad_to_longest": float(padded_len)}


def seeds_vs_sequential(
    config_paths: Sequence[Path],
    seeds: Sequence[int],
    steps: int,
    root: Path,
    data_dir: str,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """For each config: ``seeds`` trained one after another, then in one vmapped program."""
    from lra.defaults import load_config_file
    from lra.training.seeds import seed_config  # noqa: F401  (the bundle's config rule, documented there)

    rows = []
    for path in config_paths:
        config = load_config_file(path).get_config("cpu")
        if data_dir:
            config.data_dir = data_dir
        sequential = []
        for k in seeds:
            sequential.append(_train_cli(path, root / path.stem / f"single{k}", [k], steps, data_dir))
            log(
                f"{config.variant} seed {k} alone: {sequential[-1]['results'][0]['steps_per_second']:.3g} steps/s, "
                f"{sequential[-1]['wall_seconds']:.0f} s wall"
            )
        bundle = _train_cli(path, root / path.stem / "bundle", list(seeds), steps, data_dir)
        seq_train = sum(r["results"][0]["train_seconds"] for r in sequential)
        seq_wall = sum(r["wall_seconds"] for r in sequential)
        bundle_train = bundle["results"][0]["train_seconds"]
        row = {
            "config": str(path),
            "variant": config.variant,
            "seeds": list(seeds),
            "steps": steps,
            "sequential_train_seconds": seq_train,
            "sequential_wall_seconds": seq_wall,
            "bundle_train_seconds": bundle_train,
            "bundle_wall_seconds": bundle["wall_seconds"],
            "sequential_seed_steps_per_second": len(seeds) * steps / seq_train,
            "bundle_seed_steps_per_second": len(seeds) * steps / bundle_train,
            "speedup_train": seq_train / bundle_train,
            "speedup_wall": seq_wall / bundle["wall_seconds"],
            "test_accuracy_sequential": [r["results"][0]["test_accuracy"] for r in sequential],
            "test_accuracy_bundle": [r["test_accuracy"] for r in bundle["results"]],
            "bucket_padding": bucket_padding_cost(config, seeds, steps) if len(config.data.buckets) else None,
        }
        log(
            f"{config.variant}: {len(seeds)} seeds vmapped {row['bundle_seed_steps_per_second']:.3g} seed-steps/s vs "
            f"sequential {row['sequential_seed_steps_per_second']:.3g} (x{row['speedup_train']:.2f} training time, "
            f"x{row['speedup_wall']:.2f} wall)"
        )
        rows.append(row)
    return rows


def seeds_markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# {len(report['rows'][0]['seeds'])} seeds in one program vs one after another: {env['device_kind']} "
        f"({env['backend']}, {env['cpu_count']} cores)",
        "",
        f"Command: `{env['command']}` (git {env['git_commit']}, jax {env['jax_version']}, {env['date']}; "
        f"load average at the end {'/'.join(f'{x:.1f}' for x in env.get('load_average_1_5_15min', []))}).",
        "Each run is `python -m lra.train` on the config's `cpu` preset for the steps shown (validation and a "
        "checkpoint at the end only). Training seconds exclude compilation, evaluation and checkpoints "
        "(result.json's `train_seconds`); wall seconds are the whole processes (start-up, data, compilation, "
        "evaluation). Seed-steps/s = seeds x steps / training seconds.",
        "",
        "| variant | steps | sequential seed-steps/s | vmapped seed-steps/s | speed-up (training) | "
        "sequential wall s | vmapped wall s | speed-up (wall) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["rows"]:
        lines.append(
            f"| {r['variant']} | {r['steps']} | {r['sequential_seed_steps_per_second']:.3g} | "
            f"{r['bundle_seed_steps_per_second']:.3g} | x{r['speedup_train']:.2f} | "
            f"{r['sequential_wall_seconds']:.0f} | {r['bundle_wall_seconds']:.0f} | x{r['speedup_wall']:.2f} |"
        )
    pads = [(r["variant"], r["bucket_padding"]) for r in report["rows"] if r["bucket_padding"]]
    if pads:
        lines += [
            "",
            "Length buckets: mean padded length per seed-step over these steps. The seeds of one program "
            "share the first seed's bucket order (no padding beyond each seed's own bucket); padding every "
            "step to the longest bucket any seed drew would cost the last column.",
            "",
            "| variant | own order | shared order (used) | pad to the longest |",
            "|---|---:|---:|---:|",
        ]
        for variant, p in pads:
            lines.append(
                f"| {variant} | {p['own_order']:.0f} | {p['shared_order']:.0f} | {p['pad_to_longest']:.0f} "
                f"(x{p['pad_to_longest'] / p['shared_order']:.2f}) |"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    _child_main(sys.argv[1])
