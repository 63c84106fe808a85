"""Multi-process launches: the environment becomes jax.distributed.initialize's arguments, and two
CPU processes on 127.0.0.1 compute one sharded sum together (gloo collectives)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import pytest

from lra.training import hosts

REPO = Path(__file__).resolve().parent.parent

LAUNCHER_VARS = (
    *hosts.EXPLICIT_VARS,
    hosts.LOCAL_DEVICE_IDS_VAR,
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_SIZE",
    "TPU_WORKER_HOSTNAMES",
)
EXPLICIT = {
    "JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234",
    "JAX_NUM_PROCESSES": "4",
    "JAX_PROCESS_ID": "3",
}


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """A clean launcher environment, a fresh module state and a fake jax.distributed.initialize."""
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(hosts, "_initialized", False)
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kwargs: calls.append(kwargs))
    return calls


def test_one_process_initializes_nothing(captured):
    assert hosts.initialize_args({}) is None
    assert not hosts.multi_host_environment({})
    hosts.initialize()
    assert captured == []


def test_explicit_launch_passes_all_three_and_device_ids(captured, monkeypatch):
    for var, value in {**EXPLICIT, "JAX_LOCAL_DEVICE_IDS": "0, 1"}.items():
        monkeypatch.setenv(var, value)
    hosts.initialize()
    hosts.initialize()  # once only
    assert captured == [
        dict(
            coordinator_address="10.0.0.1:1234",
            num_processes=4,
            process_id=3,
            local_device_ids=[0, 1],
            initialization_timeout=hosts.DEFAULT_TIMEOUT + 60,
        )  # ours first (issue 26 U3)
    ]


@pytest.mark.parametrize(
    "given, missing",
    [
        (["JAX_COORDINATOR_ADDRESS"], "JAX_NUM_PROCESSES, JAX_PROCESS_ID missing"),
        (["JAX_NUM_PROCESSES", "JAX_PROCESS_ID"], "JAX_COORDINATOR_ADDRESS missing"),
        (["JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES"], "JAX_PROCESS_ID missing"),
    ],
)
def test_a_missing_variable_is_named(captured, monkeypatch, given, missing):
    for var in given:
        monkeypatch.setenv(var, EXPLICIT[var])
    with pytest.raises(ValueError, match=missing):
        hosts.initialize()
    assert captured == []


@pytest.mark.parametrize(
    "var, value, message",
    [
        ("JAX_PROCESS_ID", "4", "JAX_PROCESS_ID=4 must be < JAX_NUM_PROCESSES=4"),
        ("JAX_PROCESS_ID", "-1", "JAX_PROCESS_ID='-1' must be an integer >= 0"),
        ("JAX_NUM_PROCESSES", "two", "JAX_NUM_PROCESSES='two' must be an integer >= 1"),
        ("JAX_COORDINATOR_ADDRESS", "10.0.0.1", "JAX_COORDINATOR_ADDRESS='10.0.0.1' must be host:port"),
        ("JAX_LOCAL_DEVICE_IDS", "0;1", "JAX_LOCAL_DEVICE_IDS='0;1' must be comma-separated"),
    ],
)
def test_bad_values_are_named(var, value, message):
    with pytest.raises(ValueError, match=message):
        hosts.initialize_args({**EXPLICIT, var: value})


def test_cluster_launchers_keep_jax_auto_detection():
    # SLURM / MPI / TPU: jax detects what is not given (as before), so a lone address is fine.
    assert hosts.initialize_args({"SLURM_NTASKS": "8"}) == {}
    assert hosts.initialize_args({"OMPI_COMM_WORLD_SIZE": "2"}) == {}
    assert hosts.initialize_args({"TPU_WORKER_HOSTNAMES": "a,b"}) == {}
    assert hosts.initialize_args({"SLURM_NTASKS": "8", "JAX_COORDINATOR_ADDRESS": "n1:99"}) == {
        "coordinator_address": "n1:99"
    }
    assert hosts.initialize_args({"SLURM_NTASKS": "1"}) is None


def test_cpu_collectives_default_to_gloo_but_a_choice_is_kept(monkeypatch):
    name = "jax_cpu_collectives_implementation"
    if not hasattr(jax.config, name):
        pytest.skip(f"this jax ({jax.__version__}) has no {name}")
    before = getattr(jax.config, name)
    try:
        jax.config.update(name, None)
        hosts._cpu_collectives_default()
        assert getattr(jax.config, name) == "gloo"
        jax.config.update(name, "mpi")
        hosts._cpu_collectives_default()
        assert getattr(jax.config, name) == "mpi"
    finally:
        jax.config.update(name, before)


WORKER = textwrap.dedent(
    """
    import json
    import jax, jax.numpy as jnp, numpy as np
    from lra.training import hosts

    hosts.initialize()
    mesh = hosts.data_mesh()
    batch = {"x": np.arange(24, dtype=np.float32).reshape(8, 3)}  # the same global batch everywhere
    sharded = hosts.shard_batch(batch, hosts.batch_sharded(mesh))
    total = jax.jit(lambda b: jnp.sum(b["x"] ** 2), out_shardings=hosts.replicated(mesh))(sharded)
    print(json.dumps({"process_index": jax.process_index(), "process_count": jax.process_count(),
                      "devices": int(mesh.devices.size), "local_rows": sharded["x"].addressable_shards[0].data.shape[0],
                      "sum": float(total)}))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_cpu_processes_share_one_sharded_sum(tmp_path: Path):
    if not hasattr(jax.config, "jax_cpu_collectives_implementation"):
        pytest.skip(f"this jax ({jax.__version__}) has no CPU cross-process collectives option")
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and k != "XLA_FLAGS"}
    env.update(JAX_PLATFORMS="cpu", JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{_free_port()}", JAX_NUM_PROCESSES="2")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script)],
            env={**env, "JAX_PROCESS_ID": str(i)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, f"process exited {p.returncode}:\n{err[-3000:]}"
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    expected = float(sum(i * i for i in range(24)))  # the single-process sum
    assert [o["process_index"] for o in outputs] == [0, 1]
    for o in outputs:
        assert o["process_count"] == 2 and o["devices"] == 2 and o["local_rows"] == 4
        assert o["sum"] == expected


def _train_cmd(workdir: Path, data_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "lra.train",
        f"--config={REPO}/configs/listops_transformer.py:smoke",
        f"--workdir={workdir}",
        f"--config.data_dir={data_dir}",
        "--config.num_train_steps=40",
        "--config.eval_every=10",
        "--config.checkpoint_every=10",
        "--config.log_every=5",
    ]


def _launch_two(workdir: Path, data_dir: Path) -> list[subprocess.Popen]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and k != "XLA_FLAGS"}
    env.update(
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{_free_port()}",
        JAX_NUM_PROCESSES="2",
        PYTHONPATH=str(REPO),
    )
    return [
        subprocess.Popen(
            _train_cmd(workdir, data_dir),
            env={**env, "JAX_PROCESS_ID": str(i)},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]


def _finish(procs: list[subprocess.Popen]) -> None:
    try:
        for p in procs:
            out, _ = p.communicate(timeout=600)
            assert p.returncode == 0, f"process exited {p.returncode}:\n{out[-3000:]}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


@pytest.mark.slow
def test_two_processes_train_like_one_with_two_devices_and_resume_after_a_kill(tmp_path: Path):
    """2 CPU processes on 127.0.0.1 (gloo) train the smoke config to one process's result with 2
    devices; only process 0 writes run files; both killed after a checkpoint, they resume and end
    exactly as the uninterrupted pair did."""
    import signal
    import time

    if not hasattr(jax.config, "jax_cpu_collectives_implementation"):
        pytest.skip(f"this jax ({jax.__version__}) has no CPU cross-process collectives option")
    data = tmp_path / "data"
    one_env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    one_env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=2", PYTHONPATH=str(REPO))
    one = subprocess.run(
        _train_cmd(tmp_path / "one", data), env=one_env, cwd=REPO, capture_output=True, text=True, timeout=600
    )  # also prepares the data, so the two processes only read it
    assert one.returncode == 0, one.stderr[-3000:]

    _finish(_launch_two(tmp_path / "two", data))
    keys = ("best_val_accuracy", "best_step", "test_accuracy", "test_loss", "num_devices", "num_params")
    ref, two = (json.loads((tmp_path / w / "result.json").read_text()) for w in ("one", "two"))
    assert {k: two[k] for k in keys} == pytest.approx({k: ref[k] for k in keys}, rel=1e-5)
    records = [json.loads(line) for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines()]
    assert len({(r["step"], r["split"]) for r in records}) == len(records), "a record was written twice"

    procs = _launch_two(tmp_path / "killed", data)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and all(p.poll() is None for p in procs):
        if (tmp_path / "killed" / "checkpoints" / "latest" / "20").is_dir():
            break
        time.sleep(0.01)
    for p in procs:
        p.send_signal(signal.SIGKILL)
        p.communicate()
    assert not (tmp_path / "killed" / "result.json").exists(), "killed too late: the run had finished"
    _finish(_launch_two(tmp_path / "killed", data))
    again = json.loads((tmp_path / "killed" / "result.json").read_text())
    assert {k: again[k] for k in keys} == {k: two[k] for k in keys}
    strip = lambda path: [
        {k: v for k, v in json.loads(line).items() if k != "steps_per_second"}  # noqa: E731
        for line in path.read_text().splitlines()
    ]
    assert strip(tmp_path / "killed" / "metrics.jsonl") == strip(tmp_path / "two" / "metrics.jsonl")


def test_one_process_decides_to_stop_alone_without_a_collective(monkeypatch):
    """Issue 38: the multi-host stop agreement costs a single host nothing (no per-step collective)."""
    from types import SimpleNamespace

    from jax.experimental import multihost_utils

    from lra.training.loop import Trainer

    def collective(*args, **kwargs):
        raise AssertionError("a collective on one process")

    monkeypatch.setattr(multihost_utils, "process_allgather", collective)
    assert Trainer._agreed_stop(SimpleNamespace(stop=SimpleNamespace(signum=None)), 3) is None
    assert Trainer._agreed_stop(SimpleNamespace(stop=SimpleNamespace(signum=15)), 3) == 15


@pytest.mark.slow
def test_a_sigterm_reaching_one_process_stops_both_after_a_save(tmp_path: Path):
    """Issue 38: the stop-and-save is collective, so a SIGTERM that reaches one host only must
    reach the decision of every host: the processes agree on a stop flag at every step, both save
    the same step's checkpoint and exit 143. (Before: jax.distributed's preemption notifier took
    SIGTERM, and the run never stopped; with the run's handler alone, the signalled process would
    wait for ever in the collective save.) Process 1 is signalled: process 0, which writes the
    files, stops too. About 2 minutes on two loaded cores: slow."""
    import signal
    import time

    if not hasattr(jax.config, "jax_cpu_collectives_implementation"):
        pytest.skip(f"this jax ({jax.__version__}) has no CPU cross-process collectives option")
    from lra.data import load_task
    from test_train import smoke

    data = tmp_path / "data"
    load_task(smoke(data))  # generated once here, so the two processes only read it
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and k != "XLA_FLAGS"}
    env.update(
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{_free_port()}",
        JAX_NUM_PROCESSES="2",
        PYTHONPATH=str(REPO),
    )
    workdir = tmp_path / "w"
    command = _train_cmd(workdir, data)[:-4] + [
        "--config.num_train_steps=100000",
        "--config.eval_every=50000",
        "--config.checkpoint_every=10",
        "--config.log_every=10",
    ]
    logs = [tmp_path / f"process{i}.log" for i in range(2)]  # files, not pipes: a full pipe would block a process
    procs = [
        subprocess.Popen(
            command,
            env={**env, "JAX_PROCESS_ID": str(i)},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=logs[i].open("w"),
        )
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and all(p.poll() is None for p in procs):
            if (workdir / "checkpoints" / "latest" / "10").is_dir():
                break
            time.sleep(0.05)
        assert all(p.poll() is None for p in procs), "a process ended before the signal"
        procs[1].send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(timeout=120)
        errs = [log.read_text() for log in logs]
        assert [p.returncode for p in procs] == [143, 143], "\n".join(e[-2000:] for e in errs)
        assert "process 1 got SIGTERM: all stop after step" in errs[0] and "Traceback" not in errs[0] + errs[1]
        saved = max(int(p.name) for p in (workdir / "checkpoints" / "latest").iterdir() if p.name.isdigit())
        assert saved > 10 and f"after step {saved} " in errs[0] and not (workdir / "result.json").exists()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def _one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr and "Check failed" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr[-3000:]
    return errors[0]


def test_waiting_messages_name_what_is_missing():
    assert (
        hosts.waiting_message(dict(coordinator_address="h:1", num_processes=3, process_id=0))
        == "process 0 of 3: waiting for 2 more processes at h:1"
    )
    assert "waiting for process 0 (the coordinator) at h:1" in hosts.waiting_message(
        dict(coordinator_address="h:1", num_processes=2, process_id=1)
    )
    assert hosts.join_timeout({}) == hosts.DEFAULT_TIMEOUT
    assert hosts.join_timeout({hosts.TIMEOUT_VAR: "7"}) == 7
    with pytest.raises(ValueError, match="LRA_DISTRIBUTED_TIMEOUT='soon' must be an integer >= 1"):
        hosts.join_timeout({hosts.TIMEOUT_VAR: "soon"})


@pytest.mark.parametrize("process_id", [0, 1])
def test_a_missing_peer_is_one_error_line_after_the_timeout(tmp_path: Path, process_id: int):
    """Issue 26 U3: one process of two started: it says what it waits for at once, and after
    LRA_DISTRIBUTED_TIMEOUT seconds ends with one error line and exit 2 (jax alone: 5 silent
    minutes, then a C++ abort, exit 134)."""
    import time

    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and k != "XLA_FLAGS"}
    address = f"127.0.0.1:{_free_port()}"
    env.update(
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_ADDRESS=address,
        JAX_NUM_PROCESSES="2",
        JAX_PROCESS_ID=str(process_id),
        LRA_DISTRIBUTED_TIMEOUT="4",
        PYTHONPATH=str(REPO),
    )
    start = time.monotonic()
    out = subprocess.run(
        _train_cmd(tmp_path / "w", tmp_path / "data"), env=env, cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2, out.stderr[-3000:]
    assert time.monotonic() - start < 60
    waiting = "waiting for 1 more process at " if process_id == 0 else "waiting for process 0 (the coordinator) at "
    assert waiting + address in out.stderr.splitlines()[0] if process_id == 0 else waiting + address in out.stderr
    line = _one_error_line(out.stderr)
    assert "not every process joined within 4 s" in line and "LRA_DISTRIBUTED_TIMEOUT" in line
    assert not (tmp_path / "w").exists()


def test_processes_given_different_configs_are_one_clear_error(tmp_path: Path):
    """Issue 26 U4: two processes, one with another learning rate: each ends with one error line
    naming the field and both values, exit 2, before anything is written."""
    if not hasattr(jax.config, "jax_cpu_collectives_implementation"):
        pytest.skip(f"this jax ({jax.__version__}) has no CPU cross-process collectives option")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and k != "XLA_FLAGS"}
    env.update(
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{_free_port()}",
        JAX_NUM_PROCESSES="2",
        PYTHONPATH=str(REPO),
    )
    extra = ([], ["--config.learning_rate=0.05"])
    procs = [
        subprocess.Popen(
            _train_cmd(tmp_path / "w", tmp_path / "data") + extra[i],
            env={**env, "JAX_PROCESS_ID": str(i)},
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 2, err[-3000:]
            line = _one_error_line(err)
            assert (
                "were given different commands" in line
                and "learning_rate: 0.005 in process 0, 0.05 in process 1" in line
            )
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    assert not (tmp_path / "w").exists()
