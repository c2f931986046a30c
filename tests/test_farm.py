"""`python -m harl.farm up|status|down`: real TVM tracker and servers on 127.0.0.1."""

import os
import socket

import psutil
from farm_util import farm_cli, leftovers, loopback_farm, recorded_processes, sessions_tmpdir

from harl.farm.farm import down, free_port, group_members, server_args, up
from harl.farm.tracker import count_servers


def test_up_status_down(tmp_path):
    with loopback_farm(tmp_path, servers=2, key="test-cpu") as (port, records):
        tracker, *servers = records
        assert tracker.role == "tracker" and tracker.port == port and len(servers) == 2
        assert count_servers("127.0.0.1", port, "test-cpu") == 2
        # Detached: each process leads its own session, so it outlives the shell that started it.
        for record in records:
            assert os.getsid(record.pid) == record.pid
        # Pinned to separate cores where there are enough of them.
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) >= 2:
            assert [s.core for s in servers] == cores[:2]
            for server in servers:
                assert psutil.Process(server.pid).cpu_affinity() == [server.core]
        # Every listener binds the loopback address only.
        for record in records:
            listening = [c.laddr for proc in [psutil.Process(record.pid)]
                         for c in proc.net_connections() if c.status == psutil.CONN_LISTEN]
            listening += [c.laddr for child in psutil.Process(record.pid).children(True)
                          for c in child.net_connections() if c.status == psutil.CONN_LISTEN]
            assert listening and all(addr.ip == "127.0.0.1" for addr in listening)
        # No farm process (popen workers included) loaded torch: each would take seconds more.
        farm_processes = [proc for record in records for proc in group_members(record)]
        assert len(farm_processes) >= 6  # the tracker, two servers and a popen worker each
        assert not [proc.cmdline() for proc in farm_processes
                    if any("libtorch" in m.path for m in proc.memory_maps())]

        status = farm_cli(tmp_path, "status")
        assert status.returncode == 0, status.stderr
        assert f"tracker 127.0.0.1:{port}" in status.stdout
        assert "key 'test-cpu': 2 servers, 2 free, 0 busy" in status.stdout

        again = farm_cli(tmp_path, "up", "--servers", 1, "--key", "x", "--port", free_port())
        assert again.returncode == 2 and "a farm is already up" in again.stderr
    assert not (tmp_path / "farm.json").exists()
    status = farm_cli(tmp_path, "status")
    assert status.returncode == 1 and "no farm is up" in status.stdout


def test_busy_port_is_one_line_and_starts_nothing(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = farm_cli(tmp_path, "up", "--servers", 1, "--key", "b", "--port", port)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"harl: error: port 127.0.0.1:{port} is in use; pick another with --port"]
    assert recorded_processes(tmp_path) == []


def test_down_without_farm_is_harmless(tmp_path):
    proc = farm_cli(tmp_path, "down")
    assert proc.returncode == 0 and "no farm is up" in proc.stdout


def test_servers_that_spawn_their_sessions_serve_them(tmp_path, monkeypatch):
    """On a GPU machine servers run with --no-fork (a forked session cannot use CUDA there)."""
    from tvm import rpc

    monkeypatch.setenv("TMPDIR", str(sessions_tmpdir(tmp_path)))  # the farm inherits it
    assert server_args("127.0.0.1", 9000, tracker_port=9190, key="k",
                       no_fork=True)[-1] == "--no-fork"
    assert "--no-fork" not in server_args("127.0.0.1", 9000, tracker_port=9190, key="k",
                                          no_fork=False)
    port = free_port()
    state = up(1, key="test-spawn", port=port, directory=tmp_path, no_fork=True)
    try:
        server = psutil.Process(state.servers[0].pid)
        assert "--no-fork" in server.cmdline()
        session = rpc.connect_tracker("127.0.0.1", port).request("test-spawn", session_timeout=60)
        assert session.cpu(0).exist
    finally:
        down(tmp_path)
    assert leftovers(state.processes) == []  # spawned sessions included
