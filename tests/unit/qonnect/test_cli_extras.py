"""Each service's dependencies come with its package extra; a missing one is named, with the
pip command that brings it, instead of a traceback."""

from __future__ import annotations

import importlib

import pytest
from qonnect import cli
from qonnect.errors import UserError


def missing(monkeypatch, module: str, dependency: str) -> None:
    """Importing ``module`` through the CLI fails as if ``dependency`` were not installed."""
    real = importlib.import_module

    def import_module(name, *args):
        if name == module:
            raise ModuleNotFoundError(f"No module named '{dependency}'", name=dependency)
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", import_module)


def test_user_error_has_one_home():
    assert cli.UserError is UserError


@pytest.mark.parametrize(
    ("command", "module", "hint"),
    [
        ("kb", "qonnect.kb.cli", "pip install 'qonnect[kb]'"),
        ("testbed", "qonnect_testbed.cli", "pip install qonnect-testbed"),
        ("controller", "qonnect.controller.cli", "pip install 'qonnect[controller]'"),
    ],
)
def test_a_missing_extra_is_named(monkeypatch, capsys, command, module, hint):
    missing(monkeypatch, module, "somedep")
    assert cli.main([command, "--help"]) == 2
    err = capsys.readouterr().err
    assert f"qonnect {command} needs the Python package 'somedep'" in err
    assert hint in err
    assert "Traceback" not in err


def test_a_missing_testbed_distribution_is_named(monkeypatch, capsys):
    missing(monkeypatch, "qonnect_testbed.cli", "qonnect_testbed")
    assert cli.main(["testbed", "--help"]) == 2
    err = capsys.readouterr().err
    assert "qonnect testbed needs the Python package 'qonnect_testbed'" in err
    assert "pip install qonnect-testbed" in err


def test_help_lists_a_component_whose_extra_is_missing(monkeypatch, capsys):
    missing(monkeypatch, "qonnect.kb.cli", "fastapi")
    with pytest.raises(SystemExit) as stop:
        cli.main(["--help"])
    assert stop.value.code == 0
    assert "pip install 'qonnect[kb]'" in capsys.readouterr().out


def test_a_bug_in_our_own_code_is_not_reported_as_a_missing_extra(monkeypatch):
    real = importlib.import_module

    def import_module(name, *args):
        if name == "qonnect.kb.cli":
            raise ModuleNotFoundError("No module named 'qonnect.kb.gone'", name="qonnect.kb.gone")
        return real(name, *args)

    monkeypatch.setattr(cli.importlib, "import_module", import_module)
    with pytest.raises(ModuleNotFoundError):
        cli.main(["kb", "--help"])


def test_extras_cover_every_component():
    from pathlib import Path

    import tomllib

    pyproject = tomllib.loads((Path(cli.__file__).parents[1] / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    named = {h.split("[")[1].split("]")[0] for h in cli.INSTALL_HINTS.values() if "qonnect[" in h}
    assert named <= set(extras)
    assert set(cli.INSTALL_HINTS) == set(cli.COMPONENTS) - {
        "status",
        "plan",
        "history",
        "rollback",
        "survivability",
    }
    base = " ".join(pyproject["project"]["dependencies"])
    for server_only in ("fastapi", "uvicorn", "psycopg", "pysyncobj", "aiohttp", "kubernetes-validate"):
        assert server_only not in base, f"{server_only} belongs in an extra, not the base install"


def test_the_product_package_ships_no_test_clusters():
    """The testbed is its own distribution: the qonnect package holds the services only."""
    from pathlib import Path

    import setuptools
    import tomllib

    services = Path(cli.__file__).parents[1]
    pyproject = tomllib.loads((services / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = setuptools.find_packages(str(services), include=include)
    assert "qonnect.controller" in packages
    assert not [p for p in packages if "testbed" in p], "the emulator ships in the product package"
    for dependency in ("aiohttp", "cryptography", "kubernetes-validate"):
        assert not any(
            dependency in d for e in pyproject["project"]["optional-dependencies"].values() for d in e
        )
