"""One inference worker of the grid: one fresh process pinned to one card (index 0 inside).

Started by :func:`hyport_lib.inference.grid.run_grid` as
``python -m hyport_lib.inference.worker --result PATH``: ``{"card", "device_kind",
"num_threads", "inference"}`` arrives as one line on stdin, and the rest of stdin is the
lifeline that ends the worker with its launcher (:func:`hyport_lib.processes.start_guard`).
The result file is written atomically, a failure's too (status ``failed``); a worker that
dies writes none.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Optional, Sequence

from hyport_lib.backend import get_backend
from hyport_lib.models.generation import run_inference
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.processes import exit_without_teardown, start_guard
from hyport_lib.utils.files import atomic_write_json
from hyport_lib.utils.redact import scrub_obj, scrub_text


def load_spec() -> dict:
    """The worker spec: one JSON line on stdin (whatever follows belongs to the guard)."""
    try:
        spec = json.loads(sys.stdin.buffer.readline().decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"the worker spec on stdin is not a JSON object ({exc})") from exc
    if not isinstance(spec, dict) or "card" not in spec or "inference" not in spec:
        raise ValueError("the worker spec on stdin: expected an object with 'card' and 'inference'")
    return spec


def run_worker(spec: dict) -> dict:
    """Set the device, run the inference, measure memory; returns the result payload."""
    card = int(spec["card"])
    kind = spec.get("device_kind", "cpu")
    backend = get_backend(kind)
    backend.set_device(0)  # pinned: the card is index 0 in this process
    threads = spec.get("num_threads")
    if threads:
        import torch

        torch.set_num_threads(int(threads))
    config = InferenceConfig.from_dict({**spec["inference"], "device": backend.device(0)})
    backend.reset_peak_memory(0)
    outcome = run_inference(config)
    backend.synchronize(0)
    memory = backend.memory_stats(0)
    return {
        "card": card,
        "status": "ok",
        "device": backend.device(0),
        "device_kind": backend.kind,
        "outcome": outcome.to_dict(),
        "peak_memory_bytes": memory.peak,
        "memory_source": memory.source,
    }


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hyport_lib.inference.worker",
                                     description="One card of the hyport inference grid.")
    parser.add_argument("--result", required=True, help="where to write the result JSON")
    args = parser.parse_args(argv)
    started = time.monotonic()
    spec = load_spec()
    guard = start_guard()
    card = int(spec["card"])
    visible = {k: v for k, v in os.environ.items() if k.endswith("VISIBLE_DEVICES")}
    print(f"[hyport worker] card {card} pid {os.getpid()} kind {spec.get('device_kind')} "
          f"visible {visible or '-'}" + (f" guard pid {guard}" if guard else ""), flush=True)
    try:
        payload = run_worker(spec)
        code = 0
    except Exception as exc:  # the process boundary: record any failure, then exit non-zero
        # The traceback may quote the configuration (a model path, a prompt).
        sys.stderr.write(scrub_text(traceback.format_exc()))
        sys.stderr.flush()
        payload = {
            "card": card,
            "status": "failed",
            "error_type": type(exc).__name__,
            "error": scrub_text(str(exc))[:2000],
        }
        code = 1
    payload["pid"] = os.getpid()
    payload["wall_s"] = round(time.monotonic() - started, 3)
    atomic_write_json(args.result, scrub_obj(payload))
    print(f"[hyport worker] card {card} {payload['status']} in {payload['wall_s']:.1f}s", flush=True)
    if spec.get("device_kind", "cpu") == "cpu":
        exit_without_teardown(code)
    return code


if __name__ == "__main__":
    sys.exit(main())
