"""Write docs/parameters.md from the stages' ``Params`` classes (the only declaration).

    python scripts/write_parameter_docs.py

tests/test_stage_contract.py fails when the file is stale.
"""

from __future__ import annotations

from pathlib import Path

from hyport_lib.params import markdown_table
from hyport_lib.stages import discover_stages, params_class

HEADER = """# Parameters

Generated from each stage's `Params` class (`hyport_lib/<stage>/params.py`) by
`python scripts/write_parameter_docs.py`; do not edit by hand. The same names serve the
notebooks' `parameters` cells, the `hyport` commands' flags (`max_steps` is
`--max-steps`), the profiles in `parameters/` and `hyport report -p key=value`. A key
several stages declare (`device`, `model_path`, ...) is given to each of them.
"""


def render() -> str:
    parts = [HEADER]
    for stage in discover_stages():
        table = markdown_table(params_class(stage))
        parts.append(f"## {stage.id} (`hyport_lib/{stage.name}/params.py`)\n\n{table}\n")
    return "\n".join(parts)


if __name__ == "__main__":
    target = Path(__file__).resolve().parents[1] / "docs" / "parameters.md"
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
