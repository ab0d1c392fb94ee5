"""The deploy action on the controller runs the module's runner in the task's own process
(plugins/action/deploy.py): the same options, results, errors and masking as the module run in
its own process, which ``qonnect_in_process: false`` still chooses (issue 38: a ``loop`` of
deploys paid the Kubernetes client's import once per item).

Real ``ansible-playbook`` against the paper federation; the clusters are read back through
their kubeconfigs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible_federation import recap
from support.specs import application, deployment

pytestmark = pytest.mark.timeout(300)


def one_deployment(name: str, cpu: str = "50m") -> dict:
    return application(
        name,
        [{"name": "web", "manifests": [deployment(name, 1, "nginx:1.27", cpu, memory="32Mi")]}],
        objective={"energy": 1, "cost": 1},
    )


def loop_play(folder: Path, files: list[str], out: Path, **task: object) -> Path:
    """A play deploying ``files`` with a loop, its registered results written to ``out``."""
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "module_defaults": {"group/qonnect.core.kb": {"kb_token": "{{ lookup('file', kb_token_file) }}"}},
            "tasks": [
                {
                    "name": "deploy each",
                    "qonnect.core.deploy": {"src": "{{ item }}", "min_ready_seconds": 0, **task},
                    "loop": files,
                    "register": "deployed",
                    "ignore_errors": True,
                },
                {"ansible.builtin.copy": {"content": "{{ deployed | to_json }}", "dest": str(out)}},
            ],
        }
    ]
    path = folder / f"play-{out.stem}.yml"
    path.write_text(yaml.safe_dump(play))
    return path


def results(out: Path) -> list[dict]:
    return json.loads(out.read_text())["results"]


def test_a_loop_deploys_in_process_as_the_module_does(federation, k8s, tmp_path):
    names = [f"inproc-{i}" for i in range(3)]
    files = []
    for name in names:
        path = tmp_path / f"{name}.yml"
        path.write_text(yaml.safe_dump(one_deployment(name)))
        files.append(str(path))

    first = tmp_path / "first.json"
    run = federation.playbook(str(loop_play(tmp_path, files, first)), "-vvv")
    assert run.returncode == 0, run.stdout + run.stderr
    assert recap(run)["failed"] == 0
    made = results(first)
    assert [r["changed"] for r in made] == [True, True, True], made
    # in the task's process: no module file was sent and started (-vvv shows each AnsiballZ)
    assert "AnsiballZ_deploy.py" not in run.stdout
    assert all(r["invocation"]["module_args"]["src"] == f for r, f in zip(made, files, strict=True))
    for name, r in zip(names, made, strict=True):
        cluster = r["plan"]["services"]["web"][0]["cluster"]
        _core, apps = k8s(cluster)
        assert apps.read_namespaced_deployment(name, name).spec.replicas == 1

    # unchanged: the module in its own process, then in-process again, both say nothing changed
    module_run = tmp_path / "module.json"
    run = federation.playbook(
        str(loop_play(tmp_path, files, module_run)), "-vvv", "-e", "qonnect_in_process=false"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    by_module = results(module_run)
    assert [r["changed"] for r in by_module] == [False, False, False], by_module
    assert run.stdout.count("AnsiballZ_deploy.py") >= 3  # one module process per item

    again = tmp_path / "again.json"
    run = federation.playbook(str(loop_play(tmp_path, files, again)))
    assert run.returncode == 0, run.stdout + run.stderr
    in_process = results(again)
    assert [r["changed"] for r in in_process] == [False, False, False], in_process
    for a, b in zip(by_module, in_process, strict=True):
        assert a["plan"]["services"] == b["plan"]["services"]

    # the same application, deleted from its cluster, is restored by an in-process deploy
    cluster = in_process[0]["plan"]["services"]["web"][0]["cluster"]
    _core, apps = k8s(cluster)
    apps.delete_namespaced_deployment(names[0], names[0])
    healed = tmp_path / "healed.json"
    run = federation.playbook(str(loop_play(tmp_path, files[:1], healed)))
    assert run.returncode == 0, run.stdout + run.stderr
    assert results(healed)[0]["changed"] is True
    assert apps.read_namespaced_deployment(names[0], names[0]).metadata.name == names[0]


@pytest.mark.parametrize(
    ("how", "in_process"),
    [([], True), (["-e", "qonnect_in_process=false"], False), (["-e", "with_env=1"], False)],
    # with_env: the task sets an environment, which the module's process would have
    ids=["in-process", "module-asked", "module-task-environment"],
)
def test_bad_input_fails_the_same_way_in_either_process(federation, tmp_path, how, in_process):
    bad = one_deployment("inproc-bad", cpu="lots")
    bad["spec"]["services"][0]["replicas"] = -1
    path = tmp_path / "bad.yml"
    path.write_text(yaml.safe_dump(bad))
    environment = {"environment": {"QONNECT_UNUSED": "1"}} if "with_env=1" in how else {}

    out = tmp_path / "unsupported.json"
    run = federation.playbook(str(loop_play(tmp_path, [str(path)], out, no_such_option=1)), "-vvv", *how)
    assert run.returncode == 0, run.stdout + run.stderr  # ignore_errors: the result is read
    unsupported = results(out)[0]
    assert unsupported["failed"] is True
    assert unsupported["msg"].startswith(
        "Unsupported parameters for (qonnect.core.deploy) module: no_such_option"
    )

    out = tmp_path / "bad-spec.json"
    play = loop_play(tmp_path, [str(path)], out)
    doc = yaml.safe_load(play.read_text())
    doc[0]["tasks"][0].update(environment)
    play.write_text(yaml.safe_dump(doc))
    run = federation.playbook(str(play), "-vvv", *how)
    assert ("AnsiballZ_deploy.py" not in run.stdout) is in_process, run.stdout[-3000:]
    failed = results(out)[0]
    assert failed["failed"] is True
    # every problem at once, each named by its path, and no traceback
    assert "spec.services[0].replicas" in failed["msg"], failed["msg"]
    assert "resources.requests.cpu" in failed["msg"], failed["msg"]
    assert "Traceback" not in run.stdout + run.stderr
    assert "inproc-bad" not in [a["name"] for a in federation.kb().list_applications()]
