"""The suite's split over two pytest-xdist workers (docs/ci.md, "keeping its budget").

Most of the suite's wall time is live tests waiting on broker timers, not CPU, so two workers
run it (`-n 2 --dist loadgroup` in pyproject's addopts). Each worker computes every test's group
at collection (`module_groups`, from tests/conftest.py's `pytest_collection_modifyitems`, so a
new test lands in its group without a mark) and writes it to the run's `SuiteSplit` directory;
the controller's scheduler (`SuiteSplit.scheduler`, in place of xdist's loadgroup one) gives each
group to one worker. A whole test module is in one group:

- `live`: a module with any test that uses the session's shared brokers, cluster or container
  engine (`LIVE_FIXTURES`, directly or through another fixture): one worker owns every shared
  broker, the `GROUP_REPLAY_MAX_BROKERS` cap holds for all of them and no spec starts twice;
- `spark`: else a module with any Spark test (the `spark` mark or a `spark` fixture): one Spark
  session (tests/support/spark.py) for all of them;
- else the module itself: its module-scoped fixtures run once, as without xdist.

Not xdist's own `xdist_group` marks: xdist 3.8 carries the group in the node id, which pytest 9.2
no longer lets it change (pytest-dev/pytest-xdist#1386), and loadgroup then silently schedules
test by test.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

LIVE_GROUP = "live"
SPARK_GROUP = "spark"
# Session-scoped fixtures that start brokers, a cluster or a container engine: every module that
# reaches one of them runs in the `live` worker.
LIVE_FIXTURES = frozenset({"broker_factory", "kafka_cluster", "container_engine"})


def _module_group(module: str, items: list[pytest.Item]) -> str:
    names = [set(getattr(item, "fixturenames", ())) for item in items]
    if any(LIVE_FIXTURES & n for n in names):
        return LIVE_GROUP
    if any(item.get_closest_marker("spark") or "spark" in n for item, n in zip(items, names, strict=True)):
        return SPARK_GROUP
    return module


def module_groups(items: list[pytest.Item]) -> dict[str, str]:
    """Every test's node id -> its group (see the module docstring)."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    return {
        item.nodeid: _module_group(module, members) for module, members in modules.items() for item in members
    }


@dataclass
class SuiteSplit:
    """The run's groups, shared between the workers (which write them) and the controller."""

    directory: Path
    _groups: dict[str, str] | None = None

    def write(self, worker: str, groups: dict[str, str]) -> None:
        (self.directory / f"{worker}.json").write_text(json.dumps(groups), encoding="utf-8")

    def group(self, nodeid: str) -> str:
        if self._groups is None:  # every worker has written its file before it reports its collection
            self._groups = {}
            for path in sorted(self.directory.glob("*.json")):
                self._groups.update(json.loads(path.read_text(encoding="utf-8")))
        return self._groups.get(nodeid, nodeid)

    def scheduler(self, config: pytest.Config, log: Any) -> Any:
        """xdist's load-scope scheduling with these groups as its scopes (the largest first)."""
        from xdist.scheduler import LoadScopeScheduling

        split = self

        class SuiteSplitScheduling(LoadScopeScheduling):  # type: ignore[misc]
            def _split_scope(self, nodeid: str) -> str:
                return split.group(nodeid)

        return SuiteSplitScheduling(config, log)


@dataclass
class WorkerBusy:
    """One xdist worker's time in tests (setup, call and teardown), from its reports."""

    tests: int = 0
    busy_s: float = 0.0
    first: float | None = None
    last: float = 0.0
    by_group: Counter[str] = field(default_factory=Counter)

    def add(self, report: pytest.TestReport, group: str) -> None:
        self.busy_s += report.duration
        self.by_group[group] += report.duration
        self.first = report.start if self.first is None else min(self.first, report.start)
        self.last = max(self.last, report.stop)
        if report.when == "teardown":
            self.tests += 1

    def line(self, name: str, session_start: float) -> str:
        first = (self.first or session_start) - session_start
        groups = ", ".join(f"{g} {s:.0f} s" for g, s in self.by_group.most_common(4))
        more = len(self.by_group) - 4
        rest = f" and {more} more" if more > 0 else ""
        return (
            f"{name}: {self.tests} tests, busy {self.busy_s:.0f} s, from +{first:.0f} s to "
            f"+{self.last - session_start:.0f} s ({groups}{rest})"
        )


def groups_on_several_workers(workers: dict[str, WorkerBusy]) -> list[str]:
    """Groups whose tests ran on more than one worker: none, unless the split is broken (as
    xdist's loadgroup was under pytest 9.2) or a worker crashed and its tests went elsewhere."""
    seen = Counter(group for busy in workers.values() for group in busy.by_group)
    return sorted(group for group, count in seen.items() if count > 1)
