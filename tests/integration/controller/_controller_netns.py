"""Network namespaces for the leader-isolation test, and a TCP relay between namespaces.

Each replica runs in its own namespace, linked by a veth pair to a bridge inside a hub
namespace; every address lives inside these namespaces (the root namespace is not changed). The
KB and the testbed clusters listen on loopback in the root namespace, so the relay (a separate
process, run with ``python _controller_netns.py relay CONFIG``) listens on the same loopback addresses
inside each replica namespace and forwards to the root namespace, and exposes each replica's
status port on root loopback. Cutting a replica's veth link isolates its Raft traffic only: it
still reaches the KB and the clusters, the hardest case for "a cut-off leader must not complete
a migration".
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CLONE_NEWNET = 0x40000000


def ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip", "netns", "exec", ns, "ip", *args] if ns else ["ip", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=check)


class Namespaces:
    """A hub namespace with a bridge and one namespace per replica, removed in close()."""

    def __init__(self, count: int) -> None:
        tag = secrets.token_hex(3)
        self.hub = f"q6hub{tag}"
        self.names = [f"q6r{i}{tag}" for i in range(count)]
        self.subnet = f"10.{200 + int(tag[:2], 16) % 50}.{int(tag[2:4], 16)}"
        self.addresses = [f"{self.subnet}.{i + 1}" for i in range(count)]
        self.created: list[str] = []

    def create(self) -> Namespaces:
        for ns in [self.hub, *self.names]:
            ip("netns", "add", ns)
            self.created.append(ns)
            ip("link", "set", "lo", "up", ns=ns)
        ip("link", "add", "br0", "type", "bridge", ns=self.hub)
        ip("link", "set", "br0", "up", ns=self.hub)
        for i, ns in enumerate(self.names):
            # create the pair inside the hub, then move one end into the replica namespace
            ip("link", "add", f"h{i}", "type", "veth", "peer", "name", f"v{i}", ns=self.hub)
            ip("link", "set", f"v{i}", "netns", ns, ns=self.hub)
            ip("link", "set", f"h{i}", "master", "br0", ns=self.hub)
            ip("link", "set", f"h{i}", "up", ns=self.hub)
            ip("addr", "add", f"{self.addresses[i]}/24", "dev", f"v{i}", ns=ns)
            ip("link", "set", f"v{i}", "up", ns=ns)
        return self

    def cut(self, index: int) -> None:
        """Take replica index off the bridge (its Raft peers become unreachable)."""
        ip("link", "set", f"h{index}", "down", ns=self.hub)

    def heal(self, index: int) -> None:
        ip("link", "set", f"h{index}", "up", ns=self.hub)

    def close(self) -> None:
        for ns in reversed(self.created):
            ip("netns", "del", ns, check=False)
        self.created.clear()


@contextlib.contextmanager
def isolated_group(stack: Any, workdir: Path, options: list[str], count: int = 3) -> Iterator[Namespaces]:
    """``count`` controller replicas of ``stack``, each in its own namespace (Raft over the
    bridge; KB and cluster APIs relayed to root loopback); stopped and removed afterwards."""
    ns = Namespaces(count).create()
    relay = None
    try:
        kb_port = stack.kb_url.rsplit(":", 1)[1]
        forwards = []
        for name in ns.names:  # each replica reaches the KB and every cluster API on root loopback
            forwards.append(
                {"listen_ns": name, "listen": f"127.0.0.1:{kb_port}", "target": f"127.0.0.1:{kb_port}"}
            )
            for c in stack.federation["clusters"]:
                addr = f"{c['address']}:{c['port']}"
                forwards.append({"listen_ns": name, "listen": addr, "target": addr})
        for i, name in enumerate(ns.names):  # and the caller reaches each replica's status port
            forwards.append({"listen": "127.0.0.1:0", "target_ns": name, "target": f"{ns.addresses[i]}:9460"})
        relay = Relay(workdir, forwards)
        stack.start_replicas(
            count,
            options,
            addresses=[f"{a}:9450" for a in ns.addresses],
            prefixes=[["ip", "netns", "exec", n] for n in ns.names],
            http_binds=[f"{a}:9460" for a in ns.addresses],
            status_urls=[f"http://{b}" for b in relay.bound[-count:]],
        )
        yield ns
    finally:
        stack.stop_replicas()
        if relay:
            relay.stop()
        ns.close()


class Relay:
    """The relay process; ``forwards`` is a list of {listen_ns, listen, target_ns, target}."""

    def __init__(self, workdir: Path, forwards: list[dict[str, Any]]) -> None:
        self.config = workdir / "relay.json"
        self.ready = workdir / "relay.ready"
        self.config.write_text(json.dumps(forwards))
        self.ready.unlink(missing_ok=True)
        self.log = open(workdir / "relay.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "relay", str(self.config), str(self.ready)],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 20
        while not self.ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"relay did not start: {(workdir / 'relay.log').read_text()[-2000:]}")
            time.sleep(0.05)
        self.bound: list[str] = json.loads(self.ready.read_text())  # actual listen address per forward

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


# -- the relay process ---------------------------------------------------------------------------


def _libc_setns(fd: int) -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns failed")


@contextlib.contextmanager
def _in_netns(name: str | None):
    """Run the block in network namespace name (None: the root one); sockets keep their namespace."""
    if name is None:
        yield
        return
    root = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        _libc_setns(target)
        yield
    finally:
        _libc_setns(root)
        os.close(root)
        os.close(target)


_NS_LOCK = threading.Lock()


def _socket_in(ns: str | None) -> socket.socket:
    with _NS_LOCK, _in_netns(ns):
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)


def _pump(a: socket.socket, b: socket.socket) -> None:
    try:
        while True:
            ready, _writable, _errored = select.select([a, b], [], [], 60)
            if not ready:
                continue
            for src in ready:
                data = src.recv(65536)
                if not data:
                    return
                (b if src is a else a).sendall(data)
    except OSError:
        pass
    finally:
        a.close()
        b.close()


def _serve(listener: socket.socket, target_ns: str | None, target: tuple[str, int]) -> None:
    while True:
        conn, _peer = listener.accept()
        out = _socket_in(target_ns)
        try:
            out.settimeout(5)
            out.connect(target)
            out.settimeout(None)
        except OSError:
            conn.close()
            out.close()
            continue
        threading.Thread(target=_pump, args=(conn, out), daemon=True).start()


def relay_main(config: str, ready: str) -> None:
    forwards = json.loads(Path(config).read_text())
    bound = []
    for fwd in forwards:
        host, port = fwd["listen"].rsplit(":", 1)
        listener = _socket_in(fwd.get("listen_ns"))
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((host, int(port)))
        listener.listen(64)
        bound.append(f"{host}:{listener.getsockname()[1]}")
        thost, tport = fwd["target"].rsplit(":", 1)
        threading.Thread(
            target=_serve, args=(listener, fwd.get("target_ns"), (thost, int(tport))), daemon=True
        ).start()
    Path(ready).write_text(json.dumps(bound))
    threading.Event().wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["relay"]:
        relay_main(sys.argv[2], sys.argv[3])
