"""Issue 14.4, 14.5 and the reader-token error: the collection as AWX runs it.

AWX hands credentials to a job only as injected environment variables and files. These tests
render the credential types shipped in docs/awx/ (and AWX's own Kubernetes bearer-token type)
the way AWX does, then run ansible-playbook / ansible-inventory with exactly that environment
(plus PATH, HOME and the collections path an execution environment has) against a KB served
over HTTPS by its own CA and testbed clusters whose kubeconfig paths do not exist on the
"execution node".
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import jinja2.sandbox
import pytest
import support
import yaml
from support.specs import application, deployment
from user_path_support import ROOT, tool

DOCS = ROOT / "docs" / "awx"
COLLECTIONS = ROOT / ".venv" / "collections"
# AWX's built-in "OpenShift or Kubernetes API Bearer Token" credential type (awx/main/models/credential)
AWX_KUBERNETES = {
    "injectors": {
        "file": {"template": "{{ ssl_ca_cert }}"},
        "env": {
            "K8S_AUTH_HOST": "{{ host }}",
            "K8S_AUTH_API_KEY": "{{ bearer_token }}",
            "K8S_AUTH_VERIFY_SSL": "{{ verify_ssl }}",
            "K8S_AUTH_SSL_CA_CERT": "{{ tower.filename }}",
        },
    },
}
APP = application(
    "awxdemo",
    [
        {
            "name": name,
            "tier": tier,
            "manifests": [deployment(name, 1, image, "100m", memory="64Mi", container=name)],
        }
        for name, tier, image in (
            ("web", "cloud", "docker.io/library/nginx:1.27"),
            ("cache", "edge", "docker.io/library/redis:7.4"),
        )
    ],
    objective={"energy": 1.0},
)


def inject(credential_type: dict, inputs: dict, where: Path) -> dict[str, str]:
    """The environment AWX injects for one credential: file templates become 0600 files."""
    env_jinja = jinja2.sandbox.ImmutableSandboxedEnvironment(undefined=jinja2.StrictUndefined)
    injectors = credential_type["injectors"]
    files = injectors.get("file") or {}
    where.mkdir(parents=True, exist_ok=True)
    names: dict[str, str] = {}
    for key, template in files.items():
        path = where / f"awx-{key.replace('.', '-')}"
        path.write_text(env_jinja.from_string(template).render(**inputs))
        path.chmod(0o600)
        names[key.split(".", 1)[1] if "." in key else ""] = str(path)
    tower = {"filename": names[""] if list(names) == [""] else names}
    return {k: env_jinja.from_string(v).render(tower=tower, **inputs) for k, v in injectors["env"].items()}


def base_env(home: Path) -> dict[str, str]:
    """What an execution environment has besides the credentials: tools, a home, the collection."""
    return {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "LC_ALL": "C.UTF-8",
        "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS),
        "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
        "ANSIBLE_HOST_KEY_CHECKING": "false",
    }


def kb_credential(
    stack, tmp_path: Path, token: str, ca: bool = True, validate: bool = True
) -> dict[str, str]:
    credential_type = yaml.safe_load((DOCS / "credential-type-qonnect-kb.yml").read_text())
    inputs = {
        "kb_url": stack.url,
        "kb_token": token,
        "kb_ca_cert": stack.ca.read_text() if ca else "",
        "kb_insecure_skip_verify": not validate,
    }
    return inject(credential_type, inputs, tmp_path / "kb-cred")


def k8s_credential(kubeconfig: dict, tmp_path: Path) -> dict[str, str]:
    """What AWX's own Kubernetes bearer-token credential injects for the kubeconfig's cluster."""
    cluster = kubeconfig["clusters"][0]["cluster"]
    inputs = {
        "host": cluster["server"],
        "bearer_token": kubeconfig["users"][0]["user"]["token"],
        "verify_ssl": True,
        "ssl_ca_cert": base64.b64decode(cluster["certificate-authority-data"]).decode(),
    }
    return inject(AWX_KUBERNETES, inputs, tmp_path / "k8s-cred")


def play(tmp_path: Path, env: dict, text: str, *args: str) -> subprocess.CompletedProcess:
    book = tmp_path / "play.yml"
    book.write_text(textwrap.dedent(text))
    return support.run(
        [tool("ansible-playbook"), str(book), *args], env=env, cwd=tmp_path, timeout=300, check=False
    )


CLUSTER_INFO = """
    - hosts: localhost
      gather_facts: false
      tasks:
        - qonnect.core.cluster_info: {}
          register: info
        - ansible.builtin.copy:
            content: "{{ info | to_json }}"
            dest: "{{ playbook_dir }}/out.json"
            mode: "0600"
"""


def test_kb_credential_type_drives_the_modules(stack, tmp_path):
    env = base_env(tmp_path) | kb_credential(stack, tmp_path, stack.admin)
    run = play(tmp_path, env, CLUSTER_INFO)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    info = json.loads((tmp_path / "out.json").read_text())
    assert sorted(c["name"] for c in info["clusters"]) == sorted(stack.clusters)
    assert stack.admin not in run.stdout + run.stderr


def test_kb_ca_from_the_credential_is_what_verifies_the_kb(stack, tmp_path):
    """Without the CA the same run fails on the certificate; with validation off it passes."""
    env = base_env(tmp_path) | kb_credential(stack, tmp_path, stack.admin, ca=False)
    assert env["QONNECT_KB_CA_PATH"] == ""
    run = play(tmp_path, env, CLUSTER_INFO)
    assert run.returncode != 0 and "CERTIFICATE_VERIFY_FAILED" in run.stdout + run.stderr
    env = base_env(tmp_path) | kb_credential(stack, tmp_path, stack.admin, ca=False, validate=False)
    run = play(tmp_path, env, CLUSTER_INFO)
    assert run.returncode == 0, run.stdout[-3000:]


def inventory_file(tmp_path: Path) -> Path:
    path = tmp_path / "federation.qonnect.yml"
    path.write_text("plugin: qonnect.core.kb\n")
    return path


def plain(value):
    """ansible-inventory --list writes inventory-sourced strings as {"__ansible_unsafe": value}."""
    return value.get("__ansible_unsafe") if isinstance(value, dict) else value


def test_kb_credential_type_drives_the_inventory_plugin(stack, tmp_path):
    env = (
        base_env(tmp_path)
        | kb_credential(stack, tmp_path, stack.reader)
        | {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"}
    )
    run = support.run(
        [tool("ansible-inventory"), "-i", str(inventory_file(tmp_path)), "--list"],
        env=env,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    hostvars = json.loads(run.stdout)["_meta"]["hostvars"]
    assert sorted(hostvars) == sorted(stack.clusters)
    assert {plain(hv["ansible_python_interpreter"]) for hv in hostvars.values()} == {sys.executable}
    assert all(hv.get("kubeconfig") is None for hv in hostvars.values())  # reader: no credentials


def test_unreachable_kb_fails_the_inventory_only_when_asked(tmp_path):
    """What the plugin documents about ANSIBLE_INVENTORY_UNPARSED_FAILED."""
    env = base_env(tmp_path) | {"QONNECT_KB_URL": "http://127.0.0.1:9", "QONNECT_KB_TOKEN": "x"}
    cmd = [tool("ansible-inventory"), "-i", str(inventory_file(tmp_path)), "--list"]
    lenient = support.run(cmd, env=env, timeout=120, check=False)
    assert lenient.returncode == 0 and "KB unreachable" in lenient.stderr
    strict = support.run(
        cmd, env=env | {"ANSIBLE_INVENTORY_UNPARSED_FAILED": "true"}, timeout=120, check=False
    )
    assert strict.returncode != 0 and "KB unreachable" in strict.stderr


def test_play_on_a_tier_group_runs_modules_with_the_collections_python(stack, tmp_path):
    """Issue 14.4: hosts of group fog run qonnect modules with the Python that has their packages
    (the discovered /usr/bin/python3 has no kubernetes client)."""
    env = base_env(tmp_path) | kb_credential(stack, tmp_path, stack.admin)
    run = play(
        tmp_path,
        env,
        """
        - hosts: fog
          gather_facts: false
          tasks:
            - name: Read the cluster's nodes through its kubeconfig (needs the kubernetes package)
              qonnect.core.cluster:
                name: "{{ inventory_hostname }}"
                tier: "{{ tier }}"
                kubeconfig: "{{ kubeconfig }}"
                gather_nodes: true
              check_mode: true  # read the nodes, leave the KB record as it is
              register: gathered
            - ansible.builtin.assert:
                that: gathered.nodes | length > 0
    """,
        "-i",
        str(inventory_file(tmp_path)),
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "fog-1" in run.stdout and "failed=0" in run.stdout


def kubeconfig_of(stack, name: str) -> dict:
    return yaml.safe_load(Path(stack.clusters[name]["kubeconfig"]).read_text())


@pytest.fixture
def hidden_kubeconfigs(stack, tmp_path):
    """The KB's kubeconfig paths point nowhere, as on an AWX execution node; afterwards they are
    restored and the test application is removed through them."""
    kb = stack.kb()
    for name in stack.clusters:
        kb.update_cluster(name, {"kubeconfig": f"/nonexistent/{name}.yaml"})
    yield
    for name, c in stack.clusters.items():
        kb.update_cluster(name, {"kubeconfig": c["kubeconfig"]})
    env = base_env(tmp_path) | kb_credential(stack, tmp_path / "cleanup", stack.admin)
    play(
        tmp_path,
        env,
        """
        - hosts: localhost
          gather_facts: false
          tasks:
            - qonnect.core.deploy: {name: awxdemo, state: absent}
    """,
    )


def deployments(stack, cluster: str, namespace: str = "awxdemo") -> list[str]:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=stack.clusters[cluster]["kubeconfig"])
    return sorted(d.metadata.name for d in client.AppsV1Api(api).list_namespaced_deployment(namespace).items)


def cluster_of(tier: str, stack) -> str:
    return next(n for n, c in stack.clusters.items() if c["tier"] == tier)


def test_kubeconfig_credential_type_deploys_with_the_shipped_playbook(stack, tmp_path, hidden_kubeconfigs):
    """docs/awx/credential-type-qonnect-kubeconfig.yml: one kubeconfig, a context per cluster."""
    merged: dict = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for name in stack.clusters:
        doc = kubeconfig_of(stack, name)
        for key in ("clusters", "users", "contexts"):
            merged[key] += doc[key]
    credential_type = yaml.safe_load((DOCS / "credential-type-qonnect-kubeconfig.yml").read_text())
    env = (
        base_env(tmp_path)
        | kb_credential(stack, tmp_path, stack.admin)
        | inject(credential_type, {"kubeconfig": yaml.safe_dump(merged)}, tmp_path / "k8s-cred")
    )
    app_file = tmp_path / "specs" / "awxdemo.yml"  # outside the checkout, absolute
    app_file.parent.mkdir()
    app_file.write_text(yaml.safe_dump(APP))
    run = support.run(
        [tool("ansible-playbook"), "qonnect.core.deploy", "-e", f"app_file={app_file}"],
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert deployments(stack, cluster_of("cloud", stack)) == ["web"]
    assert deployments(stack, cluster_of("edge", stack)) == ["cache"]
    assert "qkb_" not in run.stdout + run.stderr


def test_awx_kubernetes_bearer_token_credential_deploys(stack, tmp_path, hidden_kubeconfigs):
    """AWX's own Kubernetes credential (K8S_AUTH_HOST/API_KEY/SSL_CA_CERT/VERIFY_SSL) for one
    cluster, a kubeconfig passed through the shipped playbook's `kubeconfigs` for the other."""
    cloud, edge = cluster_of("cloud", stack), cluster_of("edge", stack)
    doc = kubeconfig_of(stack, cloud)
    env = base_env(tmp_path) | kb_credential(stack, tmp_path, stack.admin) | k8s_credential(doc, tmp_path)
    app_file = tmp_path / "awxdemo.yml"
    app_file.write_text(yaml.safe_dump(APP))
    extra = json.dumps({"app_file": str(app_file), "kubeconfigs": {edge: stack.clusters[edge]["kubeconfig"]}})
    run = support.run(
        [tool("ansible-playbook"), "qonnect.core.deploy", "-e", extra],
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert deployments(stack, cloud) == ["web"] and deployments(stack, edge) == ["cache"]
    assert doc["users"][0]["user"]["token"] not in run.stdout + run.stderr


def test_reader_token_gets_an_error_that_says_why(stack, tmp_path):
    """A reader token sees no kubeconfig paths: the error names the token's limits, not the cluster."""
    cloud = cluster_of("cloud", stack)
    env = base_env(tmp_path) | kb_credential(stack, tmp_path, stack.reader)
    spec = json.dumps(APP["spec"]["services"][0:1])
    run = play(
        tmp_path,
        env,
        f"""
        - hosts: localhost
          gather_facts: false
          tasks:
            - qonnect.core.deploy:
                spec: {{apiVersion: qonnect.io/v1, kind: Application, metadata: {{name: awxdemo}},
                        spec: {{services: {spec}}}}}
                plan: {{services: {{web: [{{cluster: {cloud}, replicas: 1}}]}}}}
                record: false
    """,
    )
    assert run.returncode != 0
    assert f"cluster {cloud}: the KB token may not read kubeconfig paths" in run.stdout, run.stdout[-3000:]
    assert "no kubeconfig (register it" not in run.stdout


def test_awx_kubernetes_credential_reads_a_cluster_for_registration(stack, tmp_path):
    """qonnect.core.cluster with gather_nodes reads the cluster through AWX's own Kubernetes
    credential (K8S_AUTH_* in the environment, no kubeconfig path) and takes its tier from it."""
    edge = cluster_of("edge", stack)
    doc = kubeconfig_of(stack, edge)
    env = base_env(tmp_path) | kb_credential(stack, tmp_path, stack.admin) | k8s_credential(doc, tmp_path)
    args = json.dumps({"name": "awx-probe", "gather_nodes": True})
    run = support.run(
        [tool("ansible"), "localhost", "-m", "qonnect.core.cluster", "-a", args, "--check"],
        env=env,
        cwd=tmp_path,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert '"tier": "edge"' in run.stdout and f"{edge}-" in run.stdout  # its nodes, read with the credential
    assert doc["users"][0]["user"]["token"] not in run.stdout + run.stderr
