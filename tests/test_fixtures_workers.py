"""The groups that keep each shared run to one xdist worker (tests/fixtures_workers.py)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures_workers import SharedFixtureScheduling, shared_fixture_groups

HERE = Path(__file__).resolve().parent

CONFTEST = """
import pytest

@pytest.fixture(scope="session")
def report():
    return 1

@pytest.fixture(scope="session")
def training():
    return 2

@pytest.fixture(scope="session")
def zoo():
    return 3

@pytest.fixture
def per_test():
    return 4
"""

TESTS = """
import pytest

@pytest.fixture(scope="module")
def server():
    return 0

@pytest.fixture(scope="module")
def through_report(report):
    return report

def test_report(report): pass
def test_report_and_training(report, training): pass
def test_training(training): pass
def test_through(through_report): pass
def test_server(server): pass
def test_server_again(server, per_test): pass
def test_zoo(zoo): pass
def test_plain(per_test, tmp_path): pass
"""


def test_tests_sharing_a_fixture_form_one_group_and_the_others_none(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_planted=TESTS)
    items, _ = pytester.inline_genitems()
    groups = {item.name: group for item in items
              for node_id, group in shared_fixture_groups(items, root=pytester.path).items()
              if node_id == item.nodeid}
    # report and training are one group: a test uses both; the module fixture that uses the
    # report joins it, and so does the module's other module fixture (same module key)
    chained = {"test_report", "test_report_and_training", "test_training", "test_through",
               "test_server", "test_server_again"}
    assert set(groups) == chained, groups
    assert len({groups[name] for name in chained}) == 1
    # zoo is safe to set up in every worker; per-test and pytest's own fixtures group nothing
    assert "test_zoo" not in groups and "test_plain" not in groups


def test_module_fixtures_alone_group_by_module(pytester):
    pytester.makepyfile(test_one="""
import pytest

@pytest.fixture(scope="module")
def server():
    return 0

def test_a(server): pass
def test_b(server): pass
def test_c(): pass
""", test_two="""
import pytest

@pytest.fixture(scope="module")
def server():
    return 0

def test_d(server): pass
""")
    items, _ = pytester.inline_genitems()
    groups = shared_fixture_groups(items, root=pytester.path)
    by_name = {item.name: groups.get(item.nodeid) for item in items}
    assert by_name["test_a"] == by_name["test_b"] is not None
    assert by_name["test_c"] is None
    assert by_name["test_d"] is not None and by_name["test_d"] != by_name["test_a"]


CRASHING = """
import os
import pytest

@pytest.mark.parametrize("i", range(6))
def test_before(i): pass

def test_crash(): os._exit(1)

@pytest.mark.parametrize("i", range(4))
def test_after(i): pass
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_crashed_worker_fails_its_test_and_the_run_ends(pytester, monkeypatch, workers):
    """xdist 3.8's scope scheduling hangs after a worker crash; this one reports the test
    that crashed and runs the rest on a replacement (with one worker: the replacement is
    given two tests, not one it would wait behind)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    pytester.makepyfile(test_crashing=CRASHING)
    result = pytester.runpytest_subprocess("-p", "fixtures_workers", "-n", workers, "-p", "no:cacheprovider",
                                           timeout=120)
    result.assert_outcomes(failed=1, passed=10)
    result.stdout.fnmatch_lines(["*crashed while running*test_crash*"])


class FakeWorker:
    """What the scheduler uses of xdist's WorkerController; a dead one's pipe is closed."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.dead = False
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        if self.dead:
            raise OSError("cannot send (already closed?)")
        self.sent.append(list(indices))

    def shutdown(self) -> None:
        self.shutting_down = True


def test_a_report_from_a_worker_that_died_meanwhile_leaves_its_work_for_its_removal(tmp_path):
    """The race CI met: a worker finishes a test, dies on the next, and its report of the
    first reaches the scheduler before the news of its death. Giving it more work must not
    end the run (it raised OSError from a closed pipe); the work given is handed back when
    the worker is removed, less the test it died on."""
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({}), encoding="utf-8")
    config = SimpleNamespace(getvalue=lambda name: ["2*popen"], option=SimpleNamespace(loadscopereorder=False))
    scheduler = SharedFixtureScheduling(config, groups_path=groups)
    collection = [f"test_x.py::test_{i}" for i in range(8)]
    first, second = FakeWorker("gw0"), FakeWorker("gw1")
    for worker in (first, second):
        scheduler.add_node(worker)
        scheduler.add_node_collection(worker, collection)
    scheduler.schedule()
    given_first = [i for batch in first.sent for i in batch]
    assert len(given_first) == 3 and not first.dead

    first.dead = True  # it crashed on its second test, nobody has been told yet
    scheduler.mark_test_complete(first, given_first[0])
    assert scheduler.assigned_work[first]  # the unsent work is still recorded as its own

    crashed = scheduler.remove_node(first)
    assert crashed == collection[given_first[1]]
    given_second = {i for batch in second.sent for i in batch}
    unsent = {collection.index(nodeid) for unit in scheduler.workqueue.values() for nodeid in unit}
    # every test but the finished one and the crash reaches the live worker or still waits
    assert given_second | unsent == set(range(len(collection))) - {given_first[0], given_first[1]}
