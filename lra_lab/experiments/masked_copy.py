"""The masked-copy task of Vyas et al., *Fast Transformers with Clustered Attention* (arXiv:2007.04825),
Appendix C.2, and a tiny trainer for it.

A sequence ``0 w 0 w`` (w uniform over the symbols 1..10, length L) is shown with some symbols
masked, never both copies of one position; the model outputs the whole unmasked sequence. Solving
it needs each masked position to attend to its twin L+1 steps away, which clustered attention with
few clusters cannot route (all queries of a cluster share one attention row) while improved
clustered attention can (each query re-weights its cluster's top-k keys exactly).

Masking: each position of w is masked with probability 2 * ``mask_fraction`` in one uniformly
chosen copy, so ``mask_fraction`` of the symbols are masked on average (the paper: 20%). The loss
is cross-entropy on every position (the target is the whole sequence); we report accuracy on the
masked symbols (the part that needs attention; chance is 1/10) and on all positions.
The model is a small pre-LayerNorm encoder with fixed sinusoidal positions (as the paper's ASR
models), built here so that the script does not depend on the LRA encoder. The paper's is 4 layers
x 6 heads x 32, MLP 768, R-Adam at 2e-4, batch 32, 5000 steps, 15-100 clusters, top-k 32, L from
31 to 255. The defaults here are a CPU-sized version: L=31, 2 layers x 4 heads x 16, R-Adam at 3e-3,
800 steps, 4 or 16 clusters and top-k 16 (N/4, so that the top keys are not half the sequence).
``scripts/masked_copy.py`` is the command-line front end. The task, its settings and its model are
:mod:`lra_lab.experiments.masked_copy_task` (re-exported here); this module trains, evaluates and
reports, resumably.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from lra import attention, cpu_speed
from lra.errors import InputError
from lra_lab.experiments.masked_copy_task import MASK_TOKEN as MASK_TOKEN
from lra_lab.experiments.masked_copy_task import MAX_TOKENS as MAX_TOKENS
from lra_lab.experiments.masked_copy_task import MODEL_LISTS as MODEL_LISTS
from lra_lab.experiments.masked_copy_task import NUM_SYMBOLS as NUM_SYMBOLS
from lra_lab.experiments.masked_copy_task import SEPARATOR as SEPARATOR
from lra_lab.experiments.masked_copy_task import VOCAB as VOCAB
from lra_lab.experiments.masked_copy_task import CopyModel as CopyModel
from lra_lab.experiments.masked_copy_task import Settings as Settings
from lra_lab.experiments.masked_copy_task import canonical_variant as canonical_variant
from lra_lab.experiments.masked_copy_task import make_batch as make_batch
from lra_lab.experiments.masked_copy_task import parse_variant as parse_variant
from lra_lab.experiments.masked_copy_task import settings_config as settings_config
from lra_lab.experiments.masked_copy_task import settings_from_config as settings_from_config
from lra_lab.experiments.masked_copy_task import settings_problem as settings_problem
from lra_lab.experiments.masked_copy_task import settings_record as settings_record
from lra_lab.experiments.masked_copy_task import sinusoids as sinusoids


def train_variant(settings: Settings, spec: str, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Train one variant from scratch; return its final metrics and training curve."""
    label, name, kwargs = parse_variant(spec, settings)
    n = 2 * (settings.seq_len + 1)
    model = CopyModel(
        attention.get(name), kwargs, settings.num_layers, settings.num_heads, settings.head_dim, settings.mlp_dim
    )
    key = jax.random.key(settings.seed)
    params = model.init(key, jnp.zeros((1, n), jnp.int32))
    schedule = optax.linear_schedule(0.0, settings.learning_rate, max(settings.warmup_steps, 1))
    optimizer = optax.radam(schedule)
    opt_state = optimizer.init(params)

    def metrics(logits, targets, masked):
        loss = optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()
        correct = logits.argmax(-1) == targets
        return loss, (correct & masked).sum(), masked.sum(), correct.mean()

    @jax.jit
    def train_step(params, opt_state, batch, step_key):
        inputs, targets, masked = batch

        def loss_fn(p):
            logits = model.apply(p, inputs, rngs={"attention": step_key})
            return metrics(logits, targets, masked)[0]

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    @jax.jit
    def eval_step(params, batch):
        inputs, targets, masked = batch
        return metrics(model.apply(params, inputs), targets, masked)  # fixed hashing key

    train_rng = np.random.default_rng([settings.seed, 1])
    curve, start = [], time.time()
    pin_core = cpu_speed.requested_core()  # LRA_PIN_CORE (lra_lab.reproduce --jobs): a bad one fails here
    for step in range(1, settings.steps + 1):
        batch = make_batch(settings, train_rng)
        step_key = jax.random.fold_in(key, step)  # fresh hashing planes every step
        params, opt_state, loss = train_step(params, opt_state, batch, step_key)
        if step == 1 and pin_core is not None:  # after the first compile: XLA's threads exist, each keeps them
            cpu_speed.pin_process_to_core(pin_core)
        if step % settings.log_every == 0 or step == settings.steps:
            curve.append({"step": step, "loss": float(loss)})
            elapsed = time.time() - start
            log(f"  {label:>16} step {step:5d}  loss {float(loss):.4f}  ({elapsed:.0f}s)")
    train_seconds = time.time() - start

    run = {
        "variant": label,
        "attention": name,
        "attention_kwargs": kwargs,
        **evaluate(settings, eval_step, params),
        "final_loss": curve[-1]["loss"],
        "train_seconds": round(train_seconds, 1),
        "curve": curve,
    }
    if name == "softmax" and settings.swap_eval:
        run["swap_eval"] = [swap_evaluate(settings, spec, params, metrics) for spec in settings.swap_eval]
    return run


def evaluate(settings: Settings, eval_step: Callable, params: Any) -> dict[str, float]:
    """Masked-symbol and all-token accuracy and loss over ``eval_batches`` fixed batches (the same
    batches for every variant and every swap: one seeded generator)."""
    eval_rng = np.random.default_rng([settings.seed, 2])
    hits = total = 0
    losses, token_acc = [], []
    for _ in range(settings.eval_batches):
        loss, h, t, acc = eval_step(params, make_batch(settings, eval_rng))
        hits, total = hits + int(h), total + int(t)
        losses.append(float(loss))
        token_acc.append(float(acc))
    return {
        "masked_accuracy": hits / max(total, 1),
        "token_accuracy": float(np.mean(token_acc)),
        "eval_loss": float(np.mean(losses)),
    }


def swap_evaluate(settings: Settings, spec: str, params: Any, metrics: Callable) -> dict[str, Any]:
    """The softmax-trained ``params`` evaluated with the attention of ``spec`` (one parameter tree)."""
    label, name, kwargs = parse_variant(spec, settings)
    model = CopyModel(
        attention.get(name), kwargs, settings.num_layers, settings.num_heads, settings.head_dim, settings.mlp_dim
    )

    @jax.jit
    def eval_step(params, batch):
        inputs, targets, masked = batch
        return metrics(model.apply(params, inputs), targets, masked)  # fixed hashing key

    # flax names each block's attention after its class (SoftmaxAttention_0, ...): the same weights under
    # the other class's names (renaming the modules instead would change every variant's initialisation)
    source, target = attention.get("softmax").__name__, attention.get(name).__name__
    renamed = {
        "params": {
            key.replace(f"{source}_", f"{target}_", 1) if key.startswith(f"{source}_") else key: value
            for key, value in params["params"].items()
        }
    }
    return {"variant": label, "attention": name, "attention_kwargs": kwargs, **evaluate(settings, eval_step, renamed)}


def run_experiment(
    settings: Settings,
    log: Callable[[str], None] = print,
    done: Mapping[str, dict[str, Any]] | None = None,
    on_run: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Train every variant of ``settings`` and collect the results.

    ``done`` maps a variant spec to the run an earlier, interrupted call of the same settings
    finished: each variant trains from the seed alone, so reusing it is exact. ``on_run(spec, run)``
    is called as each new variant finishes (the command line appends it to its partial file).
    """
    done = dict(done or {})
    log(
        f"masked copy: L={settings.seq_len} (N={2 * (settings.seq_len + 1)}), "
        f"{settings.steps} steps x batch {settings.batch_size}"
    )
    runs = []
    for spec in settings.variants:
        if spec in done:
            log(f"  {spec}: finished by an earlier call, reused")
            runs.append(done[spec])
            continue
        run = train_variant(settings, spec, log)
        if on_run is not None:
            on_run(spec, run)
        runs.append(run)
    for r in runs:
        log(
            f"{r['variant']:>16}: masked-token accuracy {r['masked_accuracy']:.3f}, "
            f"all-token accuracy {r['token_accuracy']:.3f}"
        )
    return {
        "settings": settings_record(settings),
        "device_kind": jax.devices()[0].device_kind,
        "jax_version": jax.__version__,
        "runs": runs,
    }


def markdown_report(result: dict[str, Any], command: str) -> str:
    """A results table with the command and settings that produced it."""
    s = result["settings"]
    lines = [
        "# Masked copy (Fast Transformers with Clustered Attention, arXiv:2007.04825, Appendix C.2)",
        "",
        f"Command: `{command}`",
        "",
        f"Scale: L={s['seq_len']} (N={2 * (s['seq_len'] + 1)}), {s['num_layers']} layers x "
        f"{s['num_heads']} heads x {s['head_dim']}, MLP {s['mlp_dim']}, "
        f"R-Adam lr {s['learning_rate']} ({s['warmup_steps']} warmup steps), "
        f"batch {s['batch_size']}, {s['steps']} steps, top-k {s['topk']}, {s['bits']} bits, "
        f"{s['iterations']} Lloyd iterations, seed {s['seed']}; "
        f"device {result['device_kind']}, jax {result['jax_version']}. "
        f"Evaluation: {s['eval_batches']} fresh batches; chance on masked symbols is 0.1.",
        "",
        "| variant | masked-symbol accuracy | all-token accuracy | eval loss | train s |",
        "|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        lines.append(
            f"| {r['variant']} | {r['masked_accuracy']:.3f} | {r['token_accuracy']:.3f} | "
            f"{r['eval_loss']:.3f} | {r['train_seconds']} |"
        )
        for swap in r.get("swap_eval", []):  # the same trained weights, evaluated with another attention
            lines.append(
                f"| {r['variant']} weights, evaluated as {swap['variant']} | {swap['masked_accuracy']:.3f} | "
                f"{swap['token_accuracy']:.3f} | {swap['eval_loss']:.3f} | - |"
            )
    return "\n".join(lines) + "\n"


PARTIAL = "partial.jsonl"  # one finished variant a line, until results.json is written


def _finished_result(out: Path, settings: Settings) -> dict[str, Any] | None:
    """``out/results.json`` if it is a finished record of exactly ``settings`` (variants included)."""
    try:
        result = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return None
    recorded = result.get("settings") if isinstance(result, dict) else None
    if not isinstance(recorded, dict):
        return None
    return result if recorded == settings_record(settings) else None


def _partial_settings(settings: Settings) -> dict[str, Any]:
    """What a partial file's runs must share with this call to be reused (not the variant list)."""
    return {k: v for k, v in settings_record(settings).items() if k != "variants"}


def partial_entries(path: Path) -> list[dict[str, Any]]:
    """The lines of a partial file ({"spec", "settings", "run"} each; none when there is no file).
    A torn last line (a kill mid-append) is dropped: that variant simply trains again; a damaged
    line elsewhere is a ValueError naming it."""
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    entries = []
    for i, line in enumerate(lines):
        try:
            entry = json.loads(line)
            complete = isinstance(entry, dict) and {"spec", "run", "settings"} <= entry.keys()
        except ValueError:
            complete = False
        if not complete:
            if i == len(lines) - 1:
                break
            raise InputError(
                f"{path}, line {i + 1}, is damaged: delete the file (its variants train again) " f"or pass --restart"
            ) from None
        entries.append(entry)
    return entries


def read_partial(path: Path, settings: Settings) -> dict[str, dict[str, Any]]:
    """Finished variants of an interrupted call of ``settings``: spec -> run (:func:`partial_entries`);
    runs of other settings are refused by name."""
    want, done = _partial_settings(settings), {}
    for entry in partial_entries(path):
        held = entry["settings"]
        if held != want:
            diffs = ", ".join(f"{k}: {held.get(k)!r} there, {v!r} now" for k, v in want.items() if held.get(k) != v)
            raise InputError(
                f"{path} holds runs of other settings ({diffs}): pass the same settings to "
                f"resume, --restart to discard them, or another --out"
            )
        done[entry["spec"]] = entry["run"]
    return done


def run_resumable(
    settings: Settings, out: Path, command: str, restart: bool = False, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """:func:`run_experiment` into ``out``: each finished variant is appended (fsync'd) to
    ``out/partial.jsonl``, so a killed call resumes where it stopped when run again, exactly (each
    variant trains from the seed alone); ``results.json`` and ``results.md`` are written atomically
    at the end and the partial file removed. One process per folder (``out/.lock``)."""
    from lra.training.provenance import mark_start, seal, stamp
    from lra.training.run_files import WorkdirLock, append_jsonl, write_text_atomic

    problem = settings_problem(settings)
    if problem:
        raise InputError(problem)
    mark_start()

    out.mkdir(parents=True, exist_ok=True)
    with WorkdirLock(out, flag="--out"):
        partial = out / PARTIAL
        if restart:
            partial.unlink(missing_ok=True)
        finished = _finished_result(out, settings)
        if finished is not None and not restart:  # never retrain (and overwrite) a finished record
            log(
                f"{out / 'results.json'} already holds this experiment's finished runs; nothing to do "
                "(--restart trains it again)"
            )
            return finished
        done = read_partial(partial, settings)
        if done:
            log(f"resuming from {partial}: {len(done)} variant(s) finished ({', '.join(done)})")

        def append(spec: str, run: dict[str, Any]) -> None:
            run["git_commit_start"] = mark_start()["git_commit_start"]  # each variant's own provenance
            # fsynced; a line torn by a full disk is cut first, so it never swallows this one (MC1)
            append_jsonl(partial, {"spec": spec, "settings": _partial_settings(settings), "run": run})

        result = run_experiment(settings, log, done=done, on_run=append)
        result.update({k: v for k, v in stamp().items() if k != "command"}, command=command)
        starts = [
            r["git_commit_start"] for r in result.get("runs", []) if isinstance(r, dict) and r.get("git_commit_start")
        ]
        if starts:  # a resumed call: the record's data began with the first variant's process
            result["git_commit_start"] = starts[0]
        write_text_atomic(out / "results.json", json.dumps(result, indent=2) + "\n")
        seal(out / "results.json")  # an edit after this is found by the audit (lra.training.provenance)
        write_text_atomic(out / "results.md", markdown_report(result, command))
        partial.unlink(missing_ok=True)
    return result
