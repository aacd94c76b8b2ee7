"""``hyport triage`` across nodes (issue 42): several nodes' logs read together, each node's
host, first error and last line, and the node that stopped first named, or why none is.

The logs are made here in the shape torchrun 2.13 and hyport's launcher write them (one
``logs/node<k>.log`` per node, every rank's lines prefixed by ``--tee 3``'s
``[default0]:``): the lines of a real two-node run on this machine (torchrun's c10d
rendezvous, gloo, one node's agent and worker killed with SIGKILL), with DeepSpeed's
timestamped step lines, torch_npu's HCCL watchdog and torchrun's failure summary. A log's
modification time is set as the host would have left it.
"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.triage import Triage, triage, triage_text
from hyport_lib.triage.across_nodes import SAME_TIME_S
from hyport_lib.triage import log_files
from hyport_lib.triage.log_times import line_time

DAY = "2026-12-07"


def _at(clock: str) -> float:
    return datetime.fromisoformat(f"{DAY} {clock}").timestamp()


def _steps(rank: int, until: str, first: int = 1) -> list[str]:
    """A rank training one step a second up to ``until``: DeepSpeed's step line (its logger
    writes the time) and the Trainer's loss dict (none)."""
    end = datetime.fromisoformat(f"{DAY} {until}")
    lines = [f"[default0]:[hyport train rank {rank}] world 2, restart 0, resume from none"]
    for step in range(first, first + 3):
        when = datetime.fromtimestamp(end.timestamp() - (first + 2 - step)).strftime("%Y-%m-%d %H:%M:%S")
        lines += [f"[default0]:[{when},104] [INFO] [logging.py:107:log_dist] [Rank {rank}] step={step}, "
                  f"skipped=0, lr=[1e-05], mom=[(0.9, 0.999)]",
                  f"[default0]:{{'loss': {2.3 - step / 10:.2f}, 'grad_norm': 1.1, 'learning_rate': 1e-05, "
                  f"'epoch': {step / 10:.1f}}}"]
    return lines


def _failed_summary(host: str, rank: int, clock: str, error: str) -> list[str]:
    """torchrun's agent after its rank failed: its E line, then ChildFailedError's summary."""
    return [
        f"E1207 {clock}.251000 28311 torch/distributed/elastic/multiprocessing/api.py:1002] failed "
        f"(exitcode: 1) local_rank: 0 (pid: 28337) of binary: /usr/bin/python3",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.11/site-packages/torch/distributed/launcher/api.py", line 383, in launch_agent',
        "    raise ChildFailedError(",
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "hyport_lib.train.worker FAILED",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        f"  time      : {DAY}_{clock}",
        f"  host      : {host}",
        f"  rank      : {rank} (local_rank: 0)",
        "  exitcode  : 1 (pid: 28337)",
        f"  {error}",
        "============================================================",
    ]


GLOO_CLOSED = ("RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection "
               "closed by peer [10.0.0.2]:32470. This is typically caused by a remote worker crashing. Check the "
               "logs of the remote worker before reporting an error. GLHF!")


def _echo_of_a_killed_peer(host: str, rank: int, clock: str) -> list[str]:
    """A survivor's rank fails in its all-reduce when the peer's socket closes (no time on
    those lines), then its agent reports."""
    return ["[default0]:[rank0]: Traceback (most recent call last):",
            "[default0]:[rank0]:   File \"/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py\", "
            "line 3252, in all_reduce",
            "[default0]:[rank0]:     work.wait()",
            f"[default0]:[rank{rank}]: {GLOO_CLOSED}",
            *_failed_summary(host, rank, clock, GLOO_CLOSED)]


def _hccl_watchdog(rank: int, clock: str) -> list[str]:
    return [f"[default0]:[rank{rank}]:[E1207 {clock}.512000000 ProcessGroupHCCL.cpp:628] [PG 0 Rank {rank}] "
            "Watchdog caught collective operation timeout: WorkHCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=4, "
            "NumelOut=4, Timeout(ms)=600000) ran for 600012 milliseconds before timing out."]


def _write(folder: Path, node: int, lines: list[str], mtime: str) -> Path:
    log = folder / "logs" / f"node{node}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.utime(log, (_at(mtime), _at(mtime)))
    return log


def _killed(folder: Path) -> None:
    """Node 1's host dies at 12:00:03 (its log just ends); node 0 errs 9 s later."""
    _write(folder, 0, [*_steps(0, "12:00:03"), *_echo_of_a_killed_peer("h0", 0, "12:00:12")], "12:00:12.4")
    _write(folder, 1, _steps(1, "12:00:03"), "12:00:03.3")


def test_times_are_read_from_torch_deepspeed_torchrun_and_cann_lines():
    ref = _at("23:00:00")
    assert line_time("[default0]:[2026-12-07 12:00:01,104] [INFO] step=1", ref) == _at("12:00:01.104")
    assert line_time("[W1207 16:54:59.205972192 TCPStore.cpp:138] [c10d] x", ref) == \
        pytest.approx(_at("16:54:59.205972"))
    assert line_time("E1207 17:04:30.251000 28311 torch/x.py:1002] failed", ref) == _at("17:04:30.251")
    assert line_time(f"  time      : {DAY}_17:04:28", ref) == _at("17:04:28")
    assert line_time("[ERROR] HCCL(60570,):2026-12-07-14:46:07.911.312 [hccl_socket", ref) == _at("14:46:07.911")
    assert line_time("[default0]:rank 0: step 1", ref) is None
    assert line_time("[default0]:{'loss': 2.2, 'epoch': 0.1}", ref) is None
    # torch's lines give no year: a date after the file was written is the year before's.
    assert datetime.fromtimestamp(line_time("I1231 23:59:00.000000 1 x.py:1] y", _at("00:00:00"))).year == 2025


def test_a_killed_node_is_named_its_log_ends_before_the_others_echo(tmp_path):
    _killed(tmp_path)
    across = triage([tmp_path]).across_nodes
    assert across is not None and [n.label for n in across.nodes] == ["node 0", "node 1"]
    survivor, killed = across.nodes
    assert survivor.host == "h0" and killed.host is None
    assert survivor.first_error.echo and survivor.first_error.summary == "Connection closed by peer"
    assert survivor.first_error.time == _at("12:00:12") and survivor.first_error.time_from == "later line"
    assert killed.first_error is None and killed.ended == _at("12:00:03.3") and killed.ended_from == "file mtime"
    assert across.first_stopped == "node 1"
    assert across.verdict == ("node 1 stopped first: its log ends at 12:00:03 (file mtime), 9 s before node 0's "
                              "first error 'Connection closed by peer' (an echo)")


def test_a_frozen_node_of_three_is_named_the_others_time_out_later(tmp_path):
    """Node 1 stops writing at 12:00:03 and never errs; nodes 0 and 2 wait in the all-reduce
    until HCCL's watchdog (600 s), which is their echo of node 1."""
    _write(tmp_path, 0, [*_steps(0, "12:00:03"), *_hccl_watchdog(0, "12:10:03")], "12:10:04")
    _write(tmp_path, 1, _steps(1, "12:00:03"), "12:00:03.1")
    _write(tmp_path, 2, [*_steps(2, "12:00:03"), *_hccl_watchdog(2, "12:10:03")], "12:10:04")
    across = triage([tmp_path]).across_nodes
    assert [n.first_error.key if n.first_error else None for n in across.nodes] == \
        ["hccl_exec_timeout", None, "hccl_exec_timeout"]
    assert [n.first_error.time_from for n in across.nodes if n.first_error] == ["line", "line"]
    assert across.first_stopped == "node 1"
    assert across.verdict.startswith("node 1 stopped first: its log ends at 12:00:03 (file mtime), 600 s before "
                                     "node 0's first error 'Watchdog caught collective operation timeout'")


def test_a_node_that_errs_with_a_cause_is_named_before_the_echoes(tmp_path):
    oom = "[default0]:[rank1]: RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.00 GiB total)"
    _write(tmp_path, 0, [*_steps(0, "12:00:03"), *_echo_of_a_killed_peer("h0", 0, "12:00:06")], "12:00:06.5")
    _write(tmp_path, 1, [*_steps(1, "12:00:03"), oom, *_failed_summary("h1", 1, "12:00:04", oom)], "12:00:05")
    _write(tmp_path, 2, [*_steps(2, "12:00:03"), *_echo_of_a_killed_peer("h2", 2, "12:00:07")], "12:00:07.5")
    across = triage([tmp_path]).across_nodes
    assert [n.host for n in across.nodes] == ["h0", "h1", "h2"]
    assert across.nodes[1].first_error.key == "npu_out_of_memory" and not across.nodes[1].first_error.echo
    assert across.verdict == ("node 1 (host h1) stopped first: its first error 'device out of memory' at 12:00:04 "
                              "(the time of a later line), 2 s before node 0's first error "
                              "'Connection closed by peer' (an echo)")


def test_nodes_that_stopped_alike_name_no_node_and_say_so(tmp_path):
    oom = "[default0]:[rank{r}]: RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"
    for rank in (0, 1):
        line = oom.format(r=rank)
        _write(tmp_path / "same", rank, [*_steps(rank, "12:00:03"), line,
                                         *_failed_summary(f"h{rank}", rank, "12:00:04", line)], "12:00:05")
        _write(tmp_path / "clean", rank, [*_steps(rank, "12:00:03"), "[default0]:[hyport train rank 0] done"],
               f"12:00:0{4 + rank}")
    same = triage([tmp_path / "same"]).across_nodes
    assert same.first_stopped is None
    assert same.verdict.startswith(f"no node named: node 0 and node 1 stopped within {SAME_TIME_S:g} s of each "
                                   "other (node 0: its first error 'device out of memory' at 12:00:04")
    clean = triage([tmp_path / "clean"]).across_nodes
    assert clean.first_stopped is None
    assert clean.verdict == ("no node named: no node's log shows an error (their logs end between 12:00:04 "
                             "and 12:00:05)")
    for rank in (0, 1):  # both ended in the same second: one time, not "between t and t"
        _write(tmp_path / "together", rank, [*_steps(rank, "12:00:03"), "[default0]:[hyport train rank 0] done"],
               "12:00:04.2")
    together = triage([tmp_path / "together"]).across_nodes
    assert together.verdict == "no node named: no node's log shows an error (their logs end at 12:00:04)"
    # Only echoes: the node they echo left no log here.
    _write(tmp_path / "echoes", 0, _echo_of_a_killed_peer("h0", 0, "12:00:06"), "12:00:06.5")
    _write(tmp_path / "echoes", 2, _echo_of_a_killed_peer("h2", 2, "12:00:06"), "12:00:06.5")
    echoes = triage([tmp_path / "echoes"]).across_nodes
    assert echoes.first_stopped is None and "every node's first error is an echo" in echoes.verdict
    # One node's log alone is nothing to compare.
    assert triage([tmp_path / "same" / "logs" / "node0.log"]).across_nodes is None


def test_hosts_folders_given_side_by_side_are_the_nodes(tmp_path):
    """Each host kept its own output_dir (no shared storage): their log folders, copied here,
    each hold one node log; ``--nodes`` makes each path a node whatever its files' names."""
    _killed(tmp_path / "shared")
    for rank in (0, 1):
        folder = tmp_path / f"host{rank}"
        (folder / "logs").mkdir(parents=True)
        log = tmp_path / "shared" / "logs" / f"node{rank}.log"
        copy = folder / "logs" / ("torchrun.log" if rank else f"node{rank}.log")
        copy.write_bytes(log.read_bytes())
        os.utime(copy, (log.stat().st_mtime,) * 2)
    assert triage([tmp_path / "host0", tmp_path / "host1"]).across_nodes is None  # one node<k>.log only
    across = triage([tmp_path / "host0" / "logs", tmp_path / "host1" / "logs"], nodes_by_path=True).across_nodes
    assert across.first_stopped == "node 1" and across.nodes[1].files == ["host1/logs/torchrun.log"]


def test_the_command_prints_a_table_and_the_verdict_from_a_shared_output_dir(tmp_path, capsys):
    _killed(tmp_path)
    (tmp_path / "logs" / "ranks" / "job_a" / "attempt_0" / "0").mkdir(parents=True)
    (tmp_path / "logs" / "ranks" / "job_a" / "attempt_0" / "0" / "stdout.log").write_text("rank 0: step 1\n")
    code = main(["triage", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    table = out[out.index("nodes (2):"):].splitlines()
    assert table[1].split() == ["node", "host", "first", "error", "at", "where", "last", "line", "at"]
    assert table[2].split()[:3] == ["node", "0", "h0"] and "logs/node0.log:" in table[2]
    assert table[3].split() == ["node", "1", "?", "none", "-", "-", "12:00:03", "(file", "mtime)"]
    assert table[4] == ("verdict: node 1 stopped first: its log ends at 12:00:03 (file mtime), 9 s before node 0's "
                        "first error 'Connection closed by peer' (an echo)")
    code = main(["triage", str(tmp_path), "--json"])
    data = json.loads(capsys.readouterr().out)
    assert data["across_nodes"]["first_stopped"] == "node 1"
    assert Triage.from_dict(data).across_nodes == triage([tmp_path]).across_nodes  # kept in a stage's record
    assert main(["triage", str(tmp_path), "--nodes"]) == 2  # one PATH is no set of nodes
    assert "--nodes" in capsys.readouterr().err


def test_a_netrc_line_in_a_node_log_never_reaches_the_triage(tmp_path):
    """Issue 42: a rank that printed a netrc file (``cat ~/.netrc`` in a start script) showed
    its password in the triage's context lines and the node's first error."""
    lines = _steps(0, "12:00:03") + [
        "[default0]:[rank0]: machine obs.example.com login svc password Zz9-netrc-secret",
        "[default0]:[rank0]: OSError: upload refused for login svc passwd Zz9-netrc-secret",
        "[default0]:[rank0]: RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB",
    ]
    _write(tmp_path, 0, lines, "12:00:04")
    _write(tmp_path, 1, _steps(1, "12:00:03"), "12:00:20")
    result = triage([tmp_path])
    shown = "\n".join(triage_text(result)) + json.dumps(result.to_dict())
    assert "Zz9-netrc-secret" not in shown
    assert "machine obs.example.com login svc password [redacted]" in result.findings[0].context[-3]
    assert result.across_nodes.nodes[0].first_error.text.endswith("login svc passwd [redacted]")


def test_a_killed_node_is_named_by_the_host_its_rank_said_at_start(tmp_path):
    """hyport's rank says ``host: NAME`` when it starts: a node killed without torchrun's failure
    summary is still named by its host."""
    _write(tmp_path, 0, [*_steps(0, "12:00:03"), *_echo_of_a_killed_peer("h0", 0, "12:00:12")], "12:00:12.4")
    _write(tmp_path, 1, ["[default0]:[hyport train rank 1] host: h1", *_steps(1, "12:00:03")], "12:00:03.3")
    across = triage([tmp_path]).across_nodes
    assert [n.host for n in across.nodes] == ["h0", "h1"]
    assert across.first_stopped == "node 1" and across.verdict.startswith("node 1 (host h1) stopped first")


def test_a_glog_line_takes_the_year_nearest_the_file_time():
    """torch's lines give no year: of the year before, its own and the year after, the date
    nearest the file's time (a host 3 s ahead of the file server across New Year; a Feb 29
    line in a file copied the next year)."""
    def when(line: str, reference: str) -> str:
        return datetime.fromtimestamp(line_time(line, datetime.fromisoformat(reference).timestamp())).isoformat()
    assert when("E0101 00:00:01.000000 1 api.py:1] failed", "2026-12-31 23:59:58") == "2027-01-01T00:00:01"
    assert when("W1231 23:59:59.000000 1 x.py:1] y", "2027-01-01 00:00:05") == "2026-12-31T23:59:59"
    assert when("E0229 10:00:00.000000 1 x.py:1] y", "2029-01-10 00:00:00") == "2028-02-29T10:00:00"


def test_a_node_log_cut_by_a_limit_names_no_node(tmp_path, monkeypatch):
    """Reading that a limit stopped is no end of the log: node 1's log read up to a line
    (the time limit), or in part, or not at all (the byte budget), names no node."""
    _killed(tmp_path)
    node0_lines = len((tmp_path / "logs" / "node0.log").read_text().splitlines())
    calls = []

    def passed(deadline):  # the time limit falls 4 lines into node 1's log
        calls.append(deadline)
        return deadline is not None and len(calls) > node0_lines + 4
    monkeypatch.setattr(log_files, "_passed", passed)
    timed = triage([tmp_path], max_seconds=60).across_nodes
    assert timed.first_stopped is None and timed.nodes[1].cut == "read only up to line 4 (past the time limit)"
    assert timed.verdict == "no node named: node 1's log was read only up to line 4 (past the time limit)"
    monkeypatch.undo()
    (tmp_path / "logs" / "a_big.log").write_text("x" * 5000 + "\n")
    budget = triage([tmp_path], max_bytes=5100).across_nodes
    assert budget.first_stopped is None
    assert budget.verdict == ("no node named: node 0's log was read only in part (past the byte budget); "
                              "node 1's log was not read (past the byte budget)")
    assert triage([tmp_path], max_bytes=4000).across_nodes.verdict == \
        "no node named: the logs of node 0 and node 1 were not read (past the byte budget)"


def test_three_nodes_stopping_together_are_listed_as_prose(tmp_path):
    oom = "[default0]:[rank{r}]: RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"
    for rank in (0, 1, 2):
        line = oom.format(r=rank)
        _write(tmp_path, rank, [*_steps(rank, "12:00:03"), line, *_failed_summary(f"h{rank}", rank, "12:00:04", line)],
               "12:00:05")
    assert triage([tmp_path]).across_nodes.verdict.startswith(
        "no node named: node 0, node 1 and node 2 stopped within 2 s of each other (node 0: ")


def test_an_error_the_node_ran_on_after_is_not_its_stop(tmp_path):
    """A retried download an hour before node 1 is killed: node 0 went on training, so its
    stop is its final error episode (the echo), and node 1 is named. Lines within
    :data:`EPISODE_S` of an error (other ranks, torchrun's agent) leave it the stop."""
    retry = ("[default0]:[rank0]: Error while downloading from https://cdn-lfs.hf.co/x: "
             "HTTPSConnectionPool(host='cdn-lfs.hf.co', port=443): Read timed out. Trying to resume download...")
    _write(tmp_path, 0, [*_steps(0, "11:00:03"), retry, *_steps(0, "11:00:06", first=4), *_steps(0, "12:00:03", first=7),
                         *_echo_of_a_killed_peer("h0", 0, "12:00:12")], "12:00:12.4")
    _write(tmp_path, 1, _steps(1, "12:00:03"), "12:00:03.3")
    across = triage([tmp_path]).across_nodes
    assert across.nodes[0].first_error.summary == "Connection closed by peer"
    assert across.first_stopped == "node 1"
    oom = "[default0]:[rank1]: RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"
    _write(tmp_path, 1, [*_steps(1, "12:00:03"), oom, *_steps(1, "12:00:40", first=4)], "12:00:41")
    _write(tmp_path, 0, [*_steps(0, "12:00:03"), *_echo_of_a_killed_peer("h0", 0, "12:00:50")], "12:00:50.4")
    across = triage([tmp_path]).across_nodes
    assert across.nodes[1].first_error.key == "npu_out_of_memory" and across.first_stopped == "node 1"


def test_a_silent_node_is_named_only_when_the_others_only_echo(tmp_path):
    """Node 0 runs out of memory at 12:00:40; node 1 waited silently in the all-reduce since
    12:00:03 and was then killed: its last write does not say it stopped first."""
    oom = "[default0]:[rank0]: RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB"
    _write(tmp_path, 0, [*_steps(0, "12:00:03"), oom, *_failed_summary("h0", 0, "12:00:40", oom)], "12:00:41")
    _write(tmp_path, 1, _steps(1, "12:00:03"), "12:00:03.3")
    across = triage([tmp_path]).across_nodes
    assert across.first_stopped is None
    assert across.verdict == (
        "no node named: node 1 stopped writing without an error and node 0 errs with a cause (node 1: its log "
        "ends at 12:00:03 (file mtime); node 0: its first error 'device out of memory' at 12:00:40 (the time of "
        "a later line)): either may have stopped first")


def test_with_nodes_an_earlier_launchs_rank_logs_are_left_out(tmp_path):
    """``--nodes`` with each host's logs folder: yesterday's failed attempt under host0's
    ``logs/ranks`` (modified before node0.log began) is no part of node 0's stop."""
    _killed(tmp_path / "shared")
    for rank in (0, 1):
        logs = tmp_path / f"host{rank}" / "logs"
        logs.mkdir(parents=True)
        source = tmp_path / "shared" / "logs" / f"node{rank}.log"
        (logs / source.name).write_bytes(source.read_bytes())
        os.utime(logs / source.name, (source.stat().st_mtime,) * 2)
    old = tmp_path / "host0" / "logs" / "ranks" / "old_run" / "attempt_0" / "0" / "stderr.log"
    old.parent.mkdir(parents=True)
    old.write_text("[2026-12-06 09:00:00,000] step=1\nRuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n")
    os.utime(old, (_at("09:00:00") - 86400,) * 2)
    result = triage([tmp_path / "host0" / "logs", tmp_path / "host1" / "logs"], nodes_by_path=True)
    assert result.across_nodes.first_stopped == "node 1"
    assert result.across_nodes.nodes[0].files == ["host0/logs/node0.log"]
    assert any("node 0: 1 log file modified before its node log began" in note for note in result.notes)


def test_a_join_timeout_is_an_echo_of_the_node_that_never_joined(tmp_path):
    """Node 1 stops before joining (its log ends at 12:00:03); node 0's torchrun gives up the
    rendezvous at 12:00:18 (the vendored log: no time on its lines, so the file's). The
    waiting node is the echo: as a cause it would leave 'either may have stopped first'."""
    vendored = Path(__file__).parents[1] / "data" / "hyport_logs" / "rendezvous_join_timeout.node1-never-joined.log"
    _write(tmp_path, 0, vendored.read_text(encoding="utf-8").splitlines(), "12:00:18")
    _write(tmp_path, 1, ["[hyport train] node 1 of 2: joining the rendezvous at 10.0.0.1:29400"], "12:00:03")
    across = triage([tmp_path]).across_nodes
    waiting = across.nodes[0].first_error
    # Its first error line is the traceback's ``raise RendezvousTimeoutError`` (an error line
    # before the one the catalogue recognises): the echo phrase marks both.
    assert waiting.echo and waiting.summary == "RendezvousTimeoutError" and "RendezvousTimeoutError" in waiting.text
    assert across.first_stopped == "node 1"
    assert across.verdict == ("node 1 stopped first: its log ends at 12:00:03 (file mtime), 15 s before node 0's "
                              "first error 'RendezvousTimeoutError' (an echo)")
