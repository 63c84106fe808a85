"""The markdown report of the peers benchmark (:mod:`lra_lab.bench.peers`): per family the times of each
run, the lra / peer ratios and their spread, and dispersed vs softmax per attention score."""

from __future__ import annotations

import statistics
from typing import Any

# What is compared and how a missing peer is installed: here, below the benchmark (lra_lab.bench.peers
# imports them), so that the two modules import in one direction (issue 55).
PEER_INSTALL = (
    "python -m venv /work/peers-venv --system-site-packages; "
    "/work/peers-venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu; "
    "CUDA_HOME= PATH=<PATH without nvcc> /work/peers-venv/bin/pip install "
    "pytorch-fast-transformers==0.4.0 --no-build-isolation; then pass "
    "--peer_python /work/peers-venv/bin/python"
)

# family -> (lra case, peer case) names; a ratio is lra / peer.
COMPARISONS = (
    ("clustered", "lra_clustered", "ft_clustered", "fast-transformers 0.4.0"),
    ("improved clustered", "lra_improved_clustered", "ft_improved_clustered", "fast-transformers 0.4.0"),
    ("softmax", "lra_softmax", "jax_dot_product_attention", "jax.nn.dot_product_attention"),
    ("softmax", "lra_softmax", "torch_sdpa", "torch scaled_dot_product_attention"),
)


def median_ms(case: dict[str, Any] | None) -> float | None:
    if not case or not case.get("seconds"):
        return None
    return 1e3 * statistics.median(case["seconds"])


def case_ms(run: dict[str, Any], n: int, name: str) -> float | None:
    entry = run["lengths"].get(str(n), {})
    for kind in ("lra", "peer"):
        found = entry.get(kind, {}).get("cases", {}).get(name)
        if found is not None:
            return median_ms(found)
    return None


def _fmt(values: list[float | None], digits: int = 1) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "–"
    return " / ".join(f"{v:,.{digits}f}" for v in vals)


def _spread(values: list[float | None]) -> str:
    vals = [v for v in values if v is not None]
    if len(vals) < 2:
        return ""
    return f"{100 * (max(vals) / min(vals) - 1):.0f}%"


def report(result: dict[str, Any]) -> str:
    """The markdown report: machine, versions, per family the times of each run and ratios."""
    from lra.attention.dispersed import num_scores

    meta, runs = result["meta"], result["runs"]
    s = meta["settings"]
    lengths = meta["lengths"]
    versions: dict[str, str] = {}
    missing: set[str] = set()
    for run in runs:
        for entry in run["lengths"].values():
            for part in entry.values():
                versions.update(part.get("versions", {}))
                missing.update(part.get("missing", []))
    m = meta["machine"]
    lines = [
        "# lra vs peers: attention cores on this CPU",
        "",
        f"{m['cpu_model']}, {m['cpu_count']} cores ({m['platform']}); {s['threads']} threads per framework; "
        f"load average at start {', '.join(f'{x:.2f}' for x in m['load_average_at_start'] or [])}; {meta['date']}.",
        "Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(versions.items())) + ".",
        f"Command: `{meta['command']}`" + (f" (git {meta['git_commit']})." if meta.get("git_commit") else ""),
        "",
        f"Attention core only (no projections), forward + backward (gradient of sum(y) w.r.t. q, k, v), "
        f"float32, batch {s['batch']}, {s['heads']} heads of {s['head_dim']}; clustered: {s['clusters']} clusters, "
        f"{s['bits']} bits, {s['iterations']} Lloyd iterations, top-k {s['topk']} (hashing and clustering "
        f"included, attention dropout 0). Each framework in its own process, lengths alternated; "
        f"median of {s['calls']} consecutive calls after a warm-up call; {len(runs)} full run(s), values "
        f"listed run by run.",
        "",
    ]
    if missing:
        lines += [
            "**Not installed, rows left empty:** " + "; ".join(sorted(missing)) + f". To measure them: {PEER_INSTALL}.",
            "",
        ]
    lines += [
        "| family | N | lra ms | peer | peer ms | lra / peer | spread lra / peer |",
        "|---|---:|---:|---|---:|---:|---|",
    ]
    for family, lra_name, peer_name, peer_label in COMPARISONS:
        for n in lengths:
            a = [case_ms(run, n, lra_name) for run in runs]
            b = [case_ms(run, n, peer_name) for run in runs]
            if all(x is None for x in a + b):
                continue
            ratios = [x / y if x is not None and y is not None else None for x, y in zip(a, b, strict=False)]
            spreads = " / ".join(x for x in (_spread(a), _spread(b)) if x) or ""
            lines.append(f"| {family} | {n} | {_fmt(a)} | {peer_label} | {_fmt(b)} | {_fmt(ratios, 2)} | {spreads} |")
    lines += [
        "",
        "Dispersed vs softmax (lra), per attention score (dispersed: the pattern's scores, "
        "Algorithm 2; softmax: N²) and per token:",
        "",
        "| N | dispersed ms | softmax ms | dispersed ns/score | softmax ns/score | per score ÷ softmax "
        "| per token ÷ softmax |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in lengths:
        d = [case_ms(run, n, "lra_dispersed") for run in runs]
        sm = [case_ms(run, n, "lra_softmax") for run in runs]
        if all(x is None for x in d):
            continue
        ns_d = [1e6 * x / (s["batch"] * num_scores(n)) if x is not None else None for x in d]
        ns_s = [1e6 * x / (s["batch"] * n * n) if x is not None else None for x in sm]
        per_score = [x / y if x is not None and y is not None else None for x, y in zip(ns_d, ns_s, strict=False)]
        per_token = [x / y if x is not None and y is not None else None for x, y in zip(d, sm, strict=False)]
        lines.append(
            f"| {n} | {_fmt(d)} | {_fmt(sm)} | {_fmt(ns_d)} | {_fmt(ns_s)} | {_fmt(per_score, 2)} "
            f"| {_fmt(per_token, 2)} |"
        )
    lines += [
        "",
        "Spread: (largest / smallest - 1) over the runs of that row. Raw calls: the .json beside " "this file.",
        "",
    ]
    return "\n".join(lines)
