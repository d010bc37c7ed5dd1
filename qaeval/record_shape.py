"""The shape of a record's run, checked before anything is built from it: every field missing or of the
wrong JSON type is named by its place (``cases[3].verdicts[0].score is str, not int or null``), so what
is built afterwards can trust its types and an exception there is a bug in qaeval (exit 70), not a
malformed file (exit 65). The verdict sections declare their own shapes (``SECTION`` in each verdict
module); ``qaeval.record_check`` then derives again what the layers determine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from qaeval.data.schema import LABEL_SCHEMA
from qaeval.errors import RecordError
from qaeval.frames import object_problems, row_problems
from qaeval.scoring.evaluate import RunMeta
from qaeval.scoring.judge import JudgeConfig, VERDICT_SCHEMA
from qaeval.scoring.metrics import SCOREBOARD_SCHEMA, SLICE_SCHEMA
from qaeval.scoring.retrieval import RETRIEVAL_SCHEMA
from qaeval.scoring.trajectory import TRAJECTORY_SCHEMA
from qaeval.system.contract import OUTPUT_SCHEMA


META_TYPES: dict[str, tuple[type, ...]] = {
    "adapter": (str,), "isolation": (str,), "concurrency": (int,), "executor": (str, type(None)), "k": (int,),
    "timeout": (int, float, type(None)), "data": (str,), "created": (str, type(None)),
    "git_commit": (str, type(None)), "qaeval_version": (str,), "python": (str,),
}
JUDGE_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,), "model": (str,), "temperature": (int, float), "seed": (int, type(None)),
    "prompt_version": (str,), "base_url": (str, type(None)),
}


def _typed(raw: Mapping[str, Any], types: Mapping[str, tuple[type, ...]], prefix: str, where: str) -> dict[str, Any]:
    """The known fields of a record section, each of the type it must have; a field of another type is a
    RecordError naming it (a bug in qaeval is not a malformed record: it is not caught here)."""
    problems = [f"{prefix}.{name} is {type(raw[name]).__name__}, not {' or '.join(t.__name__ for t in kinds)}"
                for name, kinds in types.items()
                if name in raw and (not isinstance(raw[name], kinds) or isinstance(raw[name], bool) and bool not in kinds)]
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


LINE_FIELDS = {  # a case line of a record, as the loader reads it ("list"/"dict": a JSON array/object)
    "case_id": "str", "case": "dict", "fingerprint": "str", "output": "dict", "checks": "list",
    "retrieval": "Dict", "verdicts": "list", "trajectory": "list", "passed": "bool", "fail_reasons": "list",
    "units": "dict",
}
REASON_FIELDS = {"code": "str", "message": "str"}  # and "name" for a registered check or metric
STORED_OUTPUT = {k: v for k, v in OUTPUT_SCHEMA.items()  # what a line's output holds (the rest is optional)
                 if k not in ("case_id", "latency_s", "logs", "passages", "prompt_to_model")}
LINE_ROWS = (  # a case line's lists of rows, and the frame schema each row follows
    ("verdicts", {k: v for k, v in VERDICT_SCHEMA.items() if k not in ("case_id", "cached")}),
    ("trajectory", {k: v for k, v in TRAJECTORY_SCHEMA.items() if k != "case_id"}),
)


def _line_problems(line: Mapping[str, Any], at: str) -> list[str]:
    problems = object_problems(line["output"], STORED_OUTPUT, f"{at}.output")
    problems += [f"{at}.checks[{j}] is not [check, passed, reason]" for j, c in enumerate(line["checks"])
                 if not (isinstance(c, list) and len(c) == 3 and isinstance(c[0], str) and isinstance(c[1], bool)
                         and isinstance(c[2], str))]
    problems += row_problems(line["fail_reasons"], REASON_FIELDS, f"{at}.fail_reasons")
    if line["retrieval"] is not None:
        problems += object_problems(line["retrieval"], {k: v for k, v in RETRIEVAL_SCHEMA.items() if k != "case_id"},
                                    f"{at}.retrieval")
    for name, schema in LINE_ROWS:
        problems += row_problems(line[name], schema, f"{at}.{name}")
    return problems


def shape_problems(data: Mapping[str, Any]) -> list[str]:
    """Every field of the record's run that is missing or of the wrong JSON type, named by its place
    (``cases[3].verdicts[0].score is str, not int or null``), found before anything is built from it, so
    what is built afterwards can trust its types: an exception there is a bug in qaeval, not a malformed
    file (exit 70, not 65)."""
    problems = row_problems(data.get("cases"), LINE_FIELDS, "cases")
    if problems:
        return problems
    problems = [p for i, line in enumerate(data["cases"]) for p in _line_problems(line, f"cases[{i}]")]
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
