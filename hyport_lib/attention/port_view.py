"""The port of ``code_path`` as stage 02 tells it: the proof as a table and in words (for
the notebook's "Port it", :func:`hyport_lib.attention.show.show_port`), the index card's
line and the drafts' paragraphs. Compute lives in :mod:`hyport_lib.port`."""

from __future__ import annotations

from typing import Optional

from hyport_lib.attention.phrases import PHRASES
from hyport_lib.attention.stage import AttentionRecord
from hyport_lib.drafting.draft import Draft
from hyport_lib.drafting.markdown import code, quote, table
from hyport_lib.drafting.values import as_dict, as_list, num

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


def blog_lines(record: dict, draft: Draft) -> list[str]:
    """The drafts' paragraphs on the port and its proof (nothing when no port was made)."""
    t = draft.phrases(PHRASES)
    data = as_dict(record.get("data"))
    if data.get("port_error"):
        return [t["port_not_made"], ""] + quote(str(data["port_error"])) + [""]
    port = data.get("port")
    if not isinstance(port, dict):
        return []
    changes, manual = as_list(port.get("changes")), as_list(port.get("manual"))
    kinds: dict[str, int] = {}
    for change in changes:
        if isinstance(change, dict):
            kinds[str(change.get("kind"))] = kinds.get(str(change.get("kind")), 0) + 1
    lines = [t["port_intro"].format(changes=num(len(changes)), files=num(len(as_list(port.get("files_changed")))),
                                    left=num(len(manual)), dst=code(port.get("dst"))), ""]
    lines += table([t["port_kind"], t["port_count"]], [[code(k), num(n)] for k, n in sorted(kinds.items())])
    left = [m for m in manual if isinstance(m, dict)]
    if left:
        lines += [t["port_left"], ""]
        lines += [f"- {code(str(m.get('file')) + ':' + str(m.get('line')))} {code(m.get('kind'))}: "
                  f"{code(m.get('why'))}" for m in left]
        lines.append("")
    lines += _proof_lines(as_dict(port.get("proof")), t, draft)
    return lines


def _proof_lines(proof: dict, t: dict, draft: Draft) -> list[str]:
    if not proof:
        return []
    if proof.get("error"):
        return [t["port_proof_error"], ""] + quote(str(proof["error"])) + [""]
    cases = [c for c in as_list(proof.get("cases")) if isinstance(c, dict)]
    lines = [t["port_proof"].format(verdict=code(proof.get("verdict")), model=code(proof.get("model_class")),
                                    dtype=code(proof.get("dtype")),
                                    path=t["port_emulated"] if proof.get("emulated") else t["port_on_npu"]), ""]
    header = [t["port_case"], "PASS/FAIL", "max |Δ|", t["port_bound"], t["port_calls"], t["port_tokens"]]
    lines += table(header, [[code(c.get("name")), code(c.get("verdict")), num(c.get("max_abs")), num(c.get("bound")),
                             num(c.get("npu_calls")), _tokens(c.get("tokens_match"), draft)] for c in cases])
    return lines


def _tokens(value: Optional[bool], draft: Draft) -> str:
    return "-" if value is None else draft.yes_no(value)
