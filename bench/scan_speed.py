"""Full-scan speed at real size, side by side in one run (prints ratios; not a test).

On one checkpoint folder (``bench/build_random_checkpoint.py`` builds a 7 B one), each of
these reads every ``*.safetensors`` file whole, in a child process of its own:

- **raw read**: ``readinto`` of a reused 2 MiB buffer, nothing done with the bytes (the
  reference; the buffer size the issue's ratios used);
- **scan**: hyport's :func:`full_scan` (NaN/Inf count + XXH3 per tensor) from this tree;
- **scan before** (``--before REPO``): the same from another checkout (the main branch's worktree, say),
  so the gain is measured beside the raw read in the same run, on the same page cache;
- **naive**: ``safe_open`` + ``torch.isfinite`` per tensor (warm only, ``--naive-rounds``).

Cold: every file dropped from the page cache with ``posix_fadvise(DONTNEED)`` before the run
(works without root for clean pages; ``fincore``, when installed, shows what stayed). Warm:
the files read once by the parent just before the run. The readers take turns, each round
starting with the next one, so that the load of a shared machine hits all alike; best and
median of ``--rounds`` are printed, with the load average. Peak RSS is each child's
``ru_maxrss`` (imports included), beside its RSS just before it started reading. The scan
children also print a digest of all their checksums and NaN/Inf counts: a "before" and an
"after" that disagree are reported.

    .venv/bin/python bench/scan_speed.py FOLDER [--rounds 3] [--before OTHER_CHECKOUT] [--naive-rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RAW_BUFFER = 2 << 20


def shard_files(folder: Path) -> list[Path]:
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"error: no *.safetensors file in {folder}")
    return files


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def raw_read(files: list[Path]) -> int:
    view = memoryview(bytearray(RAW_BUFFER))
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return total


# ---- the children: each prints one JSON line -------------------------------------------------

def child_raw(folder: Path, _repo: str) -> dict:
    files = shard_files(folder)
    before, started, cpu = rss_mb(), time.perf_counter(), cpu_s()
    nbytes = raw_read(files)
    return {"seconds": time.perf_counter() - started, "cpu_s": cpu_s() - cpu, "bytes": nbytes, "rss_before_mb": before}


def child_scan(folder: Path, repo: str) -> dict:
    sys.path.insert(0, repo)  # ahead of the editable install's finder: that checkout's hyport_lib
    import hashlib

    import hyport_lib
    from hyport_lib.weights.layout import inspect_checkpoint
    from hyport_lib.weights.scan import full_scan

    if not hyport_lib.__file__.startswith(str(Path(repo).resolve())):
        raise SystemExit(f"error: imported {hyport_lib.__file__}, not the one under {repo}")
    shards = inspect_checkpoint(folder, with_model=False, validate=False).shards
    before, started, cpu = rss_mb(), time.perf_counter(), cpu_s()
    result = full_scan(shards)
    seconds, cpu = time.perf_counter() - started, cpu_s() - cpu
    digest = hashlib.sha256(json.dumps({k: [t.checksum, t.nan, t.inf] for k, t in sorted(result.tensors.items())})
                            .encode()).hexdigest()[:16]
    return {"seconds": seconds, "cpu_s": cpu, "bytes": result.bytes_read, "rss_before_mb": before, "digest": digest,
            "tensors": len(result.tensors), "findings": [f"{f.cls}: {f.message}" for f in result.findings]}


def child_naive(folder: Path, _repo: str) -> dict:
    import torch
    from safetensors import safe_open

    files = shard_files(folder)
    before, started, cpu = rss_mb(), time.perf_counter(), cpu_s()
    nbytes, nonfinite = 0, 0
    for path in files:
        with safe_open(str(path), framework="pt") as fh:
            for key in fh.keys():
                tensor = fh.get_tensor(key)
                nbytes += tensor.numel() * tensor.element_size()
                nonfinite += int((~torch.isfinite(tensor)).sum())
    return {"seconds": time.perf_counter() - started, "cpu_s": cpu_s() - cpu, "bytes": nbytes,
            "rss_before_mb": before, "nonfinite": nonfinite}


CHILDREN = {"raw": child_raw, "scan": child_scan, "naive": child_naive}


# ---- the parent ------------------------------------------------------------------------------

def drop(files: list[Path]) -> None:
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_gb(files: list[Path]) -> str:
    if not shutil.which("fincore"):
        return "?"
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, files)], capture_output=True, text=True)
    try:
        return f"{sum(int(x) for x in out.stdout.split()) / 1e9:.2f} GB"
    except ValueError:
        return "?"


def run_child(kind: str, folder: Path, repo: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--repo", repo, str(folder)],
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"error: the {kind} child ({repo}) failed with {out.returncode}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default=None, help="another checkout whose full_scan runs beside this one's")
    parser.add_argument("--naive-rounds", type=int, default=1, help="0 leaves the naive loop out")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--repo", default=str(REPO), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        record = CHILDREN[args.child](args.folder, args.repo)
        record["peak_mb"] = peak_mb()
        print(json.dumps(record))
        return 0

    files = shard_files(args.folder)
    size = sum(p.stat().st_size for p in files)
    readers = [("raw read", "raw", str(REPO)), ("scan", "scan", str(REPO))]
    if args.before:
        readers.append(("scan before", "scan", str(Path(args.before).resolve())))
    print(f"{args.folder}: {len(files)} file(s), {size / 1e9:.2f} GB; {os.cpu_count()} CPU(s); "
          f"load average before: {load_average()}")
    runs: dict[tuple[str, str], list[dict]] = {}
    for state in ("cold", "warm"):
        for round_ in range(args.rounds):
            turn = round_ % len(readers)
            for label, kind, repo in readers[turn:] + readers[:turn]:
                if state == "cold":
                    drop(files)
                else:
                    raw_read(files)  # the first read fills the page cache; the child's is counted
                resident = resident_gb(files)
                record = run_child(kind, args.folder, repo)
                record["resident"] = resident
                runs.setdefault((state, label), []).append(record)
                print(f"  {state} {label:12s} round {round_ + 1}: {record['bytes'] / record['seconds'] / 1e9:6.2f} GB/s "
                      f"({record['seconds']:.1f} s, CPU {record['cpu_s'] / record['bytes'] * 1e9:.2f} s/GB, resident before: "
                      f"{resident}, peak RSS "
                      f"{record['peak_mb']:.0f} MB)", flush=True)
    for round_ in range(args.naive_rounds):
        raw_read(files)
        record = run_child("naive", args.folder, str(REPO))
        runs.setdefault(("warm", "naive"), []).append(record)
        print(f"  warm naive        round {round_ + 1}: {record['bytes'] / record['seconds'] / 1e9:6.2f} GB/s "
              f"({record['seconds']:.1f} s, CPU {record['cpu_s'] / record['bytes'] * 1e9:.2f} s/GB, peak RSS "
              f"{record['peak_mb']:.0f} MB)", flush=True)
    print(f"load average after: {load_average()}\n")

    def rate(state: str, label: str, how: str) -> float:
        records = runs[state, label]
        speeds = [r["bytes"] / r["seconds"] / 1e9 for r in records]
        return max(speeds) if how == "best" else statistics.median(speeds)

    print(f"{'':14s}{'cold best':>10s}{'median':>8s}{'warm best':>11s}{'median':>8s}   GB/s (CPU machine)   "
          f"CPU s/GB warm   peak RSS (before reading)")
    for label in [r[0] for r in readers] + (["naive"] if args.naive_rounds else []):
        cells = ""
        for state in ("cold", "warm"):
            if (state, label) in runs:
                cells += f"{rate(state, label, 'best'):{10 if state == 'cold' else 11}.2f}{rate(state, label, 'median'):8.2f}"
            else:
                cells += f"{'-':>{10 if state == 'cold' else 11}s}{'-':>8s}"
        records = [r for state in ("cold", "warm") for r in runs.get((state, label), [])]
        peak = max(r["peak_mb"] for r in records)
        before = max(r["rss_before_mb"] for r in records)
        cpu = statistics.median(r["cpu_s"] / r["bytes"] * 1e9 for r in runs[("warm", label)])
        print(f"{label:14s}{cells}   {'':18s}{cpu:8.3f}        {peak:6.0f} MB ({before:.0f} MB)")
    print("\nratios (GB/s over GB/s, same run):")
    for label in [r[0] for r in readers if r[1] == "scan"]:
        for state, target in (("cold", 0.8), ("warm", 0.5)):
            best = rate(state, label, "best") / rate(state, "raw read", "best")
            median = rate(state, label, "median") / rate(state, "raw read", "median")
            print(f"  {label} / raw read, {state}: {best:.2f} best, {median:.2f} median (target >= {target})")
        if args.naive_rounds:
            print(f"  {label} / naive, warm: {rate('warm', label, 'best') / rate('warm', 'naive', 'best'):.1f}x best")
    digests = {label: {r["digest"] for state in ("cold", "warm") for r in runs[state, label]}
               for label, kind, _ in readers if kind == "scan"}
    findings = {label: runs["cold", label][0]["findings"] for label, kind, _ in readers if kind == "scan"}
    if len({d for ds in digests.values() for d in ds}) != 1:
        print(f"\nMISMATCH: the scans' checksums / NaN-Inf counts differ: {digests}")
        return 1
    print(f"\nevery scan gave the same checksums and NaN/Inf counts (digest {next(iter(digests['scan']))}); "
          f"findings: {findings['scan'] or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
