"""The processes of a run: hosts joining a multi-host launch, the data mesh, the stop signals they agree on,
and the children a command runs.

Launches: ``JAX_COORDINATOR_ADDRESS``/``JAX_NUM_PROCESSES``/``JAX_PROCESS_ID`` (jax reads only the address, so all
are parsed here), or SLURM/MPI/TPU pods, where jax finds the processes. A missing peer: each process says what it
waits for and after ``LRA_DISTRIBUTED_TIMEOUT`` seconds exits 2 with one ``error:`` line, before jax's C++ abort;
then :func:`check_same_config` makes different commands one error, not a hang (docs/running.md, multi-host).
``StopSignals``, installed first: before training a signal stops at once (nothing to save); during training the
first finishes the step and saves, a second exits at once (safe: every run file is replaced atomically);
:func:`agreed_stop` stops every host after the same step. ``ChildSignals`` (lra_lab.reproduce, lra_lab.preflight):
each child in its own session, so a Ctrl-C reaches it once, through the parent, and a SIGTERM to the parent alone
is passed on; nothing new starts and the caller waits (exit 128+signal, no orphans; docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from lra.errors import InputError, Interrupted

# -- multi-host: joining, one command, the data mesh ---------------------------------------------------------
COORDINATOR_VAR = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES_VAR = "JAX_NUM_PROCESSES"
PROCESS_ID_VAR = "JAX_PROCESS_ID"
LOCAL_DEVICE_IDS_VAR = "JAX_LOCAL_DEVICE_IDS"
EXPLICIT_VARS = (COORDINATOR_VAR, NUM_PROCESSES_VAR, PROCESS_ID_VAR)
TIMEOUT_VAR = "LRA_DISTRIBUTED_TIMEOUT"  # seconds to wait for every process to join (default 300)
DEFAULT_TIMEOUT = 300
WAIT_NOTE_SECONDS = 30
EXIT_NO_PEERS = 2  # lra.errors.EXIT_INVALID: a launch that cannot start; nothing was changed

_initialized = False


def cluster_launcher(env: Mapping[str, str] | None = None) -> bool:
    """True under a launcher jax detects by itself with several processes (SLURM, MPI, TPU pod)."""
    env = os.environ if env is None else env
    for var in ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        if int(env.get(var, "1") or 1) > 1:
            return True
    return "," in env.get("TPU_WORKER_HOSTNAMES", "")


def multi_host_environment(env: Mapping[str, str] | None = None) -> bool:
    """True under a launcher that runs one process per host (JAX_* variables, SLURM, MPI, TPU pod)."""
    env = os.environ if env is None else env
    return any(env.get(var) for var in EXPLICIT_VARS) or cluster_launcher(env)


def _int_var(env: Mapping[str, str], var: str, minimum: int) -> int:
    text = env[var].strip()
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise InputError(f"{var}={text!r} must be an integer >= {minimum}")
    return value


def initialize_args(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``jax.distributed.initialize``'s arguments from the environment (None: one process); missing ones named."""
    env = os.environ if env is None else env
    given = {var: env[var] for var in EXPLICIT_VARS if env.get(var, "").strip()}
    if not given:
        return {} if cluster_launcher(env) else None
    missing = [var for var in EXPLICIT_VARS if var not in given]
    if missing and not cluster_launcher(env):
        raise InputError(
            f"multi-process launch: {', '.join(given)} set but {', '.join(missing)} missing; set all of "
            f"{COORDINATOR_VAR}=host:port (process 0's address), {NUM_PROCESSES_VAR}=N and "
            f"{PROCESS_ID_VAR}=0..N-1 in every process (or unset them all for one process)"
        )
    args: dict[str, Any] = {}
    if COORDINATOR_VAR in given:
        address = given[COORDINATOR_VAR].strip()
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise InputError(f"{COORDINATOR_VAR}={address!r} must be host:port, e.g. 10.0.0.1:1234")
        args["coordinator_address"] = address
    if NUM_PROCESSES_VAR in given:
        args["num_processes"] = _int_var(env, NUM_PROCESSES_VAR, 1)
    if PROCESS_ID_VAR in given:
        args["process_id"] = _int_var(env, PROCESS_ID_VAR, 0)
        if args.get("num_processes", args["process_id"] + 1) <= args["process_id"]:
            raise InputError(
                f"{PROCESS_ID_VAR}={args['process_id']} must be < {NUM_PROCESSES_VAR}={args['num_processes']}"
            )
    ids = env.get(LOCAL_DEVICE_IDS_VAR, "").strip()
    if ids:
        try:
            args["local_device_ids"] = [int(i) for i in ids.split(",")]
        except ValueError:
            raise InputError(f"{LOCAL_DEVICE_IDS_VAR}={ids!r} must be comma-separated integers, e.g. 0,1") from None
    return args


def _cpu_collectives_default() -> None:
    """gloo for cross-process CPU collectives unless one is chosen (older jax defaults to none, and then no
    computation can span processes). Only the CPU client reads it; must precede initialize(), which creates it."""
    name = "jax_cpu_collectives_implementation"
    if hasattr(jax.config, name) and getattr(jax.config, name) is None:  # hasattr: older jax lack it
        jax.config.update(name, "gloo")


def join_timeout(env: Mapping[str, str] | None = None) -> int:
    """Seconds to wait for every process to join (``LRA_DISTRIBUTED_TIMEOUT``, default 300)."""
    env = os.environ if env is None else env
    if not env.get(TIMEOUT_VAR, "").strip():
        return DEFAULT_TIMEOUT
    return _int_var(env, TIMEOUT_VAR, 1)


def waiting_message(args: Mapping[str, Any]) -> str:
    """What this process waits for, in words (process 0 waits for the others, the others for it)."""
    address = args.get("coordinator_address", "the address the launcher gives")
    n, pid = args.get("num_processes"), args.get("process_id")
    if pid == 0 and n:
        more = n - 1
        return f"process 0 of {n}: waiting for {more} more process{'es' if more != 1 else ''} at {address}"
    if pid is not None and n:
        return f"process {pid} of {n}: waiting for process 0 (the coordinator) at {address} and the others"
    return f"waiting for the other processes of this launch at {address}"


def _watch(done: threading.Event, message: str, timeout: int) -> None:
    """Repeat ``message`` every WAIT_NOTE_SECONDS until ``done``; after ``timeout``, one error line and exit."""
    waited = 0
    while waited < timeout:
        step = min(WAIT_NOTE_SECONDS, timeout - waited)
        if done.wait(step):
            return
        waited += step
        if waited < timeout:
            print(f"{message} ({waited} s of {timeout} s)", file=sys.stderr, flush=True)
    print(
        f"error: {message}: not every process joined within {timeout} s. Start all {NUM_PROCESSES_VAR} "
        f"processes with the same {COORDINATOR_VAR} (process 0's host:port, reachable from every host) "
        f"and distinct {PROCESS_ID_VAR}s; {TIMEOUT_VAR}=SECONDS waits longer",
        file=sys.stderr,
        flush=True,
    )
    os._exit(EXIT_NO_PEERS)


def initialize() -> None:
    """Call jax.distributed.initialize() once when several processes take part; a no-op otherwise."""
    global _initialized
    if _initialized:
        return
    args = initialize_args()
    if args is not None:
        timeout = join_timeout()
        _cpu_collectives_default()
        message = waiting_message(args)
        print(message, file=sys.stderr, flush=True)
        done = threading.Event()
        watcher = threading.Thread(target=_watch, args=(done, message, timeout), daemon=True)
        watcher.start()
        try:  # jax's own limit later than ours: our error line comes first
            jax.distributed.initialize(**args, initialization_timeout=timeout + 60)
        finally:
            done.set()
    _initialized = True


def check_same_config(payload: Mapping[str, Any]) -> None:
    """Unless every process has the same ``payload``, an InputError on all of them naming what differs where."""
    if jax.process_count() == 1:
        return
    from jax.experimental import multihost_utils

    text = json.dumps(payload, sort_keys=True, default=str).encode()
    digest = np.frombuffer(hashlib.sha256(text).digest(), np.uint8)
    digests = np.asarray(multihost_utils.process_allgather(digest))
    if all((d == digests[0]).all() for d in digests):
        return
    length = int(np.max(np.asarray(multihost_utils.process_allgather(np.int32(len(text))))))
    padded = np.zeros(length, np.uint8)
    padded[: len(text)] = np.frombuffer(text, np.uint8)
    texts = np.asarray(multihost_utils.process_allgather(padded))
    from lra.training.run_files import flatten_config

    decoded = [json.loads(bytes(t).rstrip(b"\0").decode()) for t in texts]
    flat = [flatten_config(d) for d in decoded]
    lines = []
    for pid in range(1, len(flat)):
        diffs = sorted(k for k in flat[0].keys() | flat[pid].keys() if flat[0].get(k) != flat[pid].get(k))
        if diffs:
            shown = "; ".join(
                f"{k}: {flat[0].get(k)!r} in process 0, {flat[pid].get(k)!r} in process {pid}" for k in diffs[:4]
            )
            lines.append(shown + ("; ..." if len(diffs) > 4 else ""))
    raise InputError(
        f"the {len(flat)} processes of this launch were given different commands ({' | '.join(lines)}); "
        f"nothing was changed. Start every process with the same --config, --config.* overrides, "
        f"--workdir and flags"
    )


def data_mesh() -> Mesh:
    """A 1-D mesh over all devices of all hosts; the batch is split along its ``data`` axis."""
    return Mesh(np.asarray(jax.devices()), ("data",))


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec())


def batch_sharded(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, PartitionSpec("data"))


def seed_batch_sharded(mesh: Mesh) -> NamedSharding:
    """A training batch of several seeds (S, B, ...): every seed's rows split over the mesh."""
    return NamedSharding(mesh, PartitionSpec(None, "data"))


def shard_batch(batch: dict[str, np.ndarray], sharding: NamedSharding) -> dict[str, jax.Array]:
    """Place a global batch (the same on every host) on the mesh, each host giving its rows of ``data``."""
    n_proc, pid = jax.process_count(), jax.process_index()
    axis = list(sharding.spec).index("data")

    def place(x: np.ndarray) -> jax.Array:
        if n_proc == 1:
            return jax.device_put(x, sharding)
        rows = x.shape[axis] // n_proc
        local = np.take(x, np.arange(pid * rows, (pid + 1) * rows), axis=axis)
        return jax.make_array_from_process_local_data(sharding, local, x.shape)

    return {k: place(v) for k, v in batch.items()}


# -- stop signals: save and stop, agreed across hosts --------------------------------------------------------
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The signal handler of one run; ``signum`` is set once a stop was asked for."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.training = False
        self._old: dict[int, Any] = {}
        self._pipe: tuple[int, int] | None = None
        self._watcher: threading.Thread | None = None
        self._old_wakeup = -1

    def install(self) -> StopSignals:
        self._old = {s: signal.signal(s, self) for s in SIGNALS}
        self._count_deliveries()
        return self

    def _count_deliveries(self) -> None:
        """Count deliveries, not handler calls: while the main thread is in XLA's C++ code, two signals of one
        kind set one pending flag and the handler runs once. The C-level handler writes each delivery to a wakeup
        pipe; a thread reading it ends the run at the second while training, without waiting for the step."""
        if threading.current_thread() is not threading.main_thread():
            return
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            self._old_wakeup = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        except ValueError:  # not the main thread of the main interpreter
            os.close(read_fd)
            os.close(write_fd)
            return
        self._pipe = (read_fd, write_fd)

        def watch() -> None:
            seen = 0
            while True:
                try:
                    data = os.read(read_fd, 64)
                except OSError:
                    return
                if not data:
                    return
                for signum in data:
                    if signum not in SIGNALS:
                        continue
                    seen += 1
                    if seen >= 2 and self.training:
                        name = signal.Signals(signum).name
                        print(
                            f"{name} again: stopping at once; the last saved checkpoint is kept",
                            file=sys.stderr,
                            flush=True,
                        )
                        os._exit(128 + signum)

        self._watcher = threading.Thread(target=watch, name="lra-stop-signals", daemon=True)
        self._watcher.start()

    def reclaim(self) -> None:
        """Take SIGTERM/SIGINT back from jax.distributed's preemption notifier, under which the run never heard
        of SIGTERM (the hosts agree on this handler's flag instead). ``restore`` still restores the originals."""
        for s in SIGNALS:
            signal.signal(s, self)

    def restore(self) -> None:
        for s, handler in self._old.items():
            signal.signal(s, handler)
        self._old = {}
        if self._pipe is not None:
            signal.set_wakeup_fd(self._old_wakeup)
            read_fd, write_fd = self._pipe
            os.close(write_fd)  # the watcher reads the end of the pipe and returns
            if self._watcher is not None:
                self._watcher.join(timeout=5)
            os.close(read_fd)
            self._pipe = self._watcher = None

    def __call__(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if self.signum is not None:
            print(f"{name} again: stopping at once; the last saved checkpoint is kept", file=sys.stderr, flush=True)
            os._exit(128 + signum)  # no cleanup that a third signal could interrupt
        self.signum = signum
        if not self.training:
            raise Interrupted(signum, None, saved=False)
        print(
            f"{name}: finishing the step in flight (at most one: the loop runs one step ahead) and saving a "
            "checkpoint; send it again to stop at once without saving",
            file=sys.stderr,
            flush=True,
        )


def agreed_stop(own: int | None, step: int) -> int | None:
    """The signal to stop on after ``step`` (None: go on). Every process's flag is gathered at every step, so a
    signal reaching some hosts stops all after the same step, each taking its part in the collective save (alone,
    the others would wait in the next collective for ever). SIGTERM wins over SIGINT. One process: no collective."""
    if jax.process_count() == 1:
        return own
    from jax.experimental import multihost_utils

    flags = np.asarray(multihost_utils.process_allgather(np.int32(own or 0)))
    signum = int(flags.max())
    if signum and not own:
        senders = ", ".join(str(i) for i in np.flatnonzero(flags))
        print(
            f"process {jax.process_index()}: process {senders} got {signal.Signals(signum).name}: all stop "
            f"after step {step} and save a checkpoint",
            file=sys.stderr,
            flush=True,
        )
    return signum or None


# -- child processes: signals passed on, no orphans ----------------------------------------------------------
class ChildSignals:
    """The children a process is running (each with a label), and the signal that stopped it."""

    def __init__(self, on_signal: str) -> None:
        """``on_signal``: printed once after ``SIGTERM: ``; may name ``{count}`` (running children) and ``{labels}``."""
        self.on_signal = on_signal
        self.children: dict[subprocess.Popen, str] = {}
        self.signum: int | None = None
        self.interrupted: list[str] = []  # labels of the children running when the signal came
        self._lock = threading.RLock()  # the handler runs in the main thread, which may hold it

    def forward(self, signum: int, frame: object = None) -> None:
        """The signal handler: pass ``signum`` to every running child; remember it (nothing new starts)."""
        with self._lock:
            running = [(c, label) for c, label in self.children.items() if c.poll() is None]
            if self.signum is None:
                self.signum = signum
                self.interrupted = [label for _, label in running]
                print(
                    f"{signal.Signals(signum).name}: "
                    + self.on_signal.format(count=len(running), labels=", ".join(self.interrupted) or "none"),
                    file=sys.stderr,
                    flush=True,
                )
        for child, _ in running:
            child.send_signal(signum)

    def check(self) -> None:
        """Raise :class:`Interrupted` once a signal has come: the caller starts nothing new."""
        if self.signum is not None:
            raise Interrupted(self.signum, None, saved=False)

    def start(self, argv: list[str], label: str = "", **popen: Any) -> subprocess.Popen:
        """``subprocess.Popen`` in a session of its own, tracked until :meth:`done`; refused after a signal."""
        self.check()
        child = subprocess.Popen(argv, start_new_session=True, **popen)
        with self._lock:
            self.children[child] = label or " ".join(argv)
            late = self.signum
        if late is not None:  # the signal came while it started: it gets it too
            self.interrupted.append(self.children[child])
            child.send_signal(late)
        return child

    def done(self, child: subprocess.Popen) -> None:
        """``child`` has ended (or is being given up): stop tracking it; a live one is stopped and waited for."""
        if child.poll() is None:
            child.terminate()
            child.wait()
        with self._lock:
            self.children.pop(child, None)

    def reset(self) -> None:
        """Forget a past signal (a new command in the same process, e.g. in tests)."""
        self.signum, self.interrupted = None, []

    @contextlib.contextmanager
    def forwarding(self) -> Iterator[ChildSignals]:
        """SIGINT/SIGTERM handled by :meth:`forward` inside the block (the main thread only), restored after."""
        previous = {sig: signal.signal(sig, self.forward) for sig in SIGNALS}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
