"""The port of ``code_path`` as stage 02 tells it: the proof as a table and in words (for
the notebook's "Port it", :func:`hyport_lib.attention.show.show_port`), the index card's
line and the drafts' table of changes. Compute lives in :mod:`hyport_lib.port`."""

from __future__ import annotations

from hyport_lib.attention.stage import AttentionRecord
from hyport_lib.drafting.values import as_dict, as_list

PROOF_COLUMNS = ("name", "kind", "verdict", "max_abs", "bound", "cosine", "npu_calls",
                 "tokens_match", "detail")


def proof_frame(proof: dict):
    """The proof's cases as a DataFrame (one row per input case)."""
    import pandas as pd

    return pd.DataFrame([{c: case.get(c) for c in PROOF_COLUMNS} for case in proof.get("cases") or []],
                        columns=list(PROOF_COLUMNS))


def proof_markdown(proof: dict) -> str:
    """The proof's verdict and what was compared with what, as Markdown."""
    if proof.get("error"):
        return f"**Proof {proof.get('verdict')}**: {proof['error']}"
    lines = [f"**Proof {proof.get('verdict')}**: `{proof.get('model_class')}` "
             f"({proof.get('model_kind')}), tiny random weights, {proof.get('dtype')} on "
             f"{proof.get('device')}", "",
             f"- reference: {proof.get('reference')}",
             f"- port: {proof.get('ported_path')}"]
    lines += [f"- note: {n}" for n in proof.get("notes") or []]
    return "\n".join(lines)


def glance_rows(attention: AttentionRecord) -> list[tuple[str, str]]:
    """The index card's line for the port, when one was made."""
    if attention.port_error:
        return [("port", f"not made: {attention.port_error}")]
    port = attention.port
    if port is None:
        return []
    proof = as_dict(port.get("proof"))
    said = f"proof {proof.get('verdict')}" + (" (emulated)" if proof.get("emulated") else "") \
        if proof else "nothing to prove"
    return [("port", f"{len(as_list(port.get('changes')))} changes, "
                     f"{len(as_list(port.get('manual')))} left for a human, {said}")]


def port_kinds(port: dict) -> list[tuple[str, int]]:
    """The port's changes by kind, for the drafts' table."""
    kinds: dict[str, int] = {}
    for change in as_list(port.get("changes")):
        if isinstance(change, dict):
            kinds[str(change.get("kind"))] = kinds.get(str(change.get("kind")), 0) + 1
    return sorted(kinds.items())
