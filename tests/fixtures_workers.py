"""Keep each shared run to one run when the suite is spread over processes (pytest-xdist).

``scripts/test.sh`` runs the suite with ``-n auto``: every xdist worker is its own Python
process with its own session and module fixtures. A session fixture that makes a five-stage
report, or a module fixture that starts eight inference workers, would otherwise be made
once per worker that happens to get one of its tests.

So every test that uses a shared fixture of this suite (session or module scope, defined
under tests/) is put in a group, and tests that share one such fixture, directly or through
another test, in the same group; a group runs on one worker, which makes each fixture once.
Tests without a shared fixture are spread one by one.

How: only a worker sees the fixtures, only the controller schedules. Each worker writes
``node id -> group`` when it has collected (every worker collects the same tests); the
controller's scheduler, a ``LoadScopeScheduling`` whose scope is that group, reads it once
all workers have collected. (xdist's own ``--dist loadgroup`` carries the group in the node
id, which pytest 9 no longer lets a plugin change.)

``zoo`` is the exception: its checkpoints are built once into the hyport cache under a file
lock and read by every later session, so each worker reading them costs no second build and
its many fast tests stay spread over the workers.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from xdist.scheduler import LoadScopeScheduling

TESTS = Path(__file__).resolve().parent

#: Shared fixtures whose second set-up (in another worker) costs nothing worth grouping for.
SAFE_TO_REPEAT = frozenset({"zoo"})


def _shared_keys(item: pytest.Item, root: Path) -> set[str]:
    """What ``item`` shares with other tests through fixtures defined under ``root``:
    ``session:<fixture>``, ``package:<folder>`` or ``module:<file>``."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    keys = set()
    for name in item.fixturenames:
        definitions = info.name2fixturedefs.get(name) or ()
        if not definitions or name in SAFE_TO_REPEAT:
            continue
        definition = definitions[-1]  # the one this test gets (an override wins)
        code = getattr(definition.func, "__code__", None)
        if code is None:
            continue
        where = Path(code.co_filename).resolve()
        if root not in where.parents:
            continue  # pytest's own (tmp_path_factory, ...) are cheap per worker
        if definition.scope == "session":
            keys.add(f"session:{name}")
        elif definition.scope == "package":
            keys.add(f"package:{item.path.parent.name}")
        elif definition.scope == "module":
            keys.add(f"module:{item.path.name}")
    return keys


def shared_fixture_groups(items: list[pytest.Item], root: Path = TESTS) -> dict[str, str]:
    """node id -> group name for the tests that share a fixture defined under ``root``; tests
    sharing one (directly or through another test) have the same group (union-find)."""
    parent: dict[str, str] = {}

    def representative(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    keys_of = {item.nodeid: sorted(_shared_keys(item, root)) for item in items}
    for keys in keys_of.values():
        for other in keys:
            parent[representative(other)] = representative(keys[0])
    members: dict[str, list[str]] = {}
    for key in list(parent):
        members.setdefault(representative(key), []).append(key)
    names = {r: "+".join(sorted(k.split(":", 1)[1] for k in ks)) for r, ks in members.items()}
    return {nodeid: names[representative(keys[0])] for nodeid, keys in keys_of.items() if keys}


#: workerinput key: the file the workers write the groups into.
GROUPS_FILE = "hyport_groups_file"
_GROUPS_PATH = pytest.StashKey[Path]()


def _is_controller(config: pytest.Config) -> bool:
    return getattr(config.option, "dist", "no") != "no" and not hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if _is_controller(config):
        handle, path = tempfile.mkstemp(prefix="hyport-xdist-groups-", suffix=".json")
        os.close(handle)
        config.stash[_GROUPS_PATH] = Path(path)


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(_GROUPS_PATH, None)
    if path is not None:
        path.unlink(missing_ok=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    node.workerinput[GROUPS_FILE] = str(node.config.stash[_GROUPS_PATH])


class SharedFixtureScheduling(LoadScopeScheduling):
    """Load scheduling where a scope is a group of tests sharing a fixture, else one test.

    Three things differ from xdist's own, each made safe for a crashed worker (pytest-xdist
    3.8 hangs there in every scope mode, upstream issues #1327 and #1378):

    - the work of a crashed worker goes back to the queue without its finished scopes and
      without the test that crashed (reported failed, as plain ``-n`` does);
    - a worker is always given work until it holds more than two tests, since a worker runs
      a test only once it knows the next one (a replacement given a single test would wait
      forever);
    - a report from a worker that has since died can arrive before the news of its death;
      sending it more work then fails (the pipe is closed). The work stays recorded as the
      dead worker's, and ``remove_node`` hands it back once the death is reported, as
      xdist's own ``WorkerController.shutdown`` treats the same error.
    """

    def __init__(self, config: pytest.Config, log=None, groups_path: Path | None = None) -> None:
        super().__init__(config, log)
        self._groups_path = groups_path
        self._groups: dict[str, str] | None = None

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:
            text = self._groups_path.read_text(encoding="utf-8") if self._groups_path else ""
            self._groups = json.loads(text or "{}")
        return self._groups.get(nodeid, nodeid)

    def remove_node(self, node):
        workload = self.assigned_work.pop(node)
        pending = [(scope, nodeid) for scope, unit in workload.items()
                   for nodeid, done in unit.items() if not done]
        if not pending:
            return None
        scope, crashed = pending[0]
        workload[scope][crashed] = True
        self.workqueue.update({s: unit for s, unit in workload.items() if not all(unit.values())})
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed

    def _reschedule(self, node) -> None:
        if node.shutting_down:
            return
        while self.workqueue and self._pending_of(self.assigned_work[node]) <= 2:
            try:
                self._assign_work_unit(node)
            except OSError as error:  # the worker died; remove_node returns its work
                self.log(f"worker {node.gateway.id} is gone ({error}); its work waits for its removal")
                return
        if not self.workqueue:
            node.shutdown()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") not in ("load", "loadgroup"):
        return None  # a mode asked for by name (--dist loadfile, ...) is left to xdist
    return SharedFixtureScheduling(config, log, groups_path=config.stash[_GROUPS_PATH])


@pytest.hookimpl(trylast=True)  # after -m / -k have deselected
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or GROUPS_FILE not in workerinput:
        return
    target = Path(workerinput[GROUPS_FILE])
    # Every worker writes the same map; each writes whole (a temporary file, then a rename).
    partial = target.with_name(f"{target.name}.{workerinput.get('workerid', os.getpid())}")
    groups = {node_id: f"group:{group}" for node_id, group in shared_fixture_groups(items).items()}
    partial.write_text(json.dumps(groups), encoding="utf-8")
    os.replace(partial, target)
