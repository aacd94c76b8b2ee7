"""The parameters of a report run: a profile (YAML) and ``-p key=value``, checked once
before anything runs. The namespace is the union of every stage's ``Params`` fields; each
value is typed once, and each selected stage's ``plan`` is made from them, so a wrong value
stops the run before anything is written, in the same words as the notebook and the command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import yaml

from hyport_lib.memory.fit import DoesNotFit
from hyport_lib.models.preflight import HUB_ID
from hyport_lib.params import Field, ParameterError, parameter_fields, parse_text, unknown_parameter
from hyport_lib.processes import (describe_exit, read_log_tail, read_task_result, run_child, task_command,
                                  task_environ)
from hyport_lib.report.paths import default_profiles_dir
from hyport_lib.report.run import run_folder_env
from hyport_lib.stages import Stage, params_class, stage_part
from hyport_lib.utils.printable import first_line
from hyport_lib.utils.redact import is_secret_parameter, scrub_text
from hyport_lib.utils.wording import counted, plural


def resolve_profile(name_or_path: Optional[str]) -> Optional[Path]:
    """A bundled profile's name (``ascend-910b-8card``) or a path; None: no profile."""
    if not name_or_path:
        return None
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") and os.path.exists(path):
        return path
    candidate = default_profiles_dir() / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    if os.path.isfile(path):  # a profile under another suffix: read as YAML, errors name the file
        return path
    known = ", ".join(sorted(p.stem for p in default_profiles_dir().glob("*.yaml")))
    raise FileNotFoundError(f"profile {name_or_path!r} not found (as a file or in parameters/: {known})")


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice (YAML would keep the last silently:
    ``device: cpu`` then ``device: npu`` must not quietly mean npu)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # "<<: *base": what it brings in may be overridden here
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice", key_node.start_mark)
            try:
                seen.add(key)
            except TypeError:  # an unhashable key: the base class reports it
                pass
        return super().construct_mapping(node, deep=deep)


def load_profile(path: Optional[Path]) -> dict:
    """Errors name the file."""
    if path is None:
        return {}
    try:
        data = yaml.load(Path(path).read_text(encoding="utf-8"), Loader=_StrictLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read profile ({exc})") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a profile must be a mapping of parameter: value, got {type(data).__name__}")
    bad = [k for k in data if not isinstance(k, str) or not k.isidentifier()]
    if bad:
        raise ValueError(f"{path}: parameter names must be identifiers, got {bad}")
    return data


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """``-p key=value`` items as ``{key: value}``, values as text: :func:`coerce_overrides`
    types them, by the type each stage's ``Params`` declares."""
    result = {}
    for item in items or ():
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key.isidentifier():
            raise ValueError(f"-p {item!r}: expected key=value with an identifier key")
        result[key] = raw
    return result


def parse_yaml_value(key: str, raw: str):
    """A ``-p`` value for a non-string parameter, parsed as YAML (``20``, ``true``, ``[1, 2]``)."""
    if not raw.strip():
        return None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ValueError(f"-p {key}={raw!r}: value is not valid YAML ({exc})") from exc


def coerce_overrides(raw: dict, fields: dict[str, Field]) -> dict:
    """``-p`` values read by their field's type; a key no stage declares (accepted with
    ``allow_unknown``) is read as YAML, as its profile line would be."""
    return {key: parse_text(fields[key], value) if key in fields
            else parse_yaml_value(key, value) if isinstance(value, str) else value
            for key, value in raw.items()}


def absolutize_paths(params: dict, fields: dict[str, Field], base: Path) -> dict:
    """Relative path values made absolute against ``base`` (the caller's folder: each
    notebook runs in its own), existing or not, so that a missing file is named where the
    user looked; a field's ``not_paths`` (``tiny``) and a hub id that is no folder stay."""
    out = {}
    for key, value in params.items():
        spec = fields[key].spec if key in fields else None
        if spec is not None and spec.path and isinstance(value, str) and value:
            hub_id = spec.hub_id and HUB_ID.match(value) and not os.path.exists(base / value)
            if not os.path.isabs(value) and value.strip().lower() not in spec.not_paths and not hub_id:
                value = str((base / value).resolve())
        out[key] = value
    return out


def safe_parameters(params: dict) -> dict:
    """Parameters fit to print: secret-named keys dropped, values scrubbed."""
    return {k: (scrub_text(v) if isinstance(v, str) else v)
            for k, v in params.items() if not is_secret_parameter(k)}


@dataclass
class RunParameters:
    merged: dict  # every parameter of the run, typed
    declared: dict[str, dict[str, Field]]  # stage id -> its declared parameters
    unused: list[str]  # keys no stage declares (only with allow_unknown)

    def for_stage(self, stage: Stage) -> dict:
        return {k: v for k, v in self.merged.items() if k in self.declared[stage.id]}

    def effective(self, stage: Stage) -> dict:
        """Every parameter the stage declares, given or its default."""
        return {name: self.merged.get(name, f.default) for name, f in self.declared[stage.id].items()}


def resolve_parameters(from_profile: dict, overrides: dict, stages: list[Stage], *,
                       profile_name: str = "the profile", allow_unknown: bool = False,
                       base: Optional[Path] = None) -> RunParameters:
    """A :class:`ParameterError` for bad values and for keys no stage declares, naming the
    closest declared ones (``allow_unknown`` accepts those; the index lists them as ignored)."""
    declared = {s.id: {f.name: f for f in parameter_fields(params_class(s))} for s in stages}
    fields: dict[str, Field] = {}
    for by_name in declared.values():
        for name, f in by_name.items():
            known = fields.setdefault(name, f)
            if f.optional and not known.optional:
                # null must read as None when any stage takes None (02's model_path skips its
                # model check); a stage that needs a value says so when its Params is built
                fields[name] = dataclasses.replace(known, optional=True)
    problems = []
    for source, keys in ((profile_name, from_profile), ("-p", overrides)):
        for key in sorted(k for k in keys if k not in fields):
            if allow_unknown and (source != "-p" or key in from_profile):
                continue
            problems.append(unknown_parameter(key, list(fields), source) + " (no stage declares it)")
    if problems:
        raise ParameterError(problems)
    merged = {**from_profile, **coerce_overrides(overrides, fields)}
    for key, value in list(merged.items()):
        if key in fields:
            try:
                # types only: whether a path exists is each selected stage's question
                # (plan_requests), not one for a stage this run leaves out
                merged[key] = fields[key].convert(value)
            except ParameterError as exc:
                problems.append(str(exc))
    if problems:
        raise ParameterError(problems)
    merged = absolutize_paths(merged, fields, base or Path.cwd())
    return RunParameters(merged, declared, sorted(k for k in merged if k not in fields))


@dataclass
class PlanRequest:
    """What one stage's pre-run plan is made from."""

    stage: str  # the stage's name (its package)
    stage_id: str
    values: dict  # every parameter of its Params, checked (rebuilt unchecked for the plan)
    left_to_the_run: list[str]  # paths an earlier stage of the run writes: planned as not given
    refused: list[str]  # what its Params refused: then no plan is made


@dataclass
class PreRunCheck:
    """What the pre-run plans found."""

    refused: list[str]  # values a stage refuses (a parameter, a file, a record): no run
    host: list[str]  # what the host cannot do now (busy cards): said; the run goes on
    #: plans the cards or the host cannot hold, with the figures: no run (the memory
    #: model's refusal, not a wrong value: said as such)
    memory: list[str] = dataclasses.field(default_factory=list)


class PreRunRefused(ValueError):
    """What the pre-run plans refused: wrong values, and plans that would not fit in memory,
    each said as what it is; ``details`` has a line per problem."""

    def __init__(self, refused: list[str], memory: list[str]):
        self.refused, self.memory = refused, memory
        problems = refused + memory
        self.details = problems if len(problems) > 1 else []
        if not memory:
            head = f"{len(refused)} parameters are wrong"
        elif not refused:
            head = f"{len(memory)} {'plan does' if len(memory) == 1 else 'plans do'} not fit in memory"
        else:
            head = (f"{counted(len(refused), 'wrong value')} and {counted(len(memory), 'plan')} that "
                    f"{plural('does', len(memory), 'do')} not fit in memory")
        super().__init__(problems[0] if len(problems) == 1 else f"{head}: {problems[0]}")


def plan_requests(params: RunParameters, selected: list[Stage]) -> list[PlanRequest]:
    """Each selected stage's ``Params``, built here from all its values at once (so that rules
    across them hold as given), typed as they are (:meth:`~hyport_lib.params.StageParams.from_typed`)."""
    requests = []
    for index, stage in enumerate(selected):
        values = params.for_stage(stage)
        written = _written_earlier(values, params.declared[stage.id], selected[:index], params)
        try:
            checked, refused = params_class(stage).from_typed(values).to_dict(), []
        except ParameterError as exc:
            checked, refused = {}, [f"{stage.id}: {line}" for line in (exc.details or [str(exc)])]
        requests.append(PlanRequest(stage.name, stage.id, checked, written, refused))
    return requests


def make_plans(requests: list[PlanRequest]) -> PreRunCheck:
    """Each stage's ``plan``, the paths an earlier stage writes left out, its parameters not
    checked again. Runs in the child of :func:`check_before_running`."""
    refused, host, memory = [], [], []
    with _as_a_new_run():
        for request in requests:
            where = request.stage_id
            refused += request.refused
            if request.refused:
                continue
            try:
                planned = stage_part(request.stage, "params").Params.trusted(
                    {**request.values, **{key: None for key in request.left_to_the_run}})
                made = stage_part(request.stage, "stage").plan(planned)
                # what the stage leaves out for this host (a check that does not fit): said, run
                host += [f"{where}: {line}" for line in getattr(made, "left_out", None) or []]
            except ParameterError as exc:
                refused += [f"{where}: {line}" for line in (exc.details or [str(exc)])]
            except DoesNotFit as exc:
                memory.append(f"{where}: {exc}")
            except RuntimeError as exc:
                host.append(f"{where}: {first_line(exc)}")
            except (ValueError, OSError) as exc:
                # a refusal with a line per record (a bad dataset) is said once, then its lines
                refused.append(f"{where}: {first_line(exc)}")
                refused += [f"{where}:   {line}" for line in getattr(exc, "details", None) or []]
    return PreRunCheck(refused, host, memory)


def check_before_running(params: RunParameters, selected: list[Stage]) -> list[str]:
    """Each selected stage's ``plan`` (:func:`make_plans`), in a fresh child process: a plan
    may start the device runtime, which in the report's own long-lived process would hold a
    card the stages then find busy. Returns what the host cannot do now (said; the run goes
    on and stage 01 explains it); raises a ParameterError naming each refused value and
    its stage, :class:`PreRunRefused` when a plan would not fit in memory (with any wrong
    values), a RuntimeError when the check itself could not run."""
    requests = {"requests": [dataclasses.asdict(r) for r in plan_requests(params, selected)]}
    with tempfile.TemporaryDirectory(prefix="hyport-precheck-") as folder:
        result_path, log_path = Path(folder) / "plans.json", Path(folder) / "plans.log"
        cmd, payload = task_command("hyport_lib.report.run_parameters:plans_in_child", requests, result_path,
                                    label="[hyport pre-check]", teardown=True)
        ended = run_child(cmd, env=task_environ(), log_path=log_path, payload=payload,
                          timeout_s=PLAN_TIMEOUT_S, poll_interval_s=0.05, kill_grace_s=2.0)
        found = read_task_result(result_path)
        if found.get("status") != "ok":
            how = f"no result after {PLAN_TIMEOUT_S} s" if ended.timed_out else describe_exit(ended.code, ended.child)
            why = f"{found['error_type']}: {found['error']}" if found else read_log_tail(log_path)
            raise RuntimeError(f"the pre-run check failed ({how}): {why}")
    if found["refused"] and not found["memory"]:
        raise ParameterError(found["refused"])
    if found["memory"]:
        raise PreRunRefused(found["refused"], found["memory"])
    return found["host"]


def plans_in_child(spec: dict) -> dict:
    return dataclasses.asdict(make_plans([PlanRequest(**item) for item in spec["requests"]]))


#: The plans load processors and read datasets: minutes only for a huge dataset.
PLAN_TIMEOUT_S = 1800


@contextlib.contextmanager
def _as_a_new_run():
    """The plans see what the stages will see: a run folder with no results yet (not the
    interactive results folder, where an old stage-04 record would stand in for this
    run's). Plans write nothing, so the folder is still empty when it is removed."""
    with tempfile.TemporaryDirectory(prefix="hyport-plan-") as folder:
        with run_folder_env(Path(folder)):
            yield


def _written_earlier(values: dict, fields: dict[str, Field], earlier: list[Stage],
                     params: RunParameters) -> list[str]:
    """Keys of ``values`` naming a path an earlier stage of the run writes (and so cannot
    exist yet)."""
    writers = {s.name: s for s in earlier}
    out = []
    for key, value in values.items():
        spec = fields[key].spec
        writer = writers.get(spec.written_by) if spec.written_by else None
        # os.path: a path the system will not look up is not there, never an internal error
        if writer is None or not isinstance(value, str) or not value or os.path.exists(os.path.expanduser(value)):
            continue
        folders = [params.merged.get(f.name) for f in params.declared[writer.id].values() if f.spec.output]
        inside = Path(value).expanduser().resolve().is_relative_to
        if any(isinstance(folder, str) and folder and inside(Path(folder).expanduser().resolve())
               for folder in folders):
            out.append(key)
    return out
