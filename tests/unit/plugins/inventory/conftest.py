"""Load qonnect.core.kb as ansible's plugin loader would, without installing its collection finder.

Other suites in the same pytest process import the collection as a plain package, so the
plugin's option definitions are registered directly from its DOCUMENTATION.
"""

from __future__ import annotations

import pytest
from ansible.inventory.data import InventoryData
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import inventory_loader
from ansible_collections.qonnect.core.plugins.inventory import kb as kb_plugin

NAME = "qonnect.core.kb"


@pytest.fixture
def plugin():
    inventory_loader._load_config_defs(NAME, kb_plugin, kb_plugin.__file__)
    instance = kb_plugin.InventoryModule()
    instance._load_name = NAME
    instance._redirected_names = [NAME]
    return instance


@pytest.fixture
def parse(plugin, tmp_path):
    """parse(text, name, cache) -> the InventoryData the plugin filled from a config file."""

    def run(text: str, name: str = "fed.qonnect.yml", cache: bool = False) -> InventoryData:
        path = tmp_path / name
        path.write_text(text)
        data = InventoryData()
        plugin.parse(data, DataLoader(), str(path), cache=cache)
        data.reconcile_inventory()
        return data

    return run
