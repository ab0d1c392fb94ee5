"""A fresh machine for the real-target test: a Debian root of its own (debootstrap, cached as a
tarball by ``scripts/target-root.sh``), entered only through its own sshd, with its own Python,
``HOME`` and nothing of qonnect.

The root is a chroot: it shares the network namespace, so its sshd listens on a loopback port of
the host and the services the roles start there reach the testbed's clusters (127.0.0.x) and are
reached by the test directly. It gets ``/proc``, a private ``/dev`` (a tmpfs with the usual device
nodes and its own devpts instance, never the host's ``/dev``), the host's resolver and the host's
CA bundle and pip configuration (the machine's network trust: an intercepting egress proxy would
otherwise refuse pip). ``close()`` kills every process whose root is the chroot, unmounts
everything and removes the root only when no mount is left under it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from support import free_port

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "target-root.sh"

# character devices of the chroot's /dev: name -> (major, minor)
DEVICES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9), "tty": (5, 0)}
LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
}


def root_tarball(timeout: float = 900) -> Path:
    """The cached Debian root (built by scripts/target-root.sh on first use, ~2 minutes)."""
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"scripts/target-root.sh failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path) + "/"
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8") as info:
        for line in info:
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix) or point == str(path):
                found.append(point)
    return found


def _run(*cmd: str, timeout: float = 60) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=timeout)


class ChrootTarget:
    """A chroot made from ``tarball`` under ``base``, reachable as root over SSH on 127.0.0.1."""

    def __init__(self, base: Path, tarball: Path) -> None:
        self.base = base
        self.tarball = tarball
        self.root = base / "root"
        self.key = base / "ssh" / "id_ed25519"
        self.port = free_port()
        self.sshd: subprocess.Popen | None = None
        self.mounted: list[Path] = []

    def path(self, inside: str | Path) -> Path:
        """Where a path of the target is on the host."""
        return self.root / str(inside).lstrip("/")

    # -- set-up --------------------------------------------------------------------------------

    def start(self) -> ChrootTarget:
        self.root.mkdir(parents=True)
        _run("tar", "-C", str(self.root), "--numeric-owner", "-xpf", str(self.tarball), timeout=300)
        self._mount("proc", "proc", self.path("/proc"))
        dev = self.path("/dev")
        shutil.rmtree(dev)  # the tarball's nodes: replaced by a private tmpfs
        dev.mkdir()
        self._mount("tmpfs", "tmpfs", dev, "mode=0755,nosuid,size=64m")
        for name, (major, minor) in DEVICES.items():
            os.mknod(dev / name, 0o666 | 0o020000, os.makedev(major, minor))
            os.chmod(dev / name, 0o666)
        for name, target in LINKS.items():
            os.symlink(target, dev / name)
        (dev / "shm").mkdir(mode=0o1777)
        os.chmod(dev / "shm", 0o1777)
        (dev / "pts").mkdir()
        self._mount("devpts", "devpts", dev / "pts", "newinstance,ptmxmode=0666,mode=0620")
        self._network_trust()
        self._sshd()
        return self

    def _mount(self, kind: str, source: str, point: Path, options: str = "") -> None:
        _run("mount", "-t", kind, *(["-o", options] if options else []), source, str(point))
        self.mounted.append(point)

    def _network_trust(self) -> None:
        """The host's resolver, CA bundle and pip configuration: how this machine reaches the
        package index (not qonnect's business, as a site's base image would carry them)."""
        for name in ("/etc/resolv.conf", "/etc/ssl/certs/ca-certificates.crt", "/etc/pip.conf"):
            if Path(name).is_file():
                dest = self.path(name)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.unlink(missing_ok=True)
                shutil.copyfile(name, dest)
                dest.chmod(0o644)

    def _sshd(self) -> None:
        self.key.parent.mkdir(mode=0o700)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "qonnect-real-target", "-f", str(self.key))
        ssh_dir = self.path("/root/.ssh")
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        (ssh_dir / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        (ssh_dir / "authorized_keys").chmod(0o600)
        self.path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        self.chroot("ssh-keygen", "-A")
        log = open(self.base / "sshd.log", "ab")  # noqa: SIM115 - the sshd's, closed in close()
        self.sshd = subprocess.Popen(
            [
                "chroot",
                str(self.root),
                "/usr/sbin/sshd",
                "-D",
                "-e",
                "-o",
                f"ListenAddress=127.0.0.1:{self.port}",
                "-o",
                "PermitRootLogin=prohibit-password",
                "-o",
                "PasswordAuthentication=no",
                "-o",
                "KbdInteractiveAuthentication=no",
                "-o",
                "UsePAM=no",
                "-o",
                "MaxStartups=50",
                "-o",
                "MaxSessions=50",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
        )
        self._log = log
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.port), 1):
                break
            if self.sshd.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the target's sshd did not listen: {(self.base / 'sshd.log').read_text()[-2000:]}"
                )
            time.sleep(0.2)
        probe = self.ssh("id -u; echo $HOME; command -v python3; ls /opt 2>/dev/null | wc -l")
        assert probe.split() == ["0", "/root", "/usr/bin/python3", "0"], probe

    def chroot(self, *cmd: str, timeout: float = 60) -> str:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
        proc = subprocess.run(
            ["chroot", str(self.root), *cmd],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            check=True,
        )
        return proc.stdout

    def ssh(self, command: str, timeout: float = 60) -> str:
        """Run a shell command on the target over SSH (as Ansible reaches it)."""
        proc = subprocess.run(
            ["ssh", *self.ssh_options(), "-p", str(self.port), "root@127.0.0.1", command],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert proc.returncode == 0, f"ssh {command!r}: {proc.stderr[-2000:]}"
        return proc.stdout

    def ssh_options(self) -> list[str]:
        return [
            "-i",
            str(self.key),
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
        ]

    def host_vars(self) -> dict[str, object]:
        """How Ansible reaches the target."""
        return {
            "ansible_host": "127.0.0.1",
            "ansible_port": self.port,
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": " ".join(self.ssh_options()[2:]),
            "ansible_python_interpreter": "/usr/bin/python3",
        }

    # -- what runs there -----------------------------------------------------------------------

    def processes(self) -> list[int]:
        """Pids of every process whose root is the chroot."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if os.readlink(entry / "root") == str(self.root):
                    pids.append(int(entry.name))
        return pids

    def cmdline(self, pid: int) -> str:
        with contextlib.suppress(OSError):
            return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        return ""

    def log_tails(self, lines: int = 15) -> str:
        """The last lines of every service log on the target (for a failure's message)."""
        parts = []
        for log in sorted(self.root.glob("var/lib/qonnect/*/*.log")):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.relative_to(self.root)}\n" + "\n".join(tail))
        return "\n".join(parts) or "(no service logs on the target)"

    # -- teardown ------------------------------------------------------------------------------

    def close(self) -> None:
        """Kill everything running in the chroot, unmount, remove the root (never through a mount)."""
        for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
            for pid in self.processes():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while self.processes() and time.monotonic() < deadline:
                time.sleep(0.1)
        if self.sshd is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.sshd.wait(5)
            self._log.close()
        for point in [Path(p) for p in sorted(_mounts_under(self.root), reverse=True)]:
            if subprocess.run(
                ["umount", str(point)], capture_output=True, timeout=30, check=False
            ).returncode:
                subprocess.run(["umount", "-l", str(point)], capture_output=True, timeout=30, check=False)
        self.mounted.clear()
        left = _mounts_under(self.root)
        if left:
            raise AssertionError(f"still mounted under the target root (not removed): {left}")
        if self.root.exists():
            subprocess.run(["rm", "-rf", "--one-file-system", str(self.root)], timeout=300, check=False)
