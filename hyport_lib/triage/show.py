"""A :class:`~hyport_lib.triage.model.Triage` as a table, as Markdown lines, as plain text,
and in a notebook. Only drawing: what was found is computed in :mod:`.scan`."""

from __future__ import annotations

from hyport_lib.triage.model import Triage

#: Places named in a line before "and N more".
PLACES_SHOWN = 4
FRAME_COLUMNS = ("kind", "title", "where", "places", "line", "meaning", "action")


def _places(finding) -> str:
    others = [str(p) for p in finding.places[1:PLACES_SHOWN]]
    left = len(finding.places) - 1 - len(others) + finding.more_places
    text = ", ".join(others)
    if left:
        text += f"{', ' if text else ''}{left} more"
    return text


def triage_frame(triage: Triage):
    """One row per finding (errors, then warnings) and one per file with unrecognised error
    lines, as a ``pandas.DataFrame`` with :data:`FRAME_COLUMNS`."""
    import pandas as pd

    rows = []
    for f in triage.findings:
        rows.append({"kind": f.severity, "title": f.title, "where": f.where,
                     "places": len(f.places) + f.more_places, "line": f.text,
                     "meaning": f.meaning, "action": f.action})
    for item in triage.unrecognised:
        first = item.lines[0] if item.lines else [None, ""]
        rows.append({"kind": "not recognised", "title": f"{item.count} error line(s)",
                     "where": f"{item.file}:{first[0]}", "places": 1, "line": first[1],
                     "meaning": "", "action": ""})
    return pd.DataFrame(rows, columns=list(FRAME_COLUMNS))


def _fence(lines: list[str]) -> list[str]:
    """Lines in a Markdown code block (a line holding a fence cannot close it early)."""
    return ["```text", *[line.replace("```", "'''") for line in lines], "```"]


def triage_markdown(triage: Triage) -> list[str]:
    """Markdown lines for the report: the summary, each finding (where, the lines, what it
    means, what to do) and, under "Not recognised", the error lines nothing explains."""
    out = [f"**Log triage:** {triage.summary_line()}", ""]
    for f in triage.findings:
        label = "Warning" if f.severity == "warning" else "Failure"
        others = _places(f)
        out.append(f"**{label}: {f.title}** at `{f.where}`"
                   + (f" (also {others})" if others else ""))
        out += ["", *_fence(f.context or [f.text]), "",
                f"*What it means:* {f.meaning}", "", f"*What to do:* {f.action}", ""]
    if triage.unrecognised:
        out += ["**Not recognised:** error lines that no known failure explains.", ""]
        for item in triage.unrecognised:
            extra = item.count - len(item.lines)
            out.append(f"`{item.file}`" + (f" ({extra} more not shown)" if extra > 0 else ""))
            out += ["", *_fence([f"{number}: {text}" for number, text in item.lines]), ""]
    for note in triage.notes:
        out.append(f"*Note:* {note}")
    if not triage.files_read:
        out.append("*No log file was found to read.*")
    return out


def triage_text(triage: Triage) -> list[str]:
    """Plain lines for a terminal: each finding (title, where, the line, meaning, what to do),
    then the unrecognised lines under "not recognised"."""
    out = [f"{len(triage.files_read)} file(s) read: {triage.summary_line()}"]
    for f in triage.findings:
        out.append("")
        out.append(f"{'WARNING' if f.severity == 'warning' else 'FAILURE'}: {f.title}  [{f.key}]")
        out.append(f"  where:   {f.where}" + (f"  (also {_places(f)})" if _places(f) else ""))
        out.append(f"  line:    {f.text.strip()}")
        out.append(f"  meaning: {f.meaning}")
        out.append(f"  to do:   {f.action}")
    if triage.unrecognised:
        out += ["", "not recognised (error lines no known failure explains):"]
        for item in triage.unrecognised:
            extra = item.count - len(item.lines)
            out.append(f"  {item.file}" + (f"  ({extra} more not shown)" if extra > 0 else ""))
            out += [f"    {number}: {text}" for number, text in item.lines]
    for note in triage.notes:
        out.append(f"note: {note}")
    return out


def show_triage(triage: Triage) -> None:
    """Display :func:`triage_markdown` in a notebook."""
    from IPython.display import Markdown, display

    display(Markdown("\n".join(triage_markdown(triage))))
