"""lra's attention cores side by side with their peers' own implementations, on this CPU.

Each case is the attention core alone (no projections), forward + backward: the gradient of
sum(y) with respect to q, k and v, float32, batch 1, 4 heads of 32, ``--threads`` threads.

* clustered, improved clustered (100 clusters, 63 bits, 10 Lloyd iterations, top-k 32, hashing
  and clustering included): lra vs fast-transformers 0.4.0
  (``fast_transformers.attention.ClusteredAttention`` / ``ImprovedClusteredAttention``, its
  C++ CPU kernels; attention dropout 0);
* softmax: lra (``lra.attention.base.dot_product_attention``) vs
  ``jax.nn.dot_product_attention`` (XLA) vs PyTorch's ``scaled_dot_product_attention``;
* dispersed vs softmax, per attention score (the pattern's scores against N^2).

Every framework runs in its own subprocess (lra and jax in one, torch and fast-transformers in
another, started with ``--peer_python``), one length at a time, the two alternating, so that
load changes on a shared machine hit both alike; inside a subprocess each case runs its warm-up
and timed calls together (see ``_time_cases``). Softmax runs up to ``--softmax-max-len`` (16K would need ~16
GB). The peers are never a
dependency of lra: install them in a separate environment, e.g.

    python -m venv /work/peers-venv --system-site-packages
    /work/peers-venv/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu
    CUDA_HOME= PATH=<PATH without nvcc> /work/peers-venv/bin/pip install \\
        pytorch-fast-transformers==0.4.0 --no-build-isolation      # CPU build, ~8 min

    python scripts/bench_peers.py --peer_python /work/peers-venv/bin/python --repeats 2

A missing peer is reported (in the output and in the report) and its rows stay empty; lra's
rows are measured anyway. Writes OUT.json (every call of every run) and OUT.md (medians per
run, the lra / peer ratios, and with ``--repeats 2`` or more the spread between runs; written by
:mod:`lra_lab.bench.peers_report`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

DEFAULT_LENGTHS = (1024, 4096, 16384)


# ------------------------------------------------------------------------------------ workers


def _pin_threads(threads: int) -> None:
    """Both frameworks get the same CPUs: the first ``threads`` this process may use."""
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))[:threads]
        os.sched_setaffinity(0, cpus)


def _time_cases(cases: dict[str, Callable[[], Any]], calls: int, sync: Callable[[Any], Any]) -> dict[str, Any]:
    """Each case in turn: one warm-up (compile) call, then ``calls`` timed calls.

    Not interleaved call by call: right after a large case (softmax at 4K frees ~1 GB), a small
    case's next calls ran 4-5x slower (clustered at 4K: 88 ms instead of 17-20 ms, measured), so
    interleaving measured the allocator, not the case. Load changes are averaged by the repeats.
    """
    out: dict[str, Any] = {}
    for name, fn in cases.items():
        start = time.perf_counter()
        sync(fn())
        out[name] = {"first_call_s": time.perf_counter() - start, "seconds": []}
        for _ in range(calls):
            start = time.perf_counter()
            sync(fn())
            out[name]["seconds"].append(time.perf_counter() - start)
    return out


def lra_worker(n: int, s: dict[str, Any]) -> dict[str, Any]:
    """lra's cores (and jax.nn.dot_product_attention) at length ``n``."""
    import jax
    import jax.numpy as jnp

    from lra.attention import clustered as cl
    from lra.attention import dispersed
    from lra.attention.base import dot_product_attention

    shape = (s["batch"], n, s["heads"], s["head_dim"])
    q, k, v = (jax.random.normal(key, shape, jnp.float32) for key in jax.random.split(jax.random.key(0), 3))
    mask = jnp.ones((s["batch"], n), bool)
    rng = jax.random.key(1)
    offs = dispersed.offsets()

    def clustered(q, k, v):
        c = cl.cluster_queries(q, mask, rng, s["clusters"], s["bits"], s["iterations"])
        return cl.clustered_attention(q, k, v, mask, c, s["clusters"])

    def improved(q, k, v):
        c = cl.cluster_queries(q, mask, rng, s["clusters"], s["bits"], s["iterations"])
        return cl.improved_clustered_attention(q, k, v, mask, c, s["clusters"], s["topk"])

    cores: dict[str, Callable[..., Any]] = {
        "lra_clustered": clustered,
        "lra_improved_clustered": improved,
        "lra_dispersed": lambda q, k, v: dispersed.dispersed_attention(q, k, v, mask, offs),
    }
    if n <= s["softmax_max_len"]:
        cores["lra_softmax"] = lambda q, k, v: dot_product_attention(q, k, v, mask)
        cores["jax_dot_product_attention"] = lambda q, k, v: jax.nn.dot_product_attention(
            q, k, v, mask=mask[:, None, None, :], implementation="xla"
        )
    cores = {name: f for name, f in cores.items() if name in s["cases"]}
    steps = {
        name: jax.jit(jax.grad(lambda q, k, v, f=f: jnp.sum(f(q, k, v)), argnums=(0, 1, 2)))
        for name, f in cores.items()
    }
    cases: dict[str, Callable[[], Any]] = {name: partial(step, q, k, v) for name, step in steps.items()}
    result = _time_cases(cases, s["calls"], jax.block_until_ready)
    return {"cases": result, "missing": [], "versions": _versions(["jax", "jaxlib", "flax", "numpy"])}


def peer_worker(n: int, s: dict[str, Any]) -> dict[str, Any]:
    """torch's scaled_dot_product_attention and fast-transformers' clustered attentions."""
    missing: list[str] = []
    try:
        import torch
    except ImportError as e:
        return {
            "cases": {},
            "missing": [f"torch ({e})", "pytorch-fast-transformers==0.4.0 (needs torch)"],
            "versions": {},
        }
    torch.set_num_threads(s["threads"])
    torch.manual_seed(0)
    shape = (s["batch"], n, s["heads"], s["head_dim"])
    q, k, v = (torch.randn(shape, dtype=torch.float32, requires_grad=True) for _ in range(3))
    cases: dict[str, Callable[[], Any]] = {}

    def fwd_bwd(core: Callable[..., Any]) -> Callable[[], Any]:
        def step() -> Any:
            for t in (q, k, v):
                t.grad = None
            core(q, k, v).sum().backward()
            return q.grad

        return step

    if n <= s["softmax_max_len"] and "torch_sdpa" in s["cases"]:
        sdpa = torch.nn.functional.scaled_dot_product_attention
        cases["torch_sdpa"] = fwd_bwd(
            lambda q, k, v: sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
        )
    try:
        from fast_transformers.attention import ClusteredAttention, ImprovedClusteredAttention
        from fast_transformers.masking import FullMask, LengthMask
    except ImportError as e:
        missing.append(f"pytorch-fast-transformers==0.4.0 ({e})")
    else:
        full = FullMask(n, n)
        lengths = LengthMask(torch.full((s["batch"],), n, dtype=torch.int64), max_len=n)
        common = dict(
            clusters=s["clusters"], iterations=s["iterations"], bits=s["bits"], hash_bias=True, attention_dropout=0.0
        )
        modules = {
            "ft_clustered": ClusteredAttention(**common),
            "ft_improved_clustered": ImprovedClusteredAttention(topk=s["topk"], **common),
        }
        for name, module in modules.items():
            if name in s["cases"]:
                module.eval()  # no dropout (it is 0 anyway)
                cases[name] = fwd_bwd(lambda q, k, v, m=module: m(q, k, v, full, lengths, lengths))
    result = _time_cases(cases, s["calls"], lambda x: x)
    return {"cases": result, "missing": missing, "versions": _versions(["torch", "pytorch-fast-transformers", "numpy"])}


def _versions(dists: list[str]) -> dict[str, str]:
    from importlib import metadata

    out = {}
    for d in dists:
        try:
            out[d] = metadata.version(d)
        except metadata.PackageNotFoundError:
            pass
    return out


def _worker_main(kind: str, n: int, payload: str) -> None:
    s = json.loads(payload)
    _pin_threads(s["threads"])
    result = lra_worker(n, s) if kind == "lra" else peer_worker(n, s)
    result.update(python=sys.version.split()[0], executable=sys.executable)
    print(json.dumps(result))


# ------------------------------------------------------------------------------------- parent


def run_worker(command: list[str], kind: str, n: int, s: dict[str, Any], log: Callable[[str], None]) -> dict[str, Any]:
    """One subprocess; its last stdout line is the JSON result."""
    env = dict(os.environ)
    if kind == "lra":  # the worker imports lra from this checkout
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
        entry = ["-m", "lra_lab.bench.peers"]
    else:  # the peers' python need not have lra: this file runs as a script (it imports only the standard
        entry = [str(Path(__file__).resolve())]  # library at module level; lra only inside lra_worker and report)
    argv = command + entry + ["--worker", kind, "--n", str(n), "--payload", json.dumps(s)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        log(f"  {kind} N={n}: subprocess failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
        return {"cases": {}, "missing": [], "error": proc.stderr.strip()[-2000:], "versions": {}}
    return json.loads(lines[-1])


def machine() -> dict[str, Any]:
    model = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "load_average_at_start": load,
    }


def measure(
    lengths: list[int], s: dict[str, Any], repeats: int, peer_cmd: list[str], log: Callable[[str], None] = print
) -> dict[str, Any]:
    """``repeats`` full runs; in each, every length runs lra then the peers (alternating)."""
    runs = []
    lra_cmd = [sys.executable]
    for r in range(repeats):
        run: dict[str, Any] = {"lengths": {}}
        for n in lengths:
            order = [("lra", lra_cmd), ("peer", peer_cmd)]
            if (r + lengths.index(n)) % 2:  # alternate who goes first
                order.reverse()
            entry: dict[str, Any] = {}
            for kind, cmd in order:
                log(f"run {r + 1}/{repeats} N={n}: {kind}")
                entry[kind] = run_worker(cmd, kind, n, s, log)
            run["lengths"][str(n)] = entry
        runs.append(run)
    return {"runs": runs}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lengths", nargs="+", type=int, default=list(DEFAULT_LENGTHS))
    p.add_argument("--repeats", type=int, default=1, help="full runs (2: report the spread between them)")
    p.add_argument("--calls", type=int, default=5, help="timed calls per case per run (median reported)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument(
        "--peer_python",
        "--peer-python",
        default=sys.executable,
        help="python (a command, split like a shell would) with torch and fast-transformers",
    )
    p.add_argument("--out", type=Path, default=Path("results/bench/peers"), help="writes OUT.json and OUT.md")
    p.add_argument("--clusters", type=int, default=100)
    p.add_argument("--bits", type=int, default=63)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--topk", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=32)
    p.add_argument("--softmax-max-len", type=int, default=4096)
    p.add_argument("--cases", nargs="+", default=None, help="only these cases (default: all)")
    p.add_argument("--worker", choices=["lra", "peer"], help=argparse.SUPPRESS)
    p.add_argument("--n", type=int, help=argparse.SUPPRESS)
    p.add_argument("--payload", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        _worker_main(args.worker, args.n, args.payload)
        return
    from lra_lab.bench.peers_report import PEER_INSTALL, report  # after the worker: a peer's runs without lra

    all_cases = [
        "lra_clustered",
        "lra_improved_clustered",
        "lra_softmax",
        "lra_dispersed",
        "jax_dot_product_attention",
        "torch_sdpa",
        "ft_clustered",
        "ft_improved_clustered",
    ]
    settings = dict(
        batch=1,
        heads=args.heads,
        head_dim=args.head_dim,
        clusters=args.clusters,
        bits=args.bits,
        iterations=args.iterations,
        topk=args.topk,
        threads=args.threads,
        calls=args.calls,
        softmax_max_len=args.softmax_max_len,
        cases=args.cases or all_cases,
    )
    peer_cmd = shlex.split(args.peer_python)
    start = machine()
    result = measure(args.lengths, settings, args.repeats, peer_cmd)
    missing = sorted(
        {
            m
            for run in result["runs"]
            for e in run["lengths"].values()
            for part in e.values()
            for m in part.get("missing", [])
        }
    )
    for m in missing:
        print(f"NOT INSTALLED: {m} -- its rows stay empty. To measure it: {PEER_INSTALL}", flush=True)
    from lra.training.run_files import git_commit

    result["meta"] = {
        "settings": settings,
        "lengths": args.lengths,
        "machine": start,
        "peer_python": args.peer_python,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python scripts/bench_peers.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:])),
        "git_commit": git_commit(),
        "missing": missing,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    md = report(result)
    args.out.with_suffix(".md").write_text(md)
    print(md)
    print("wrote", args.out.with_suffix(".json"), args.out.with_suffix(".md"))


if __name__ == "__main__":
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # run as a file (the peers' worker): lra_lab/bench/'s modules must not shadow their imports
    main()
