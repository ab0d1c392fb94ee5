"""One federation for the adversarial suite: the paper testbed, a KB, one agent per cluster.

Real processes, as in tests/integration/ansible (whose helpers it reuses); module-scoped, so it
is stopped before another directory's federation starts.
"""

from __future__ import annotations

import subprocess

import pytest
from adversarial_harness import QONNECT, Federation, create_token, start_process, stop_process, wait_for


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """The nine-cluster paper testbed with its clusters registered and reporting to a KB."""
    import yaml

    base = tmp_path_factory.mktemp("qonnect-adversarial")
    tb = base / "testbed"
    procs: list[subprocess.Popen] = []
    try:
        subprocess.run(
            [QONNECT, "testbed", "up", "--profile", "paper", "--dir", str(tb), "--start-delay", "0.2"],
            check=True,
            capture_output=True,
            timeout=120,
        )
        fed = yaml.safe_load((tb / "federation.yaml").read_text())
        db = f"sqlite:///{base / 'kb.sqlite'}"
        admin = create_token(db, "admin", base / "admin.token")
        port_file = base / "kb.port"
        procs.append(
            start_process(
                [
                    QONNECT,
                    "kb",
                    "serve",
                    "--db",
                    db,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--port-file",
                    str(port_file),
                    "--heartbeat-timeout",
                    "30",
                ],
                base / "kb.log",
            )
        )
        port = wait_for(lambda: port_file.exists() and port_file.read_text().strip(), 60, "the KB")
        federation = Federation(
            base, f"http://127.0.0.1:{port}", admin, {c["name"]: c for c in fed["clusters"]}, procs
        )
        kb = federation.kb()
        for c in fed["clusters"]:
            fields = ("name", "tier", "location", "server", "kubeconfig", "context", "labels")
            kb.register_cluster({k: c[k] for k in fields})
            token = create_token(db, "agent", base / f"agent-{c['name']}.token", c["name"])
            procs.append(
                start_process(
                    [
                        QONNECT,
                        "agent",
                        "--cluster",
                        c["name"],
                        "--kubeconfig",
                        c["kubeconfig"],
                        "--kb",
                        federation.kb_url,
                        "--token-file",
                        str(token),
                        "--interval",
                        "2",
                        "--state-dir",
                        str(base / f"agent-{c['name']}"),
                    ],
                    base / f"agent-{c['name']}.log",
                )
            )

        def all_reporting():
            inv = kb.inventory()
            return len(inv["clusters"]) == 9 and all(c["healthy"] and c["nodes"] for c in inv["clusters"])

        wait_for(all_reporting, 90, "all nine agents to report")
        yield federation
    finally:
        for proc in reversed(procs):
            stop_process(proc)
        subprocess.run(
            [QONNECT, "testbed", "down", "--dir", str(tb)], capture_output=True, timeout=60, check=False
        )


@pytest.fixture(scope="module")
def dyn(federation):
    """dyn(cluster) -> a kubernetes DynamicClient reading that cluster through its kubeconfig."""
    from kubernetes import config, dynamic

    cache: dict[str, object] = {}

    def get(cluster: str):
        if cluster not in cache:
            api = config.new_client_from_config(config_file=federation.clusters[cluster]["kubeconfig"])
            cache[cluster] = dynamic.DynamicClient(api)
        return cache[cluster]

    return get
