"""Benchmark stage 05's readers (prints ratios; not a test).

(a) **Header-only inspection follows the tensor count, not the bytes.** Two synthetic
    checkpoints with the same number of tensors (two shards and an index each), about
    100 MB and about 2 GB, are inspected alternately (``inspect_checkpoint`` without the
    model class: headers, index cross-checks, safetensors' own validation). Target: the
    time ratio big / small near 1.
(b) **The full scan keeps up with the disk.** The full scan (NaN/Inf + a checksum per
    tensor; two workers, each reading, checking and hashing its own tensors) of the big checkpoint with
    each checksum (``xxh3``, the default; ``crc32``; ``sha256``) against a raw sequential
    read of the same files (``readinto`` of the scan's chunk size into one buffer, nothing
    done with the bytes). All are timed cold (the files dropped from the page cache with
    ``posix_fadvise(DONTNEED)`` after an ``fsync``; ``fincore`` shows the resident bytes
    when installed) and warm (each run twice, the second counted), interleaved, in
    ``--rounds`` rounds (10), each round starting with the next reader so that every
    reader runs in every position: this VM's disk alternates between two speeds from one
    read to the next, and with a fixed order the second and fourth readers always met the
    slow one. The ratios of the best runs and of the medians are both printed, beside the
    ratio of a second raw read to the first: the noise any ratio carries. Targets for
    the default: scan / raw throughput >= 0.8 cold (from the disk) and
    >= 0.5 warm (from the page cache, where the raw read is a memory copy and the scan
    is bound by the CPU); the other two checksums are printed beside it so the gain
    shows. The load average is printed before and after, since on a shared machine the
    ratios move with it. The scan's peak memory is measured in a child process
    (``VmHWM``, reset before the scan).

The files are written with plain file writes (a 16 MiB block of finite bfloat16 values
repeated, never the whole checkpoint in memory), scaled down with a message when the
disk lacks room, and deleted afterwards.

    .venv/bin/python bench/bench_weights.py [--tensors 1000] [--small-mb 100] [--big-mb 2048]
                                            [--repeats 15] [--rounds 10] [--dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hyport_lib.weights.layout import inspect_checkpoint  # noqa: E402
from hyport_lib.weights.checksums import DEFAULT_CHECKSUM, HASHERS  # noqa: E402
from hyport_lib.weights.scan import CHUNK_BYTES, full_scan  # noqa: E402

BLOCK = 16 << 20


def finite_block() -> bytes:
    import numpy as np

    values = np.random.default_rng(0).standard_normal(BLOCK // 2).astype(np.float32)
    return (values.view(np.uint32) >> 16).astype(np.uint16).tobytes()  # bf16, all finite


def write_checkpoint(folder: Path, tensors: int, total_bytes: int, block: bytes) -> list[Path]:
    """Two BF16 shards and an index; every tensor the same size."""
    folder.mkdir(parents=True)
    per = max(2, (total_bytes // tensors) // 2 * 2)
    names = [f"model.layers.{i}.weight" for i in range(tensors)]
    halves = [names[: tensors // 2], names[tensors // 2:]]
    files, weight_map = [], {}
    for i, part in enumerate(halves, 1):
        name = f"model-{i:05d}-of-00002.safetensors"
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for key in part:
            header[key] = {"dtype": "BF16", "shape": [per // 2], "data_offsets": [offset, offset + per]}
            weight_map[key] = name
            offset += per
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * ((-len(text)) % 8)
        path = folder / name
        with open(path, "wb") as fh:
            fh.write(struct.pack("<Q", len(text)) + text)
            left = offset
            while left:
                n = min(len(block), left)
                fh.write(block[:n] if n < len(block) else block)
                left -= n
            fh.flush()
            os.fsync(fh.fileno())  # DONTNEED drops only clean pages
        files.append(path)
    index = {"metadata": {"total_size": per * tensors}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return files


def drop(paths) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident(paths) -> str:
    """Resident bytes of the files in the page cache (``fincore``), or '?'."""
    if not shutil.which("fincore"):
        return "?"
    try:
        out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", *map(str, paths)],
                             capture_output=True, text=True, check=True).stdout.split()
        return f"{sum(int(x) for x in out) / 1e6:,.0f} MB"
    except (subprocess.CalledProcessError, ValueError):
        return "?"


def raw_read(paths) -> tuple[float, int]:
    buf = bytearray(CHUNK_BYTES)  # the scan's read size; one buffer, so it stays in the cache
    view = memoryview(buf)
    total, started = 0, time.perf_counter()
    for path in paths:
        with open(path, "rb", buffering=0) as fh:
            while n := fh.readinto(view):
                total += n
    return time.perf_counter() - started, total


def scan(folder: Path, checksum: str) -> tuple[float, int]:
    shards = inspect_checkpoint(folder, with_model=False, validate=False).shards
    started = time.perf_counter()
    result = full_scan(shards, checksum=checksum)
    assert not result.findings, result.findings
    return time.perf_counter() - started, result.bytes_read


def scan_memory_mb(folder: Path) -> tuple[float, float]:
    """RSS before the scan and peak RSS during it, in a child (Linux: the peak is reset
    through ``/proc/self/clear_refs`` first, so import-time peaks do not hide it)."""
    code = ("import sys; sys.path.insert(0, %r)\n"
            "from hyport_lib.weights.layout import inspect_checkpoint\n"
            "from hyport_lib.weights.scan import full_scan\n"
            "def status(field):\n"
            "    for line in open('/proc/self/status'):\n"
            "        if line.startswith(field + ':'): return int(line.split()[1]) / 1024\n"
            "shards = inspect_checkpoint(%r, with_model=False).shards\n"
            "open('/proc/self/clear_refs', 'w').write('5')\n"
            "before = status('VmRSS')\n"
            "full_scan(shards)\n"
            "print(before, status('VmHWM'))\n") % (str(REPO), str(folder))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, peak = out.stdout.split()
    return float(before), float(peak)


def load_average() -> str:
    """The 1, 5 and 15 minute load averages (``/proc/loadavg``), or '?'."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=1000)
    parser.add_argument("--small-mb", type=int, default=100)
    parser.add_argument("--big-mb", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds of (b), cold and warm each "
                        "(a multiple of 5 puts every reader in every position equally often)")
    parser.add_argument("--dir", default=None, help="where to write the files (default: a temp folder)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hyport-bench-weights-", dir=args.dir))
    small_mb, big_mb = args.small_mb, args.big_mb
    free_mb = shutil.disk_usage(root).free // 2**20
    if (small_mb + big_mb) * 1.2 > free_mb:
        big_mb = max(small_mb * 2, int(free_mb / 1.2) - small_mb)
        print(f"note: only {free_mb:,} MiB free under {root}: the big checkpoint is scaled down to {big_mb} MiB")
    try:
        block = finite_block()
        t0 = time.perf_counter()
        small = write_checkpoint(root / "small", args.tensors, small_mb << 20, block)
        big = write_checkpoint(root / "big", args.tensors, big_mb << 20, block)
        del block
        size = lambda ps: sum(p.stat().st_size for p in ps)  # noqa: E731
        print(f"wrote {args.tensors} tensors twice: {size(small) / 1e6:,.0f} MB and {size(big) / 1e6:,.0f} MB "
              f"in {time.perf_counter() - t0:.1f} s ({root})")

        # (a) header-only inspection, alternating so drift hits both alike
        times = {"small": [], "big": []}
        for name in ("small", "big"):
            inspect_checkpoint(root / name, with_model=False)  # warm the imports and the headers
        for _ in range(args.repeats):
            for name in ("small", "big"):
                started = time.perf_counter()
                insp = inspect_checkpoint(root / name, with_model=False)
                times[name].append(time.perf_counter() - started)
                assert len(insp.tensors) == args.tensors, insp.findings
                assert [f.cls for f in insp.findings] == ["config_missing"], insp.findings
        med = {k: statistics.median(v) for k, v in times.items()}
        print("\n(a) header-only inspection (2 shards + index, safetensors validation included), "
              f"median of {args.repeats}")
        print(f"    {size(small) / 1e6:>8,.0f} MB: {med['small'] * 1e3:7.2f} ms")
        print(f"    {size(big) / 1e6:>8,.0f} MB: {med['big'] * 1e3:7.2f} ms")
        print(f"    ratio big/small: {med['big'] / med['small']:.2f} for {size(big) / size(small):.0f}x the bytes "
              f"(target: near 1)")

        # (b) full scan with each checksum against a raw sequential read, cold then warm
        algorithms = [DEFAULT_CHECKSUM] + [a for a in HASHERS if a != DEFAULT_CHECKSUM]
        print(f"\n(b) full scan (NaN/Inf + checksum) vs raw sequential read ({CHUNK_BYTES >> 20} MiB readinto), "
              f"{size(big) / 1e6:,.0f} MB; load average before: {load_average()}")
        # The same raw read twice: how far two identical readers differ is this disk's noise,
        # the margin any scan / raw ratio below carries.
        readers = [("raw read", lambda: raw_read(big)), ("raw again", lambda: raw_read(big))]
        readers += [(f"scan {a}", lambda a=a: scan(root / "big", a)) for a in algorithms]
        rates: dict[tuple[str, str, str], float] = {}
        for state in ("cold", "warm"):
            runs: dict[str, list[tuple[float, int, str]]] = {label: [] for label, _ in readers}
            for round_ in range(args.rounds):
                # interleaved, and each round starts with the next reader: every reader runs
                # in every position, so that the disk's mood (on this VM it alternates from
                # one read to the next) hits all alike
                turn = round_ % len(readers)
                for label, fn in readers[turn:] + readers[:turn]:
                    if state == "cold":
                        drop(big)
                    else:
                        fn()  # the first pass fills the cache; the second is counted
                    before = resident(big)
                    seconds, nbytes = fn()
                    runs[label].append((seconds, nbytes, before))
            for label, _ in readers:
                seconds, nbytes, before = min(runs[label])
                median = statistics.median(s for s, _, _ in runs[label])
                rates[state, label, "best"] = nbytes / seconds / 1e9
                rates[state, label, "median"] = nbytes / median / 1e9
                print(f"    {state:4s} {label:11s}: {seconds:6.2f} s  {rates[state, label, 'best']:6.2f} GB/s best, "
                      f"{rates[state, label, 'median']:6.2f} GB/s median of {args.rounds} "
                      f"(resident before the best: {before})")
        print(f"    load average after: {load_average()}")
        print("    scan / raw throughput:" + "".join(f"{a:>9s}" for a in algorithms) + "   raw again / raw (noise)")
        targets = {"cold": f"from the disk; target for {DEFAULT_CHECKSUM} >= 0.8",
                   "warm": f"from the page cache: CPU-bound; target for {DEFAULT_CHECKSUM} >= 0.5"}
        for state in ("cold", "warm"):
            for kind in ("best", "median"):
                ratios = "".join(f"{rates[state, f'scan {a}', kind] / rates[state, 'raw read', kind]:9.2f}"
                                 for a in algorithms)
                noise = rates[state, "raw again", kind] / rates[state, "raw read", kind]
                print(f"    {state + ', ' + kind:22s}{ratios}   {noise:9.2f}   ({targets[state]})")
        if Path("/proc/self/clear_refs").exists():
            before, peak = scan_memory_mb(root / "big")
            print(f"\n    memory of a full scan (child): RSS {before:.0f} MB before, peak {peak:.0f} MB during "
                  f"(+{peak - before:.0f} MB) for {size(big) / 1e6:,.0f} MB of weights")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
