"""Issue 14.4 and 14.5: the interpreter hosts get, the cache key, the CA/TLS environment variables."""

from __future__ import annotations

import sys

import pytest
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import inventory_loader
from ansible_collections.qonnect.core.plugins.inventory import kb as kb_plugin

NAME = "qonnect.core.kb"
DATA = {
    "inventory": {
        "clusters": [{"name": "fog-1", "tier": "fog", "labels": {}, "healthy": True, "nodes": []}],
        "latency_ms": {},
        "placements": {},
    },
    "records": {},
}


@pytest.fixture
def run(tmp_path, monkeypatch):
    """run(text) -> (InventoryData, options the fetch saw); a new plugin instance per run, like
    separate ansible-inventory processes sharing one cache directory."""
    seen: list[dict] = []

    def fake_fetch(self):
        url, token = self._connection()
        seen.append(
            {
                "url": url,
                "token": token,
                "ca_path": self.get_option("ca_path"),
                "validate_certs": self._validate_certs(),
            }
        )
        return DATA

    monkeypatch.setattr(kb_plugin.InventoryModule, "fetch", fake_fetch)
    for var in (
        "QONNECT_KB_URL",
        "QONNECT_KB_TOKEN",
        "QONNECT_KB_CA_PATH",
        "QONNECT_KB_VALIDATE_CERTS",
        "QONNECT_INVENTORY_PYTHON_INTERPRETER",
    ):
        monkeypatch.delenv(var, raising=False)

    def parse(text: str) -> InventoryData:
        inventory_loader._load_config_defs(NAME, kb_plugin, kb_plugin.__file__)
        plugin = kb_plugin.InventoryModule()
        plugin._load_name = NAME
        plugin._redirected_names = [NAME]
        path = tmp_path / "fed.qonnect.yml"
        path.write_text(text)
        data = InventoryData()
        plugin.parse(data, DataLoader(), str(path), cache=True)
        if plugin.get_option("cache"):
            plugin.set_cache_plugin()  # what ansible-inventory does at the end of a run
        data.reconcile_inventory()
        return data

    parse.seen = seen
    return parse


def test_hosts_run_modules_with_the_python_that_runs_ansible(run):
    inv = run("plugin: qonnect.core.kb\nurl: http://127.0.0.1:1\n")
    hv = inv.get_host("fog-1").get_vars()
    assert hv["ansible_python_interpreter"] == sys.executable
    assert hv["ansible_connection"] == "local"


def test_interpreter_is_overridable_by_option_and_environment(run, monkeypatch):
    inv = run("plugin: qonnect.core.kb\nurl: http://127.0.0.1:1\npython_interpreter: auto_silent\n")
    assert inv.get_host("fog-1").get_vars()["ansible_python_interpreter"] == "auto_silent"
    monkeypatch.setenv("QONNECT_INVENTORY_PYTHON_INTERPRETER", "/opt/py/bin/python3")
    inv = run("plugin: qonnect.core.kb\nurl: http://127.0.0.1:1\n")
    assert inv.get_host("fog-1").get_vars()["ansible_python_interpreter"] == "/opt/py/bin/python3"


def test_cache_key_includes_url_and_token_identity_never_the_token(run, tmp_path):
    cache_dir = tmp_path / "cache"
    conf = (
        "plugin: qonnect.core.kb\nurl: {url}\ntoken: {token}\ncache: true\n"
        f"cache_plugin: jsonfile\ncache_connection: {cache_dir}\ncache_timeout: 600\n"
    )
    run(conf.format(url="http://127.0.0.1:1", token="reader-AAAA"))
    run(conf.format(url="http://127.0.0.1:1", token="reader-AAAA"))
    assert len(run.seen) == 1  # same KB and token: the cache answers
    run(conf.format(url="http://127.0.0.1:1", token="admin-BBBB"))
    assert len(run.seen) == 2  # another token: its own fetch, never the other token's inventory
    run(conf.format(url="http://127.0.0.2:1", token="reader-AAAA"))
    assert len(run.seen) == 3  # another KB
    files = list(cache_dir.iterdir())
    assert len(files) == 3
    for f in files:
        assert "AAAA" not in f.name + f.read_text() and "BBBB" not in f.name + f.read_text()


def test_ca_path_and_validate_certs_from_environment(run, monkeypatch, tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    monkeypatch.setenv("QONNECT_KB_URL", "https://kb.example.org:8443")
    monkeypatch.setenv("QONNECT_KB_CA_PATH", str(ca))
    monkeypatch.setenv("QONNECT_KB_VALIDATE_CERTS", "false")
    run("plugin: qonnect.core.kb\n")
    assert run.seen[-1] == {
        "url": "https://kb.example.org:8443",
        "token": None,
        "ca_path": str(ca),
        "validate_certs": False,
    }
