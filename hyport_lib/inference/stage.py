"""Stage 03: inference on every card, of one host or of several (``nnodes``: each host runs
its own cards, node 0 merges them, :mod:`.hosts`); the plan checks everything and writes
nothing."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Callable, Optional

from hyport_lib.backend import get_backend
from hyport_lib.devices.card_plan import plan_grid
from hyport_lib.inference.agreement import NOT_WAITED_FOR
from hyport_lib.inference.grid import GridProgress, GridResult, InferencePlan, given, ok_median, run_grid
from hyport_lib.inference.hosts import run_node
from hyport_lib.inference.memory_plan import plan_memory, sequence_note
from hyport_lib.inference.params import Params
from hyport_lib.memory.shape import model_shape
from hyport_lib.models.generation import batch_prompts, check_processor, check_prompts, single_prompt
from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.loading import load_processor, tokenizer_of
from hyport_lib.models.preflight import check_decoder_only, check_model_path
from hyport_lib.models.prompts import PromptNotApplicable, encode_prompts
from hyport_lib.models.tiny import MARKER_FILE, TINY_MODEL_NAME, tiny_model_dir
from hyport_lib.params import ParameterError
from hyport_lib.proof.choice import GRID, ProofBatch, choose_attention
from hyport_lib.results import INTERRUPTED, RUN_DIR_ENV, StageSummary, fresh_folder_beside_results
from hyport_lib.utils.printable import first_line
from hyport_lib.utils.redact import scrub_text
from hyport_lib.utils.wording import counted

STAGE = "03_inference"
RESULT = GridResult


def plan(params: Params) -> InferencePlan:
    """Every check the grid needs (cards, log folder, model, memory, prompts), refused here
    in one line rather than once per card; the workers' attention chosen and a swap proven.
    Nothing is written but hyport's cache (a proof, and the tiny model a proof needs).

    Raises:
        ParameterError: ``log_dir`` names a file, or a place no folder can be made in.
        ValueError: a parameter (named) this host or model cannot take; DoesNotFit where the
            cards or the host cannot hold the grid (the memory model's figures).
        RuntimeError: the device kind asked for is not usable here.
    """
    backend = get_backend(params.device, num_cards=params.num_cards)
    card_plan = plan_grid(backend, num_cards=params.num_cards, allow_busy_cards=params.allow_busy_cards)
    log_dir = Path(params.log_dir).expanduser().resolve() if params.log_dir else _default_log_dir(params)
    _check_log_dir(log_dir, named=params.log_dir is not None)
    model_path = params.model_path
    # "tiny" is built when the grid runs, or for a swap's proof; it takes every prompt.
    if model_path != TINY_MODEL_NAME:
        model_path = check_model_path(model_path, allow_download=params.allow_download)
        check_decoder_only(model_path, "stage 03")  # in the plan, not once per card
    # The parameters of the same name; each worker sets its own device.
    same_name = {f.name: getattr(params, f.name) for f in dataclasses.fields(InferenceConfig)
                 if f.name != "device" and hasattr(params, f.name)}
    config = InferenceConfig(**{**same_name, "model_path": model_path,
                                "batch_prompts": tuple(map(tuple, params.batch_prompts))})
    notes = []
    memory = None
    folder = _planned_folder(model_path)
    if folder is not None:
        # Memory first: a grid the cards cannot hold is refused before its prompts are judged.
        try:
            shape = model_shape(folder, trust_remote_code=params.trust_remote_code)
        except Exception as exc:  # noqa: BLE001 — a model transformers cannot build: every worker
            # says so in its card's row (scrubbed); the plan says it could not size it.
            notes.append(scrub_text(f"memory: not planned (the model's size could not be read: "
                                    f"{type(exc).__name__}: {first_line(exc)})")[:400])
        else:
            memory = plan_memory(backend, shape, folder, config, len(card_plan.to_run),
                                 card_memory_gib=params.card_memory_gib)
            notes += [f"memory: {line}" for line in memory.lines()] + [sequence_note(config)]
    if Path(model_path).is_dir():
        check_prompts(config, model_path)
        check_processor(config, model_path)
    attention = choose_attention(params.attn_implementation, backend.kind, GRID, config.model_path,
                                 lambda folder: _proof_batches(dataclasses.replace(config, model_path=folder)),
                                 trust_remote_code=config.trust_remote_code)
    config = dataclasses.replace(config, attn_implementation=attention.attn_implementation)
    if attention.note:
        notes.append(f"attention: {attention.note}")
    return InferencePlan(params=params, backend=backend, card_plan=card_plan, config=config, log_dir=log_dir,
                         attention=attention, notes=notes, memory=memory)


def _proof_batches(config: InferenceConfig) -> list[ProofBatch]:
    """The single prompt and the batch, each encoded as the workers encode them."""
    loaded = load_processor(config.model_path, trust_remote_code=config.trust_remote_code)
    tokenizer_of(loaded.processor).padding_side = "left"
    try:
        groups = [("the single prompt", [single_prompt(loaded, config)])]
    except PromptNotApplicable:
        groups = []  # the grid leaves it out (skip_not_applicable); the batch is proven
    batch, _ = batch_prompts(loaded, config)
    groups += [("the batch prompts", batch)] if batch else []
    if not groups:
        raise ValueError("attn_implementation: no prompt of this grid fits the model, so the swap cannot be "
                         "proven on it")
    return [(label, encode_prompts(loaded, prompts, enable_thinking=config.enable_thinking), None)
            for label, prompts in groups]


def _planned_folder(model_path: str) -> Optional[str]:
    """The folder the memory plan reads: a checked folder, or the tiny model's once it is
    built (the grid builds it; a hub id is not read before a worker downloads it)."""
    if model_path == TINY_MODEL_NAME:
        tiny = tiny_model_dir()
        return str(tiny) if (tiny / MARKER_FILE).is_file() else None
    return model_path if Path(model_path).is_dir() else None


def _default_log_dir(params: Params) -> Path:
    """One host: a fresh folder beside the results. Several: the folder where the hosts meet,
    the same on every node: ``<run>/inference_logs`` of a report run (its run folder is on shared
    storage, given to every node), else none (it must be named)."""
    if params.nnodes == 1:
        return fresh_folder_beside_results("inference_logs")
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        raise ParameterError([f"nnodes={params.nnodes}: log_dir must name the folder every host shares "
                              "(the hosts meet there: storage they all see)"])
    return Path(run_dir) / "inference_logs"


def _check_log_dir(log_dir: Path, *, named: bool) -> None:
    """ParameterError unless ``log_dir`` exists or can be made (its nearest existing parent
    is a writable folder)."""
    shown = f"log_dir={str(log_dir)!r}" if named else f"log_dir=None (the default folder {log_dir})"
    existing = log_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == log_dir else f"lies under the file {existing}"
        raise ParameterError([f"{shown}: not a writable folder (it {what})"])
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ParameterError([f"{shown}: not a writable folder ({existing} is not writable)"])


def run(plan: InferencePlan, *, on_progress: Optional[Callable[[GridProgress], None]] = None) -> GridResult:
    if plan.params.nnodes > 1:
        return run_node(plan, on_progress=on_progress)
    return run_grid(plan, on_progress=on_progress)


def summarize(result: GridResult) -> StageSummary:
    """PASS: every launched card ok and all agree; WARN: ok but busy cards skipped or
    outputs differ; FAIL: a card failed or timed out, or none ran, or (several hosts) a
    node never reported or ran another plan; INTERRUPTED: stopped before every card
    finished. A node > 0 judges its own cards and says the job's verdict is node 0's."""
    counts = result.counts
    not_waited_for = any(entry.note == NOT_WAITED_FOR for entry in result.nodes)
    if counts["failed"] or counts["timeout"]:
        verdict = "FAIL"
    elif any(entry.note and entry.note != NOT_WAITED_FOR for entry in result.nodes):
        verdict = "FAIL"
    elif counts["interrupted"] or counts["not-started"] or not_waited_for:
        verdict = INTERRUPTED
    elif counts["ok"] == 0:
        verdict = "FAIL"
    elif counts["skipped-busy"] or not result.consistent:
        verdict = "WARN"
    else:
        verdict = "PASS"
    line = result.consistency_line
    if counts["interrupted"] or counts["not-started"]:
        line = f"{_stopped_cards(counts)} {line}"
    if result.node_rank > 0:
        line = (f"node {result.node_rank} of {result.nnodes} (host {result.host}) ran its own cards: {line} "
                f"The job's record, its merged grid and verdict, is node 0's.")
    return StageSummary(verdict, line, _headline(result))


def _stopped_cards(counts: dict[str, int]) -> str:
    """``Stopped: 0 of 2 cards finished (2 stopped running, 0 not started).``"""
    ended = counts["ok"] + counts["failed"] + counts["timeout"]
    planned = ended + counts["interrupted"] + counts["not-started"]
    return (f"Stopped: {ended} of {counted(planned, 'card')} finished ({counts['interrupted']} stopped running, "
            f"{counts['not-started']} not started).")


def _headline(result: GridResult) -> dict:
    ok = result.frame[result.frame["status"] == "ok"]
    launched = len(result.frame) - result.counts["skipped-busy"]

    def median(col):
        value = ok_median(result.frame, col)
        return None if value is None else round(value, 3)

    hosts = {"hosts": result.hosts_cards} if result.merged else \
        {"node": f"{result.node_rank} of {result.nnodes}"} if result.nnodes > 1 else {}
    return {
        **hosts,
        "cards ok": f"{len(ok)}/{launched}",
        "skipped busy": result.counts["skipped-busy"],
        "consistent": bool(result.consistent),
        "tokens/s incl. prefill (median)": median("tokens_per_s"),
        "decode tokens/s (median)": median("decode_tokens_per_s"),
        "load s (median)": median("load_s"),
        "cold first call s (median)": median("cold_s"),
        "first token s (median)": median("first_token_s"),
        "CPU fallback warnings": int(sum(int(v) for v in result.frame["cpu_fallback_warnings"] if given(v))),
    }
