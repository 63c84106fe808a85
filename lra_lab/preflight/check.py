"""One config on one target: compile its train step in a child process (or read the cache), then
the estimate, the verdict and the report lines. ``python -m lra_lab.preflight`` is the command line."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from lra.console import binary_bytes
from lra.training.hosts import ChildSignals
from lra_lab.preflight import cache, estimate, targets
from lra_lab.preflight.compile_step import ERROR, RESULT


class PreflightError(Exception):
    """Bad input: one error line, exit 2."""


# The compile children running now: SIGTERM/SIGINT to this process is passed on to them (``sweep
# --jobs N`` runs several), nothing new starts, and the command says which were interrupted (PF7).
COMPILES = ChildSignals("stopping {count} running compilation(s) ({labels}) and waiting for them; nothing new starts")


def check_sizes(config: Any, target: targets.Target, seeds: int = 1) -> None:
    """Sizes no compile can answer, refused before compiling (issue 52 PF2: ``max_len=1e9`` compiled
    ~60 s, then "cannot tell" with a C++ overflow): the position table (``model.max_len`` x
    ``emb_dim`` floats, every model has one) against the target's memory (the host's for the CPU),
    and a sequence length past 2^31."""
    m = config.model
    elements = int(m.max_len) * int(m.emb_dim) * max(1, seeds)
    capacity = estimate.memory_capacity(target, _host_memory() if target.kind == "cpu" else None)
    if int(m.max_len) >= 2**31 or (capacity is not None and 4 * elements > capacity):
        have = f"target {target.name}: {binary_bytes(capacity, digits=1)}" if capacity else "a length past 2^31"
        raise PreflightError(
            f"config.model.max_len={m.max_len} x emb_dim={m.emb_dim}: the position table alone is "
            f"{binary_bytes(4 * elements, digits=1)} ({have}); lower config.model.max_len (and data.max_len)"
        )


def _host_memory() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


@functools.cache
def check_python(python: str) -> None:
    """``--python`` must run and import this suite (PF4): otherwise one line naming it, before any compile."""
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return
    try:
        probe = subprocess.run(
            [python, "-c", "import jax, lra_lab.preflight.compile_step"], capture_output=True, text=True, timeout=600
        )
    except (OSError, subprocess.SubprocessError) as e:
        raise PreflightError(
            f"--python {python}: cannot run it ({getattr(e, 'strerror', None) or e}); give the "
            "interpreter that compiles (a venv with this suite installed, e.g. VENV/bin/python)"
        ) from None
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise PreflightError(
            f"--python {python}: `import jax, lra_lab.preflight.compile_step` exited {probe.returncode} "
            f"({last}); give an interpreter with jax and this suite installed (pip install -e .)"
        )


def _split_config(spec: str) -> tuple[str, str | None]:
    path, sep, options = spec.partition(".py:")
    path = path + ".py" if sep else spec
    if not Path(path).is_file():
        raise PreflightError(f"--config {spec}: no such file {path!r} (give configs/<task>_<attention>.py[:OPTIONS])")
    return path, (options or None) if sep else None


def child_environment(target: targets.Target) -> dict[str, str]:
    """The child's environment: the target's platform and flags only there, never in this process."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"  # TPU/GPU programs compile against a topology description, no device
    if target.kind == "tpu":
        env["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"  # a second libtpu process (e.g. training beside us)
        env.setdefault("TPU_SKIP_MDS_QUERY", "1")
    if target.kind == "gpu":
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_gpu_enable_triton_gemm=false").strip()
    return env


def check_compiler(target: targets.Target, python: str) -> None:
    """A target whose compiler is not installed in ``python`` is refused naming the extra."""
    module = {"tpu": "libtpu", "gpu": "jax_cuda12_plugin"}.get(target.kind)
    if module is None:
        return
    probe = subprocess.run(
        [python, "-c", f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"],
        capture_output=True,
    )
    if probe.returncode != 0:
        extra = "preflight-tpu" if target.kind == "tpu" else "preflight-gpu"
        raise PreflightError(
            f'target {target.name!r} needs {module}, not installed for {python}: pip install -e ".[{extra}]" '
            f"(best in its own venv, then pass --python VENV/bin/python)"
        )


def gpu_target_config(target: targets.Target) -> str:
    """XLA's target description of the GPU (experimental deviceless path, jax issues #23971, #28376).

    The text protos live in XLA's source tree (``xla/backends/gpu/target_config/specs/``; before 2025
    ``xla/tools/hlo_opt/gpu_specs/``), not in any wheel: point ``LRA_PREFLIGHT_GPU_SPECS`` at a folder
    holding them. A spec newer than the installed jaxlib may name a field its proto lacks; the
    compiler's error names it (jaxlib 0.10.2 lacks ``collective_memory_granularity``): delete that
    line. docs/accelerators.md says which file and commit produced the committed tables."""
    assert target.chip is not None  # a GPU target names its chip
    folder = os.environ.get("LRA_PREFLIGHT_GPU_SPECS", "")
    path = Path(folder) / target.chip.gpu_spec
    if not folder or not path.is_file():
        raise PreflightError(
            f"target {target.name!r} (experimental) needs XLA's GPU description {target.chip.gpu_spec}: set "
            f"LRA_PREFLIGHT_GPU_SPECS to a folder holding it (openxla/xla: "
            f"xla/backends/gpu/target_config/specs/, formerly xla/tools/hlo_opt/gpu_specs/)"
            + (f"; {path} not found" if folder else "")
        )
    return path.read_text()


def compile_in_child(
    payload: dict[str, Any], target: targets.Target, python: str, quiet: bool = False, label: str = ""
) -> dict[str, Any]:
    """Run compile_step in a child process, with a progress line; Ctrl-C stops the child and re-raises."""
    what = f"{label} " if label else ""
    if not quiet:
        print(f"compiling {what}for {target.name}, {target.devices} device(s) ({target.description}) ...", flush=True)
    proc = COMPILES.start(
        [python, "-m", "lra_lab.preflight.compile_step", json.dumps(payload)],
        label or f"{payload['config']} for {target.name}",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_environment(target),
    )
    done = threading.Event()
    start = time.monotonic()

    def ticker() -> None:
        while not done.wait(30):
            if not quiet:
                print(f"  still compiling {what}for {target.name} ({time.monotonic() - start:.0f} s)", flush=True)

    threading.Thread(target=ticker, daemon=True).start()
    try:
        out, err = proc.communicate()
    finally:  # leaving on an exception (a Ctrl-C outside COMPILES.forwarding): the child is stopped, waited for
        done.set()
        COMPILES.done(proc)
    COMPILES.check()  # a signal stopped it: its result is not one (nothing is cached)
    for line in reversed(out.splitlines()):
        for prefix in (RESULT, ERROR):
            if line.startswith(prefix):
                return json.loads(line[len(prefix) :])
    return {
        "status": "error",
        "stage": "child process",
        "resource_exhausted": "RESOURCE_EXHAUSTED" in err,
        "error": f"exit {proc.returncode}: " + (err.strip().splitlines() or ["no output"])[-1][:300],
    }


def preflight(
    config_spec: str,
    target_name: str,
    *,
    batch: int | None = None,
    seeds: int = 1,
    measure_steps: int = 0,
    python: str = sys.executable,
    cache_dir: Path | None = None,
    use_cache: bool = True,
    overrides: dict[str, Any] | None = None,
    quiet: bool = False,
    label: str = "",
    memory_budget: int | None = None,
) -> dict[str, Any]:
    """Compile (or read from the cache) one config for one target; the result with its estimate and verdict.
    ``memory_budget`` (bytes per device) replaces the device's memory in the verdict."""
    target = targets.parse(target_name)
    path, options = _split_config(config_spec)
    from lra_lab.preflight.compile_step import load_config

    overrides = dict(overrides or {})
    if batch is not None:
        if batch < 1:
            raise PreflightError(f"--batch {batch}: the global batch must be >= 1")
        overrides["batch_size"] = batch
    try:
        config = load_config(path, options, overrides)
        from lra.training.checks import validate_config

        validate_config(config)  # batch_size=0 and the like: refused here, not in the compile child
    except Exception as e:  # noqa: BLE001 -- a config file's own code may raise anything; it is reported, not hidden
        raise PreflightError(f"--config {config_spec}: {type(e).__name__}: {e}") from None
    check_sizes(config, target, seeds)
    check_python(python)
    check_compiler(target, python)
    payload: dict[str, Any] = {
        "config": path,
        "options": options,
        "overrides": overrides,
        "seeds": seeds,
        "measure_steps": measure_steps if target.kind == "cpu" else 0,
        "target": {
            "kind": target.kind,
            "devices": target.devices,
            "topology": target.topology,
            "topology_name": target.chip.topology_name if target.chip else "",
            "chip_config_name": target.chip.chip_config_name if target.chip else "",
        },
    }
    if target.kind == "gpu":
        payload["target"]["target_config"] = gpu_target_config(target)
    directory = cache_dir or cache.default_dir()
    k = cache.key(json.loads(config.to_json_best_effort()), target.name, seeds, payload["measure_steps"], python)
    result = cache.load(directory, k) if use_cache else None
    cached = result is not None
    if result is None:
        result = compile_in_child(payload, target, python, quiet, label)
        if target.kind == "cpu" and result.get("status") == "ok":
            result["cpu"] = _cpu_specs(python)
        if result.get("status") == "ok" or result.get("resource_exhausted"):
            cache.store(directory, k, result)
    result = dict(result, cached=cached, target=target.name, config=config_spec)
    # a failed compile reports no shapes; the verdict's fixes need them (the config's own values)
    result.setdefault("global_batch", int(config.batch_size))
    result.setdefault("devices", target.devices)
    result.setdefault("dtype", str(config.model.dtype))
    cpu = result.get("cpu") or {}
    capacity = memory_budget or estimate.memory_capacity(target, cpu.get("memory_bytes"))
    if memory_budget:
        result["memory_budget"] = int(memory_budget)
    result["verdict"], result["verdict_detail"] = estimate.verdict(result, target, capacity)
    if result.get("status") == "ok":
        result["step_time"] = estimate.step_times(result, target, cpu.get("matmul_flops"), cpu.get("bandwidth"))
        if target.kind == "cpu":
            from lra_lab.preflight.bench_check import comparison

            result["bench_check"] = comparison(result)
    return result


def _cpu_specs(python: str) -> dict[str, Any]:
    """This CPU's matmul rate and copy bandwidth, measured in a child (the CPU target's 'peak')."""
    code = (
        "import json,time,os,numpy as np,jax,jax.numpy as jnp\n"
        "from lra_lab.bench.steps import matmul_rate\n"
        "a=np.ones(32*1024*1024);b=np.empty_like(a);np.copyto(b,a)\n"
        "t=time.perf_counter()\n"
        "for _ in range(5): np.copyto(b,a)\n"
        "dt=(time.perf_counter()-t)/5\n"
        "mem=os.sysconf('SC_PAGE_SIZE')*os.sysconf('SC_PHYS_PAGES')\n"
        "print(json.dumps({'matmul_flops':matmul_rate('float32',1024),'bandwidth':2*a.nbytes/dt,'memory_bytes':mem}))"
    )
    out = subprocess.run(
        [python, "-c", code], capture_output=True, text=True, env={**os.environ, "JAX_PLATFORMS": "cpu"}
    )
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def _rate(flops_per_s: float) -> str:
    """A peak in TFLOP/s for accelerators, GFLOP/s for a CPU (whose rate would print as 0.0 TFLOP/s)."""
    return f"{flops_per_s / 1e12:,.1f} TFLOP/s" if flops_per_s >= 1e12 else f"{flops_per_s / 1e9:,.4g} GFLOP/s"


def report_lines(r: dict[str, Any], price_per_hour: float | None = None, currency: str = "USD") -> list[str]:
    """The one-config report; with ``price_per_hour`` (per device-hour) the run line adds its cost."""
    lines = [f"{r['config']} on {r['target']}{' (cached)' if r.get('cached') else ''}"]
    if r.get("status") != "ok":
        lines.append(f"verdict: {r['verdict']}: {r['verdict_detail']}")
        if r.get("fit"):
            lines.append(r["fit"]["line"])
        return lines
    m, c = r["memory"] or {}, r["cost"]
    per_device = r["global_batch"] // r["devices"]
    lines += [
        f"  {r['variant']} ({r['task']}), {r['num_params']:,} parameters, length {r['length']}, {r['dtype']}, "
        f"global batch {r['global_batch']} ({per_device} per device x {r['devices']} devices), {r['seeds']} seed(s)",
        f"  memory per device (XLA): arguments {binary_bytes(m.get('argument', 0))}, temporaries "
        f"{binary_bytes(m.get('temp', 0))}, outputs {binary_bytes(m.get('output', 0))}, "
        f"total {binary_bytes(m.get('total', 0))}",
        f"  per step and device: {c['flops'] / 1e9:,.3g} GFLOP, "
        + (
            f"{c['bytes_accessed'] / 1e9:,.2f} GB accessed"
            if "bytes_unfused" not in c
            else f"bytes not known ({c['bytes_unfused'] / 1e9:,.1f} GB in the unfused program, an overcount; "
            f"FLOPs from the {c.get('source')})"
        )
        + f" (compiled in {r['compile_seconds']:.0f} s)",
    ]
    st = r.get("step_time")
    if st:
        run_hours = st["estimate"] * r["num_train_steps"] / 3600
        roof = "FLOPs only: bytes not known" if "bytes_unfused" in c else f"{st['bandwidth'] / 1e9:,.0f} GB/s"
        lines.append(
            f"  step time: >= {st['lower_bound'] * 1e3:,.1f} ms (roofline: {_rate(st['peak_flops'])}, {roof}), "
            f"estimate {st['estimate'] * 1e3:,.1f} ms at {st['mfu']:.0%} MFU (assumed; real steps are "
            "slower than the bound)"
        )
        lines.append(
            f"  run: {r['num_train_steps']:,} steps ~ {run_hours:,.2f} h (estimate), "
            f">= {st['lower_bound'] * r['num_train_steps'] / 3600:,.2f} h (bound)"
        )
        if price_per_hour is not None:
            from lra_lab.preflight.estimate import cost_text

            lines.append(
                f"  cost: {r['devices']} device(s) x {run_hours:,.2f} h = "
                f"{cost_text(run_hours * r['devices'], price_per_hour, currency)} (estimate, at the "
                f"price given per device-hour)"
            )
    if r.get("measured"):
        ms = r["measured"]["step_seconds_median"]
        lines.append(
            f"  measured on this CPU: {ms * 1e3:,.1f} ms per step (median of {r['measured']['steps']})"
            + (f"; estimate / measured = {st['estimate'] / ms:.2f}" if st else "")
        )
    if r.get("bench_check"):
        from lra_lab.preflight.bench_check import lines as bench_lines

        lines += bench_lines(r["bench_check"])
    lines.append(f"verdict: {r['verdict']}: {r['verdict_detail']}")
    if r.get("fit"):
        lines.append(r["fit"]["line"])
    return lines


def microbatch_counts(batch_size: int, devices: int) -> list[int]:
    """The microbatch counts a batch allows, smallest first: divisors M of the batch whose
    microbatches still split evenly over the devices (lra.training.step.check_split)."""
    return [m for m in range(1, batch_size + 1) if batch_size % m == 0 and (batch_size // m) % devices == 0]


def fit_microbatches(config_spec: str, target_name: str, **kwargs: Any) -> dict[str, Any]:
    """The smallest ``config.microbatches`` whose step fits the target (or ``memory_budget``): each
    allowed count in increasing order is compiled (cached) until one fits. The result is that
    count's preflight result with ``fit`` = {microbatches, tried: [(count, total bytes, verdict)],
    line}; when none fits, the largest count's result with ``fit.microbatches`` None."""
    target = targets.parse(target_name)
    overrides = dict(kwargs.pop("overrides", None) or {})
    batch = kwargs.pop("batch", None)
    if batch is not None:
        overrides["batch_size"] = batch
    path, options = _split_config(config_spec)
    from lra_lab.preflight.compile_step import load_config

    try:
        config = load_config(path, options, overrides)
    except Exception as e:  # noqa: BLE001 -- reported as one line, as preflight does
        raise PreflightError(f"--config {config_spec}: {type(e).__name__}: {e}") from None
    counts = microbatch_counts(int(config.batch_size), target.devices)
    tried: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    for count in counts:
        result = preflight(config_spec, target_name, overrides={**overrides, "microbatches": count}, **kwargs)
        total = (result.get("memory") or {}).get("total")
        tried.append({"microbatches": count, "total_bytes": total, "verdict": result["verdict"]})
        if result["verdict"] != "does not fit":  # fits, or cannot tell (no memory analysis): stop
            break
    found = tried[-1]["microbatches"] if tried and tried[-1]["verdict"] == "fits" else None
    steps = ", ".join(
        f"{t['microbatches']}: {binary_bytes(t['total_bytes']) if t['total_bytes'] else t['verdict']}" for t in tried
    )
    if found is None:
        line = (
            f"fit: no microbatch count fits (tried {steps}); lower the batch, use --config.model.remat=true "
            f"or bf16 (:bf16)"
        )
    elif found == 1:
        line = "fit: the step fits without microbatches (config.microbatches=1)"
    else:
        line = f"fit: config.microbatches={found} is the smallest count that fits (per-device memory {steps})"
    result = dict(result, fit={"microbatches": found, "tried": tried, "line": line})
    return result
