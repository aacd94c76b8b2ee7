"""The checkpoint against the model class built from its config: what the class
expects that the files do not give (ZeRO-3 ``Size([0])`` placeholders, weights in no
file) and tied weights saved under both names. Run by
:func:`hyport_lib.weights.layout.inspect_checkpoint` once the headers are read.
"""

from __future__ import annotations

import math
import re

from hyport_lib.checkpoint_files.findings import Finding, name_some

# ``result`` below is a ``layout.Inspection``; not imported (layout imports this module).


def model_checks(result) -> None:
    """Every check of this module, findings appended to ``result.findings``."""
    _placeholders(result)
    _absent(result)
    _tied_note(result)


def _placeholders(result) -> None:
    expected = result.names.expected
    for shard in result.shards:
        found = []
        for key, entry in shard.tensors.items():
            if not entry.is_float or entry.numel:
                continue
            want = expected.get(result.names.to_model(key))
            if want is not None and math.prod(want) == 0:
                continue  # the model itself has an empty tensor here
            found.append((key, entry, want))
        if found:
            key, entry, want = found[0]
            hint = f" where the model expects {list(want)}" if want else ""
            result.findings.append(Finding(
                "zero3_placeholder", shard.label,
                f"{len(found)} floating tensor(s) with no elements, e.g. `{key}` "
                f"{entry.dtype} {list(entry.shape)}{hint}: ZeRO-3 placeholders saved instead of the "
                f"weights (save with stage3_gather_16bit_weights_on_model_save, or consolidate "
                f"with zero_to_fp32)", tensors=[k for k, _, _ in found]))


def _absent(result) -> None:
    """Weights the model class has that no file (and no index entry) holds."""
    names = result.names
    if not names.class_name or not result.shards or result.kind == "file":
        return
    keys = [*result.tensors, *(result.index.weight_map if result.index else ())]
    keys += [k for s in result.shards for k in s.invalid]
    present = {names.to_model(k) for k in keys}
    tied = {**names.tied, **{v: k for k, v in names.tied.items()}}
    optional = [re.compile(p) for p in names.optional]
    absent = [m for m in names.expected if m not in present and tied.get(m) not in present
              and not any(p.search(m) for p in optional)]
    if absent:
        result.findings.append(Finding(
            "weight_missing", result.index.file if result.index else result.shards[0].label,
            f"{len(absent)} weight(s) of {names.class_name} are in no file: {name_some(absent)} "
            f"(from_pretrained would initialise them at random)", tensors=absent))


def _tied_note(result) -> None:
    dups = result.tied_duplicates
    if dups:
        tensors = result.tensors
        result.findings.append(Finding(
            "tied_duplicate", tensors[dups[0]][0].label,
            f"{len(dups)} tied weight(s) saved under both names ({name_some(dups)}); the "
            f"parameter total without them is {result.unique_parameters:,}", tensors=dups))
