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
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from lra import attention
from lra.attention.base import project_out, project_qkv

DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)
FLAT_TIME_FACTOR = 1.5  # time per token may grow this much from the shortest to the longest length
LINEAR_MEMORY_SLACK = 1.25  # memory may grow this much more than the length does
SPEED_CHECK_LENGTH = 4096  # "faster than softmax" is checked here


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
    stats = _memory_stats()
    if stats and "bytes_limit" in stats:
        return int(0.9 * stats["bytes_limit"])
    return int(0.6 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


class Projections(attention.Attention):
    """The reference floor: only the q/k/v/out projections every family shares, y = out(q + k + v).

    Its time per token against N is what this machine charges for the dense layers alone: every
    family runs them too, so that part of a family's growth is not the family's doing.
    """

    @nn.compact
    def __call__(self, x_BxNxD: jax.Array, mask_BxN: jax.Array, memory: jax.Array | None = None,
                 deterministic: bool = True) -> tuple[jax.Array, None]:
        q, k, v = project_qkv(self, x_BxNxD)
        return project_out(self, q + k + v, x_BxNxD.shape[-1]), None


REFERENCES = {"projections": Projections}  # benchmark-only rows, not attention families


def _family_class(name: str) -> type[attention.Attention]:
    return REFERENCES[name] if name in REFERENCES else attention.get(name)


def parse_family(spec: str) -> tuple[str, dict[str, Any]]:
    """``"name"`` or ``"name:key=value,key=value"`` -> (registry name, module options).

    Options let one report compare settings of a family, e.g. ``linear:chunk_size=16384``.
    """
    from lra.defaults import parse_option

    name, _, opts = spec.partition(":")
    _family_class(name)  # an unknown name fails here, listing the valid ones
    kwargs: dict[str, Any] = {}
    for item in filter(None, (t.strip() for t in opts.split(","))):
        if "=" not in item:
            raise ValueError(f"family option {item!r} in {spec!r} is not key=value, e.g. linear:chunk_size=256")
        if name in REFERENCES:
            raise ValueError(f"{name} is a reference row and has no options (in {spec!r})")
        field, value = parse_option(name, item)
        kwargs[field] = value
    return name, kwargs


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


def _memory_stats() -> dict[str, Any] | None:
    try:
        return jax.devices()[0].memory_stats()
    except Exception:  # not every backend implements it
        return None


def _step(family: str, n: int, s: Settings) -> tuple[Callable[..., Any], tuple[Any, ...]]:
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
        y, mem = module.apply(params, x, mask, memory=memory, rngs=rngs)
        total = jnp.sum(y.astype(jnp.float32))
        return total if mem is None else total + jnp.sum(mem.astype(jnp.float32))

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1))), (params, x)


def _compiled_bytes(compiled: Any) -> dict[str, int] | None:
    try:
        m = compiled.memory_analysis()
    except Exception:  # not every backend implements it (NotImplementedError, XlaRuntimeError): no memory column
        return None
    if m is None:
        return None
    parts = {
        "argument_bytes": int(m.argument_size_in_bytes),
        "output_bytes": int(m.output_size_in_bytes),
        "temp_bytes": int(m.temp_size_in_bytes),
        "alias_bytes": int(m.alias_size_in_bytes),
    }
    parts["total_bytes"] = (parts["argument_bytes"] + parts["output_bytes"] + parts["temp_bytes"]
                            - parts["alias_bytes"])
    return parts


def _timed_call(fn: Callable[..., Any], args: tuple[Any, ...]) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def measure_length(
    families: Sequence[str], n: int, s: Settings, skip: dict[str, str] | None = None,
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
            fn, args = _step(family, n, s)
            compiled = fn.lower(*args).compile()
            case["compile_seconds"] = time.perf_counter() - start
            case["memory"] = _compiled_bytes(compiled)
            total = (case["memory"] or {}).get("total_bytes")
            if total is not None and total > limit:
                case.update(status="skipped", reason=f"predicted memory {total / 2**30:.1f} GiB > limit "
                                                      f"{limit / 2**30:.1f} GiB (--max-memory-gb)")
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
        log(f"  {case['family']} N={n}: {case['status']} "
            + (f"{case['seconds'] * 1e3:.1f} ms" if case["status"] == "ok" else case["reason"]))
    return list(cases.values())


def _isolated_case(family: str, n: int, s: Settings) -> dict[str, Any]:
    """One case in a fresh process, so the device's peak memory belongs to it alone."""
    payload = json.dumps({"family": family, "n": n, "settings": dataclasses.asdict(s)})
    proc = subprocess.run([sys.executable, "-m", "lra.bench.attention", payload], capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"family": family, "n": n, "status": "error",
                "reason": f"subprocess exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def _child_main(payload: str) -> None:
    spec = json.loads(payload)
    case = measure_length([spec["family"]], spec["n"], Settings(**spec["settings"]), log=lambda _: None)[0]
    stats = _memory_stats()
    if stats and "peak_bytes_in_use" in stats:
        case["device_peak_bytes"] = int(stats["peak_bytes_in_use"])
    case["process_peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(case))


def run(
    families: Sequence[str], lengths: Sequence[int], s: Settings, isolate: bool = False,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """All cases, shortest length first; families too slow at one length skip the longer ones."""
    cases: list[dict[str, Any]] = []
    skip: dict[str, str] = {}
    for n in sorted(lengths):
        log(f"N={n}")
        if isolate:
            batch = []
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
                skip.setdefault(case["family"], f"one call at N={n} took {case['first_call_seconds']:.1f} s "
                                                f"> --max-seconds-per-case {s.max_seconds:.0f}")
        cases.extend(batch)
    return cases


# ----------------------------------------------------------------------------- checks and reports


def _ok(cases: list[dict[str, Any]], family: str) -> dict[int, dict[str, Any]]:
    return {c["n"]: c for c in cases if c["family"] == family and c["status"] == "ok"}


def checks(cases: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per family: flat time per token, faster than softmax at 4K, linear memory."""
    soft = _ok(cases, "softmax")
    out = {}
    for family in dict.fromkeys(c["family"] for c in cases):
        ok = _ok(cases, family)
        result: dict[str, Any] = {}
        if len(ok) >= 2:
            lo, hi = min(ok), max(ok)
            growth = ok[hi]["us_per_token"] / ok[lo]["us_per_token"]
            result["time_per_token"] = dict(short=lo, long=hi, ratio=growth,
                                            passed=growth <= FLAT_TIME_FACTOR)
            if "ns_per_score" in ok[lo] and "ns_per_score" in ok[hi]:
                per_score = ok[hi]["ns_per_score"] / ok[lo]["ns_per_score"]
                result["time_per_score"] = dict(short=lo, long=hi, ratio=per_score,
                                                passed=per_score <= FLAT_TIME_FACTOR)
            mem_lo, mem_hi = ((ok[k].get("memory") or {}).get("total_bytes") for k in (lo, hi))
            if mem_lo and mem_hi:
                ratio = mem_hi / mem_lo
                result["memory"] = dict(short=lo, long=hi, ratio=ratio, length_ratio=hi / lo,
                                        passed=ratio <= LINEAR_MEMORY_SLACK * hi / lo)
        if family != "softmax" and SPEED_CHECK_LENGTH in ok and SPEED_CHECK_LENGTH in soft:
            rel = ok[SPEED_CHECK_LENGTH]["seconds"] / soft[SPEED_CHECK_LENGTH]["seconds"]
            result["vs_softmax"] = dict(n=SPEED_CHECK_LENGTH, ratio=rel, passed=rel < 1.0)
        out[family] = result
    return out


def environment(command: Sequence[str]) -> dict[str, Any]:
    from lra.training.run_files import git_commit

    dev = jax.devices()[0]
    return {
        "device_kind": dev.device_kind,
        "backend": jax.default_backend(),
        "device_count": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "jax_version": jax.__version__,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(command),
        "git_commit": git_commit(),
    }


def _mib(b: int | None) -> str:
    return "" if b is None else f"{b / 2**20:,.1f}"


def _mark(check: dict[str, Any] | None, fmt: str) -> str:
    if not check:
        return "n/a"
    return fmt.format(**check) + (" ✓" if check["passed"] else " ✗")


def markdown(report: dict[str, Any]) -> str:
    env, s, cases = report["environment"], report["settings"], report["cases"]
    soft = _ok(cases, "softmax")
    lines = [
        "# Attention scaling: one layer, forward + backward",
        "",
        f"{env['device_kind']} ({env['backend']}, {env['cpu_count']} CPUs), jax {env['jax_version']}, "
        f"{env['date']}, commit {env['git_commit']}.",
        f"Batch {s['batch']}, width {s['dim']}, {s['num_heads']} heads, qkv {s['qkv_dim']}, {s['dtype']}; "
        f"median of {s['repeats']} calls after one warm-up. Memory: XLA's compiled-step accounting "
        "(arguments + outputs + temporaries).",
        f"Command: `{env['command']}`",
        "",
        "| family | N | status | ms / call | µs / token | ns / score | × softmax | memory MiB | device peak MiB |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for c in cases:
        if c["status"] != "ok":
            lines.append(f"| {c['family']} | {c['n']} | {c['status']}: {c['reason']} | | | | | | |")
            continue
        rel = f"{c['seconds'] / soft[c['n']]['seconds']:.2f}" if c["n"] in soft else ""
        per_score = f"{c['ns_per_score']:.2f}" if "ns_per_score" in c else ""
        lines.append(
            f"| {c['family']} | {c['n']} | ok{' (1 call)' if c.get('note') else ''} | {c['seconds'] * 1e3:,.1f} | "
            f"{c['us_per_token']:.2f} | {per_score} | {rel} | {_mib((c.get('memory') or {}).get('total_bytes'))} | "
            f"{_mib(c.get('device_peak_bytes'))} |"
        )
    lines += [
        "",
        f"Checks: time per token at the longest length within {FLAT_TIME_FACTOR}× of the shortest; "
        f"time below softmax's at N={SPEED_CHECK_LENGTH}; memory growing at most "
        f"{LINEAR_MEMORY_SLACK}× the length ratio (linear). Where the number of scores is set by a "
        "pattern (softmax N², dispersed's Algorithm 2), time per score gets the same flatness check.",
        "",
        *(["`projections` is a reference row, not a family: the q/k/v/out projections alone, "
           "y = out(q + k + v). Every family has these dense layers, so their time-per-token ratio "
           "is what this machine charges before any attention is computed.", ""]
          if any(c["family"].partition(":")[0] in REFERENCES for c in cases) else []),
        "| family | time/token long ÷ short | time/score long ÷ short | × softmax at 4K | memory long ÷ short |",
        "|---|---|---|---|---|",
    ]
    for family, ch in report["checks"].items():
        lines.append(
            f"| {family} | {_mark(ch.get('time_per_token'), '{ratio:.2f} ({long}÷{short})')} | "
            f"{_mark(ch.get('time_per_score'), '{ratio:.2f}')} | "
            f"{_mark(ch.get('vs_softmax'), '{ratio:.2f}')} | "
            f"{_mark(ch.get('memory'), '{ratio:.1f} (length ×{length_ratio:.0f})')} |"
        )
    return "\n".join(lines) + "\n"


def _length_label(n: int) -> str:
    return f"{n // 1024}K" if n % 1024 == 0 else str(n)


def plot(report: dict[str, Any], path: Path) -> None:
    """Time and memory against N, log-log, from a report (also one read back from its JSON:
    ``scripts/bench_attention.py --replot``). The legend sits right of both panels, off the data;
    the settings (batch, width, heads) are in the title; a family's skipped lengths are written
    where its line stops, with the predicted memory drawn hollow when XLA gave one."""
    try:
        import matplotlib
    except ModuleNotFoundError as e:
        raise ModuleNotFoundError(f"{e}: the figure needs the tables extra, pip install -e \".[tables]\"; the "
                                  "JSON is written: redraw it with scripts/bench_attention.py --replot JSON",
                                  name=e.name) from e

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(13, 4.8), layout="constrained")
    cases = report["cases"]
    colours = [plt.get_cmap("tab10")(i) for i in range(10)] + [plt.get_cmap("Dark2")(i) for i in range(8)]
    markers = ["o", "s", "^", "D", "v", "P", "X", "<", ">", "h"]
    families = list(dict.fromkeys(c["family"] for c in cases))
    attention_families = [f for f in families if f.partition(":")[0] not in REFERENCES]
    skipped_notes = []
    for family in families:
        ok = _ok(cases, family)
        ns = sorted(ok)
        if family.partition(":")[0] in REFERENCES:
            style = dict(color="black", linestyle="--", marker="x", label=f"{family} (reference: dense layers only)")
        else:
            i = attention_families.index(family)
            style = dict(color=colours[i % len(colours)], linestyle="-", marker=markers[i % len(markers)],
                         label=family)
        if ns:
            ax_t.plot(ns, [ok[n]["seconds"] for n in ns], markersize=5, **style)
            mem = [(n, (ok[n].get("memory") or {}).get("total_bytes")) for n in ns]
            mem = [(n, b / 2**20) for n, b in mem if b]
            if mem:
                ax_m.plot(*zip(*mem), markersize=5, **style)
        missing = sorted((c for c in cases if c["family"] == family and c["status"] != "ok"), key=lambda c: c["n"])
        if not missing:
            continue
        lengths = ", ".join(_length_label(c["n"]) for c in missing)
        skipped_notes.append(f"{family} at N = {lengths} {missing[0]['status']}: {missing[0].get('reason', '')}")
        if ns:
            last = ns[-1]
            ax_t.annotate(f"{family}: N = {lengths} {missing[0]['status']}", (last, ok[last]["seconds"]),
                          xytext=(6, 0), textcoords="offset points", va="center", fontsize=8,
                          color=style["color"])
        predicted = [(c["n"], c["memory"]["total_bytes"] / 2**20) for c in missing
                     if (c.get("memory") or {}).get("total_bytes")]
        if predicted:
            start = [(ns[-1], ok[ns[-1]]["memory"]["total_bytes"] / 2**20)] if ns and ok[ns[-1]].get("memory") else []
            ax_m.plot(*zip(*(start + predicted)), color=style["color"], linestyle=":", marker=None)
            ax_m.plot(*zip(*predicted), linestyle="none", marker=style["marker"], markersize=7,
                      markerfacecolor="white", markeredgecolor=style["color"])
            n, mib = predicted[-1]
            ax_m.annotate(f"{family} {_length_label(n)}: predicted, not run", (n, mib), xytext=(-8, 1),
                          textcoords="offset points", ha="right", va="bottom", fontsize=8, color=style["color"])
    lengths = sorted({c["n"] for c in cases})
    for ax, ylabel in ((ax_t, "seconds per forward + backward"), (ax_m, "memory (MiB, XLA's compiled step)")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lengths, [_length_label(n) for n in lengths])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.set_xlabel("sequence length N")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    if len(lengths) > 1:  # room on the right for the notes of a line that stops early
        ax_t.set_xlim(lengths[0] / 1.2, lengths[-1] * (2.0 if skipped_notes else 1.2))
    handles, labels = ax_t.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right center", fontsize=8, title="family", title_fontsize=8)
    env, s = report["environment"], report["settings"]
    fig.suptitle(f"One attention layer, forward + backward: batch {s['batch']}, width {s['dim']}, "
                 f"{s['num_heads']} heads, qkv {s['qkv_dim']}, {s['dtype']}; median of {s['repeats']} calls\n"
                 f"{env['device_kind']}" + (f" ({env['cpu_count']} CPUs)" if env.get("backend") == "cpu" else "")
                 + f", jax {env['jax_version']}", fontsize=10)
    if skipped_notes:
        fig.supxlabel("skipped: " + "; ".join(skipped_notes), fontsize=8, color="dimgray")
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(cases: list[dict[str, Any]], s: Settings, out: Path, command: Sequence[str],
                 name: str = "attention_scaling") -> dict[str, Path]:
    """Write ``name``.json, .md and .png under ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    from lra.training.provenance import stamp

    # the start and end commits at top level, as every experiment record has them (the audit reads them)
    report = {**stamp(), "environment": environment(command), "settings": dataclasses.asdict(s),
              "cases": cases, "checks": checks(cases)}
    paths = {ext: out / f"{name}.{ext}" for ext in ("json", "md", "png")}
    paths["json"].write_text(json.dumps(report, indent=1) + "\n")
    paths["md"].write_text(markdown(report))
    plot(report, paths["png"])
    return paths


if __name__ == "__main__":  # the child of an isolated case: python -m lra.bench.attention '<json>'
    _child_main(sys.argv[1])
