"""Full-scan speed at real size, side by side in one run (prints ratios; not a test).

On one checkpoint folder (``bench/build_random_checkpoint.py`` builds a 7 B one), each of
these reads the ``*.safetensors`` files whole, in a child process of its own:

- **raw read**: ``readinto`` of a reused 2 MiB buffer, nothing done with the bytes (the
  reference; the buffer size the issue's ratios used);
- **scan**: hyport's :func:`full_scan` (NaN/Inf count + XXH3 per tensor) from this tree;
- **scan before** (``--before OTHER_CHECKOUT``): the same from another checkout (the main
  branch's worktree, say), so the gain is measured beside the raw read in the same run;
- **naive**: ``safe_open`` + ``torch.isfinite`` per tensor (warm only, ``--naive-rounds``).

Cold: every file dropped from the page cache with ``posix_fadvise(DONTNEED)`` before the run
(works without root for clean pages; ``fincore``, when installed, shows what stayed). Warm:
the files read once by the parent just before the run. Warm runs read only the first files
that fit in 80 % of ``MemAvailable`` (all of them when they fit; the note says when not), so
that "warm" is never half cold. The readers take turns, each round starting with the next
one, so that the load of a shared machine hits all alike; best and median of ``--rounds``
are printed, with the load average and each reader's CPU seconds per GB (the ratio of
those is what a machine with no core to spare would see). Peak RSS is each child's
``ru_maxrss`` (imports included), beside its RSS just before it started reading. The scan
children print a digest of all their checksums and NaN/Inf counts: scans that disagree
are reported, and the run fails.

    .venv/bin/python bench/scan_speed.py FOLDER [--rounds 3] [--before OTHER_CHECKOUT] [--naive-rounds 1]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_weights import drop, resident  # bench/ is this script's folder on sys.path

REPO = Path(__file__).resolve().parents[1]
RAW_BUFFER = 2 << 20
#: The share of MemAvailable the warm runs' files may take in the page cache.
WARM_SHARE = 0.8


def rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def raw_read(files: list[Path]) -> int:
    view = memoryview(bytearray(RAW_BUFFER))
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return total


# ---- the children: each prints one JSON line -------------------------------------------------

def child_raw(files: list[Path], _repo: str) -> dict:
    before, started, cpu = rss_mb(), time.perf_counter(), cpu_s()
    nbytes = raw_read(files)
    return {"seconds": time.perf_counter() - started, "cpu_s": cpu_s() - cpu, "bytes": nbytes,
            "rss_before_mb": before}


def child_scan(files: list[Path], repo: str) -> dict:
    sys.path.insert(0, repo)  # ahead of the editable install's finder: that checkout's hyport_lib
    import hashlib

    import hyport_lib
    from hyport_lib.checkpoint_files.header import read_header
    from hyport_lib.weights.scan import full_scan

    if not hyport_lib.__file__.startswith(str(Path(repo).resolve())):
        raise SystemExit(f"error: imported {hyport_lib.__file__}, not the one under {repo}")
    shards = [read_header(path) for path in files]
    before, started, cpu = rss_mb(), time.perf_counter(), cpu_s()
    result = full_scan(shards)
    seconds, cpu = time.perf_counter() - started, cpu_s() - cpu
    digest = hashlib.sha256(json.dumps({k: [t.checksum, t.nan, t.inf] for k, t in sorted(result.tensors.items())})
                            .encode()).hexdigest()[:16]
    return {"seconds": seconds, "cpu_s": cpu, "bytes": result.bytes_read, "rss_before_mb": before,
            "digest": digest, "tensors": len(result.tensors),
            "findings": [f"{f.cls}: {f.message}" for f in result.findings]}


def child_naive(files: list[Path], _repo: str) -> dict:
    import torch
    from safetensors import safe_open

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
# (bench_weights.py drops files from the page cache and reads what stays, for both benches)

def mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("error: no MemAvailable in /proc/meminfo")


def run_child(kind: str, files: list[Path], repo: str) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", kind, "--repo", repo, *map(str, files)],
                         capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"error: the {kind} child ({repo}) failed with {out.returncode}:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def gb_s(record: dict) -> float:
    return record["bytes"] / record["seconds"] / 1e9


def cpu_per_gb(record: dict) -> float:
    return record["cpu_s"] / record["bytes"] * 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", type=Path, help="the checkpoint folder (or, in a child, its files)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--before", default=None, help="another checkout whose full_scan runs beside this one's")
    parser.add_argument("--naive-rounds", type=int, default=1, help="0 leaves the naive loop out")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--repo", default=str(REPO), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        record = CHILDREN[args.child](args.paths, args.repo)
        record["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        print(json.dumps(record))
        return 0
    if len(args.paths) != 1 or not args.paths[0].is_dir():
        parser.error(f"expected one checkpoint folder, got {' '.join(map(str, args.paths))}")
    folder = args.paths[0]
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        parser.error(f"no *.safetensors file in {folder}")
    size = sum(p.stat().st_size for p in files)

    drop(files)
    room = WARM_SHARE * mem_available()
    warm_files = []
    for path in files:
        if sum(p.stat().st_size for p in warm_files) + path.stat().st_size > room:
            break
        warm_files.append(path)
    warm_size = sum(p.stat().st_size for p in warm_files)
    print(f"{folder}: {len(files)} file(s), {size / 1e9:.2f} GB; {os.cpu_count()} CPU(s); "
          f"load average before: {load_average()}")
    if not warm_files:
        parser.error(f"not even the first file fits in {room / 1e9:.1f} GB of page cache: no warm run possible")
    if warm_files != files:
        print(f"note: {size / 1e9:.2f} GB do not fit in {WARM_SHARE:.0%} of the {mem_available() / 1e9:.1f} GB "
              f"available: warm runs read the first {len(warm_files)} file(s), {warm_size / 1e9:.2f} GB")

    readers = [("raw read", "raw", str(REPO)), ("scan", "scan", str(REPO))]
    if args.before:
        readers.append(("scan before", "scan", str(Path(args.before).resolve())))
    runs: dict[tuple[str, str], list[dict]] = {}
    for state, subset in (("cold", files), ("warm", warm_files)):
        for round_ in range(args.rounds):
            turn = round_ % len(readers)
            for label, kind, repo in readers[turn:] + readers[:turn]:
                if state == "cold":
                    drop(files)
                else:
                    raw_read(subset)  # the first read fills the page cache; the child's is counted
                cached = resident(subset)
                record = run_child(kind, subset, repo)
                runs.setdefault((state, label), []).append(record)
                print(f"  {state} {label:12s} round {round_ + 1}: {gb_s(record):6.2f} GB/s ({record['seconds']:.1f} s, "
                      f"CPU {cpu_per_gb(record):.3f} s/GB, resident before: {cached}, "
                      f"peak RSS {record['peak_mb']:.0f} MB)", flush=True)
    for round_ in range(args.naive_rounds):
        raw_read(warm_files)
        record = run_child("naive", warm_files, str(REPO))
        runs.setdefault(("warm", "naive"), []).append(record)
        print(f"  warm naive        round {round_ + 1}: {gb_s(record):6.2f} GB/s ({record['seconds']:.1f} s, "
              f"CPU {cpu_per_gb(record):.3f} s/GB, peak RSS {record['peak_mb']:.0f} MB)", flush=True)
    drop(files)
    print(f"load average after: {load_average()}\n")

    def rate(state: str, label: str, how: str) -> float:
        speeds = [gb_s(r) for r in runs[state, label]]
        return max(speeds) if how == "best" else statistics.median(speeds)

    def cpu(label: str) -> float:
        return statistics.median(cpu_per_gb(r) for r in runs["warm", label])

    print(f"GB/s on this CPU machine; cold: {size / 1e9:.2f} GB, warm: {warm_size / 1e9:.2f} GB")
    print(f"{'':14s}{'cold best':>10s}{'median':>8s}{'warm best':>11s}{'median':>8s}{'CPU s/GB warm':>15s}"
          f"   peak RSS (before reading)")
    labels = [r[0] for r in readers] + (["naive"] if args.naive_rounds else [])
    for label in labels:
        cells = ""
        for state, width in (("cold", 10), ("warm", 11)):
            if (state, label) in runs:
                cells += f"{rate(state, label, 'best'):{width}.2f}{rate(state, label, 'median'):8.2f}"
            else:
                cells += f"{'-':>{width}s}{'-':>8s}"
        records = [r for state in ("cold", "warm") for r in runs.get((state, label), [])]
        peak = max(r["peak_mb"] for r in records)
        before = max(r["rss_before_mb"] for r in records)
        print(f"{label:14s}{cells}{cpu(label):15.3f}   {peak:6.0f} MB ({before:.0f} MB)")
    print("\nratios (GB/s over GB/s, same run):")
    for label in [r[0] for r in readers if r[1] == "scan"]:
        for state, target in (("cold", 0.8), ("warm", 0.5)):
            best = rate(state, label, "best") / rate(state, "raw read", "best")
            median = rate(state, label, "median") / rate(state, "raw read", "median")
            print(f"  {label} / raw read, {state}: {best:.2f} best, {median:.2f} median (target >= {target})")
        print(f"  {label} / raw read, CPU per GB warm, inverted: {cpu('raw read') / cpu(label):.2f} "
              f"(the warm ratio with no core to spare)")
        if args.naive_rounds:
            print(f"  {label} / naive, warm: {rate('warm', label, 'best') / rate('warm', 'naive', 'best'):.1f}x best")
    digests = {label: {r["digest"] for state in ("cold", "warm") for r in runs[state, label]}
               for label, kind, _ in readers if kind == "scan"}
    cold_digests = {label: {r["digest"] for r in runs["cold", label]} for label, kind, _ in readers if kind == "scan"}
    findings = runs["cold", "scan"][0]["findings"]
    if len({d for ds in cold_digests.values() for d in ds}) != 1 or \
            len({d for label, ds in digests.items() for d in ds - cold_digests[label]}) > 1:
        print(f"\nMISMATCH: the scans' checksums / NaN-Inf counts differ: {digests}")
        return 1
    print(f"\nevery scan of the same files gave the same checksums and NaN/Inf counts; findings: {findings or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
