"""A loopback device farm: TVM's own RPC tracker and servers as detached background processes.

`up` starts `python -m tvm.exec.rpc_tracker` and, once it listens, N `python -m tvm.exec.rpc_server`
(all without torch, which TVM imports whenever it is installed), each in its own session (process
group) so it outlives the shell, each server pinned to its own core where there are enough cores,
and writes what it started to the state file. `down` stops every process group it recorded and
waits until they are gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import psutil

from harl.errors import HarlError
from harl.farm.state import FarmState, ProcessRecord, clear_state, farm_dir, load_state, save_state
from harl.farm.tracker import wait_for_servers
from harl.target import gpu_visible

TRACKER_START_S = 60.0  # importing TVM takes seconds per process on a busy 2-core machine
STOP_WAIT_S = 10.0


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as TVM's tracker binds
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port nobody listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def server_cores(n_servers: int) -> list[int | None]:
    """One core per server when there are enough cores, else no pinning."""
    cores = sorted(os.sched_getaffinity(0))
    if n_servers > len(cores):
        return [None] * n_servers
    return cores[:n_servers]


def _environment_without_torch(directory: Path) -> dict[str, str]:
    """This environment with a folder first on PYTHONPATH whose `torch` fails to import.

    tvm_ffi imports torch whenever it is installed (2.7 of `import tvm`'s 5.2 s on the 2-core
    hosts); a tracker, a server and their popen workers and sessions never use it, and a farm
    starts several at once on the same few cores. On the path, it reaches every descendant.
    """
    stub = directory / "without-torch"
    (stub / "torch").mkdir(parents=True, exist_ok=True)
    (stub / "torch" / "__init__.py").write_text(
        'raise ImportError("harl.farm runs TVM\'s tracker and servers without torch")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(stub), env.get("PYTHONPATH")) if p)
    return env


def _spawn(role: str, args: list[str], *, log: Path, port: int, core: int | None,
           base_env: dict[str, str]) -> ProcessRecord:
    env = dict(base_env)
    if core is not None:
        env["TVM_NUM_THREADS"] = "1"  # the runtime's thread pool matches the one core it gets

    def pin() -> None:
        if core is not None:
            os.sched_setaffinity(0, {core})

    with log.open("ab") as out:
        proc = subprocess.Popen([sys.executable, "-m", *args], stdin=subprocess.DEVNULL,
                                stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True, preexec_fn=pin, close_fds=True)
    return ProcessRecord(role=role, pid=proc.pid, port=port, log=str(log), core=core,
                         started=psutil.Process(proc.pid).create_time())


def _alive(record: ProcessRecord) -> bool:
    """True while the recorded process (not a later one reusing its pid) is running."""
    try:
        proc = psutil.Process(record.pid)
        return (abs(proc.create_time() - record.started) < 1.0
                and proc.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def alive_processes(state: FarmState) -> list[ProcessRecord]:
    return [record for record in state.processes if _alive(record)]


def server_args(host: str, port: int, *, tracker_port: int, key: str, no_fork: bool) -> list[str]:
    """`python -m` arguments of one server; not silent, so its log shows each session."""
    args = ["tvm.exec.rpc_server", "--host", host, "--port", str(port), "--port-end",
            str(port + 1), "--tracker", f"{host}:{tracker_port}", "--key", key]
    # A server forks a process per session, and on a GPU machine the fork inherits a CUDA
    # context it cannot use (cudaErrorInitializationError): spawned sessions start clean.
    return args + ["--no-fork"] if no_fork else args


def up(n_servers: int, *, key: str, host: str = "127.0.0.1", port: int = 9190,
       directory: Path | None = None, no_fork: bool | None = None) -> FarmState:
    """Start a tracker on host:port and `n_servers` servers under `key`; wait until registered.

    `no_fork` (default: whether a CUDA GPU is visible) makes servers spawn their sessions.
    """
    if n_servers < 1:
        raise HarlError(f"--servers must be at least 1, got {n_servers}")
    if not key or ":" in key:
        raise HarlError(f"--key must be a non-empty name without ':', got {key!r}")
    directory = directory or farm_dir()
    existing = load_state(directory)
    if existing is not None and alive_processes(existing):
        raise HarlError(f"a farm is already up (tracker {existing.host}:{existing.port}, "
                        f"key {existing.key!r}); run `python -m harl.farm down` first")
    if not _port_is_free(host, port):
        raise HarlError(f"port {host}:{port} is in use; pick another with --port")
    directory.mkdir(parents=True, exist_ok=True)
    env = _environment_without_torch(directory)

    tracker = _spawn("tracker", ["tvm.exec.rpc_tracker", "--host", host, "--port", str(port),
                                 "--port-end", str(port + 1), "--silent"],
                     log=directory / "tracker.log", port=port, core=None, base_env=env)
    state = FarmState(host=host, port=port, key=key, processes=[tracker])
    save_state(state, directory)
    try:
        if no_fork is None:  # imports TVM (seconds) while the tracker starts
            no_fork = gpu_visible()
        state = replace(state, no_fork=no_fork)
        # A server that finds no tracker retries only after 5 s: start them once it listens.
        _wait_until_listening(tracker, host, port)
        for index, core in enumerate(server_cores(n_servers)):
            server_port = free_port(host)
            state.processes.append(_spawn(
                "server", server_args(host, server_port, tracker_port=port, key=key,
                                      no_fork=no_fork),
                log=directory / f"server-{index}.log", port=server_port, core=core, base_env=env))
            save_state(state, directory)  # so that `down` below finds every one started
        _wait_until_registered(state)
    except BaseException:
        down(directory)
        raise
    return state


def _wait_until_listening(tracker: ProcessRecord, host: str, port: int) -> None:
    deadline = time.monotonic() + TRACKER_START_S
    while time.monotonic() < deadline:
        if not _alive(tracker):
            raise HarlError(f"farm tracker (pid {tracker.pid}) exited at start; "
                            f"see {tracker.log}")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
            return
        time.sleep(0.1)
    raise HarlError(f"farm tracker did not listen on {host}:{port} within "
                    f"{TRACKER_START_S:.0f} s; see {tracker.log}")


def _wait_until_registered(state: FarmState) -> None:
    deadline = time.monotonic() + TRACKER_START_S
    last_error: HarlError | None = None
    while time.monotonic() < deadline:
        dead = [p for p in state.processes if not _alive(p)]
        if dead:
            raise HarlError(f"farm {dead[0].role} (pid {dead[0].pid}) exited at start; "
                            f"see {dead[0].log}")
        try:
            found = wait_for_servers(state.host, state.port, state.key, want=len(state.servers),
                                     wait_s=min(5.0, deadline - time.monotonic()), timeout_s=2.0)
            if found >= len(state.servers):
                return
            last_error = HarlError(f"only {found} of {len(state.servers)} servers registered")
        except HarlError as err:  # the tracker is still importing TVM
            last_error = err
            time.sleep(0.3)
    raise HarlError(f"farm did not come up within {TRACKER_START_S:.0f} s: {last_error}; "
                    f"logs in {Path(state.tracker.log).parent}")


def group_members(record: ProcessRecord) -> list[psutil.Process]:
    """Every live process in the recorded process's group (its session workers included).

    Linux does not hand out a pid that is still some group's id, so a group found here is ours
    even after its leader has exited.
    """
    members = []
    for proc in psutil.process_iter():
        try:
            if os.getpgid(proc.pid) == record.pid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def stop_processes(records: list[ProcessRecord], wait_s: float = STOP_WAIT_S) -> int:
    """SIGTERM every process in the recorded groups, SIGKILL what is left after `wait_s`.

    Returns how many processes were running.
    """
    running = [proc for record in records for proc in group_members(record)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for proc in running:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
        _, running_left = psutil.wait_procs(running, timeout=wait_s)
        if not running_left:
            return len(running)
    left = [proc.pid for proc in running if proc.is_running()
            and proc.status() != psutil.STATUS_ZOMBIE]
    if left:
        raise HarlError(f"could not stop farm processes {left}")
    return len(running)


def down(directory: Path | None = None) -> int:
    """Stop everything the state file records and forget it; returns how many were running."""
    state = load_state(directory)
    if state is None:
        return 0
    stopped = stop_processes(state.processes)
    clear_state(directory)
    return stopped
