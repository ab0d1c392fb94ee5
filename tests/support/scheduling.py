"""How the suite is spread over pytest-xdist workers: groups that keep a stack's tests together,
the slowest groups first.

Every test has a scheduling group: its file by default (module-scoped stacks stay on one worker),
or the name a module gives with ``pytestmark = pytest.mark.xdist_group(...)`` when several files
share one session stack (the real engine's `tiers` federation). A test parametrized by a session-
or module-scoped engine also carries that engine (``conformance[kube]``), so the emulator half and
the real control planes' half run on different workers at the same time.

xdist's own ``loadgroup`` puts the group into the node id, which pytest 9.2 no longer allows, so
with ``--dist loadgroup`` this plugin installs its own scheduler: each worker writes the groups it
collected to a file the controller named, and the controller hands whole groups to workers, in
collection order. The collection is sorted by each group's measured seconds (tests/durations.json,
longest first), so the long real-engine and healing groups start at once and the short ones fill
in at the end (the longest-processing-time rule). A group the file does not name counts as a
minute. ``--write-group-durations FILE`` records a run's seconds per group for the next run; a
stale file only costs speed, never a test.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
UNKNOWN_SECONDS = 60.0
# Parameters whose value selects a whole stack (one per engine): their tests form a group per value.
STACK_PARAMS = ("engine", "fleet")
GROUPS_KEY = "qonnect_groups_dir"


def group_of(item: pytest.Item) -> str:
    """The scheduling group of a test: the module's declared group or its file, plus its engine."""
    marker = item.get_closest_marker("xdist_group")
    base = str(marker.args[0]) if marker and marker.args else item.nodeid.split("::", 1)[0]
    callspec: Any = getattr(item, "callspec", None)
    engines = [str(callspec.params[p]) for p in STACK_PARAMS if callspec and p in callspec.params]
    return f"{base}[{','.join(engines)}]" if engines else base


def read_groups(directory: Path) -> dict[str, str]:
    """Node id -> group, as the workers wrote them."""
    groups: dict[str, str] = {}
    for path in sorted(directory.glob("*.json")):
        groups.update(json.loads(path.read_text()))
    return groups


class GroupScheduling(LoadScopeScheduling):
    """xdist's scope scheduler with our groups as its scopes (a group never spans two workers)."""

    def __init__(self, config: pytest.Config, log: Any, directory: Path) -> None:
        super().__init__(config, log)
        self.directory = directory
        self.groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self.groups is None:  # first called once every worker has sent its collection
            self.groups = read_groups(self.directory)
        return self.groups.get(nodeid) or nodeid.split("::", 1)[0]


class Scheduling:
    """Registered by tests/conftest.py: groups at collection, the order, the recorded seconds."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = defaultdict(float)
        self.groups: dict[str, str] = {}
        self.directory: Path | None = None
        workerinput = getattr(config, "workerinput", None)
        if workerinput is not None and workerinput.get(GROUPS_KEY):
            self.directory = Path(workerinput[GROUPS_KEY])
        elif (
            workerinput is None
            and config.getoption("dist", "no") == "loadgroup"
            and config.getoption("numprocesses", None)
        ):
            self.directory = Path(tempfile.mkdtemp(prefix="qonnect-groups-"))

    # -- the controller ---------------------------------------------------------------------------

    def pytest_configure_node(self, node: Any) -> None:
        """Tell each worker where to write its groups."""
        if self.directory is not None:
            node.workerinput[GROUPS_KEY] = str(self.directory)

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if self.directory is None:
            return None
        return GroupScheduling(config, log, self.directory)

    # -- every process that collects ----------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Longest groups first, each group's tests kept in pytest's own (fixture-scoped) order.

        After every modifyitems hook (pytest's fixture-scope ordering included) and before xdist's
        worker sends its collection to the controller."""
        self.groups = {item.nodeid: group_of(item) for item in session.items}
        known = _read(DURATIONS)
        first: dict[str, int] = {}
        for index, item in enumerate(session.items):
            first.setdefault(self.groups[item.nodeid], index)

        def key(pair: tuple[int, pytest.Item]) -> tuple[float, int, int]:
            group = self.groups[pair[1].nodeid]
            return (-known.get(group, UNKNOWN_SECONDS), first[group], pair[0])

        session.items[:] = [item for _i, item in sorted(enumerate(session.items), key=key)]
        if self.directory is not None and hasattr(self.config, "workerinput"):
            worker = self.config.workerinput["workerid"]
            (self.directory / f"{worker}.json").write_text(json.dumps(self.groups))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.groups and self.directory is not None:
            self.groups = read_groups(self.directory)
        self.seconds[self.groups.get(report.nodeid) or report.nodeid.split("::", 1)[0]] += report.duration

    def pytest_sessionfinish(self) -> None:
        target = self.config.getoption("write_group_durations")
        if target and not hasattr(self.config, "workerinput"):  # the controller, or a serial run
            ordered = dict(sorted(((g, round(s, 1)) for g, s in self.seconds.items()), key=lambda p: -p[1]))
            Path(target).write_text(json.dumps(ordered, indent=1) + "\n")

    def pytest_unconfigure(self) -> None:
        if self.directory is not None and not hasattr(self.config, "workerinput"):
            shutil.rmtree(self.directory, ignore_errors=True)


def _read(path: Path) -> dict[str, float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}
