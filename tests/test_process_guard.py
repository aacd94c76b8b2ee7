"""The fast tier's process guard (tests/fixtures_processes.py) fails a test not marked slow
that starts a process, by any of the usual ways, naming the test; a slow test may."""

from __future__ import annotations

import pytest

INNER = '''
import multiprocessing
import os
import subprocess
import sys

import pytest


@pytest.fixture(scope="session")
def shared_launch():
    return subprocess.run([sys.executable, "-c", "pass"]).returncode


def test_runs_a_command():
    subprocess.run([sys.executable, "-c", "pass"])


def test_uses_os_system():
    os.system("true")


def test_starts_a_multiprocessing_child():
    child = multiprocessing.Process(target=print)
    child.start()
    child.join()


def test_swallows_the_error():
    try:
        subprocess.run(["true"])
    except Exception:  # noqa: BLE001 — as a library probe might: the guard must still fail the test
        print("swallowed")


def test_reads_a_session_fixture_that_launches(shared_launch):
    assert shared_launch == 0


def test_starts_nothing():
    assert sum(range(4)) == 6
'''


def _outcomes(result) -> dict[str, str]:
    return {r.nodeid.split("::")[-1]: r.outcome for r in result.reprec.getreports("pytest_runtest_logreport")
            if r.when == "call" or r.outcome != "passed"}


def test_a_fast_test_that_starts_a_process_fails_naming_itself(pytester):
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_inprocess("-p", "fixtures_processes", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=4, errors=1)
    outcomes = _outcomes(result)
    assert outcomes["test_starts_nothing"] == "passed"
    text = result.stdout.str()
    for name in ("test_runs_a_command", "test_uses_os_system", "test_starts_a_multiprocessing_child",
                 "test_swallows_the_error", "test_reads_a_session_fixture_that_launches"):
        assert outcomes[name] == "failed", (name, outcomes)
        assert f"test_inner.py::{name} started a process" in text, name
    assert "mark it @pytest.mark.slow" in text


@pytest.mark.slow
def test_a_slow_test_may_start_processes(pytester):
    pytester.makepyfile(test_inner=INNER.replace("\ndef test_", "\n@pytest.mark.slow\ndef test_"))
    result = pytester.runpytest_inprocess("-p", "fixtures_processes", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
