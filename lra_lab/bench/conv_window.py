"""Ways of assembling ConvLuna's convolution windows, checked bit for bit and timed (issue 36, point 5).

ListOps' ConvLuna filters the packing keys and values with a K = 32 tap per-head convolution, computed
as a banded (Toeplitz) matmul over blocks of C = 32 outputs (``lra.attention.luna._conv_same``). The
matmul reads each block's C + K - 1 inputs, so the overlapping windows (about twice the input) are
copied into the dot's layout, [H, (B J Dh), W], before it runs: the "window assembly" that a profile of
the cpu step charged with 16-18% of ConvLuna's step. The ways compared:

* ``toeplitz``: the suite's (pad once, slice each block's body and tail, concatenate; XLA transposes
  the concatenation into the dot's layout in the same loop).
* ``h_major``: the same einsum, on windows cut from an [H, B, Dh, N] copy of the input, so the copy
  into the dot's layout reads W-contiguous rows instead of one float every H x Dh.
* ``fused_pad``: the same einsum; body and tail each padded (cropped) straight from the input, so no
  shared padded copy is written: XLA fuses the padding, and the mask and bias before it, into the copy.
* ``block64``: the suite's code with C = 64 (windows 1.5x the input instead of 2x; a longer dot).
* ``xla_conv``: ``lax.conv_general_dilated``, depthwise over H x Dh channels: no windows at all.

Each way's output, input gradient and filter gradient are compared with ``toeplitz``'s bit for bit on
the shapes the cpu preset trains and evaluates (and a paper-scale and odd shapes); then a ConvLuna layer
as the cpu preset builds it (B = 32, N = 256, D = 64, 4 heads, 16 memory cells, dropout 0.1) runs
forward + backward under each way, rounds alternated. Two times per way: the wall time of a call
(median per round) and XLA's op time per call with every op at its fastest of the traced calls (from a
``jax.profiler`` trace, summed over XLA's threads; on a shared, loaded machine preemption inflates the
first far more). The process runs with the suite's CPU settings (mimalloc, one-pass threefry), as
``lra.train`` does: without them every fresh buffer is faulted in again and the copies cost 2-4x more.

    python -m lra_lab.bench.conv_window --out results/bench/conv_window_cpu.json
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from lra.attention import luna

Conv = Callable[[jax.Array, jax.Array], jax.Array]  # (x B x N x H x Dh, kernel K x H) -> B x N x H x Dh

BLOCK = 32  # _conv_same's default C
_SUITE_CONV = luna._conv_same  # taken at import: layer_step swaps luna._conv_same while it traces


def _h_major(x_BxNxHxDh: jax.Array, kernel_KxH: jax.Array) -> jax.Array:
    """_conv_same's einsum on windows cut from an [H, B, Dh, N] copy of x."""
    b, n, h, dh = x_BxNxHxDh.shape
    k = kernel_KxH.shape[0]
    c = max(BLOCK, k)
    num_blocks, left = -(-n // c), (k - 1) // 2
    xp = jnp.pad(x_BxNxHxDh.transpose(2, 0, 3, 1), ((0, 0), (0, 0), (0, 0), (left, (num_blocks + 1) * c - n - left)))
    body = xp[..., : num_blocks * c].reshape(h, b, dh, num_blocks, c)
    tail = xp[..., c : (num_blocks + 1) * c].reshape(h, b, dh, num_blocks, c)[..., : k - 1]
    windows_BxJxWxHxDh = jnp.concatenate([body, tail], axis=-1).transpose(1, 3, 4, 0, 2)
    y = jnp.einsum("hcw,bjwhd->bjchd", luna.toeplitz_taps(kernel_KxH, c).astype(x_BxNxHxDh.dtype), windows_BxJxWxHxDh)
    return y.reshape(b, num_blocks * c, h, dh)[:, :n]


def _fused_pad(x_BxNxHxDh: jax.Array, kernel_KxH: jax.Array) -> jax.Array:
    """_conv_same's einsum; body and tail padded separately from x (negative padding crops)."""
    b, n, h, dh = x_BxNxHxDh.shape
    k = kernel_KxH.shape[0]
    c = max(BLOCK, k)
    num_blocks, left = -(-n // c), (k - 1) // 2
    zero = jnp.zeros((), x_BxNxHxDh.dtype)
    body = lax.pad(x_BxNxHxDh, zero, ((0, 0, 0), (left, num_blocks * c - n - left, 0), (0, 0, 0), (0, 0, 0)))
    tail = lax.pad(x_BxNxHxDh, zero, ((0, 0, 0), (left - c, (num_blocks + 1) * c - n - left, 0), (0, 0, 0), (0, 0, 0)))
    windows_BxJxWxHxDh = jnp.concatenate(
        [body.reshape(b, num_blocks, c, h, dh), tail.reshape(b, num_blocks, c, h, dh)[:, :, : k - 1]], axis=2
    )
    y = jnp.einsum("hcw,bjwhd->bjchd", luna.toeplitz_taps(kernel_KxH, c).astype(x_BxNxHxDh.dtype), windows_BxJxWxHxDh)
    return y.reshape(b, num_blocks * c, h, dh)[:, :n]


def _block64(x_BxNxHxDh: jax.Array, kernel_KxH: jax.Array) -> jax.Array:
    return _SUITE_CONV(x_BxNxHxDh, kernel_KxH, block=64)


def _xla_conv(x_BxNxHxDh: jax.Array, kernel_KxH: jax.Array) -> jax.Array:
    """Depthwise lax.conv_general_dilated over H x Dh channels (each head's taps repeated Dh times)."""
    b, n, h, dh = x_BxNxHxDh.shape
    k = kernel_KxH.shape[0]
    left = (k - 1) // 2
    rhs_KxIxO = jnp.repeat(kernel_KxH, dh, axis=1)[:, None, :].astype(x_BxNxHxDh.dtype)
    y = lax.conv_general_dilated(
        x_BxNxHxDh.reshape(b, n, h * dh),
        rhs_KxIxO,
        (1,),
        [(left, k - 1 - left)],
        dimension_numbers=("NWC", "WIO", "NWC"),
        feature_group_count=h * dh,
    )
    return y.reshape(b, n, h, dh)


# name -> (the conv, whether it feeds toeplitz's very matmul: then it must agree to the bit)
WAYS: dict[str, tuple[Conv, bool]] = {
    "toeplitz": (_SUITE_CONV, True),
    "h_major": (_h_major, True),
    "fused_pad": (_fused_pad, True),
    "block64": (_block64, False),
    "xla_conv": (_xla_conv, False),
}

# (B, N, H, Dh, K): the cpu preset's train (B 32) and eval (B 64) buckets, smoke's, paper-scale, odd ones
CHECK_SHAPES = (
    (32, 256, 4, 16, 32),
    (32, 128, 4, 16, 32),
    (32, 64, 4, 16, 32),
    (64, 256, 4, 16, 32),
    (64, 64, 4, 16, 32),
    (4, 64, 4, 32, 32),
    (2, 2000, 8, 64, 32),
    (2, 37, 2, 8, 32),
    (3, 20, 4, 16, 4),
)


def forward_backward(conv: Conv) -> Callable[..., tuple[jax.Array, jax.Array, jax.Array]]:
    """jit of (x, kernel, cotangent) -> (y, dL/dx, dL/dkernel) for L = <y, cotangent>."""

    def run(x, kernel, cotangent):
        y, vjp = jax.vjp(conv, x, kernel)
        return (y, *vjp(cotangent))

    return jax.jit(run)


def check_bits(names: list[str], shapes: tuple[tuple[int, ...], ...] = CHECK_SHAPES) -> list[dict[str, Any]]:
    """Per way and shape: which of y, dx, dkernel equal toeplitz's to the bit, and the largest difference."""
    base = forward_backward(WAYS["toeplitz"][0])
    rows = []
    for shape in shapes:
        b, n, h, dh, k = shape
        keys = jax.random.split(jax.random.PRNGKey(sum(shape)), 3)
        args = (
            jax.random.normal(keys[0], (b, n, h, dh)),
            0.2 * jax.random.normal(keys[1], (k, h)),
            jax.random.normal(keys[2], (b, n, h, dh)),
        )
        want = [np.asarray(a) for a in base(*args)]
        for name in names:
            got = [np.asarray(a) for a in forward_backward(WAYS[name][0])(*args)]
            rows.append(
                {
                    "way": name,
                    "shape": list(shape),
                    "identical": {
                        part: bool(np.array_equal(w.view(np.uint32), g.view(np.uint32)))
                        for part, w, g in zip(("y", "dx", "dkernel"), want, got, strict=False)
                    },
                    "max_abs_diff": max(float(np.max(np.abs(w - g))) for w, g in zip(want, got, strict=False)),
                }
            )
    return rows


def layer_step(conv: Conv, batch: int = 32, length: int = 256) -> tuple[Callable[[], Any], Any]:
    """A compiled forward + backward of the cpu preset's ConvLuna layer (the ``reference`` sharing, with
    dropout) whose filter runs ``conv``; returns (call, its outputs)."""
    module = luna.ConvLunaAttention(
        num_heads=4,
        qkv_dim=64,
        memory_size=16,
        filter="conv",
        kernel_size=32,
        stride=1,
        share_projections="qko",
        scale_unpacking=False,
        dropout_rate=0.1,
    )
    keys = jax.random.split(jax.random.PRNGKey(0), 6)
    x = jax.random.normal(keys[0], (batch, length, 64))
    mask = jnp.arange(length)[None, :] < jax.random.randint(keys[1], (batch, 1), length // 8, length + 1)
    memory = jax.random.normal(keys[2], (batch, 16, 64))
    params = module.init({"params": keys[3], "dropout": keys[4]}, x, mask, memory)

    def loss(params, x, memory):
        y, packed = module.apply(params, x, mask, memory, deterministic=False, rngs={"dropout": keys[5]})
        return jnp.sum(jnp.sin(y)) + jnp.sum(packed**2)

    # filter_length looks it up at trace time and passes (x, kernel) only, never _conv_same's block
    luna._conv_same = conv  # type: ignore[assignment]  # a Conv takes no block argument
    try:
        compiled = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2))).lower(params, x, memory).compile()
    finally:
        luna._conv_same = _SUITE_CONV
    return (lambda: compiled(params, x, memory)), compiled(params, x, memory)


def op_seconds(call: Callable[[], Any], calls: int) -> float:
    """XLA's op time per call, each op at its fastest of ``calls`` traced calls (a jax.profiler trace)."""
    from lra_lab.bench.profile_summary import find_trace, load_events

    with tempfile.TemporaryDirectory(prefix="lra_conv_window_") as folder:
        jax.profiler.start_trace(folder, create_perfetto_trace=True)
        for _ in range(calls):
            jax.block_until_ready(call())
        jax.profiler.stop_trace()
        events = load_events(find_trace(Path(folder)))
    durations: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
    for e in events:
        args = e.get("args", {})
        if e.get("ph") == "X" and "hlo_op" in args:
            durations[(args.get("hlo_module", ""), args["hlo_op"])].append(e["dur"])
    return sum(min(d) * len(d) for d in durations.values()) / calls / 1e6


def time_layer(names: list[str], rounds: int, calls: int) -> dict[str, Any]:
    """Wall (median of ``calls``) and fastest-op time per call of each way's layer step, rounds alternated."""
    steps = {}
    outputs = {}
    for name in names:
        steps[name], out = layer_step(WAYS[name][0])
        outputs[name] = [np.asarray(a) for a in jax.tree_util.tree_leaves(out)]
    identical = {
        name: all(np.array_equal(a, b) for a, b in zip(outputs["toeplitz"], outputs[name], strict=False))
        for name in names
    }
    wall: dict[str, list[float]] = {name: [] for name in names}
    ops: dict[str, list[float]] = {name: [] for name in names}
    for rnd in range(rounds):
        for name in names if rnd % 2 == 0 else names[::-1]:
            times = []
            for _ in range(calls):
                t0 = time.perf_counter()
                jax.block_until_ready(steps[name]())
                times.append(time.perf_counter() - t0)
            wall[name].append(statistics.median(times))
            ops[name].append(op_seconds(steps[name], calls))
            print(
                f"round {rnd + 1}/{rounds} {name}: wall {1e3 * wall[name][-1]:.1f} ms, "
                f"ops at fastest {1e3 * ops[name][-1]:.1f} ms",
                flush=True,
            )
    return {
        "layer_identical_to_toeplitz": identical,
        "wall_seconds": wall,
        "op_seconds": ops,
        "wall_ratio": {n: [a / b for a, b in zip(wall["toeplitz"], wall[n], strict=False)] for n in names},
        "op_ratio": {n: [a / b for a, b in zip(ops["toeplitz"], ops[n], strict=False)] for n in names},
    }


def markdown(record: dict[str, Any]) -> str:
    timing = record["layer"]
    lines = [
        "# ConvLuna's convolution windows: ways of assembling them, bit for bit and timed",
        "",
        f"`{record['command']}` at commit `{record['git_commit']}`, {record['date']}, {record['machine']}, "
        f"jax {record['jax']}, CPU settings {record['speed_settings']}; {record['rounds']} rounds of "
        f"{record['calls']} calls, order alternated.",
        "",
        *([record["note"], ""] if record.get("note") else []),
        "Layer: the cpu preset's ConvLuna-16 `:reference` layer (B = 32, N = 256, D = 64, 4 heads, "
        "K = 32, dropout 0.1), forward + backward. Ratios are toeplitz's time over the way's, per round "
        "(> 1: faster than today's). Op time: XLA's ops per call, each at its fastest traced call.",
        "",
        "| way | same matmul | bits equal on every shape (y, dx, dkernel) | layer grads equal | "
        "wall ms (per round) | wall ratio | op ms (per round) | op ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in record["ways"]:
        checks = [r for r in record["bits"] if r["way"] == name]
        equal = all(all(r["identical"].values()) for r in checks)
        worst = max((r["max_abs_diff"] for r in checks), default=0.0)
        fmt = lambda xs, scale=1.0, unit="": " / ".join(f"{scale * x:.{1 if scale > 1 else 2}f}{unit}" for x in xs)  # noqa: E731
        lines.append(
            f"| {name} | {'yes' if WAYS[name][1] else 'no'} | "
            f"{'yes' if equal else f'no (max diff {worst:.1e})'} | "
            f"{'yes' if timing['layer_identical_to_toeplitz'][name] else 'no'} | "
            f"{fmt(timing['wall_seconds'][name], 1e3)} | {fmt(timing['wall_ratio'][name], unit='x')} | "
            f"{fmt(timing['op_seconds'][name], 1e3)} | {fmt(timing['op_ratio'][name], unit='x')} |"
        )
    shapes = ", ".join("x".join(str(v) for v in s) for s in record["check_shapes"])
    lines += ["", f"Shapes checked bit for bit (B x N x H x Dh x K): {shapes}.", ""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from lra import cpu_speed
    from lra.training import provenance
    from lra.training.provenance import seal
    from lra.training.run_files import write_json_atomic, write_text_atomic

    cpu_speed.reexec_with_fast_allocator()  # time the layer as lra.train runs it: mimalloc, one-pass threefry
    cpu_speed.unroll_threefry_on_cpu()

    parser = argparse.ArgumentParser(
        prog="python -m lra_lab.bench.conv_window",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--ways", nargs="+", default=list(WAYS), choices=list(WAYS))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=15, help="calls per way and round")
    parser.add_argument("--note", default="", help="a sentence for the record, e.g. what else shared the machine")
    parser.add_argument("--out", type=Path, required=True, help="the JSON record (a .md table is written beside it)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.calls < 1:
        parser.error("--rounds and --calls must be positive")
    names = ["toeplitz"] + [n for n in args.ways if n != "toeplitz"]
    provenance.mark_start()
    bits = check_bits(names[1:])
    for row in bits:
        print(f"{row['way']} {row['shape']}: {row['identical']} (max diff {row['max_abs_diff']:.1e})", flush=True)
    layer = time_layer(names, args.rounds, args.calls)
    record = {
        **provenance.stamp(),
        "machine": f"{os.cpu_count()} CPUs ({platform.machine()})",
        "jax": jax.__version__,
        "speed_settings": cpu_speed.settings(),
        "note": args.note,
        "ways": names,
        "rounds": args.rounds,
        "calls": args.calls,
        "check_shapes": [list(s) for s in CHECK_SHAPES],
        "bits": bits,
        "layer": layer,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(args.out, record)
    seal(args.out)  # an edit after this is found by the audit (lra.training.provenance)
    write_text_atomic(args.out.with_suffix(".md"), markdown(record))
    print(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
