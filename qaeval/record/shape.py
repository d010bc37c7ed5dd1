"""The shape of a record's run, checked before anything is built from it: a field missing or of the wrong
JSON type is named by its place (``cases[3].verdicts[0].score is str, not int or null``), so an exception
afterwards is a bug in qaeval (exit 70), not a malformed file (exit 65). Verdict sections declare their
own shapes (``SECTION`` in each verdict module).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from typing import Any

from qaeval.core.errors import RecordError
from qaeval.core.frames import Each, Fields, Fixed, Maybe, Valid, row_problems, rows_of
from qaeval.core.frames import shape_problems as shape_problems_of
from qaeval.data.schema import LABEL_SCHEMA
from qaeval.scoring.judge import VERDICT_SCHEMA, JudgeConfig
from qaeval.scoring.metrics import SCOREBOARD_SCHEMA, SLICE_SCHEMA
from qaeval.scoring.outcomes import REASON
from qaeval.scoring.result import RunMeta
from qaeval.scoring.retrieval import RETRIEVAL_SCHEMA
from qaeval.scoring.trajectory import TRAJECTORY_SCHEMA


def _accepted(hint: Any) -> tuple[type, ...]:
    """The JSON types a field of this type may hold in a record (a float may be written as an int)."""
    out: list[type] = []
    for arg in typing.get_args(hint) or (hint,):
        out += [int, float] if arg is float else [arg]
    return tuple(out)


# How a run was made, as a record holds it: RunMeta's fields and types (its judge is JUDGE_TYPES').
META_TYPES: dict[str, tuple[type, ...]] = {
    f.name: _accepted(typing.get_type_hints(RunMeta)[f.name]) for f in dataclasses.fields(RunMeta) if f.name != "judge"
}
JUDGE_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "model": (str,),
    "temperature": (int, float),
    "seed": (int, type(None)),
    "prompt_version": (str,),
    "base_url": (str, type(None)),
}


def _typed(raw: Mapping[str, Any], types: Mapping[str, tuple[type, ...]], prefix: str, where: str) -> dict[str, Any]:
    """The known fields of a record section, each of the type it must have; a field of another type is a
    RecordError naming it (a bug in qaeval is not a malformed record: it is not caught here)."""
    problems = [
        f"{prefix}.{name} is {type(raw[name]).__name__}, not {' or '.join(t.__name__ for t in kinds)}"
        for name, kinds in types.items()
        if name in raw and (not isinstance(raw[name], kinds) or isinstance(raw[name], bool) and bool not in kinds)
    ]
    problems += [
        f"{prefix}.{name} is out of range"
        for name in types
        if isinstance(raw.get(name), (int, float)) and not isinstance(raw[name], bool) and not abs(raw[name]) < 2**63
    ]
    if problems:
        raise RecordError("record is malformed: " + "; ".join(problems), file=where)
    return {name: raw[name] for name in types if name in raw}


def read_meta(data: Mapping[str, Any], where: str) -> RunMeta:
    judge = data.get("judge")
    if not isinstance(judge, dict):
        raise RecordError("record meta has no judge config", file=where)
    fields = _typed(data, META_TYPES, "meta", where)
    if "adapter" not in fields:
        raise RecordError("record is malformed: meta.adapter is missing", file=where)
    config = _typed(judge, JUDGE_TYPES, "meta.judge", where)
    if not {"name", "model"} <= set(config):
        raise RecordError("record is malformed: meta.judge needs name and model", file=where)
    return RunMeta(judge=JudgeConfig(**config), **fields)


def _aggregate(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, str) or (isinstance(value, int) and abs(value) < 2**63)


STORED_OUTPUT = Fields(
    dict(  # a case line's output (a baseline keeps prompt_sha256 instead of the prompt)
        answer="str",
        citations=Each(Fields(dict(source_id="str", claim="str"))),
        retrieved_ids=Each("str"),
        passages=Each(Fields(dict(id="str", text="str", title="text"), optional=("title",))),
        abstained="bool",
        model_was_called="bool",
        prompt_to_model="text",
        prompt_sha256="text",
        computed_aggregate=Valid("object", _aggregate, "a finite number, text or null"),
        error="text",
        latency_s="float",
        logs="text",
        output_fingerprint="str",
    ),
    optional=("passages", "prompt_to_model", "prompt_sha256", "latency_s", "logs"),
)
LINE = Fields(
    dict(  # a case line of a record, as the loader reads it
        case_id="str",
        case="dict",
        fingerprint="str",
        output=STORED_OUTPUT,
        checks=Each(Fixed(("str", "bool", "str"))),
        retrieval=Maybe(Fields({k: v for k, v in RETRIEVAL_SCHEMA.items() if k != "case_id"})),
        verdicts=rows_of({k: v for k, v in VERDICT_SCHEMA.items() if k != "case_id"}, optional=("cached",)),
        trajectory=rows_of({k: v for k, v in TRAJECTORY_SCHEMA.items() if k != "case_id"}),
        passed="bool",
        fail_reasons=Each(REASON),
        units="dict",
        trials="list",
    ),
    optional=("trials",),
)
TRIAL_LAYERS = ("output", "checks", "retrieval", "verdicts", "trajectory", "passed", "fail_reasons", "units")
TRIAL = Fields(
    {name: LINE.fields[name] for name in TRIAL_LAYERS} | {"custom": "list"}, optional=("custom",)
)  # one more trial of a case: the layers a line holds for its first


def _line_problems(line: Any, at: str, trials: int, adaptive: bool = False) -> list[str]:
    problems = shape_problems_of(line, LINE, at)
    if not problems and line["case"].get("id") != line["case_id"]:
        problems.append(f"{at}.case.id is not the line's case_id {line['case_id']!r}")
    if problems:
        return problems
    more = line.get("trials", [])
    if len(more) > trials - 1 or (len(more) != trials - 1 and not adaptive):
        return [f"{at}.trials holds {len(more)} more trial(s), but meta.trials says each case ran {trials} time(s)"]
    problems = [p for j, trial in enumerate(more) for p in shape_problems_of(trial, TRIAL, f"{at}.trials[{j}]")]
    # a trial holds its layers only: a case_id or case of its own would stand in for the line's (and so
    # move a trial to another case)
    return problems + [
        f"{at}.trials[{j}] has a field a trial does not hold: {key!r}"
        for j, trial in enumerate(more)
        if isinstance(trial, dict)
        for key in trial
        if key not in TRIAL.fields
    ]


def record_trials(data: Mapping[str, Any]) -> int:
    """meta.trials of a record (1 when absent), or 0 when it is not a whole number from 1 to 100."""
    meta = data.get("meta")
    value = meta.get("trials", 1) if isinstance(meta, dict) else 1
    return value if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100 else 0


def shape_problems(data: Mapping[str, Any]) -> list[str]:
    """Every field of the record's run that is missing or of the wrong JSON type, named by its place
    (``cases[3].verdicts[0].score is str, not int or null``), found before anything is built from it, so
    what is built afterwards can trust its types: an exception there is a bug in qaeval, not a malformed
    file (exit 70, not 65)."""
    if not isinstance(data.get("cases"), list):
        return [f"cases is {type(data.get('cases')).__name__}, not a list"]
    trials = record_trials(data)
    if trials == 0:
        return [f"meta.trials is {data['meta'].get('trials')!r}, not a whole number from 1 to 100"]
    pass_k = data["meta"].get("pass_k") if isinstance(data.get("meta"), dict) else None
    if pass_k is not None and not (isinstance(pass_k, int) and not isinstance(pass_k, bool) and 1 <= pass_k <= 100):
        return [f"meta.pass_k is {pass_k!r}, not a whole number from 1 to 100"]
    adaptive = data["meta"].get("adaptive") is True if isinstance(data.get("meta"), dict) else False
    problems = [
        p for i, line in enumerate(data["cases"]) for p in _line_problems(line, f"cases[{i}]", trials, adaptive)
    ]
    problems += shape_problems_of(data.get("notes"), Maybe(Each("str")), "notes")
    problems += row_problems(data.get("scoreboard"), SCOREBOARD_SCHEMA, "scoreboard")
    problems += row_problems(data.get("slices"), SLICE_SCHEMA, "slices")
    if data.get("labels") is not None:
        problems += row_problems(data["labels"], LABEL_SCHEMA, "labels")
    return problems


def refuse_malformed(problems: list[str], where: str) -> None:
    """A RecordError listing the first twenty fields that are missing or of the wrong type, if any."""
    if problems:
        more = f" (and {len(problems) - 20} more)" if len(problems) > 20 else ""
        raise RecordError("record is malformed: " + "; ".join(problems[:20]) + more, file=where)
