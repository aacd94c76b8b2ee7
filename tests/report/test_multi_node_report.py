"""``hyport report`` on two "hosts" of one machine: two reports with ``-p nnodes=2``, node
ranks 0 and 1, into one ``--run-dir``. Node 1 writes only under ``<run>/nodes/node1/``,
runs the stages that declare node_rank (stage 01 among them) and SKIPs the others ("runs on
node 0"; a planted stage that does not declare it), sees the shared run folder as its
stages' run folder, and leaves no secret; node 0's index lists both hosts and says "2 hosts".
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hyport_lib.commands import main
from hyport_lib.report.runner import run_report

SECRET = "pa55-multi-node-7f3e"
NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def _files(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_two_nodes_share_one_run_folder_with_stage_01(tmp_path, capsys, plant_stage):
    folder = tmp_path / "nbs"
    folder.mkdir()
    shutil.copy(NOTEBOOKS / "01_environment.ipynb", folder)  # declares nnodes and node_rank: every node
    plant_stage(folder, "02_zeroonly", "from hyport_lib.results import StageRecord, write_record\n"
                "write_record(StageRecord('02_zeroonly', 'PASS', summary='ran on node 0'))")
    run = tmp_path / "shared" / "run-1"
    node = ["report", "--profile", "none", "--notebooks", str(folder), "--run-dir", str(run),
            "-p", "nnodes=2", "-p", "master_addr=127.0.0.1", "-p", "master_port=29500"]
    assert main(node + ["-p", "node_rank=1"]) == 0
    node1 = _files(run)
    assert node1 and all(name.startswith("nodes/node1/") for name in node1), node1
    checked = json.loads((run / "nodes/node1/results/01_environment.json").read_text())
    assert checked["verdict"] in ("PASS", "WARN")  # stage 01 checks node 1's host too
    skipped = json.loads((run / "nodes/node1/results/02_zeroonly.json").read_text())
    assert skipped["verdict"] == "SKIP" and skipped["summary"].startswith("runs on node 0")  # no node_rank
    assert main(node + ["-p", "node_rank=1"]) == 2  # node 1's run is there: a new run, a new folder
    assert "already holds node 1's run" in capsys.readouterr().err
    assert main(node + ["-p", "node_rank=0"]) == 0
    assert {name for name in _files(run) if name.startswith("nodes/")} == node1  # node 0 wrote none of node 1's
    assert {"index.html", "run.json", "blog.md", "blog.zh.md", "report.html",
            "results/01_environment.json", "results/02_zeroonly.json"} <= _files(run)
    assert json.loads((run / "results/02_zeroonly.json").read_text())["verdict"] == "PASS"
    assert json.loads((run / "results/01_environment.json").read_text())["verdict"] in ("PASS", "WARN")
    recorded = json.loads((run / "run.json").read_text())
    assert (recorded["nnodes"], recorded["node_rank"]) == (2, 0)
    index = (run / "index.html").read_text()
    assert "<h2>Nodes: 2 hosts × " in index
    assert '<a href="nodes/node1/index.html">index</a>' in index and index.count(f"<code>{recorded['host']}</code>") >= 2
    assert " on 2 hosts × " in (run / "blog.md").read_text().splitlines()[0]
    assert not (run / ".runner.lock").exists() and not (run / "nodes/node1/.runner.lock").exists()


@pytest.mark.slow
def test_a_node_above_0_runs_the_stages_that_take_node_rank_and_leaves_no_secret(tmp_path, plant_stage,
                                                                                 monkeypatch):
    monkeypatch.setenv("DB_PASSWORD", SECRET)
    folder = tmp_path / "nbs"
    plant_stage(folder, "01_host", "raise RuntimeError('node 0 only: never run on node 1')")
    plant_stage(folder, "02_every",
                "import os\nfrom hyport_lib.results import StageRecord, write_record\n"
                "print('the secret is', os.environ['DB_PASSWORD'])\n"
                "write_record(StageRecord('02_every', 'PASS', summary=f\"node {node_rank} saw "
                "{os.environ['DB_PASSWORD']}\", headline={'run folder': os.environ['HYPORT_RUN_DIR']}))",
                nnodes=1, node_rank=0)
    shared = tmp_path / "run"
    report = run_report(profile=None, overrides={"nnodes": "2", "node_rank": "1"}, notebooks_dir=folder,
                        run_dir=shared, cell_timeout_s=120, progress=lambda m: None)
    assert report.run_dir == shared.resolve() / "nodes" / "node1" and report.ok
    verdicts = {s.stage: (s.verdict, s.summary) for s in report.stages}
    assert verdicts["01_host"] == ("SKIP", "runs on node 0: node 1 of 2 runs only the stages that take node_rank")
    assert verdicts["02_every"][0] == "PASS" and verdicts["02_every"][1].startswith("node 1 saw ")
    every = json.loads((report.run_dir / "results/02_every.json").read_text())
    assert every["headline"]["run folder"] == str(shared.resolve())  # its outputs go under the shared run
    written = _files(shared)
    assert {"nodes/node1/notebooks/02_every.ipynb", "nodes/node1/logs/02_every.log",
            "nodes/node1/html/02_every.html", "nodes/node1/index.html"} <= written
    assert all(name.startswith("nodes/node1/") for name in written), written
    assert "blog.md" not in {Path(n).name for n in written}  # the drafts are node 0's
    assert "the secret is" in (report.run_dir / "logs/02_every.log").read_text()
    for name in written:
        assert SECRET not in (shared / name).read_text(encoding="utf-8", errors="replace"), name
