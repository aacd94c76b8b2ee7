"""``hyport infer``: the N-card inference grid from the command line.

The same :func:`hyport_lib.inference.grid.run_grid` as notebook 03, with a progress
bar on stderr instead of the live table. Exit status: 0 when every launched card
finished (busy cards skipped are not failures), 1 when a card failed or timed out or
none ran, 2 on bad arguments, 128 + the signal number when stopped by SIGTERM or SIGHUP
(``timeout``, ``kill``, a closed terminal, a service stop).

SIGTERM and SIGHUP would otherwise end the process on the spot, skipping the grid's
cleanup; they are turned into ``SystemExit`` so that the workers' process groups are
killed and their logs scrubbed before hyport exits. (Even without that, the workers
follow the launcher's exit: see :mod:`hyport_lib.inference.grid`.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading

NAME = "infer"
HELP = "run the same generation on every card, one fresh process per card, and compare"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help="auto, npu, cuda or cpu (default auto)")
    parser.add_argument("--model-path", default="tiny", help="checkpoint folder or 'tiny' (default)")
    parser.add_argument("--num-cards", type=int, default=None,
                        help="cards to use (default: all available; CPU: 2 worker processes)")
    parser.add_argument("--prompt", default=None, help="the single prompt (default: the library's)")
    parser.add_argument("--batch-prompt", dest="batch_prompts", action="append", default=None,
                        metavar="PROMPT", type=lambda text: (text, False),
                        help="a text-only prompt of the batch (repeatable, keeps order with "
                             "--batch-image-prompt; default: the library's batch)")
    parser.add_argument("--batch-image-prompt", dest="batch_prompts", action="append",
                        metavar="PROMPT", type=lambda text: (text, True),
                        help="a prompt of the batch that comes with the image (repeatable)")
    parser.add_argument("--image", default=None,
                        help="image file for every image prompt (default: the built-in sample)")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    parser.add_argument("--attn-implementation", default="eager")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per-card limit in seconds")
    parser.add_argument("--allow-busy-cards", action="store_true",
                        help="also use cards another process holds (nothing is ever killed)")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--enable-thinking", action="store_true")
    parser.add_argument("--log-dir", default=None, help="folder for card<N>.log/.json")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-record", action="store_true",
                        help="do not write the 03_inference result file")


def _config(args: argparse.Namespace):
    from hyport_lib.inference.generate import InferenceConfig

    fields = dict(model_path=args.model_path, dtype=args.dtype,
                  attn_implementation=args.attn_implementation,
                  max_new_tokens=args.max_new_tokens, image=args.image,
                  trust_remote_code=args.trust_remote_code, enable_thinking=args.enable_thinking)
    if args.prompt is not None:
        fields["single_prompt"] = args.prompt
    if args.batch_prompts:
        fields["batch_prompts"] = list(args.batch_prompts)
    return InferenceConfig(**fields)


class _ProgressBar:
    """``on_update`` callback drawing a tqdm bar on stderr."""

    def __init__(self):
        self.bar = None

    def __call__(self, progress) -> None:
        from tqdm import tqdm

        if self.bar is None:
            self.bar = tqdm(total=progress.total, file=sys.stderr, desc="cards", unit="card",
                            initial=progress.done)
        counts = progress.frame["status"].value_counts().to_dict()
        self.bar.set_postfix_str(", ".join(f"{n} {s}" for s, n in sorted(counts.items())), refresh=False)
        self.bar.update(progress.done - self.bar.n)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


#: Signals that stop ``hyport infer`` through the grid's cleanup.
STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


@contextlib.contextmanager
def exit_on_stop_signals():
    """Within the block, SIGTERM/SIGHUP raise ``SystemExit(128 + signum)``.

    The first one raises; after it the default actions are back, so a second signal
    still ends a cleanup that hangs. Outside the main thread (where Python cannot set
    handlers) nothing changes. The previous handlers are restored on the way out.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}

    def stop(signum, frame):
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        raise SystemExit(128 + signum)

    for sig in STOP_SIGNALS:
        signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def run(args: argparse.Namespace) -> int:
    from hyport_lib.inference.grid import grid_verdict, record_grid, run_grid
    from hyport_lib.inference.show import compact_frame

    bar = _ProgressBar()
    try:
        with exit_on_stop_signals():
            result = run_grid(_config(args), device=args.device, num_cards=args.num_cards,
                              timeout_s=args.timeout_s, allow_busy_cards=args.allow_busy_cards,
                              log_dir=args.log_dir, on_update=bar)
    except (ValueError, RuntimeError, TypeError, FileNotFoundError) as exc:
        print(f"hyport infer: {exc}", file=sys.stderr)
        return 2
    finally:
        bar.close()
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        print(compact_frame(result.frame).round(3).to_string(index=False, na_rep=""))
        print()
        print(result.consistency_line)
        print(f"logs: {result.log_dir}   wall {result.wall_s:.1f}s   ({result.provenance.label})")
    if not args.no_record:
        path = record_grid(result)
        print(f"result: {path}", file=sys.stderr)
    counts = result.counts
    verdict = grid_verdict(result)
    return 1 if verdict == "FAIL" or counts["failed"] or counts["timeout"] else 0
