"""Retrieval checked against the standard: qaeval's four per-case figures against trec_eval's (through
ir-measures and its pytrec_eval provider) on random rankings, and ``qaeval export trec`` read back by
ir-measures giving the record's own means."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from conftest import GOLDEN, make_case, write_cases

from qaeval import api
from qaeval.cli import main
from qaeval.commands.export import QRELS_FILE, RUN_FILE, runtag
from qaeval.record.read import load_run
from qaeval.scoring.retrieval import case_retrieval

try:
    import ir_measures
except ImportError:  # pragma: no cover
    ir_measures = None

needs_ir_measures = pytest.mark.skipif(
    ir_measures is None,
    reason="ir-measures is not installed (pip install 'ir-measures>=0.4'): the reference "
    "implementation retrieval is checked against",
)
FIGURES = ("precision_at_k", "recall_at_k", "mrr", "ndcg_at_k")


def measures(k: int) -> dict[str, object]:
    """Our figure -> the ir-measures measure defined the same way (RR without a cutoff: the whole ranking)."""
    from ir_measures import RR, P, R, nDCG

    return {"precision_at_k": P @ k, "recall_at_k": R @ k, "mrr": RR, "ndcg_at_k": nDCG @ k}


def random_cases(n: int, seed: int = 19) -> list[tuple[str, list[str], list[str], int]]:
    """(qid, gold, ranking, k): 1-4 gold ids, a ranking of 0-20 distinct ids with gold mixed in or not."""
    rng = random.Random(seed)
    pool = [f"p{i}" for i in range(40)]
    cases = []
    for i in range(n):
        gold = rng.sample(pool, rng.randint(1, 4))
        candidates = [g for g in gold if rng.random() < 0.7] + rng.sample(pool, 20)
        ranking = list(dict.fromkeys(candidates))
        rng.shuffle(ranking)
        cases.append((f"q{i}", gold, ranking[: rng.randint(0, 20)], rng.choice((1, 3, 5, 10))))
    return cases


def reference_figures(cases: list[tuple[str, list[str], list[str], int]]) -> dict[str, dict[str, float]]:
    """Per qid, the four figures as trec_eval computes them (scores strictly decreasing with rank)."""
    out: dict[str, dict[str, float]] = {}
    for k in sorted({c[3] for c in cases}):
        chosen = [c for c in cases if c[3] == k]
        qrels = [ir_measures.Qrel(qid, g, 1) for qid, gold, _, _ in chosen for g in gold]
        run = [
            ir_measures.ScoredDoc(qid, d, float(len(ranking) - r))
            for qid, _, ranking, _ in chosen
            for r, d in enumerate(ranking)
        ]
        names = {m: name for name, m in measures(k).items()}
        for metric in ir_measures.pytrec_eval.iter_calc(list(names), qrels, run):
            out.setdefault(metric.query_id, {})[names[metric.measure]] = metric.value
    return out


@needs_ir_measures
def test_the_four_figures_equal_trec_evals_on_random_rankings():
    cases = random_cases(400)
    reference = reference_figures(cases)
    assert len(reference) == len(cases)  # a query that retrieved nothing is scored too, as 0
    assert sum(not ranking for _, _, ranking, _ in cases) >= 10  # the edge cases are drawn
    assert sum(len(ranking) < k for _, _, ranking, k in cases) >= 40
    differ = []
    for qid, gold, ranking, k in cases:
        ours = case_retrieval(gold, ranking, k)
        for name in FIGURES:
            if abs(ours[name] - reference[qid][name]) > 1e-9:
                differ.append(
                    f"{qid} k={k} gold={gold} ranking={ranking}: {name} {ours[name]} vs {reference[qid][name]}"
                )
    assert not differ, "\n".join(differ[:10])


# --------------------------------------------------------------------------- qaeval export trec


@pytest.fixture(scope="module")
def golden_record(golden_run, tmp_path_factory) -> Path:
    return golden_run.save(tmp_path_factory.mktemp("trec") / "golden.json")


def test_export_writes_run_and_qrels_in_trec_format(golden_record, tmp_path, capsys):
    out = tmp_path / "new" / "trec"  # created, parents included
    assert main(["export", "trec", str(golden_record), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    run_ = load_run(golden_record)
    rows = run_.retrieval
    run_lines = (out / RUN_FILE).read_text().splitlines()
    qrels_lines = (out / QRELS_FILE).read_text().splitlines()
    assert (
        f"wrote {out / RUN_FILE}: {run_.outputs['retrieved_ids'].map(bool).sum()} queries, {len(run_lines)} lines"
        in printed
    )
    assert f"wrote {out / QRELS_FILE}: {len(rows)} queries, {int(rows['n_gold'].sum())} lines" in printed
    assert f"k = {run_.meta.k}" in printed and f"-m ndcg_cut.{run_.meta.k}" in printed
    without_gold = len(run_.suite) - len(rows)
    assert without_gold > 0 and f"{without_gold} case(s) without gold sources have no qrels lines" in printed
    first = run_.outputs.iloc[0]
    tag = runtag(run_.meta.adapter)
    assert run_lines[0] == f"{first['case_id']} Q0 {first['retrieved_ids'][0]} 1 1.0 {tag}"
    assert run_lines[1] == f"{first['case_id']} Q0 {first['retrieved_ids'][1]} 2 0.5 {tag}"
    assert all(len(line.split()) == 6 for line in run_lines)
    assert all(line.split()[1] == "0" and line.endswith(" 1") for line in qrels_lines)


@needs_ir_measures
def test_exported_files_read_by_ir_measures_give_the_records_means(golden_record, tmp_path):
    export = api.export_trec(str(golden_record), tmp_path)
    rows = load_run(golden_record).retrieval
    k = export.k
    qrels = list(ir_measures.read_trec_qrels(str(export.qrels_path)))
    run = list(ir_measures.read_trec_run(str(export.run_path)))
    names = {m: name for name, m in measures(k).items()}
    theirs = ir_measures.calc_aggregate(list(names), qrels, run)
    for measure, name in names.items():
        assert theirs[measure] == pytest.approx(rows[name].mean(), abs=1e-12), name


def test_a_case_that_retrieved_nothing_has_qrels_and_no_run_lines(tmp_path):
    data = write_cases(tmp_path / "data", [make_case(id="silent-0001", question="When did the DVD shelf open?")])
    result = api.run(str(data), adapter="plugins:make_abstain_on_dvd")  # abstains, retrieving nothing
    export = api.export_trec(result, tmp_path / "trec")
    assert (export.run_queries, export.run_lines, export.qrels_lines, export.retrieved_nothing) == (0, 0, 1, 1)
    assert "1 case(s) with gold sources retrieved nothing" in export.summary_text()
    assert "pass -c to trec_eval" in export.summary_text()


def test_an_id_with_whitespace_is_refused_naming_the_case(tmp_path, capsys):
    data = write_cases(
        tmp_path / "data",
        [
            make_case(
                id="spaced-0001",
                sources=[{"id": "s 1", "text": "The Eastside Branch opened in 1964 on Dunmore Street."}],
                gold_source_ids=["s 1"],
            )
        ],
    )
    record = api.run(str(data)).save(tmp_path / "run.json")
    assert main(["export", "trec", str(record), "--out", str(tmp_path / "trec")]) == 65
    err = capsys.readouterr().err
    assert "case 'spaced-0001'" in err and "'s 1'" in err and "holds whitespace" in err
    assert not (tmp_path / "trec").exists()  # nothing half written


def test_existing_files_are_never_overwritten(golden_record, tmp_path, capsys):
    (tmp_path / QRELS_FILE).write_text("someone's qrels\n")
    assert main(["export", "trec", str(golden_record), "--out", str(tmp_path)]) == 64
    assert f"refusing to overwrite {tmp_path / QRELS_FILE}" in capsys.readouterr().err
    assert (tmp_path / QRELS_FILE).read_text() == "someone's qrels\n" and not (tmp_path / RUN_FILE).exists()
    assert main(["export", "trec", str(golden_record), "--out", str(golden_record)]) == 64
    assert "is not a folder" in capsys.readouterr().err


def test_a_bad_record_is_a_data_error_not_a_traceback(tmp_path, capsys):
    assert main(["export", "trec", str(tmp_path / "missing.json"), "--out", str(tmp_path / "a")]) == 65
    assert "run record not found" in capsys.readouterr().err
    (tmp_path / "cases.jsonl").write_text((GOLDEN / "frozen.jsonl").read_text())
    assert main(["export", "trec", str(tmp_path / "cases.jsonl"), "--out", str(tmp_path / "b")]) == 65
    err = capsys.readouterr().err
    assert "not valid JSON" in err and "Traceback" not in err
    assert main(["export", "csv", str(tmp_path / "cases.jsonl"), "--out", str(tmp_path / "c")]) == 64
