"""The laptop benchmark: whole ``lra.train`` runs of any config, today's jax path against the
suite's CPU speed settings (lra.cpu_speed), alternated on one machine.

Each case is a config with options (``configs/listops_convluna.py:cpu,mem=16,reference``) and a
seed count; each variant is an environment (``default``: jax as it comes, ``LRA_FAST_ALLOC=0``;
``glibc``: glibc's allocator tunables instead of mimalloc, jax's rolled threefry; ``fast``: the suite's
defaults, mimalloc and the one-pass threefry; ``fast+threefry``: jax's fused threefry instead,
``LRA_UNROLLED_THREEFRY=1``, not bit-identical). A ``-pair`` variant (``fast-pair``, ``default-pair``)
runs two children of its base variant at once, pinned one per core after their first compile
(``LRA_PIN_CORE``, as sweeps and ``lra_lab.reproduce --jobs 2`` run them): its seed-steps/s is the
machine's, the sum of the two children's, so its ratio to ``default`` is what a two-lane sweep gains
over running today's one process at a time. Rounds run
every (case, variant) once, in alternating order, so that a shared machine's load hits every
variant alike; the record keeps every run and the ratios are taken within a round.

Per run: seed-steps/s (result.json's timed steps, compilation excluded, x seeds), compile time,
the child's minor page faults and system CPU per step (``wait4``'s rusage, whole process: start-up
and evaluation included, so they are upper bounds), and MFU: XLA's FLOP count of the compiled step
at the config's longest batch shape over a dense f32 matmul's rate measured in the same process.

``python -m lra_lab.bench.laptop --out results/bench/laptop_steps_cpu.json`` (``--help`` for the grid).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CASES = (
    "configs/listops_convluna.py:cpu,mem=16,reference",
    "configs/listops_luna.py:cpu,mem=16,reference",
    "configs/listops_transformer.py:cpu",
    "configs/listops_convluna.py:cpu",
)
VARIANTS: dict[str, dict[str, str]] = {
    "default": {"LRA_FAST_ALLOC": "0", "LRA_UNROLLED_THREEFRY": "0"},
    "glibc": {"LRA_FAST_ALLOC": "glibc", "LRA_UNROLLED_THREEFRY": "0"},
    "fast": {},
    "fast+threefry": {"LRA_UNROLLED_THREEFRY": "1"},
}
# two children of the base variant at once, one pinned to each core (the machine's throughput)
PAIRS: dict[str, str] = {"default-pair": "default", "fast-pair": "fast"}


def _clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "GLIBC_TUNABLES",
            "LRA_FAST_ALLOC_APPLIED",
            "LRA_FAST_ALLOC",
            "LRA_UNROLLED_THREEFRY",
            "LD_PRELOAD",
            "MIMALLOC_PURGE_DELAY",
            "LRA_PIN_CORE",
        )
    }
    return {**env, "JAX_PLATFORMS": "cpu", **extra}


def _start(config: str, seeds: int, steps: int, env: dict[str, str], workdir: Path) -> subprocess.Popen[str]:
    """An ``lra.train`` child of ``config`` at ``steps`` steps, one evaluation and one checkpoint."""
    seed_flag = [f"--config.seeds={','.join(str(s) for s in range(seeds))}"] if seeds > 1 else []
    argv = [
        sys.executable,
        "-m",
        "lra.train",
        "--config",
        config,
        f"--config.num_train_steps={steps}",
        f"--config.eval_every={steps}",
        f"--config.checkpoint_every={steps}",
        "--config.log_memory_stats=false",
        *seed_flag,
        "--workdir",
        str(workdir),
    ]
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _result(proc: subprocess.Popen[str], label: str, seeds: int, workdir: Path) -> dict[str, Any]:
    """The finished child's result.json (a RuntimeError with its output's tail if it failed)."""
    out, _ = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{label} exited {proc.returncode}: {out.strip()[-600:]}")
    return json.loads((workdir / ("seed0" if seeds > 1 else "") / "result.json").read_text())


def train_once(config: str, seeds: int, steps: int, variant: str, workdir: Path) -> dict[str, Any]:
    """One ``lra.train`` child (two at once, pinned one per core, for a ``-pair`` variant); the
    result.json numbers (a pair's seed-steps/s: the sum of its children's)."""
    base = PAIRS.get(variant, variant)
    cores: list[int | None] = [0, 1] if variant in PAIRS else [None]
    dirs = [workdir if core is None else workdir / f"core{core}" for core in cores]
    t0 = time.perf_counter()
    procs: list[subprocess.Popen[str]] = []
    try:
        for core, folder in zip(cores, dirs, strict=True):
            pin = {} if core is None else {"LRA_PIN_CORE": str(core)}
            procs.append(_start(config, seeds, steps, _clean_env({**VARIANTS[base], **pin}), folder))
        results = [_result(p, f"{config} ({variant})", seeds, d) for p, d in zip(procs, dirs, strict=True)]
    finally:
        for proc in procs:  # a failed child's partner is not left running
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    wall = time.perf_counter() - t0
    result = results[0]
    return {
        "config": config,
        "seeds": seeds,
        "steps": steps,
        "variant": variant,
        "processes": len(results),
        "wall_seconds": wall,
        "seed_steps_per_second": sum(r["steps_per_second"] for r in results) * seeds,
        "process_seed_steps_per_second": [r["steps_per_second"] * seeds for r in results],
        "compile_seconds": result["compile_seconds"],
        "train_seconds": result["train_seconds"],
        "speed_settings": result.get("speed_settings"),
        "test_loss": result["test_loss"],
        "test_accuracy": result["test_accuracy"],
        "test_results": [[r["test_loss"], r["test_accuracy"]] for r in results],
    }


def _run_with_rusage(config: str, seeds: int, steps: int, variant: str, workdir: Path) -> dict[str, Any]:
    """train_once with its children's own rusage (RUSAGE_CHILDREN deltas: one run, one child or a
    pair's two, at a time)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    row = train_once(config, seeds, steps, variant, workdir)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    process_steps = steps * row["processes"]  # per step of one process: a pair's two children are summed
    row.update(
        minor_faults_per_step=(after.ru_minflt - before.ru_minflt) / process_steps,
        system_seconds_per_step=(after.ru_stime - before.ru_stime) / process_steps,
        user_seconds=after.ru_utime - before.ru_utime,
        system_seconds=after.ru_stime - before.ru_stime,
    )
    return row


def step_cost(config_arg: str, seeds: int) -> dict[str, Any]:
    """XLA's FLOPs of the compiled train step at the config's longest batch shape, and a dense f32
    matmul's FLOP/s, both in this process (a child of the benchmark)."""
    import jax.numpy as jnp

    from lra.data import task_shapes
    from lra.defaults import load_config_file
    from lra.model import build_model
    from lra.training import hosts
    from lra.training.step import make_init, make_optimizer, make_steps
    from lra_lab.bench.steps import matmul_rate

    path, _, options = config_arg.partition(":")
    config = load_config_file(REPO / path).get_config(options or None)
    vocab_size, num_classes, dual = task_shapes(config.task)
    model = build_model(config.model, vocab_size, num_classes, dual)
    tx = make_optimizer(config.learning_rate, config.warmup_steps, config.weight_decay, config.grad_clip_norm)
    mesh = hosts.data_mesh()
    seed_list = list(range(seeds))
    train, _ = make_steps(model, tx, config, mesh, seed_list)
    length = config.data.max_len
    sample = jnp.zeros((1, length), jnp.int32)
    state = make_init(model, tx, seed_list, sample, hosts.replicated(mesh))()
    batch = {
        "inputs": jnp.zeros((seeds, config.batch_size, length), jnp.int32),
        "labels": jnp.zeros((seeds, config.batch_size), jnp.int32),
        "weights": jnp.ones((seeds, config.batch_size), jnp.float32),
    }
    cost = train.lower(state, batch).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    # no cost analysis (a backend may give None) counts as no FLOPs, as a missing "flops" key does
    return {
        "flops_per_step": float((cost or {}).get("flops", 0.0)),
        "batch_shape": [seeds, config.batch_size, length],
        "matmul_flops_per_second": matmul_rate("float32", 1024),
    }


def _step_cost_child(config: str, seeds: int) -> dict[str, Any]:
    code = (
        "import json, sys; from lra_lab.bench.laptop import step_cost; "
        f"print(json.dumps(step_cost({config!r}, {seeds})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=_clean_env({"LRA_FAST_ALLOC": "0"}),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-400:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ratios(rows: Sequence[dict[str, Any]], baseline: str = "default") -> list[dict[str, Any]]:
    """Per (case, variant), the seed-steps/s ratio against ``baseline`` within each round."""
    out = []
    keys = sorted({(r["config"], r["seeds"]) for r in rows})
    for config, seeds in keys:
        for variant in sorted({r["variant"] for r in rows} - {baseline}):
            per_round = []
            for rnd in sorted({r["round"] for r in rows}):
                pick = {
                    r["variant"]: r for r in rows if r["config"] == config and r["seeds"] == seeds and r["round"] == rnd
                }
                if baseline in pick and variant in pick:
                    per_round.append(pick[variant]["seed_steps_per_second"] / pick[baseline]["seed_steps_per_second"])
            if per_round:
                out.append(
                    {
                        "config": config,
                        "seeds": seeds,
                        "variant": variant,
                        "vs": baseline,
                        "ratios": per_round,
                        "median_ratio": statistics.median(per_round),
                    }
                )
    return out


def markdown(record: dict[str, Any]) -> str:
    lines = [
        "# Laptop benchmark: whole `lra.train` runs, jax's default path against the suite's CPU settings",
        "",
        f"`{record['command']}` at commit `{record['git_commit']}`, {record['date']}, "
        f"{record['machine']}; {record['steps']} steps per run, rounds alternated.",
        "",
        *([record["note"], ""] if record.get("note") else []),
        "| config | seeds | variant | seed-steps/s (per round) | ratio to default (per round) | "
        "minor faults / step | system s / step | compile s | MFU |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratio_of = {(r["config"], r["seeds"], r["variant"]): r for r in record["ratios"]}
    for config, seeds in sorted({(r["config"], r["seeds"]) for r in record["runs"]}):
        cost = record["step_costs"].get(f"{config}|{seeds}", {})
        for variant in [*VARIANTS, *PAIRS]:
            rows = [
                r for r in record["runs"] if r["config"] == config and r["seeds"] == seeds and r["variant"] == variant
            ]
            if not rows:
                continue
            rates = [r["seed_steps_per_second"] for r in rows]
            ratio = ratio_of.get((config, seeds, variant))
            mfu = ""
            if cost.get("flops_per_step") and cost.get("matmul_flops_per_second"):
                values = [  # a pair's: both children's steps against the (two-core) matmul rate, the machine's
                    cost["flops_per_step"] * r["seed_steps_per_second"] / seeds / cost["matmul_flops_per_second"]
                    for r in rows
                ]
                mfu = " / ".join(f"{100 * v:.1f}%" for v in values)
            lines.append(
                f"| `{config}` | {seeds} | {variant} | {' / '.join(f'{x:.2f}' for x in rates)} | "
                + (" / ".join(f"{x:.2f}x" for x in ratio["ratios"]) if ratio else "1")
                + " | "
                + " / ".join(f"{r['minor_faults_per_step']:,.0f}" for r in rows)
                + " | "
                + " / ".join(f"{r['system_seconds_per_step']:.3f}" for r in rows)
                + " | "
                + " / ".join(f"{r['compile_seconds']:.1f}" for r in rows)
                + f" | {mfu} |"
            )
    lines += [
        "",
        "Faults and system time are per step of the whole process (start-up, compilation and the one "
        "evaluation included): upper bounds. MFU: XLA's FLOPs of the step at the longest batch shape "
        "(an upper bound for bucketed configs) times steps/s over a 1024x1024 f32 matmul's rate measured "
        "in the same child (the machine's for a `-pair` variant: both children's steps). A `-pair` variant's "
        "seed-steps/s is the "
        "sum of its two pinned children's, faults and system time per step of one child. `identical` below "
        "compares each variant's test loss with the default's (bit for bit; every child of a pair).",
        "",
    ]
    for item in record["identical"]:
        lines.append(
            f"- `{item['config']}` ({item['seeds']} seeds), {item['variant']}: "
            f"{'identical' if item['identical'] else 'DIFFERS'} test loss and accuracy"
        )
    return "\n".join(lines) + "\n"


def _tests(row: dict[str, Any]) -> list[list[float]]:
    """Every child's (test loss, test accuracy) of a run row (older records: the one child's)."""
    return row.get("test_results") or [[row["test_loss"], row["test_accuracy"]]]


def main(argv: list[str] | None = None) -> int:
    from lra.training.run_files import git_commit, write_json_atomic, write_text_atomic

    parser = argparse.ArgumentParser(
        prog="python -m lra_lab.bench.laptop", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--configs", nargs="+", default=list(CASES), help="configs with options")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1], help="seed counts (vmapped in one program)")
    parser.add_argument("--variants", nargs="+", default=["default", "fast"], choices=[*VARIANTS, *PAIRS])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-mfu", action="store_true", help="skip the FLOP count and matmul rate")
    parser.add_argument("--note", default="", help="a sentence for the record, e.g. what else shared the machine")
    parser.add_argument("--out", type=Path, required=True, help="the JSON record (a .md table is written beside it)")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.rounds < 1 or min(args.seeds) < 1:
        parser.error("--steps, --rounds and --seeds must be positive")
    for config in args.configs:
        if not (REPO / config.partition(":")[0]).is_file():
            parser.error(f"--configs {config}: no such config file")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "command": " ".join(["python -m lra_lab.bench.laptop", *(argv if argv is not None else sys.argv[1:])]),
        "git_commit": git_commit(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{os.cpu_count()} CPUs ({os.uname().machine})",
        "steps": args.steps,
        "note": args.note,
        "runs": [],
        "step_costs": {},
    }
    scratch = Path(tempfile.mkdtemp(prefix="lra_laptop_"))
    try:
        for rnd in range(args.rounds):
            for i, (config, seeds) in enumerate((c, s) for c in args.configs for s in args.seeds):
                order = args.variants if (rnd + i) % 2 == 0 else list(reversed(args.variants))
                for variant in order:
                    workdir = scratch / f"r{rnd}_{i}_{variant}"
                    row = _run_with_rusage(config, seeds, args.steps, variant, workdir)
                    row["round"] = rnd
                    record["runs"].append(row)
                    shutil.rmtree(workdir, ignore_errors=True)
                    print(
                        f"round {rnd + 1}/{args.rounds} {config} x{seeds} {variant}: "
                        f"{row['seed_steps_per_second']:.2f} seed-steps/s, {row['minor_faults_per_step']:,.0f} "
                        f"faults/step",
                        flush=True,
                    )
        if not args.no_mfu:
            for config in args.configs:
                for seeds in args.seeds:
                    record["step_costs"][f"{config}|{seeds}"] = _step_cost_child(config, seeds)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    record["ratios"] = ratios(record["runs"])
    record["identical"] = []
    for config in args.configs:
        for seeds in args.seeds:
            rows = [r for r in record["runs"] if r["config"] == config and r["seeds"] == seeds]
            base = [tuple(t) for r in rows if r["variant"] == "default" for t in _tests(r)]
            for variant in sorted({r["variant"] for r in rows} - {"default"}):
                other = [tuple(t) for r in rows if r["variant"] == variant for t in _tests(r)]
                record["identical"].append(
                    {
                        "config": config,
                        "seeds": seeds,
                        "variant": variant,
                        "identical": bool(base) and set(base) == set(other) and len(set(base)) == 1,
                    }
                )
    write_json_atomic(args.out, record)
    write_text_atomic(args.out.with_suffix(".md"), markdown(record))
    print(markdown(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
