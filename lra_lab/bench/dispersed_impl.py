"""Compare ways of computing dispersed attention on this machine; the fastest is the default.

Candidates (same inputs, same outputs; checked against each other before timing):
  * ``chunks-C``: lra.attention.dispersed.dispersed_attention with ``chunk_size=C`` (query
    chunks of at most C positions, each over the offsets its keys need; the module's default
    is ``DEFAULT_CHUNK_SIZE``);
  * ``slices``: one shifted copy of K and V per offset (a Python loop over the K offsets);
  * ``slices-scan``: the same shifted copies inside two rematerialised scans over the offsets;
  * ``softmax``: full attention (lra.attention.base.dot_product_attention), for scale.

Times jitted forward+backward (gradient of sum(y) w.r.t. q, k, v) of the attention core, repeats
interleaved across candidates so load changes on a shared machine hit all alike; reports the min
and median, the compile time and XLA's temporary-buffer size. Writes
results/bench/dispersed_impl.{json,md}.

    python scripts/bench_dispersed_impl.py                  # N = 1024, 4096; width 128, 4 heads
    python scripts/bench_dispersed_impl.py --lengths 4096 --repeats 10
    python scripts/bench_dispersed_impl.py --report-only    # rewrite the .md from the .json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lra.attention import dispersed
from lra.attention.base import dot_product_attention

Core = Callable[..., jax.Array]  # (q, k, v, mask_BxN, offsets) -> y, all B x N x H x Dh


def _slices(q, k, v, mask, offs):
    """Shifted copies: logits[..., i] = <q[n], k[n + d_i]>; row wrap-around is masked."""
    offs = offs[np.abs(offs) < q.shape[1]]
    bias = dispersed._pattern_bias(mask, offs)
    q = q * q.shape[-1] ** -0.5
    shift = lambda x, d: jnp.roll(x, -int(d), axis=1)  # noqa: E731
    logits = jnp.stack([jnp.einsum("bnhd,bnhd->bnh", q, shift(k, d)) for d in offs], axis=-1)
    w = jax.nn.softmax(logits + bias, axis=-1)
    return sum(w[..., i, None] * shift(v, d) for i, d in enumerate(offs))


def _slices_scan(q, k, v, mask, offs):
    """Shifted copies inside scans over the offsets (small graph; one offset per step)."""
    offs = offs[np.abs(offs) < q.shape[1]]
    bias = dispersed._pattern_bias(mask, offs)
    q = q * q.shape[-1] ** -0.5

    @jax.checkpoint
    def score(carry, d):
        return carry, jnp.einsum("bnhd,bnhd->bnh", q, jnp.roll(k, -d, axis=1))

    _, s_KxBxNxH = jax.lax.scan(score, None, jnp.asarray(offs))
    w = jax.nn.softmax(jnp.moveaxis(s_KxBxNxH, 0, -1) + bias, axis=-1)

    @jax.checkpoint
    def mix(acc, xs):
        w_i, d = xs
        return acc + w_i[..., None] * jnp.roll(v, -d, axis=1), None

    y, _ = jax.lax.scan(mix, jnp.zeros_like(v), (jnp.moveaxis(w, -1, 0), jnp.asarray(offs)))
    return y


def candidates(n: int, chunk_sizes: list[int]) -> dict[str, Core]:
    cands: dict[str, Core] = {
        f"chunks-{c}": partial(dispersed.dispersed_attention, chunk_size=c) for c in chunk_sizes if c <= n
    }
    cands["slices"] = _slices
    cands["slices-scan"] = _slices_scan
    cands["softmax"] = lambda q, k, v, mask, offs: dot_product_attention(q, k, v, mask)
    return cands


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--dim", type=int, default=128, help="qkv width (all heads)")
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--window", type=int, default=dispersed.PAPER_WINDOW)
    ap.add_argument("--chunk-sizes", type=int, nargs="+", default=[128, 256, 512])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", type=Path, default=Path("results/bench/dispersed_impl"))
    ap.add_argument("--report-only", action="store_true", help="rewrite OUT.md from OUT.json")
    args = ap.parse_args(argv)
    if args.report_only:
        write_report(args.out)
        return

    offs = dispersed.offsets(args.window)
    rows = []
    for n in args.lengths:
        shape = (args.batch, n, args.heads, args.dim // args.heads)
        q, k, v = (jax.random.normal(key, shape) for key in jax.random.split(jax.random.key(0), 3))
        mask = jnp.broadcast_to(jnp.arange(n)[None, :] < n - 7, (args.batch, n))
        cands = candidates(n, args.chunk_sizes)
        reference = np.asarray(jax.jit(lambda q, k, v, mask=mask: _slices_scan(q, k, v, mask, offs))(q, k, v))
        compiled: dict[str, Any] = {}
        stats: dict[str, dict[str, Any]] = {}
        for name, core in cands.items():
            loss = lambda q, k, v, core=core, mask=mask: jnp.sum(core(q, k, v, mask, offs))  # noqa: E731
            out = np.asarray(jax.jit(lambda q, k, v, core=core, mask=mask: core(q, k, v, mask, offs))(q, k, v))
            if name != "softmax":  # all dispersed candidates compute the same thing
                np.testing.assert_allclose(out[:, : n - 7], reference[:, : n - 7], atol=1e-4, err_msg=name)
            t0 = time.perf_counter()
            compiled[name] = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, k, v).compile()
            mem = compiled[name].memory_analysis()
            stats[name] = {
                "compile_s": time.perf_counter() - t0,
                "temp_mib": getattr(mem, "temp_size_in_bytes", 0) / 2**20 if mem is not None else None,
                "times": [],
            }
            jax.block_until_ready(compiled[name](q, k, v))  # warm-up
            print(f"N={n} {name}: compiled in {stats[name]['compile_s']:.1f} s", flush=True)
        for _ in range(args.repeats):  # interleaved
            for name, fn in compiled.items():
                t0 = time.perf_counter()
                jax.block_until_ready(fn(q, k, v))
                stats[name]["times"].append(time.perf_counter() - t0)
        for name, s in stats.items():
            rows.append(
                {
                    "impl": name,
                    "seq_len": n,
                    "num_offsets": len(dispersed.live_offsets(n, args.window)),
                    "fwd_bwd_ms_min": 1e3 * min(s["times"]),
                    "fwd_bwd_ms_median": 1e3 * float(np.median(s["times"])),
                    "compile_s": s["compile_s"],
                    "temp_mib": s["temp_mib"],
                }
            )
            print(json.dumps(rows[-1]), flush=True)

    command = (
        "python scripts/bench_dispersed_impl.py --lengths "
        + " ".join(map(str, args.lengths))
        + f" --dim {args.dim} --heads {args.heads} --batch {args.batch} --window {args.window}"
        + " --chunk-sizes "
        + " ".join(map(str, args.chunk_sizes))
        + f" --repeats {args.repeats}"
    )
    meta = {
        "command": command,
        "what": "jitted forward+backward of the attention core (grad of sum(y) w.r.t. q, k, v)",
        "dim": args.dim,
        "heads": args.heads,
        "batch": args.batch,
        "window": args.window,
        "repeats": args.repeats,
        "device": jax.devices()[0].device_kind,
        "cpu_count": os.cpu_count(),
        "default_chunk_size": dispersed.DEFAULT_CHUNK_SIZE,
        "default_block_size": dispersed.DEFAULT_BLOCK_SIZE,
        "platform": platform.platform(),
        "jax_version": jax.__version__,
        "note": "repeats interleaved across candidates; the machine is shared, so min is the " "least noisy statistic",
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    write_report(args.out)


def write_report(out: Path, tie: float = 1.1) -> None:
    """Write ``out``.md from ``out``.json: the table and, per length, the fastest candidates
    (every dispersed candidate within ``tie`` x the fastest min time counts as tied)."""
    result = json.loads(out.with_suffix(".json").read_text())
    meta, rows = result["meta"], result["rows"]
    lines = [
        "# Dispersed attention: implementation comparison",
        "",
        f"{meta['what']}; qkv width {meta['dim']}, {meta['heads']} heads, batch {meta['batch']}, "
        f"window {meta['window']}, float32; {meta['device']} ({meta['cpu_count']} cores, shared), "
        f"jax {meta['jax_version']}; {meta['note']}. Module default: "
        f"chunk_size={meta.get('default_chunk_size', 'n/a')}, block_size={meta.get('default_block_size', 'n/a')}.",
        "",
        f"Command: `{meta['command']}`",
        "",
        "Candidates: `chunks-C` = the module's implementation with chunk_size=C (query chunks of at "
        "most C positions, each over the offsets its keys need); `slices` = one shifted copy of K "
        "and V per offset (Python loop); "
        "`slices-scan` = the shifted copies inside rematerialised scans over the offsets; "
        "`softmax` = full attention, for scale. XLA temp = the compiled step's temporary buffers.",
        "",
        "| impl | N | offsets K | fwd+bwd ms (min) | median | compile s | XLA temp MiB |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        temp = "n/a" if r["temp_mib"] is None else f"{r['temp_mib']:.1f}"
        lines.append(
            f"| {r['impl']} | {r['seq_len']} | {r['num_offsets']} | {r['fwd_bwd_ms_min']:.1f} | "
            f"{r['fwd_bwd_ms_median']:.1f} | {r['compile_s']:.1f} | {temp} |"
        )
    lines.append("")
    for n in sorted({r["seq_len"] for r in rows}):
        dis = sorted(
            (r for r in rows if r["seq_len"] == n and r["impl"] != "softmax"), key=lambda r: r["fwd_bwd_ms_min"]
        )
        tied = [r["impl"] for r in dis if r["fwd_bwd_ms_min"] <= tie * dis[0]["fwd_bwd_ms_min"]]
        lines.append(
            f"- N={n}: fastest {dis[0]['impl']}; within {round(100 * (tie - 1))}% of it: " f"{', '.join(tied)}."
        )
    lines.append("")
    out.with_suffix(".md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
