"""``hyport infer``: the N-card inference grid from the command line.

The same stage functions as notebook 03 (:mod:`hyport_lib.inference.stage`: plan, then
run that plan), with a progress bar on stderr instead of the live table. Exit status:
0 when every launched card finished (busy cards skipped are not failures), 1 when a
card failed or timed out or none ran, 2 on bad arguments, 130 when stopped (Ctrl-C,
SIGTERM, SIGHUP: see :mod:`hyport_lib.commands._cli`); the grid's cleanup kills the
workers' process groups and scrubs their logs first. (Even without that, the workers
follow the launcher's exit: see :mod:`hyport_lib.processes`.)
"""

from __future__ import annotations

import argparse
import sys

from hyport_lib.commands._cli import run_showing_partial
from hyport_lib.commands._progress import TerminalBar
from hyport_lib.utils.files import dumps_json

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
    parser.add_argument("--warmup-runs", type=int, default=1,
                        help="untimed generate calls first (their cost is start-up, reported "
                             "as cold_s); default 1")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16")
    parser.add_argument("--attn-implementation", default="eager")
    parser.add_argument("--timeout-s", type=float, default=300.0, help="per-card limit in seconds")
    parser.add_argument("--allow-busy-cards", action="store_true",
                        help="also use cards another process holds (nothing is ever killed)")
    parser.add_argument("--trust-remote-code", action="store_true")
    parser.add_argument("--allow-download", action="store_true",
                        help="a --model-path that is no folder may be a hub id to download "
                             "(off: offline, a typo is an error)")
    parser.add_argument("--enable-thinking", action="store_true")
    parser.add_argument("--skip-not-applicable", action="store_true",
                        help="leave out prompts this model cannot take (image prompts for a "
                             "text-only model) instead of refusing them")
    parser.add_argument("--log-dir", default=None, help="folder for card<N>.log/.json")
    parser.add_argument("--json", action="store_true", help="print the full result as JSON")
    parser.add_argument("--no-record", action="store_true",
                        help="do not write the 03_inference result file")


def _config(args: argparse.Namespace):
    from hyport_lib.models.generation_config import InferenceConfig

    fields = dict(model_path=args.model_path, dtype=args.dtype,
                  attn_implementation=args.attn_implementation,
                  max_new_tokens=args.max_new_tokens, image=args.image,
                  trust_remote_code=args.trust_remote_code, enable_thinking=args.enable_thinking,
                  allow_download=args.allow_download, warmup_runs=args.warmup_runs,
                  skip_not_applicable=args.skip_not_applicable)
    if args.prompt is not None:
        fields["single_prompt"] = args.prompt
    if args.batch_prompts:
        fields["batch_prompts"] = list(args.batch_prompts)
    return InferenceConfig(**fields)


def _status_counts(progress) -> str:
    counts = progress.frame["status"].value_counts().to_dict()
    return ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))


def run(args: argparse.Namespace) -> int:
    from hyport_lib.backend import get_backend
    from hyport_lib.inference import stage

    if not args.no_record:
        from hyport_lib.results import ensure_results_dir

        ensure_results_dir()
    backend = get_backend(args.device, num_cards=args.num_cards)
    config = _config(args)
    plan = stage.plan(backend, num_cards=args.num_cards, allow_busy_cards=args.allow_busy_cards)
    bar = TerminalBar("cards", "card", total=lambda p: p.total, done=lambda p: p.done,
                      postfix=_status_counts)

    def grid():
        return stage.run(config, backend=backend, plan=plan, timeout_s=args.timeout_s,
                         log_dir=args.log_dir, on_update=bar)

    # Stopped: the cards that finished are shown and recorded.
    return run_showing_partial(grid, bar, lambda result: _show(result, args))


def _show(result, args) -> int:
    from hyport_lib.inference import stage
    from hyport_lib.inference.show import compact_frame

    if args.json:
        print(dumps_json(result.to_dict(), indent=2))
    else:
        print(compact_frame(result.frame).round(3).to_string(index=False, na_rep=""))
        print()
        print(result.consistency_line)
        print(f"logs: {result.log_dir}   wall {result.wall_s:.1f}s   ({result.provenance.label})")
    if not args.no_record:
        print(f"result: {stage.record(result)}", file=sys.stderr)
    counts = result.counts
    verdict = stage.summarize(result).verdict
    return 1 if verdict == "FAIL" or counts["failed"] or counts["timeout"] else 0
