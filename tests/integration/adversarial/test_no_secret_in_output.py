"""Issue 25.3: no credential in any output.

Secrets are planted where a user or AWX puts them: each cluster's kubeconfig *content* (its
bearer token) in the playbooks' ``kubeconfigs`` variable, the same kubeconfigs as YAML text in
K8S_AUTH_KUBECONFIG, the KB admin token in its file. Then the shipped playbooks run with
``-vvv`` (deploy, remove, register_clusters), a migration runs through ansible-runner (the
engine AWX and the controller use) with its job events and artifacts on disk, and the deploy
module runs directly as AnsiballZ runs it. Everything they print, write as artifacts, or hand
to syslog (AnsibleModule logs its arguments there; a sitecustomize in each Python the test
starts records those calls) is searched for every planted secret: 0 hits.

Each search first checks that the output does hold the module arguments it searches
(``invocation.module_args``, ``Invoked with``), so an empty output cannot pass.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from adversarial_harness import BIN, COLLECTIONS, ROOT
from support.specs import application, deployment

pytestmark = pytest.mark.timeout(300)

APP = "nolog"
SPEC = application(
    APP,
    [
        {"name": "web", "tier": "cloud", "manifests": [deployment("web", 1, cpu="50m", memory="32Mi")]},
        {"name": "cache", "tier": "edge", "manifests": [deployment("cache", 1, cpu="50m", memory="32Mi")]},
    ],
    objective={"energy": 1.0},
)
# Records every syslog.syslog call of the Python it is loaded into (AnsibleModule._log_invocation).
SITECUSTOMIZE = """
import os, syslog

def _record(*args):
    with open(os.environ["QONNECT_TEST_SYSLOG"], "a", encoding="utf-8") as out:
        out.write(str(args[-1]) + "\\n")

syslog.syslog = _record
syslog.openlog = lambda *args, **kwargs: None
"""


class Planted:
    """The planted secrets (name -> value), where they went, and the environment that records
    syslog calls."""

    def __init__(self, federation, base: Path) -> None:
        self.federation = federation
        self.kubeconfigs = {
            name: yaml.safe_load(Path(c["kubeconfig"]).read_text()) for name, c in federation.clusters.items()
        }
        self.secrets = {"KB admin token": federation.admin_token_file.read_text().strip()}
        for name, doc in self.kubeconfigs.items():
            for user in doc["users"]:
                for field in ("token", "client-key-data", "password"):
                    if user["user"].get(field):
                        self.secrets[f"{name} {field}"] = user["user"][field]
        assert len(self.secrets) > len(self.kubeconfigs), "each testbed kubeconfig holds a credential"
        merged: dict = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
        for doc in self.kubeconfigs.values():
            for key in ("clusters", "users", "contexts"):
                merged[key] += doc[key]
        self.merged_text = yaml.safe_dump(merged)
        shim = base / "shim"
        shim.mkdir()
        (shim / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.syslog = base / "syslog.txt"
        self.syslog.touch()
        self.env = dict(
            federation.env,
            PYTHONPATH=os.pathsep.join([str(shim), COLLECTIONS]),
            QONNECT_TEST_SYSLOG=str(self.syslog),
        )
        self.spec_file = base / f"{APP}.yml"
        self.spec_file.write_text(yaml.safe_dump(SPEC))

    def leaks(self, text: str) -> list[str]:
        """The names of the planted secrets found in ``text``."""
        return sorted(name for name, value in self.secrets.items() if value in text)

    def logged(self) -> str:
        """What went to syslog since the last ``forget``."""
        return self.syslog.read_text()

    def forget(self) -> None:
        """Start a new syslog record, so a test reads only what its own run logged."""
        self.syslog.write_text("")

    def playbook(
        self, name: str, extra: dict, *args: str, env: dict | None = None
    ) -> subprocess.CompletedProcess:
        extra = {"kb_token_file": str(self.federation.admin_token_file), **extra}
        cmd = [str(BIN / "ansible-playbook"), name, "-vvv", "-e", json.dumps(extra), *args]
        self.forget()
        return subprocess.run(
            cmd, env=env or self.env, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False
        )

    def deployed(self) -> None:
        """The test application placed (deployed by this run if an earlier test did not)."""
        from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBError

        try:
            if self.federation.kb().get_placement(APP).get("current"):
                return
        except KBError:
            pass
        run = self.playbook("qonnect.core.deploy", {"app_file": str(self.spec_file)})
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]


@pytest.fixture(scope="module")
def planted(federation, tmp_path_factory):
    return Planted(federation, tmp_path_factory.mktemp("no-secret"))


def recap_ok(run: subprocess.CompletedProcess) -> dict[str, int]:
    found = re.search(r"localhost\s+:\s+(.*)", run.stdout)
    assert found and run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}


def assert_clean(planted: Planted, run: subprocess.CompletedProcess, in_process: bool | None = None) -> None:
    """No planted secret in the -vvv output nor in syslog. The deploy module logs its invocation
    to syslog when it runs as a module; in the controller's process (its action plugin, the
    default on the controller) it starts no module process, and -vvv says which it was."""
    output = run.stdout + run.stderr
    assert '"module_args"' in output, "-vvv shows each module's invocation (what is searched)"
    if in_process is not None:  # a playbook that deploys
        assert ("AnsiballZ_deploy.py" not in output) is in_process, "the deploy ran where it was meant to"
    assert planted.leaks(output) == [], "in the -vvv output"
    logged = planted.logged()
    if not in_process:
        assert "Invoked with" in logged, "each module logged its invocation to syslog"
    assert planted.leaks(logged) == [], "in what the modules sent to syslog"


IN_PROCESS = pytest.mark.parametrize("in_process", [True, False], ids=["in-process", "module"])


@IN_PROCESS
def test_deploy_playbook_vvv_shows_no_credential(planted, in_process):
    run = planted.playbook(
        "qonnect.core.deploy",
        {
            "app_file": str(planted.spec_file),
            "kubeconfigs": planted.kubeconfigs,
            "qonnect_in_process": in_process,
        },
    )
    recap_ok(run)
    assert_clean(planted, run, in_process)
    # masked are the credentials, not the cluster names the plan is made of
    assert re.search(r"web -> cloud-\d", run.stdout) and re.search(r"cache -> edge-\d", run.stdout), (
        run.stdout[-3000:]
    )


@IN_PROCESS
def test_migration_through_ansible_runner_has_no_credential_in_events_or_artifacts(
    planted, tmp_path, in_process
):
    """What AWX stores of a job (its events) and ansible-runner leaves on disk (artifacts)."""
    import ansible_runner

    planted.deployed()
    private = tmp_path / "runner"
    private.mkdir()
    planted.forget()
    runner = ansible_runner.run(
        private_data_dir=str(private),
        playbook="qonnect.core.migrate",
        extravars={
            "app": APP,
            "reason": "no-secret test",
            "kubeconfigs": planted.kubeconfigs,
            "kb_token_file": str(planted.federation.admin_token_file),
            "qonnect_in_process": in_process,
        },
        envvars={
            k: planted.env[k] for k in ("ANSIBLE_COLLECTIONS_PATH", "QONNECT_KB_URL", "PATH", "PYTHONPATH")
        }
        | {"ANSIBLE_NOCOLOR": "1", "QONNECT_TEST_SYSLOG": str(planted.syslog)},
        verbosity=3,
        quiet=True,
        timeout=240,
    )
    assert runner.status == "successful" and runner.rc == 0, runner.stdout.read()[-4000:]
    events = list(runner.events)
    deploy_results = [
        e["event_data"]["res"]
        for e in events
        if e.get("event") == "runner_on_ok" and e["event_data"].get("task_action") == "qonnect.core.deploy"
    ]
    assert deploy_results and "kubeconfigs" in deploy_results[0]["invocation"]["module_args"]
    assert planted.leaks(json.dumps(events)) == [], "in the job events"
    artifacts = private / "artifacts"
    files = [p for p in artifacts.rglob("*") if p.is_file()]
    assert any(p.parent.name == "job_events" for p in files)
    for path in files:
        assert planted.leaks(path.read_text(errors="replace")) == [], path.relative_to(private)
    logged = planted.logged()
    assert ("Invoked with" in logged or in_process) and planted.leaks(logged) == []


@IN_PROCESS
def test_remove_playbook_vvv_shows_no_credential(planted, in_process):
    planted.deployed()
    run = planted.playbook(
        "qonnect.core.remove",
        {"app": APP, "kubeconfigs": planted.kubeconfigs, "qonnect_in_process": in_process},
    )
    assert recap_ok(run)["changed"] >= 1, run.stdout[-3000:]
    assert_clean(planted, run, in_process)


def test_register_clusters_playbook_vvv_shows_no_credential(planted, tmp_path):
    """Registration reads each cluster's nodes; the clusters' kubeconfigs are also in
    K8S_AUTH_KUBECONFIG as YAML text, as AWX's kubeconfig credential can inject them."""
    fed = yaml.safe_load((planted.federation.dir / "testbed" / "federation.yaml").read_text())
    fed["clusters"] = fed["clusters"][:2]
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(fed))
    env = dict(planted.env, K8S_AUTH_KUBECONFIG=planted.merged_text)
    run = planted.playbook("qonnect.core.register_clusters", {"federation_file": str(path)}, env=env)
    recap_ok(run)
    assert_clean(planted, run)


def test_module_run_directly_sends_no_credential_to_syslog_or_stdout(planted, tmp_path):
    """The module as AnsiballZ runs it on a target (python -m with an args file): its invocation
    goes to syslog there, whatever the controller's callback shows."""
    args = {
        "name": "never-deployed",
        "state": "absent",
        "kubeconfigs": planted.kubeconfigs,
        "kb_url": planted.federation.kb_url,
        "kb_token": planted.secrets["KB admin token"],
    }
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    args_file.chmod(0o600)
    cmd = [sys.executable, "-m", "ansible_collections.qonnect.core.plugins.modules.deploy", str(args_file)]
    planted.forget()
    run = subprocess.run(
        cmd, env=planted.env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    result = json.loads(run.stdout)
    assert not result.get("failed"), result
    assert "kubeconfigs" in result["invocation"]["module_args"]
    assert planted.leaks(run.stdout + run.stderr) == []
    logged = planted.logged()
    assert "Invoked with" in logged and "kubeconfigs=NOT_LOGGING_PARAMETER" in logged, logged[-2000:]
    assert planted.leaks(logged) == []


def test_the_shim_records_what_syslog_gets(planted, tmp_path):
    """The syslog recorder itself works: a planted line reaches the file (no false 0 hits)."""
    probe = textwrap.dedent("""
        import syslog
        syslog.syslog(syslog.LOG_INFO, "probe-line")
    """)
    planted.forget()
    subprocess.run([sys.executable, "-c", probe], env=planted.env, check=True, timeout=30)
    assert "probe-line" in planted.logged()
