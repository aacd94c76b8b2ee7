"""The child side of :mod:`hyport_lib.port.proof_run` (``python -B -P -m
hyport_lib.port.proof_child``): one JSON line of configuration on stdin, the rest of stdin
for :func:`hyport_lib.processes.start_guard`; each step goes to the ``phase`` file before it
starts, the scrubbed record to the ``result`` file.
"""

from __future__ import annotations

import json
import sys

from hyport_lib.proof.port import prove_port
from hyport_lib.processes import exit_without_teardown, start_guard
from hyport_lib.utils.files import atomic_write_json, atomic_write_text
from hyport_lib.utils.redact import scrub_obj, scrub_text


def main() -> int:
    # One line only: what follows (end-of-file) is the guard's.
    spec = json.loads(sys.stdin.buffer.readline().decode("utf-8"))
    start_guard()
    # -B already says so; kept explicit because it is what keeps SRC byte-identical.
    sys.dont_write_bytecode = True

    def on_phase(phase: str) -> None:
        atomic_write_text(spec["phase"], phase)

    proof = prove_port(spec["src"], spec["dst"], dtype=spec["dtype"], seed=int(spec["seed"]),
                       config_overrides=spec["config_overrides"] or None, on_phase=on_phase,
                       config_setting=spec["config_setting"])
    record = scrub_obj(proof.to_dict())
    atomic_write_json(spec["result"], record)
    print(scrub_text(f"[hyport port proof] {record['verdict']}"), flush=True)
    # The model code's objects and threads are not torn down: its atexit handlers and
    # finalizers are its own business, not the proof's.
    exit_without_teardown(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
