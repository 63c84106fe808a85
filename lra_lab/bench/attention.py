"""Scaling benchmark of one attention layer: forward+backward time and peak memory against length.

For every family and length N, one jitted step computes the gradient of ``sum(y) + sum(memory)``
with respect to the parameters and the input (batch 1, width 128, 4 heads, qkv 128 by default;
memory families get a memory of ``memory_size`` cells, as the encoder passes them).

* Time: one warm-up call after compiling, then, family by family, one more untimed call and
  ``repeats`` consecutive timed calls; the median is reported. Turns call by call (the earlier
  scheme) made a small case that follows a large one run up to 4-5x slower on CPU (its data
  evicted from cache by the other family's call), which inflated the short lengths' times.
* Memory: XLA's own accounting of the compiled step (``compiled.memory_analysis()``): arguments
  + outputs + temporaries - aliased. Deterministic, the same on CPU and GPU, and known before
  anything runs, so a case that would not fit is skipped without being run. With ``isolate``
  (default on GPU) each case runs in a fresh process and the device's ``peak_bytes_in_use``
  (GPU) or the process's peak RSS (CPU, includes the runtime itself) is recorded too.
* Skips are written down with their reason, never dropped: a predicted memory over
  ``max_memory_bytes``, or a shorter length of the same family whose single call already took
  longer than ``max_seconds`` (that case keeps its one call as its time).

Checks per family (first and last measured lengths, 1K and 16K by default): time per token
at the longest within 1.5x of the shortest; faster than softmax at 4K; memory ratio within 1.25x
of the length ratio (linear; a quadratic family shows the square). Families whose number of
attention scores is fixed by a pattern (softmax: N^2; dispersed: Algorithm 2's, whose keys per
query grow with N until the gaps run out near N = 33K) also get the same check per score, which
separates "the pattern has more scores" from "each score got more expensive".
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import jax
import jax.numpy as jnp

from lra import attention
from lra.errors import InputError
from lra_lab.bench.attention_report import (
    FLAT_TIME_FACTOR,
    LINEAR_MEMORY_SLACK,
    SPEED_CHECK_LENGTH,
    checks,
    markdown,
    plot,
)
from lra_lab.bench.device_info import compiled_bytes, environment, memory_stats
from lra_lab.bench.projections import REFERENCES, Projections

__all__ = [
    "DEFAULT_LENGTHS",
    "FLAT_TIME_FACTOR",
    "LINEAR_MEMORY_SLACK",
    "REFERENCES",
    "SPEED_CHECK_LENGTH",
    "Projections",
    "Settings",
    "attention_scores",
    "checks",
    "default_memory_limit",
    "environment",
    "markdown",
    "measure_length",
    "parse_family",
    "plot",
    "run",
    "write_report",
]

DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)


@dataclasses.dataclass(frozen=True)
class Settings:
    batch: int = 1
    dim: int = 128
    num_heads: int = 4
    qkv_dim: int = 128
    dtype: str = "float32"
    repeats: int = 5
    max_seconds: float = 60.0  # one call longer than this: no repeats, longer lengths skipped
    max_memory_bytes: int | None = None  # None: default_memory_limit()


def default_memory_limit() -> int:
    """60% of RAM on CPU; 90% of the device's allocator limit on an accelerator."""
    stats = memory_stats()
    if stats and "bytes_limit" in stats:
        return int(0.9 * stats["bytes_limit"])
    return int(0.6 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _family_class(name: str) -> type[attention.Attention]:
    return REFERENCES[name] if name in REFERENCES else attention.get(name)


def parse_family(spec: str) -> tuple[str, dict[str, Any]]:
    """``"name"`` or ``"name:key=value,key=value"`` -> (registry name, module options), the options
    read as a config's short form reads them (lra.config_fields.parse_options).

    Options let one report compare settings of a family, e.g. ``linear:chunk_size=16384``.
    """
    from lra.config_fields import parse_options

    name, _, opts = spec.partition(":")
    _family_class(name)  # an unknown name fails here, listing the valid ones
    if name in REFERENCES:
        if opts.strip():
            raise InputError(f"{name} is a reference row and has no options (in {spec!r})")
        return name, {}
    return name, parse_options(name, opts, spec)


def attention_scores(family: str, n: int) -> int | None:
    """Query-key scores one head computes at length ``n``, None where no pattern fixes them."""
    name, kwargs = parse_family(family)
    if name == "softmax":
        return n * n
    if name == "dispersed":
        from lra.attention.dispersed import num_scores

        module = attention.get(name)(num_heads=1, qkv_dim=1, **kwargs)
        return num_scores(n, module.window, module.max_gap)
    return None


def _step(family: str, n: int, s: Settings) -> tuple[jax.stages.Wrapped, tuple[Any, ...]]:
    """The jitted forward+backward of one layer and its arguments at length ``n``."""
    name, kwargs = parse_family(family)
    cls = _family_class(name)
    module = cls(num_heads=s.num_heads, qkv_dim=s.qkv_dim, dtype=jnp.dtype(s.dtype), **kwargs)
    kx, km, kp = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(kx, (s.batch, n, s.dim), jnp.float32)
    mask = jnp.ones((s.batch, n), bool)
    memory = None
    if cls.uses_memory:
        memory = jax.random.normal(km, (s.batch, module.memory_size, s.dim), jnp.float32)
    # Parameters never depend on N: initialise at a short length (softmax at 16K would not fit).
    n0 = min(n, 256)
    params = module.init(kp, x[:, :n0], mask[:, :n0], memory=memory)
    rngs = {"attention": jax.random.key(1)}

    def loss(params: Any, x: jax.Array) -> jax.Array:
        # flax types apply as output-or-(output, mutated collections); with no mutable= it is the output
        y, mem = cast(tuple[jax.Array, "jax.Array | None"], module.apply(params, x, mask, memory=memory, rngs=rngs))
        total = jnp.sum(y.astype(jnp.float32))
        return total if mem is None else total + jnp.sum(mem.astype(jnp.float32))

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), (params, x)


def _timed_call(fn: Callable[..., Any], args: tuple[Any, ...]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def measure_length(
    families: Sequence[str],
    n: int,
    s: Settings,
    skip: dict[str, str] | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Measure every family at length ``n`` (each family's calls together). ``skip``: family -> reason."""
    skip = dict(skip or {})
    limit = s.max_memory_bytes or default_memory_limit()
    cases: dict[str, dict[str, Any]] = {}
    ready: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {}
    for family in families:
        case: dict[str, Any] = {"family": family, "n": n, "status": "ok"}
        cases[family] = case
        if family in skip:
            case.update(status="skipped", reason=skip[family])
            continue
        try:
            start = time.perf_counter()
            step_fn, args = _step(family, n, s)
            compiled = step_fn.lower(*args).compile()
            case["compile_seconds"] = time.perf_counter() - start
            case["memory"] = compiled_bytes(compiled)
            total = (case["memory"] or {}).get("total_bytes")
            if total is not None and total > limit:
                case.update(
                    status="skipped",
                    reason=f"predicted memory {total / 2**30:.1f} GiB > limit "
                    f"{limit / 2**30:.1f} GiB (--max-memory-gb)",
                )
                continue
            first = _timed_call(compiled, args)
        except Exception as e:  # one failing family must not stop the benchmark
            case.update(status="error", reason=f"{type(e).__name__}: {str(e)[:300]}")
            continue
        case["first_call_seconds"] = first
        case["samples"] = []
        if first > s.max_seconds:
            case["samples"] = [first]
            case["note"] = f"one call took {first:.1f} s > max {s.max_seconds:.0f} s: not repeated"
        else:
            ready[family] = (compiled, args)
        log(f"  {family} N={n}: compiled, first call {first:.3g} s")
    for family, (fn, args) in ready.items():
        _timed_call(fn, args)  # warm again: the other families' calls ran since this one's first
        cases[family]["samples"] = [_timed_call(fn, args) for _ in range(s.repeats)]
    for case in cases.values():
        if case["status"] == "ok":
            case["seconds"] = statistics.median(case["samples"])
            case["min_seconds"] = min(case["samples"])
            case["us_per_token"] = 1e6 * case["seconds"] / (s.batch * n)
            scores = attention_scores(case["family"], n)
            if scores is not None:
                case["scores"] = scores
                case["ns_per_score"] = 1e9 * case["seconds"] / (s.batch * scores)
        log(
            f"  {case['family']} N={n}: {case['status']} "
            + (f"{case['seconds'] * 1e3:.1f} ms" if case["status"] == "ok" else case["reason"])
        )
    return list(cases.values())


def _isolated_case(family: str, n: int, s: Settings) -> dict[str, Any]:
    """One case in a fresh process, so the device's peak memory belongs to it alone."""
    payload = json.dumps({"family": family, "n": n, "settings": dataclasses.asdict(s)})
    proc = subprocess.run([sys.executable, "-m", "lra_lab.bench.attention", payload], capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {
            "family": family,
            "n": n,
            "status": "error",
            "reason": f"subprocess exit {proc.returncode}: {proc.stderr.strip()[-300:]}",
        }
    return json.loads(lines[-1])


def _child_main(payload: str) -> None:
    spec = json.loads(payload)
    case = measure_length([spec["family"]], spec["n"], Settings(**spec["settings"]), log=lambda _: None)[0]
    stats = memory_stats()
    if stats and "peak_bytes_in_use" in stats:
        case["device_peak_bytes"] = int(stats["peak_bytes_in_use"])
    case["process_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(case))


def run(
    families: Sequence[str],
    lengths: Sequence[int],
    s: Settings,
    isolate: bool = False,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """All cases, shortest length first; families too slow at one length skip the longer ones."""
    cases: list[dict[str, Any]] = []
    skip: dict[str, str] = {}
    for n in sorted(lengths):
        log(f"N={n}")
        if isolate:
            batch: list[dict[str, Any]] = []
            for family in families:
                if family in skip:
                    batch.append({"family": family, "n": n, "status": "skipped", "reason": skip[family]})
                else:
                    batch.append(_isolated_case(family, n, s))
                    log(f"  {family} N={n}: {batch[-1]['status']}")
        else:
            batch = measure_length(families, n, s, skip, log)
        for case in batch:
            if case["status"] == "ok" and case.get("first_call_seconds", 0.0) > s.max_seconds:
                skip.setdefault(
                    case["family"],
                    f"one call at N={n} took {case['first_call_seconds']:.1f} s "
                    f"> --max-seconds-per-case {s.max_seconds:.0f}",
                )
        cases.extend(batch)
    return cases


def write_report(
    cases: list[dict[str, Any]], s: Settings, out: Path, command: Sequence[str], name: str = "attention_scaling"
) -> dict[str, Path]:
    """Write ``name``.json, .md and .png under ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    from lra.training.provenance import stamp

    # the start and end commits at top level, as every experiment record has them (the audit reads them)
    report = {
        **stamp(),
        "environment": environment(command),
        "settings": dataclasses.asdict(s),
        "cases": cases,
        "checks": checks(cases),
    }
    paths = {ext: out / f"{name}.{ext}" for ext in ("json", "md", "png")}
    paths["json"].write_text(json.dumps(report, indent=1) + "\n")
    paths["md"].write_text(markdown(report))
    plot(report, paths["png"])
    return paths


if __name__ == "__main__":  # the child of an isolated case: python -m lra_lab.bench.attention '<json>'
    _child_main(sys.argv[1])
