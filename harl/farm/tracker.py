"""Asking a TVM RPC tracker what it holds, with deadlines.

TVM's own client (`tvm.rpc.connect_tracker`) retries refused connections for a minute and reads
without a timeout; a farm's status and tuning's preflight must answer within seconds instead. The
messages are TVM's tracker protocol, sent with TVM's own helpers (`tvm.rpc.base`).
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from harl.errors import HarlError


@dataclass(frozen=True)
class KeyStatus:
    """Servers registered under one key, as the tracker's summary() reports them."""

    key: str
    servers: int  # registered (connected to the tracker)
    free: int  # waiting for a session
    pending: int  # session requests waiting for a free server

    @property
    def busy(self) -> int:
        return max(0, self.servers - self.free)


def tracker_summary(host: str, port: int, timeout_s: float = 5.0) -> dict:
    """The tracker's summary() dict; a one-line HarlError when it does not answer in time."""
    from tvm.rpc import base

    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            sock.sendall(struct.pack("<i", base.RPC_TRACKER_MAGIC))
            magic = struct.unpack("<i", base.recvall(sock, 4))[0]
            if magic != base.RPC_TRACKER_MAGIC:
                raise HarlError(f"{host}:{port} is not a TVM RPC tracker")
            base.sendjson(sock, [base.TrackerCode.SUMMARY])
            reply = base.recvjson(sock)
    except (OSError, struct.error) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise HarlError(f"RPC tracker {host}:{port} does not answer ({reason or 'timed out'})"
                        ) from None
    if not (isinstance(reply, list) and reply and reply[0] == base.TrackerCode.SUCCESS):
        raise HarlError(f"RPC tracker {host}:{port} sent an unexpected reply: {reply!r}")
    return reply[1]


def key_statuses(summary: dict) -> dict[str, KeyStatus]:
    """Per key: registered servers, free ones and waiting requests."""
    registered: dict[str, int] = {}
    for server in summary.get("server_info", []):
        _, _, key = str(server.get("key", "")).partition(":")  # "server:KEY"
        registered[key] = registered.get(key, 0) + 1
    queues = summary.get("queue_info", {})
    return {
        key: KeyStatus(key, registered.get(key, 0), int(queues.get(key, {}).get("free", 0)),
                       int(queues.get(key, {}).get("pending", 0)))
        for key in sorted(set(registered) | set(queues))
    }


def count_servers(host: str, port: int, key: str, timeout_s: float = 5.0) -> int:
    """Servers registered under `key` right now."""
    status = key_statuses(tracker_summary(host, port, timeout_s)).get(key)
    return status.servers if status else 0


def wait_for_servers(host: str, port: int, key: str, *, want: int, wait_s: float,
                     timeout_s: float = 5.0) -> int:
    """Poll until `want` servers are registered under `key` or `wait_s` passes; return the count.

    Servers register asynchronously, a moment after they start or after a session ends.
    """
    deadline = time.monotonic() + wait_s
    while True:
        found = count_servers(host, port, key, timeout_s)
        if found >= want or time.monotonic() >= deadline:
            return found
        time.sleep(0.2)
