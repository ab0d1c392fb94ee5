"""Issue 24: the whole system installed by ``ansible-playbook qonnect.core.site`` on a real target.

The target is a fresh Debian root (``real_target_support.ChrootTarget``): its own sshd, reached
over SSH with a generated key, its own Python (Debian's python3 and python3-venv), its own ``HOME``,
nothing of qonnect. The collection comes from the built tarball, installed into a path of its own.
Against it, as an operator would:

1. ``site --limit qonnect_kb``: the knowledge_base role installs the qonnect package it ships
   into a virtualenv on the target (dependencies from the package index) and starts the KB
   under its supervisor script (no systemd in a chroot); its admin token stays on the target;
2. ``register_clusters`` from the Ansible controller registers four testbed clusters; agent and
   controller tokens are made through the KB's API; the kubeconfigs are copied to the target;
3. ``site``: one Resource Agent per cluster and three controller replicas (one Raft group) on
   the target; the agents' reports make every cluster healthy; a second run changes nothing;
   no token or secret in any output;
4. ``deploy`` places Bookinfo (energy-first) and every service turns Healthy on the clusters;
5. ``qonnect testbed fail`` the cluster that runs productpage: the controllers the role started
   decide, run the migration playbook inside the target and move productpage to the other cloud
   cluster, where the KB and the cluster's own API both show it.

Cold (the Debian root built by scripts/target-root.sh, ~2 min) and warm times are in
docs/operations.md.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from real_target_support import ChrootTarget, free_port, root_tarball
from support import wait_for
from support.federation import started_testbed
from user_path_support import tool

# isort: split
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from ansible_collections.qonnect.core.plugins.module_utils.placement.model import current_placement

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(os.geteuid() != 0, reason="a chroot target needs root"),
]

BIN = Path(sys.executable).parent
APP = "bookinfo"
REPLICAS = ("c1", "c2", "c3")
VENV = "/opt/qonnect/venv"


@pytest.fixture(scope="module")
def installed(built: Path, tmp_path_factory) -> Path:
    """The collection installed from the built tarball into a path of its own."""
    path = tmp_path_factory.mktemp("real-target-collection") / "collections"
    subprocess.run(
        [tool("ansible-galaxy"), "collection", "install", "--force", str(built), "-p", str(path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return path


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    started = time.monotonic()
    tarball = root_tarball()
    machine = ChrootTarget(tmp_path_factory.mktemp("real-target"), tarball)
    try:
        machine.start()
        print(f"target root ready in {time.monotonic() - started:.0f}s ({tarball.name})")
        yield machine
    finally:
        machine.close()


class Operator:
    """ansible-playbook / ansible from the test's venv, the collection from the tarball."""

    def __init__(self, base: Path, collections: Path, secrets_: list[str]) -> None:
        self.base = base
        self.secrets = secrets_
        self.timings: list[tuple[str, float]] = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHONPATH"))}
        self.env.update(
            ANSIBLE_COLLECTIONS_PATH=str(collections),
            ANSIBLE_NOCOLOR="1",
            ANSIBLE_RETRY_FILES_ENABLED="0",
            ANSIBLE_LOCAL_TEMP=str(base / "ansible-local"),
            ANSIBLE_SSH_CONTROL_PATH_DIR=str(base / "cp"),
            ANSIBLE_FORKS="10",
            PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        )

    def run(self, label: str, *args: str, timeout: float = 600) -> str:
        started = time.monotonic()
        proc = subprocess.run(
            [str(BIN / args[0]), *args[1:]],
            cwd=self.base,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        self.timings.append((label, round(time.monotonic() - started, 1)))
        output = proc.stdout + proc.stderr
        (self.base / f"{label}.log").write_text(output)
        for secret in self.secrets:
            assert secret not in output, f"{label}: a token or secret leaked into the output"
        assert proc.returncode == 0, f"{label} failed:\n{output[-6000:]}"
        return proc.stdout

    def recap(self, stdout: str) -> dict[str, dict[str, int]]:
        counts = {}
        for host, rest in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", stdout.split("PLAY RECAP")[-1], re.M):
            counts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)}
        return counts


def inventory(target: ChrootTarget, federation: dict, kb_port: int, kubeconfigs: Path) -> dict:
    """KB, one agent per cluster and three controller replicas, all on the one target (inventory
    aliases of the same machine). Tokens and the Raft secret come from a vars file."""
    clusters = federation["clusters"]
    raft = {r: f"127.0.0.1:{free_port()}" for r in REPLICAS}
    kb_url = f"http://127.0.0.1:{kb_port}"
    agents = {
        f"target-agent-{c['name']}": {
            "resource_agent_cluster": c["name"],
            "resource_agent_kubeconfig": str(kubeconfigs / f"{c['name']}.yaml"),
            "resource_agent_source_address": c["address"],
            "resource_agent_peers": {p["name"]: p["server"] for p in clusters if p["name"] != c["name"]},
        }
        for c in clusters
    }
    controllers = {
        f"target-controller-{r}": {
            "controller_id": r,
            "controller_raft_address": raft[r],
            "controller_http": f"127.0.0.1:{free_port()}",
        }
        for r in REPLICAS
    }
    # One machine, one virtualenv: the first replica's role run installs it; the other two use
    # it (three parallel pip runs into one virtualenv would race).
    for r in REPLICAS[1:]:
        controllers[f"target-controller-{r}"]["controller_python"] = f"{VENV}/bin/python"
    return {
        "all": {
            "vars": target.host_vars(),
            "children": {
                "qonnect_kb": {"hosts": {"target": {"knowledge_base_port": kb_port}}},
                "qonnect_agents": {
                    "hosts": agents,
                    "vars": {
                        "resource_agent_kb_url": kb_url,
                        "resource_agent_kb_token": "{{ qonnect_agent_tokens[resource_agent_cluster] }}",
                        "resource_agent_interval": 2,
                    },
                },
                "qonnect_controllers": {
                    "hosts": controllers,
                    "vars": {
                        "controller_peers": list(raft.values()),
                        "controller_kb_url": kb_url,
                        "controller_kb_token": "{{ qonnect_controller_token }}",
                        "controller_raft_secret": "{{ qonnect_raft_secret }}",
                        "controller_wait_timeout": 120,
                    },
                },
            },
        }
    }


def placement(kb: KBClient) -> dict[str, list[str]]:
    return {
        svc: sorted(t["cluster"] for t in targets)
        for svc, targets in current_placement(kb.get_placement(APP)).items()
    }


def healthy(kb: KBClient, avoid: set[str] = frozenset()) -> dict[str, list[str]] | None:
    """The placement when every Bookinfo service is Healthy where it is placed (agents'
    reports) and off ``avoid``; else None."""
    where = placement(kb)
    workloads = kb.list_workloads(application=APP)
    for svc, clusters in where.items():
        for cluster in clusters:
            states = {w["status"] for w in workloads if w.get("service") == svc and w["cluster"] == cluster}
            if states != {"Healthy"} or cluster in avoid:
                return None
    return where if len(where) == 4 else None


def deployments(kubeconfig: Path, namespace: str) -> dict[str, int]:
    """name -> ready replicas, read from the cluster's own API."""
    from kubernetes import client, config

    api = client.AppsV1Api(config.new_client_from_config(str(kubeconfig)))
    items = api.list_namespaced_deployment(namespace, _request_timeout=10).items
    return {d.metadata.name: d.status.ready_replicas or 0 for d in items}


def test_site_on_a_fresh_target_heals_a_failover(target: ChrootTarget, installed: Path, tmp_path: Path):
    try:
        story(target, installed, tmp_path)
    except (AssertionError, subprocess.SubprocessError) as exc:
        # the target's root goes with the fixture: keep what its services said in the failure
        raise AssertionError(f"{exc}\n\nservice logs on the target:\n{target.log_tails()}") from exc


def story(target: ChrootTarget, installed: Path, base: Path) -> None:
    started = time.monotonic()
    kb_port = free_port()
    kb_url = f"http://127.0.0.1:{kb_port}"
    raft_secret = secrets.token_hex(32)
    op = Operator(base, installed, [raft_secret])
    testbed = base / "testbed"
    args = ("--profile", "paper", "--clusters", "4", "--start-delay", "0.5", "--heartbeat", "2")
    with started_testbed(testbed, *args) as federation:
        kubeconfigs = testbed / "kubeconfigs"
        (base / "inventory.yml").write_text(json.dumps(inventory(target, federation, kb_port, kubeconfigs)))

        # 1. the KB, installed from the collection's own sources onto the fresh target
        op.run(
            "site-kb", "ansible-playbook", "-i", "inventory.yml", "qonnect.core.site", "--limit", "qonnect_kb"
        )
        token_file = target.path("/var/lib/qonnect/kb/admin.token")
        admin_token = token_file.read_text().strip()
        op.secrets.append(admin_token)
        (base / "admin.token").write_text(admin_token)
        (base / "admin.token").chmod(0o600)
        kb = KBClient(kb_url, admin_token, timeout=10)
        assert kb.healthz()["status"] == "ok"
        kb_pid = int(target.path("/var/lib/qonnect/kb/kb.pid").read_text())
        assert kb_pid in target.processes(), "the KB's supervisor does not run inside the target"

        # 2. clusters registered from the Ansible controller; tokens through the KB's API
        op.run(
            "register",
            "ansible-playbook",
            "qonnect.core.register_clusters",
            "-e",
            f"federation_file={testbed / 'federation.yaml'}",
            "-e",
            f"kb_url={kb_url}",
            "-e",
            f"kb_token_file={base / 'admin.token'}",
            "-e",
            "approve_economics=true",
        )
        names = [c["name"] for c in federation["clusters"]]
        assert sorted(c["name"] for c in kb.list_clusters()) == sorted(names)
        agent_tokens = {
            n: kb.request("POST", "/api/v1/tokens", {"role": "agent", "cluster": n, "name": f"agent-{n}"})[
                "token"
            ]
            for n in names
        }
        controller_token = kb.request(
            "POST", "/api/v1/tokens", {"role": "controller", "name": "controllers"}
        )["token"]
        op.secrets.extend([*agent_tokens.values(), controller_token])
        vault = base / "secrets.yml"
        vault.write_text(
            json.dumps(
                {
                    "qonnect_agent_tokens": agent_tokens,
                    "qonnect_controller_token": controller_token,
                    "qonnect_raft_secret": raft_secret,
                }
            )
        )
        vault.chmod(0o600)
        op.run(
            "kubeconfigs",
            "ansible",
            "-i",
            "inventory.yml",
            "target",
            "-m",
            "ansible.builtin.copy",
            "-a",
            f"src={kubeconfigs}/ dest={kubeconfigs}/ mode=0600 directory_mode=0700",
        )

        # 3. agents and controllers on the target
        out = op.run(
            "site", "ansible-playbook", "-i", "inventory.yml", "qonnect.core.site", "-e", f"@{vault}"
        )
        recap = op.recap(out)
        assert len(recap) == 1 + len(names) + len(REPLICAS), recap
        assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in recap.values()), recap
        wait_for(
            lambda: all(c.get("healthy") for c in kb.inventory()["clusters"]),
            90,
            "every cluster reported healthy by the agents on the target",
            interval=1,
            retry_on=(KBError,),
        )
        statuses = {}
        for r in REPLICAS:
            home = target.path(f"/var/lib/qonnect/controller-{r}")
            pid = int((home / "controller.pid").read_text())
            assert pid in target.processes(), f"replica {r} does not run inside the target"
            statuses[r] = home
        # a second run changes nothing on the target
        again = op.recap(
            op.run(
                "site-again",
                "ansible-playbook",
                "-i",
                "inventory.yml",
                "qonnect.core.site",
                "-e",
                f"@{vault}",
            )
        )
        assert all(r["changed"] == 0 and r["failed"] == 0 for r in again.values()), again
        in_root = [target.cmdline(p) for p in target.processes()]
        assert sum(f"{VENV}/bin/qonnect -v controller run" in c for c in in_root) == len(REPLICAS), in_root
        assert sum(" agent --cluster " in c for c in in_root) == len(names), in_root

        # 4. Bookinfo, placed by its QoS goals
        spec = (
            installed
            / "ansible_collections"
            / "qonnect"
            / "core"
            / "examples"
            / "bookinfo"
            / "energy-first.yml"
        )
        op.run(
            "deploy",
            "ansible-playbook",
            "qonnect.core.deploy",
            "-e",
            f"app_file={spec}",
            "-e",
            f"kb_url={kb_url}",
            "-e",
            f"kb_token_file={base / 'admin.token'}",
            "-e",
            "wait_timeout=120",
        )
        before = wait_for(lambda: healthy(kb), 120, "Bookinfo Healthy where it was placed", interval=1)
        failed = before["productpage"][0]
        assert failed.startswith("cloud-"), before

        # 5. the cluster that runs productpage fails; the controllers on the target heal it
        mark = max([e["id"] for e in kb.list_events(limit=1)] or [0])
        subprocess.run(
            [str(BIN / "qonnect"), "testbed", "fail", failed, "--dir", str(testbed)],
            check=True,
            capture_output=True,
            timeout=60,
        )
        failed_at = time.monotonic()
        decisions: set[str] = set()
        succeeded: list[dict] = []

        def healed():
            for e in kb.list_events(after_id=mark, limit=500):
                ref = e.get("ref") or {}
                if e["type"] == "controller.decision" and failed in (ref.get("exclude") or []):
                    decisions.add(str(ref.get("id")))
                elif e["type"] == "controller.migration.succeeded" and str(ref.get("id")) in decisions:
                    succeeded.append(e)
            return bool(succeeded) and healthy(kb, avoid={failed})

        after = wait_for(healed, 240, f"Bookinfo Healthy off {failed}", interval=1, retry_on=(KBError,))
        heal_seconds = time.monotonic() - failed_at
        moved_to = after["productpage"]
        assert failed not in moved_to and all(c.startswith("cloud-") for c in moved_to), after
        # the cluster's own API: productpage runs (ready) where the KB says
        for cluster in moved_to:
            ready = deployments(kubeconfigs / f"{cluster}.yaml", "bookinfo")
            assert any(name.startswith("productpage") and n > 0 for name, n in ready.items()), ready
        # the migration playbook ran inside the target, under a replica the role started
        runs = sorted(target.root.glob("var/lib/qonnect/controller-*/data/**/artifacts/run/rc"))
        assert any(p.read_text().strip() == "0" for p in runs), runs

    print(
        f"real target: healed {failed} -> {'+'.join(moved_to)} in {heal_seconds:.0f}s; "
        f"test {time.monotonic() - started:.0f}s; playbooks {op.timings}"
    )
