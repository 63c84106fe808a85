"""Fixtures shared by the tests: one finished smoke run and one finished two-seed bundle per test
process (trained once, copied by the tests that change them); scripts/ entry points; JAX's
persistent compilation cache in one folder per test run, shared by its xdist workers (pytest_configure)."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_CACHE_KEY = pytest.StashKey[str]()
_CACHE_INPUT = "lra_jax_compilation_cache"
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
COMPILATION_CACHE = "JAX_COMPILATION_CACHE_DIR"
MIN_COMPILE_SECONDS = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"  # JAX writes a program compiled in longer


# Cases run with -m slow only (the suite's budget, about ten minutes of two cores): each parametrized test
# keeps cases of the same kind in the default suite (the id's test function is never left without one), and
# each whole-run test's guarantee is also checked by a cheaper one (said beside it). Moving a case whose programs a
# sibling compiles anyway saves nothing: the compile cost moves to the sibling (the run's compilation cache).
SLOW_CASES = {
    # dispersed: the gather implementation and the dense reference at three more (n, pattern) each
    "tests/test_dispersed.py::test_gather_equals_chunks_outputs_and_gradients[600-lengths4-4-180]",
    "tests/test_dispersed.py::test_gather_equals_chunks_outputs_and_gradients[200-lengths3-4-180]",
    "tests/test_dispersed.py::test_gather_equals_chunks_outputs_and_gradients[64-lengths0-4-12]",
    "tests/test_dispersed.py::test_core_and_gradients_match_dense_reference[70-24-7]",
    "tests/test_dispersed.py::test_core_and_gradients_match_dense_reference[200-32-16]",
    "tests/test_dispersed.py::test_core_and_gradients_match_dense_reference[64-256-16]",
    # dispersed: one slot run (2, 5 and 1000 runs stay), the third dense-reference and gather cases
    "tests/test_dispersed.py::test_gather_slot_parts_change_nothing[1]",
    "tests/test_dispersed.py::test_core_and_gradients_match_dense_reference[33-8-3]",
    "tests/test_dispersed.py::test_gather_equals_chunks_outputs_and_gradients[127-lengths2-6-20]",
    # agglomerative at 64 classes unmasked (the causal and 4-class cases of each stay)
    "tests/test_agglomerative.py::test_padding_invariant[full-64]",
    "tests/test_agglomerative.py::test_matches_the_papers_equations[None-full-64]",
    "tests/test_agglomerative.py::test_matches_the_papers_equations[4-full-64]",
    "tests/test_agglomerative.py::test_empty_class_and_empty_sequence_stay_finite[full]",
    # ConvLuna's memory initialisation at the second scale (0.125 stays)
    "tests/test_reference.py::test_memory_init_scale_is_the_standard_deviation[1.0]",
    # clustered for accelerators: farthest-point seeding on both sides (the first-C seeding stays)
    "tests/test_clustered_accelerator.py::test_modules_equal_with_the_same_seeding[clustered-farthest]",
    "tests/test_clustered_accelerator.py::test_cluster_queries_equal[farthest]",
    # clustered for accelerators: improved clustered's second seeding, bf16 and dropout; the random seeding
    "tests/test_clustered_accelerator.py::test_modules_equal_with_the_same_seeding[improved_clustered-farthest]",
    "tests/test_clustered_accelerator.py::test_bfloat16_runs_and_matches_the_cpu_implementation[improved_clustered]",
    "tests/test_clustered_accelerator.py::test_cluster_queries_equal[random]",
    "tests/test_clustered_accelerator.py::test_attention_outputs_and_gradients_equal_given_the_clustering"
    "[improved_clustered-0.3]",
    # padding and :reference forward passes: five families' ListOps configs and two tasks' ConvLuna
    "tests/test_reference.py::test_every_default_model_ignores_padding[listops_agglomerative]",
    "tests/test_reference.py::test_every_default_model_ignores_padding[listops_dispersed]",
    "tests/test_reference.py::test_every_default_model_ignores_padding[listops_clustered]",
    "tests/test_reference.py::test_every_default_model_ignores_padding[listops_improved_clustered]",
    "tests/test_reference.py::test_every_default_model_ignores_padding[listops_gated_linear]",
    "tests/test_reference.py::test_reference_configs_validate_and_run_a_forward_pass[image_convluna]",
    "tests/test_reference.py::test_reference_configs_validate_and_run_a_forward_pass[matching_convluna]",
    "tests/test_model.py::test_model_logits_ignore_padding[softmax-mean-post]",
    "tests/test_model.py::test_model_logits_ignore_padding[luna-memory-post]",
    # whole runs or child processes whose pieces the default suite tests one by one
    "tests/test_preflight.py::test_cpu_target_end_to_end_and_cache",  # the fit test compiles through the child
    "tests/test_all_configs.py::test_reference_smoke_runs_end_to_end[text_luna]",  # :reference forward passes
    "tests/test_reproduce.py::test_list_into_a_closed_pipe_is_quiet",  # --list: test_list_never_cuts_...
    "tests/test_bench_peers.py::test_bench_peers_without_peers",  # the laboratory's peer benchmark
    "tests/test_clustered.py::test_masked_copy_swap_evaluates_the_softmax_weights_with_another_attention",
    "tests/test_reproduce.py::test_masked_copy_on_a_full_disk_is_one_line_exit_4",  # run_safety's full-disk test
    "tests/test_add_family.py::test_toy_family_trains_end_to_end",  # the toy's contract and refactor-guard tests
    # clustered where improved clustered (which runs the same clustering first) stays: the accelerator program's
    # loops and scatters, module equality at the first-C seeding, bf16 training, jit + dropout
    "tests/test_clustered_accelerator.py::test_accelerator_program_has_no_loops_and_no_scatter_in_the_clustering"
    "[clustered]",
    "tests/test_clustered_accelerator.py::test_modules_equal_with_the_same_seeding[clustered-first]",
    "tests/test_bf16.py::test_bf16_training_steps_track_float32[clustered]",
    "tests/test_clustered.py::test_jit_dropout_and_finite_gradients[clustered]",
    "tests/test_clustered.py::test_padding_invariance[clustered-random]",  # first and farthest seeding stay
    # the swap to clustered end to end (test_clustered's module-level equality with softmax stays)
    "tests/test_evaluate.py::test_clustered_with_enough_clusters_equals_softmax",
    # ConvLuna's [u, v] at the default (the two :reference cases stay)
    "tests/test_reference.py::test_memory_family_matching_concatenates_u_and_v[-matching_convluna]",
    # issue 53's one-time migration (old judges against the rules as data); --audit's behaviour-preservation
    # check compares a changed judge's outcomes with its first record's commit on every audit
    "tests/test_rules_migration.py::test_old_and_new_judges_agree_byte_for_byte",
}


@pytest.hookimpl(tryfirst=True)  # before -m 'not slow' deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid in SLOW_CASES:
            item.add_marker(pytest.mark.slow)


def pytest_configure(config: pytest.Config) -> None:
    """Suite time: the tests compile the same small programs again and again (every smoke run
    builds its steps anew, every model test dispatches the same layers eagerly, and the two xdist
    workers each compile what the other already has), so the whole test run keeps JAX's persistent
    compilation cache in one fresh temporary folder and a program compiled once, by either worker,
    is loaded from it after (the same executable: results are the same bits). Every program is
    written, however fast its compile (min compile time 0: most are eager primitives of well under
    a second, each compiled once per run instead of once per worker). With xdist the controller
    makes the folder and hands it to its workers (pytest_configure_node); without, the one test
    process makes it. The workers write it at the same time: JAX writes an entry in place, so a
    reader can meet one half written, which fails the decompressor's check (zlib here, zstd where
    installed): JAX warns and compiles the program
    itself (an entry is never read wrong). A test's subprocess gets the folder only to read it
    (cached_child_env: it writes nothing, so a SIGKILLed child never leaves a cut entry), except the
    documentation's commands (test_doc_commands.py), which also write and are never killed but by
    their timeout. Removed at the end by its maker; a cache the caller set is left alone. ``python -m
    lra.train`` children get no cache of their own either (LRA_COMPILATION_CACHE=off: lra.train)."""
    os.environ["LRA_COMPILATION_CACHE"] = "off"
    if not _worker(config) and config.getoption("numprocesses", None):
        _make_cache_folder(config)
        return  # the xdist controller: it runs no test, its workers use the folder
    _threefry_as_training_runs()
    if _worker(config):
        folder = config.workerinput.get(_CACHE_INPUT)  # type: ignore[attr-defined]
    else:
        folder = _make_cache_folder(config)
    if folder:
        import jax

        jax.config.update("jax_compilation_cache_dir", folder)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


def _make_cache_folder(config: pytest.Config) -> str | None:
    """The test run's compilation cache folder (None: the caller set one), made by the one process that removes it."""
    if os.environ.get(COMPILATION_CACHE):
        return None
    folder = tempfile.mkdtemp(prefix="lra-tests-jax-cache-")
    config.stash[_CACHE_KEY] = folder
    return folder


def _threefry_as_training_runs() -> None:
    """Every test process compiles random bits with the CPU threefry lowering a training run registers
    (lra.cpu_speed, bit-identical to jax's: test_cpu_speed.py checks that in children), from its first test
    on. Otherwise a worker's test programs switched lowering at the first ``train_and_evaluate`` it
    happened to run, so a program's compile depended on the test order; and jax's own rolled lowering of an
    N-d draw (a dropout mask) compiles slowly: about a quarter of test_clustered*.py's time."""
    from lra import cpu_speed

    cpu_speed.unroll_threefry_on_cpu()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: each worker gets the run's compilation cache folder (pytest_configure)."""
    folder = node.config.stash.get(_CACHE_KEY, None)
    if folder:
        node.workerinput[_CACHE_INPUT] = folder


def _worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_CACHE_KEY, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Any:
    """A golden check's mode (tests/golden_records.py: exact or tolerance) rides on its test's
    report, so the summary counts them also when xdist workers ran the tests."""
    outcome = yield
    records = sys.modules.get("golden_records")
    if call.when == "call" and records is not None and records.MODES:
        outcome.get_result().user_properties.extend(("golden_mode", m) for m in records.MODES)
        records.MODES.clear()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line saying how the golden records were checked: exact (this machine wrote them) or
    within the tolerance (another machine's records)."""
    modes = Counter(
        value
        for reports in terminalreporter.stats.values()
        for report in reports
        for key, value in getattr(report, "user_properties", ())
        if key == "golden_mode"
    )
    if modes:
        from golden_records import RTOL

        tolerance = modes["tolerance"] + modes["bit-equal"]
        terminalreporter.write_line(
            f"golden records: {modes['exact']} checked exact (records of this machine), {tolerance} within "
            f"rtol {RTOL} (records of another machine or of none, {modes['bit-equal']} of them equal to the bit; "
            "tests/golden_records.py)"
        )


# Test-only programs (never the library's training run, whose smoke runs the golden tests check) may be compiled
# with LLVM's expensive passes off: XLA:CPU compiles them in about half the time, and results move by float
# rounding at most (integer bits are exact); test_bf16's golden losses are made and checked with them. Compiling
# dominates the suite (each test program runs in milliseconds).
FAST_COMPILE = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def fast_jit(fn: Callable[..., Any], **kwargs: Any) -> Any:
    """``jax.jit(fn, **kwargs)`` compiled with FAST_COMPILE."""
    import jax

    return jax.jit(fn, compiler_options=FAST_COMPILE, **kwargs)


def compilation_cache_dir() -> str | None:
    """This test run's compilation cache folder (for a subprocess that may share it), if any."""
    import jax

    return jax.config.jax_compilation_cache_dir or None


def cached_child_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) that reads this test run's compilation cache and
    writes nothing to it, for a ``python -m lra.train`` or ``lra.evaluate`` child: a program a test process
    compiled is loaded instead of compiled again (the same executable: the same bits), 5-10 CPU-seconds per
    training step. JAX writes only a program whose compile took longer than its minimum, here a year, so
    the child may be SIGKILLed or signalled at any moment: it never leaves a cut entry. Reading one that a
    test process is writing at that moment is JAX's warning and its own compile (pytest_configure)."""
    out = dict(os.environ if env is None else env)
    cache = compilation_cache_dir()
    if cache:
        out[COMPILATION_CACHE] = cache
        out[MIN_COMPILE_SECONDS] = str(365 * 24 * 3600)
    return out


def script_main(name: str) -> Callable[..., int]:
    """``main`` of ``scripts/<name>.py`` (scripts are not a package)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        return importlib.import_module(name).main
    finally:
        sys.path.remove(str(SCRIPTS))


def result_record(**fields) -> dict:
    """A result.json that ``run_files.result_problem`` accepts (a finished run), with ``fields`` changed."""
    record = {
        "task": "listops",
        "attention": "softmax",
        "variant": "Transformer",
        "seed": 0,
        "best_val_accuracy": 0.5,
        "best_step": 6,
        "test_accuracy": 0.5,
        "test_loss": 1.0,
        "num_train_steps": 6,
        "train_seconds": 1.0,
        "steps_per_second": 1.0,
        "num_params": 1,
        "config_preset": "smoke",
        "device_kind": "cpu",
        "num_devices": 1,
        "jax_version": "0",
        "git_commit": "abc",
    }
    return {**record, **fields}


@pytest.fixture(scope="session")
def smoke_data_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("lra_data_smoke")


@pytest.fixture(scope="session")
def finished_smoke_run(smoke_data_dir, tmp_path_factory) -> tuple[Path, dict]:
    """A finished ListOps smoke run (6 steps; checkpoints and validations at 3 and 6): copy it
    before damaging it."""
    from lra.train import train_and_evaluate
    from test_train import smoke

    workdir = tmp_path_factory.mktemp("finished") / "run"
    return workdir, train_and_evaluate(smoke(smoke_data_dir), workdir)


@pytest.fixture(scope="session")
def finished_bundle(smoke_data_dir, tmp_path_factory) -> tuple[Path, list[dict]]:
    """Seeds 0 and 1 of the bucketed smoke config (``data.buckets=(24, 40)``: seeds draw different
    batch lengths; seed 1 shares seed 0's bucket order), trained in one program (6 steps): shared by
    test_faults.py and test_seeds.py, so copy it before changing it."""
    from lra.train import train_and_evaluate
    from test_train import smoke

    root = tmp_path_factory.mktemp("bundle") / "whole"
    results = train_and_evaluate(smoke(smoke_data_dir, seeds=(0, 1), **{"data.buckets": (24, 40)}), root)
    assert [r["seed"] for r in results] == [0, 1]
    return root, results
