"""Stage 03: inference on every card — the stage id, the stage function and its record.

The notebook and ``hyport infer`` both plan with :func:`plan` and run that plan with
:func:`run`; :func:`record` writes the result through :mod:`hyport_lib.results`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from hyport_lib.models.generation_config import InferenceConfig
from hyport_lib.models.generation import check_prompts
from hyport_lib.inference.grid import run_grid as run  # noqa: F401  (the stage function)
from hyport_lib.devices.card_plan import plan_grid as plan  # noqa: F401
from hyport_lib.inference.table import GridResult, grid_headline, grid_verdict
from hyport_lib.results import StageSummary, record_summary

STAGE = "03_inference"


def check_parameters(params: dict) -> None:
    """Before a report runs anything: the model folder and the attention name this stage
    would load on every card (each error names the parameter).

    Raises:
        ValueError: naming the parameter, its value and why.
    """
    from hyport_lib.models.preflight import check_attn_implementation, check_model_path
    from hyport_lib.utils.values import as_flag

    model_dir = check_model_path(params.get("model_path") or "tiny",
                                 allow_download=as_flag("allow_download", params.get("allow_download", False)))
    if params.get("attn_implementation"):
        check_attn_implementation(params["attn_implementation"])
    if Path(model_dir).is_dir():
        known = {k: params[k] for k in ("single_prompt", "batch_prompts", "image", "trust_remote_code",
                                        "skip_not_applicable") if params.get(k) is not None}
        check_prompts(InferenceConfig(model_path=model_dir, **known), model_dir)


def summarize(result: GridResult) -> StageSummary:
    """Verdict (see :func:`~hyport_lib.inference.table.grid_verdict`), line and figures."""
    return StageSummary(grid_verdict(result), result.consistency_line, grid_headline(result))


def record(result: GridResult, *, directory: Optional[os.PathLike] = None,
           stage: Optional[str] = None) -> Path:
    """Write the grid as the stage result; returns the file written."""
    return record_summary(stage or STAGE, summarize(result), data=result.to_dict(),
                          provenance=result.provenance, directory=directory)
