"""Public datasets into qaeval's formats: golden cases from QA data, labelled sets from human-labelled data.

``import_file(FORMAT, IN, OUT_DIR)`` streams the input (JSON arrays and objects are read item by item
with ijson, JSONL and CSV line by line), so a large file imports in bounded memory; every record is
either imported or refused with a reason, and the counts say so. The written file is loaded back as
strictly as any golden file before the import reports success.

Golden cases (``qaeval import FORMAT IN --out DIR`` writes ``DIR/<prefix>.jsonl``):

squad2      SQuAD 2.0 (official JSON). One case per question: its paragraph is the gold source and the
            next paragraphs of the same article are near-miss distractors. ``is_impossible`` questions
            (written to look answerable from that paragraph) must be abstained on. single-hop; tag
            ``squad2`` or ``squad2-unanswerable``.
hotpotqa    HotpotQA, distractor setting (JSON array). One source per context title; the titles named
            by ``supporting_facts`` are the gold sources, each also a ``retrieved`` checkpoint.
            multi-hop; the question ``type`` (``bridge`` or ``comparison``) is the adversarial tag.
musique     MuSiQue (JSON array or JSONL). One source per paragraph; ``is_supporting`` paragraphs are
            the gold sources and ``retrieved`` checkpoints; ``question_decomposition`` gives the hops:
            two or more is multi-hop (tag ``musique-<n>hop``), one is single-hop. ``answerable: false``
            must be abstained on (gold answer null, no gold source).
ragas       Rows as RAGAS users keep them (JSONL, or CSV with list columns as JSON): ``question``,
            ``contexts`` (list of strings), ``ground_truth`` or ``reference`` (or ``ground_truths``, a
            list, whose first item is taken), optional ``reference_contexts`` (the contexts that carry
            the answer: the gold sources; without it a case has no gold source and no retrieval row).
            single-hop.

Labelled sets (``--labelled``; ``calibrate --labelled``), each row a claim, its evidence and a human score:

wice        WiCE claim level (JSONL): the cited web page is one source (its sentences joined), the
            claim is the answer citing it; ``supported`` 2, ``partially_supported`` 1,
            ``not_supported`` 0 on faithfulness. No question.
expertqa    ExpertQA (JSONL): every claim of every system answer that has evidence; each evidence
            passage a source, the claim citing each; ``support`` Complete 2, Partial 1, Missing or
            Incomplete 0 on faithfulness. A claim with no evidence, or a support of ``N/A`` or none at
            all, is refused (nothing was judged against text).
ares        ARES human annotations (TSV: Query or Question, Document, Answer,
            Answer_Faithfulness_Label; ARES's files spell the question both ways, and the other
            columns they carry, such as the other labels, Reaction and Sources, are ignored): the
            document is the one source, the answer cites it; faithfulness 1 -> 2, 0 -> 0 (ARES's
            few-shot files spell them ``[[Yes]]`` and ``[[No]]``: the same).

``--corpus`` (squad2, hotpotqa, musique): every paragraph of the file, of every record (refused ones and
those left out by ``--limit`` too), is pooled into ``DIR/corpus.jsonl`` (``qaeval.data.pooling``: the same
text is one passage, its id the title's slug and a digest of the text, the same on every import), and
the cases carry no ``sources``: their gold source ids (and checkpoints) are corpus ids: the question's
paragraph for SQuAD (none when unanswerable), the ``supporting_facts`` titles' paragraphs for HotpotQA,
the ``is_supporting`` paragraphs for MuSiQue. The file's records are read once (after the UTF-8 and
nesting checks every import makes); the corpus is streamed to disk as it is pooled and put in place
all at once, never over an existing one.

``--limit N`` keeps the first N records imported (with ``--seed S``: a uniform sample of N, drawn by
reservoir sampling so memory stays at N); ``--prefix`` names the ids (default: the format).

Hostile input is bad data (exit 65), found in bounded memory before a case is written: bytes that are
not UTF-8 (the line and byte offset named), JSON arrays or objects nested more than ``MAX_DEPTH`` deep.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from qaeval.data.corpus import CORPUS_FILE
from qaeval.data.pooling import PassagePool, corpus_case
from qaeval.errors import DatasetError, FileAccessError, Problem, UsageError
from qaeval.files import loads_strict, write_jsonl

CASE_FORMATS = ("squad2", "hotpotqa", "musique", "ragas")
LABELLED_FORMATS = ("wice", "expertqa", "ares")
FORMATS = CASE_FORMATS + LABELLED_FORMATS


class Refused(Exception):
    """A record that cannot become a case, and why (counted, never silently dropped)."""


@dataclass
class ImportReport:
    format: str
    source: str
    out: str = ""
    read: int = 0
    imported: int = 0
    left_by_limit: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)
    corpus: str = ""  # with --corpus: the corpus written, its passages and the paragraphs merged into them
    pooled: int = 0
    merged: int = 0

    def refuse(self, reason: str, where: str) -> None:
        self.refused[reason] += 1
        self.examples.setdefault(reason, where)

    def summary_text(self) -> str:
        lines = [f"imported {self.imported} of {self.read} {self.format} record(s) from {self.source} into {self.out}"]
        if self.left_by_limit:
            lines.append(f"  {self.left_by_limit} left out by --limit")
        for reason, n in self.refused.most_common():
            lines.append(f"  refused {n}: {reason} (first: {self.examples[reason]})")
        accounted = self.imported + self.left_by_limit + sum(self.refused.values())
        lines.append(f"  every record accounted for: {accounted} = {self.read}")
        if self.corpus:
            lines.append(f"pooled {self.pooled} passage(s) from every record of the file into {self.corpus} "
                         f"({self.merged} duplicate paragraph(s) merged)")
        return "\n".join(lines)


# --------------------------------------------------------------------------- reading, streamed


def _open(path: Path) -> io.BufferedReader:
    if not path.exists():
        raise DatasetError("input file not found (public datasets are not shipped with qaeval)", file=str(path))
    if not path.is_file():
        raise DatasetError("input is not a regular file", file=str(path))
    try:
        return open(path, "rb")
    except OSError as exc:
        raise FileAccessError(path, f"cannot read ({exc.strerror or exc})") from None


MAX_DEPTH = 100  # arrays and objects nested deeper than this are refused (the public datasets nest < 10)


def check_utf8(path: Path) -> None:
    """Read the whole input once, in bounded chunks: bytes that are not UTF-8 are a DatasetError naming
    the line and byte offset, before any record is read."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset, lines = 0, 1
    with _open(path) as f:
        while True:
            chunk = f.read(1 << 20)
            held = len(decoder.getstate()[0])  # the start of a character cut by the previous chunk
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as exc:
                at = offset - held + exc.start
                line = lines + chunk.count(b"\n", 0, max(0, exc.start - held))
                raise DatasetError([Problem(str(path), line, f"not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset "
                                                            f"{at})")]) from None
            if not chunk:
                return
            offset += len(chunk)
            lines += chunk.count(b"\n")


def check_depth(path: Path) -> None:
    """Stream a JSON file's structure once: nesting deeper than MAX_DEPTH is a DatasetError, found in
    memory that does not grow with the depth (ijson would keep a prefix per level)."""
    import ijson

    depth = 0
    with _open(path) as f:
        try:
            for event, _ in ijson.basic_parse(f):
                if event in ("start_map", "start_array"):
                    depth += 1
                    if depth > MAX_DEPTH:
                        raise DatasetError(f"arrays or objects nested more than {MAX_DEPTH} deep: not a dataset",
                                           file=str(path))
                elif event in ("end_map", "end_array"):
                    depth -= 1
        except ijson.JSONError as exc:
            raise DatasetError(f"not valid JSON ({_ijson_reason(exc)})", file=str(path)) from None


def _ijson_reason(exc: Exception) -> str:
    """ijson's complaint as one line of text (its C parser gives bytes and a drawing of the spot)."""
    reason = exc.args[0] if exc.args else exc
    if isinstance(reason, bytes):
        reason = reason.decode("utf-8", errors="replace")
    return str(reason).strip().splitlines()[0] if str(reason).strip() else type(exc).__name__


def _first_char(path: Path) -> str:
    with _open(path) as f:
        head = f.read(4096).decode("utf-8-sig", errors="replace").lstrip()
    return head[:1]


def json_items(path: Path, prefix: str = "item") -> Iterator[tuple[str, Any]]:
    """(position, item) for each item of a JSON array (``prefix`` in ijson's notation), streamed."""
    import ijson

    check_depth(path)
    with _open(path) as f:
        try:
            for i, item in enumerate(ijson.items(f, prefix, use_float=True), start=1):
                yield f"{path}:item {i}", item
        except ijson.JSONError as exc:
            raise DatasetError(f"not valid JSON ({_ijson_reason(exc)})", file=str(path)) from None


def jsonl_items(path: Path) -> Iterator[tuple[str, Any]]:
    with _open(path) as f:
        for number, raw in enumerate(f, start=1):
            line = raw.decode("utf-8-sig", errors="strict").strip() if number == 1 else raw.decode("utf-8").strip()
            if not line:
                continue
            try:
                yield f"{path}:{number}", loads_strict(line)
            except ValueError as exc:
                raise DatasetError(f"line {number} is not valid JSON ({exc})", file=str(path)) from None


def records(path: Path, *, array_prefix: str = "item") -> Iterator[tuple[str, Any]]:
    """JSON array items or JSONL lines, whichever the file holds."""
    return json_items(path, array_prefix) if _first_char(path) == "[" else jsonl_items(path)


def csv_rows(path: Path, delimiter: str = ",") -> Iterator[tuple[str, dict[str, str]]]:
    csv.field_size_limit(1 << 30)
    with _open(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter)
        for row in reader:
            yield f"{path}:{reader.line_num}", row


# --------------------------------------------------------------------------- mapping rules


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise Refused(f"{what} missing or empty")
    return value


def _slug(title: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:48] or "source"
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def squad2_passages(article: Any) -> Iterator[tuple[str | None, str]]:
    """(title, text) of every paragraph of an article that has text."""
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        context = paragraph.get("context") if isinstance(paragraph, dict) else None
        if isinstance(context, str) and context.strip():
            yield article.get("title") or None, context


def squad2_cases(where: str, article: Any, prefix: str, split: str, distractors: int = 5) -> Iterator[tuple[str, Any]]:
    """The cases of one SQuAD article (or the reasons its questions are refused)."""
    paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
    if not isinstance(paragraphs, list):
        yield where, Refused("an article without paragraphs")
        return
    for p, paragraph in enumerate(paragraphs):
        qas = (paragraph.get("qas") or []) if isinstance(paragraph, dict) else []
        others = [(p + k) % len(paragraphs) for k in range(1, distractors + 1) if len(paragraphs) > k]
        try:
            sources = [{"id": f"p{i}", "title": article.get("title") or None,
                        "text": _text(paragraphs[i].get("context"), "paragraph context")}
                       for i in sorted({p, *others})]
        except Refused as exc:
            for qa in qas:
                yield where, exc
            continue
        for qa in qas:
            here = f"{where}, question {qa.get('id', '?') if isinstance(qa, dict) else '?'}"
            try:
                yield here, _squad2_case(qa, sources, f"p{p}", prefix, split)
            except Refused as exc:
                yield here, exc


def _squad2_case(qa: Any, sources: list[dict[str, Any]], gold_id: str, prefix: str, split: str) -> dict[str, Any]:
    if not isinstance(qa, dict):
        raise Refused("a question that is not an object")
    question = _text(qa.get("question"), "question").strip()
    impossible = bool(qa.get("is_impossible"))
    answers = [a.get("text") for a in qa.get("answers") or [] if isinstance(a, dict)]
    if not impossible and not any(isinstance(a, str) and a.strip() for a in answers):
        raise Refused("answerable question without an answer")
    gold = None if impossible else next(a for a in answers if isinstance(a, str) and a.strip())
    return {
        "id": f"{prefix}-{_text(qa.get('id'), 'question id')}", "question": question,
        "sources": [{k: v for k, v in s.items() if v is not None} for s in sources],
        "gold_answer": gold, "gold_source_ids": [] if impossible else [gold_id],
        "expected_behavior": "unanswerable_must_abstain" if impossible else "answer",
        "difficulty": "single-hop", "split": split,
        "adversarial": "squad2-unanswerable" if impossible else "squad2",
    }


def _items_of(record: Any, key: str, what: str) -> list[Any]:
    """A record's non-empty list field, or Refused."""
    if not isinstance(record, dict):
        raise Refused("a record that is not an object")
    value = record.get(key)
    if not isinstance(value, list) or not value:
        raise Refused(f"no {what}")
    return value


def _hotpotqa_paragraph(item: Any) -> tuple[Any, str]:
    """(title, text) of one context entry, the sentences joined; Refused when it is not [title, sentences]."""
    if not (isinstance(item, list) and len(item) == 2 and isinstance(item[1], list)):
        raise Refused("a context entry that is not [title, sentences]")
    return item[0], "".join(s for s in item[1] if isinstance(s, str)).strip()


def hotpotqa_passages(record: Any) -> Iterator[tuple[str | None, str]]:
    """(title, text) of every context paragraph of a record that has a title and text."""
    context = record.get("context") if isinstance(record, dict) else None
    for item in context if isinstance(context, list) else []:
        try:
            title, text = _hotpotqa_paragraph(item)
        except Refused:
            continue
        if isinstance(title, str) and title.strip() and text:
            yield title, text


def hotpotqa_case(record: Any, prefix: str, split: str) -> dict[str, Any]:
    context = _items_of(record, "context", "context paragraphs")
    taken: set[str] = set()
    sources, ids = [], {}
    for item in context:
        title, text = _hotpotqa_paragraph(item)
        title = _text(title, "context title")
        if not text:
            raise Refused("an empty context paragraph")
        if title in ids:
            continue
        ids[title] = _slug(title, taken)
        sources.append({"id": ids[title], "title": title, "text": text})
    supporting = [f[0] for f in record.get("supporting_facts") or [] if isinstance(f, list) and f]
    if not supporting:
        raise Refused("no supporting facts")
    missing = [t for t in supporting if t not in ids]
    if missing:
        raise Refused("a supporting title that is not among the context paragraphs")
    gold_ids = list(dict.fromkeys(ids[t] for t in supporting))
    kind = record.get("type")
    return {
        "id": f"{prefix}-{_text(record.get('_id') or record.get('id'), 'id')}",
        "question": _text(record.get("question"), "question").strip(), "sources": sources,
        "gold_answer": _text(record.get("answer"), "answer").strip(), "gold_source_ids": gold_ids,
        "expected_behavior": "answer", "difficulty": "multi-hop", "split": split,
        **({"adversarial": kind} if isinstance(kind, str) and kind else {}),
        "checkpoints": [{"kind": "retrieved", "source_id": g} for g in gold_ids],
    }


def musique_passages(record: Any) -> Iterator[tuple[str | None, str]]:
    """(title, text) of every paragraph of a record that has text."""
    paragraphs = record.get("paragraphs") if isinstance(record, dict) else None
    for p in paragraphs if isinstance(paragraphs, list) else []:
        text = p.get("paragraph_text") if isinstance(p, dict) else None
        if isinstance(text, str) and text.strip():
            yield (p["title"] if isinstance(p.get("title"), str) and p["title"] else None), text


def musique_case(record: Any, prefix: str, split: str) -> dict[str, Any]:
    paragraphs = _items_of(record, "paragraphs", "paragraphs")
    sources, gold = [], []
    for n, p in enumerate(paragraphs):
        if not isinstance(p, dict):
            raise Refused("a paragraph that is not an object")
        sid = f"p{p.get('idx', n)}"
        sources.append({"id": sid, "text": _text(p.get("paragraph_text"), "paragraph text"),
                        **({"title": p["title"]} if isinstance(p.get("title"), str) and p["title"] else {})})
        if p.get("is_supporting") is True:
            gold.append(sid)
    if len({s["id"] for s in sources}) != len(sources):
        raise Refused("two paragraphs with the same idx")
    hops = len(record.get("question_decomposition") or []) or 1
    answerable = record.get("answerable", True) is not False
    if answerable and not gold:
        raise Refused("an answerable question with no supporting paragraph")
    case = {
        "id": f"{prefix}-{_text(record.get('id'), 'id')}", "question": _text(record.get("question"), "question").strip(),
        "sources": sources, "gold_answer": _text(record.get("answer"), "answer").strip() if answerable else None,
        "gold_source_ids": gold if answerable else [],
        "expected_behavior": "answer" if answerable else "unanswerable_must_abstain",
        "difficulty": "multi-hop" if hops >= 2 else "single-hop", "split": split, "adversarial": f"musique-{hops}hop",
    }
    if answerable and hops >= 2:
        case["checkpoints"] = [{"kind": "retrieved", "source_id": g} for g in gold]
    return case


def _listish(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = loads_strict(value)
        except ValueError:
            raise Refused(f"{what} is text, not a JSON list") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise Refused(f"{what} is not a list of strings")
    return value


def ragas_case(record: Any, prefix: str, split: str, number: int) -> dict[str, Any]:
    from qaeval.text import normalize

    if not isinstance(record, dict):
        raise Refused("a row that is not an object")
    contexts = [c for c in _listish(record.get("contexts"), "contexts") if c.strip()]
    if not contexts:
        raise Refused("no contexts")
    truth = record.get("ground_truth") or record.get("reference")
    if not truth and record.get("ground_truths"):
        truth = (_listish(record["ground_truths"], "ground_truths") or [None])[0]
    truth = _text(truth, "ground_truth/reference")
    references = record.get("reference_contexts")
    gold: list[str] = []
    if references not in (None, "", []):
        wanted = {normalize(r) for r in _listish(references, "reference_contexts")}
        gold = [f"c{i}" for i, c in enumerate(contexts, start=1) if normalize(c) in wanted]
        if not gold:
            raise Refused("reference_contexts that match none of the contexts")
    sources = [{"id": f"c{i}", "text": c} for i, c in enumerate(contexts, start=1)]
    return {"id": f"{prefix}-{number:05d}", "question": _text(record.get("question") or record.get("user_input"), "question"),
            "sources": sources, "gold_answer": truth.strip(), "gold_source_ids": gold, "expected_behavior": "answer",
            "difficulty": "single-hop", "split": split}


# --------------------------------------------------------------------------- labelled sets


def _labelled(cid: str, question: str, sources: list[dict[str, Any]], answer: str, score: int, reason: str) -> dict[str, Any]:
    return {"id": cid, "question": question, "sources": sources,
            "output": {"answer": answer, "citations": [{"source_id": s["id"], "claim": answer} for s in sources],
                       "abstained": False},
            "labels": {"faithfulness": {"score": score, "reason": reason}}}


WICE_SCORES = {"supported": 2, "partially_supported": 1, "not_supported": 0}
EXPERTQA_SCORES = {"Complete": 2, "Partial": 1, "Missing": 0, "Incomplete": 0}
ARES_SCORES = {"1": 2, "1.0": 2, "[[Yes]]": 2, "Yes": 2, "0": 0, "0.0": 0, "[[No]]": 0, "No": 0}


def wice_rows(path: Path, prefix: str) -> Iterator[tuple[str, Any]]:
    for where, record in jsonl_items(path):
        try:
            if not isinstance(record, dict):
                raise Refused("a record that is not an object")
            label = record.get("label")
            if label not in WICE_SCORES:
                raise Refused(f"label {label!r} is not supported/partially_supported/not_supported")
            evidence = record.get("evidence")
            if not isinstance(evidence, list) or not any(isinstance(s, str) and s.strip() for s in evidence):
                raise Refused("no evidence text")
            text = " ".join(s.strip() for s in evidence if isinstance(s, str) and s.strip())
            meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
            cid = f"{prefix}-{meta.get('id') or where.rsplit(':', 1)[-1]}"
            yield where, _labelled(cid, "", [{"id": "page", "text": text}], _text(record.get("claim"), "claim"),
                                   WICE_SCORES[label], f"WiCE: {label}")
        except Refused as exc:
            yield where, exc


def expertqa_rows(path: Path, prefix: str) -> Iterator[tuple[str, Any]]:
    for where, record in jsonl_items(path):
        if not isinstance(record, dict) or not isinstance(record.get("answers"), dict):
            yield where, Refused("a record without answers")
            continue
        question = record.get("question") if isinstance(record.get("question"), str) else ""
        line = where.rsplit(":", 1)[-1]
        for system, answer in record["answers"].items():
            claims = answer.get("claims") if isinstance(answer, dict) else None
            for n, claim in enumerate(claims or [], start=1):
                here = f"{where}, {system} claim {n}"
                try:
                    if not isinstance(claim, dict):
                        raise Refused("a claim that is not an object")
                    support = claim.get("support")
                    if support not in EXPERTQA_SCORES:
                        raise Refused(f"support {support!r} is not a judgement of the evidence (N/A or none)")
                    evidence = [e for e in claim.get("evidence") or [] if isinstance(e, str) and e.strip()]
                    if not evidence:
                        raise Refused("no evidence to judge the claim against")
                    sources = [{"id": f"e{i}", "text": e.strip()} for i, e in enumerate(evidence, start=1)]
                    cid = f"{prefix}-{line}-{re.sub(r'[^a-z0-9]+', '-', str(system).lower())}-{n}"
                    yield here, _labelled(cid, question, sources, _text(claim.get("claim_string"), "claim"),
                                          EXPERTQA_SCORES[support], f"ExpertQA expert: {support}")
                except Refused as exc:
                    yield here, exc


def ares_rows(path: Path, prefix: str) -> Iterator[tuple[str, Any]]:
    for n, (where, row) in enumerate(csv_rows(path, delimiter="\t"), start=1):
        try:
            label = (row.get("Answer_Faithfulness_Label") or "").strip()
            if label not in ARES_SCORES:
                raise Refused(f"Answer_Faithfulness_Label {label!r} is not 0 or 1 (or [[No]] or [[Yes]])")
            score = ARES_SCORES[label]
            question = row.get("Query", row.get("Question"))  # ARES's files name the column either way
            yield where, _labelled(f"{prefix}-{n:04d}", _text(question, "Query (or Question)"),
                                   [{"id": "doc", "text": _text(row.get("Document"), "Document")}],
                                   _text(row.get("Answer"), "Answer"), score, f"ARES human label {label}")
        except Refused as exc:
            yield where, exc


# --------------------------------------------------------------------------- the import


def _one_case(build: Callable[[Any, str, str], dict[str, Any]]) -> Callable[..., Iterator[tuple[str, Any]]]:
    def cases(where: str, record: Any, prefix: str, split: str) -> Iterator[tuple[str, Any]]:
        try:
            yield where, build(record, prefix, split)
        except Refused as exc:
            yield where, exc
    return cases


# format: (its records' place in a JSON file, the cases of one record, the passages of one record)
POOLED = {
    "squad2": ("data.item", squad2_cases, squad2_passages),
    "hotpotqa": ("item", _one_case(hotpotqa_case), hotpotqa_passages),
    "musique": ("item", _one_case(musique_case), musique_passages),
}


def _pooled(fmt: str, path: Path, prefix: str, split: str, pool: PassagePool | None) -> Iterator[tuple[str, Any]]:
    """Cases of a format with paragraphs, read once: with a pool, every paragraph of every record (kept,
    refused or left by --limit) is pooled first, and each case names its passages by corpus id."""
    array_prefix, cases_of, passages_of = POOLED[fmt]
    reader = json_items(path, array_prefix) if fmt == "squad2" else records(path, array_prefix=array_prefix)
    for where, record in reader:
        if pool is not None:
            for title, text in passages_of(record):
                pool.add(title, text)
        for here, item in cases_of(where, record, prefix, split):
            yield here, item if pool is None or isinstance(item, Refused) else corpus_case(item, pool)


def _produce(fmt: str, path: Path, prefix: str, split: str, pool: PassagePool | None) -> Iterator[tuple[str, Any]]:
    if fmt in POOLED:
        yield from _pooled(fmt, path, prefix, split, pool)
    elif fmt == "ragas":
        rows = csv_rows(path) if path.suffix.lower() == ".csv" else records(path)
        for n, (where, record) in enumerate(rows, start=1):
            try:
                yield where, ragas_case(record, prefix, split, n)
            except Refused as exc:
                yield where, exc
    else:
        yield from {"wice": wice_rows, "expertqa": expertqa_rows, "ares": ares_rows}[fmt](path, prefix)


def _checked_prefix(fmt: str, limit: int | None, split: str, prefix: str | None, corpus: bool) -> str:
    if fmt not in FORMATS:
        raise UsageError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
    if corpus and fmt not in POOLED:
        raise UsageError(f"--corpus is for {', '.join(POOLED)} (a passage pool read from the whole file); "
                         f"{fmt} rows carry their own passages")
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    if split not in ("frozen", "living"):
        raise UsageError(f"--split must be frozen or living, got {split!r}")
    prefix = prefix or fmt
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", prefix):
        raise UsageError(f"--prefix must be letters, digits, '-', '_' or '.', got {prefix!r}")
    return prefix


def _collect(report: ImportReport, items: Iterator[tuple[str, Any]], limit: int | None,
             seed: int | None) -> list[dict[str, Any]]:
    """The records kept: all, the first ``limit``, or (with a seed) a uniform sample of ``limit``."""
    kept: list[dict[str, Any]] = []
    rng = random.Random(seed) if seed is not None else None
    accepted = 0
    seen_ids: set[str] = set()
    for where, item in items:
        report.read += 1
        if isinstance(item, Refused):
            report.refuse(str(item), where)
            continue
        if item["id"] in seen_ids:
            report.refuse("an id that appeared earlier in the file", where)
            continue
        seen_ids.add(item["id"])
        accepted += 1
        if limit is None or len(kept) < limit:
            kept.append(item)
        elif rng is not None:  # reservoir sampling: every accepted record equally likely, memory bounded by limit
            j = rng.randrange(accepted)
            if j < limit:
                kept[j] = item
            report.left_by_limit += 1
        else:
            report.left_by_limit += 1
    report.imported = len(kept)
    return kept


def _check_written(out: Path, labelled: bool) -> None:
    """Read the written file back as strictly as any, with whatever else the folder holds: case ids must be
    unique across its files, and a corpus case's gold and checkpoint passages must be in its corpus."""
    if labelled:
        from qaeval.data.labels import read_labelled_set

        read_labelled_set(out)
        return
    from qaeval.data.cases import load_suite

    corpus = load_suite(out.parent).corpus
    if corpus is not None:
        corpus.close()


def import_file(fmt: str, source: str | Path, out_dir: str | Path, *, limit: int | None = None, seed: int | None = None,
                split: str = "frozen", prefix: str | None = None, corpus: bool = False) -> ImportReport:
    """Convert ``source`` (a public dataset in ``fmt``) into ``out_dir/<prefix>.jsonl``: golden cases, or a
    labelled set for the labelled formats. With ``corpus``, every paragraph of the file is pooled into
    ``out_dir/corpus.jsonl`` and the cases name their gold passages by corpus id. Refuses to overwrite an
    existing file."""
    prefix = _checked_prefix(fmt, limit, split, prefix, corpus)
    path = Path(source)
    labelled = fmt in LABELLED_FORMATS
    out = Path(out_dir) / f"{prefix}{'-labelled' if labelled else ''}.jsonl"
    for taken in (out, Path(out_dir) / CORPUS_FILE) if corpus else (out,):
        if os.path.lexists(taken):
            raise UsageError(f"{taken} exists; choose another --out{'' if corpus else ' or --prefix'} "
                             "(an import never overwrites data)")
    report = ImportReport(fmt, str(path), str(out))
    check_utf8(path)
    with PassagePool(out_dir) if corpus else nullcontext() as pool:
        kept = _collect(report, _produce(fmt, path, prefix, split, pool), limit, seed)
        if not kept:
            raise DatasetError(f"nothing imported: {report.summary_text()}", file=str(path))
        if pool is not None:
            report.corpus, report.pooled, report.merged = str(pool.publish()), pool.pooled, pool.merged
    try:
        write_jsonl(out, kept)
        _check_written(out, labelled)
    except BaseException:
        for written in (out, Path(report.corpus)) if corpus else (out,):
            written.unlink(missing_ok=True)
        raise
    return report
