"""Issue 34.8: every ``ansible-playbook qonnect.core.PLAYBOOK -e VAR=...`` the README, the docs
and the examples show names a variable that playbook takes (``-e spec=`` was shown for deploy,
which reads ``app_file``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
COMMAND = re.compile(r"ansible-playbook\s+qonnect\.core\.(\w+)((?:\s+-e\s+\w+=\S+)+)")


def documented_variables(playbook: str) -> set[str]:
    """The variables a playbook's header comment lists (``#   name   description``)."""
    text = (ROOT / "playbooks" / f"{playbook}.yml").read_text()
    names = set(re.findall(r"^#\s{2,}(\w+)\s", text, re.M))
    names |= set(re.findall(r"-e (\w+)=", text))  # its own usage lines
    return names


def test_every_example_command_uses_variables_the_playbook_takes():
    files = [ROOT / "README.md", *ROOT.glob("docs/**/*.md"), *ROOT.glob("examples/**/*.yml")]
    seen = 0
    wrong = []
    for path in files:
        for playbook, options in COMMAND.findall(path.read_text()):
            for var in re.findall(r"-e\s+(\w+)=", options):
                seen += 1
                if var not in documented_variables(playbook):
                    wrong.append(f"{path.relative_to(ROOT)}: qonnect.core.{playbook} -e {var}=")
    assert seen >= 5 and wrong == []
