#!/usr/bin/env python3
"""The frozen corpus and the corpus-scale retriever, measured on synthetic corpora.

    python benchmarks/bench_corpus.py                                  # corpus: 100k and 1M; retrievers: 100k
    python benchmarks/bench_corpus.py --corpus-sizes 100000 --retriever-sizes 100000 --repeat 3
    python benchmarks/bench_corpus.py --retrievers fts5,bm25s          # bm25s needs `pip install bm25s`

Passages are ~80 words in sentences drawn from a Zipf-distributed vocabulary (a few hundred common English
words, then tens of thousands of made-up ones), so BM25 has rare and common terms to weigh. Questions
take the four rarest words of a random passage (that passage is the gold one); one in ten uses words
no passage has (it should find nothing above the floor).

Every measurement runs in a fresh process so peak memory (``ru_maxrss``) is its own:

corpus      ``Corpus.open`` time (streaming validation, sha256, index) and the resident memory it adds
            (above the interpreter with numpy imported), the process's peak RSS; median time of ``corpus[id]`` over 10,000 random ids; time
            to iterate every passage.
fts5        ``CorpusRetriever.build`` into an empty cache folder (the corpus already open), the index
            size on disk, peak RSS; the time to open it again from the cache; the median time of one
            ``search(question, 10)`` over 1,000 questions, without and with the 0.5 coverage floor;
            recall@10 of the gold passage as a sanity check; on 200 questions, the share of the top 10
            that is the same with the common-word cutoff as with ranking on every word.
bm25s       the same through bm25s's public API: streaming tokenisation of the passages (English
            stopwords, no stemmer), ``BM25.index``, ``save``/``load(mmap=True)``, one ``retrieve`` per
            question.

Prints one line per measurement and the median over ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMON = (
    "the of and to in a is was for on that by with as at from it an be are this which or its were "
    "has have had not but also after first their new other two more one all into time over year when "
    "city museum library branch river school church station bridge market harbour council garden "
    "village street tower castle island valley forest railway company festival record season"
).split()
SYLLABLES = "ka ro mi tu ne sa li po de va gu shi ren tal mor bek dan fil gor hun".split()
QUESTIONS = 1000


def vocabulary(size: int = 60000) -> list[str]:
    made_up = (a + b + c + d for a in SYLLABLES for b in SYLLABLES for c in SYLLABLES for d in ("", *SYLLABLES))
    words = list(COMMON)
    for word in made_up:
        if len(words) == size:
            break
        words.append(word)
    return words


def write_corpus(path: Path, n: int, seed: int = 7) -> None:
    import numpy as np

    words = vocabulary()
    weights = 1.0 / np.arange(1, len(words) + 1) ** 1.05
    cumulative = np.cumsum(weights) / weights.sum()
    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as out:
        for start in range(0, n, 10000):
            count = min(10000, n - start)
            picks = np.searchsorted(cumulative, rng.random((count, 80)))
            for row, i in zip(picks.tolist(), range(start, start + count)):
                sentences = [" ".join(words[w] for w in row[j : j + 10]) for j in range(0, 80, 10)]
                text = ". ".join(s[0].upper() + s[1:] for s in sentences) + f". Ref {i}."
                passage = {"id": f"doc-{i:07d}", "text": text}
                if i % 2:
                    passage["title"] = words[row[0]].title() + " " + words[row[1]]
                out.write(json.dumps(passage) + "\n")


def questions(corpus, n_passages: int) -> list[tuple[str, str | None]]:
    """(question, gold id or None): the four rarest words of a random passage; 10% out of corpus."""
    rank = {w: r for r, w in enumerate(vocabulary())}
    rng = random.Random(11)
    out = []
    for q in range(QUESTIONS):
        if q % 10 == 0:
            out.append((f"Which record mentions zqxv{q} and wplk{q} together?", None))
            continue
        gold = f"doc-{rng.randrange(n_passages):07d}"
        found = sorted({w.lower().strip(".") for w in corpus[gold].text.split()} & rank.keys(), key=rank.get)
        out.append(("Which record mentions " + ", ".join(found[-4:]) + "?", gold))
    return out


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# --------------------------------------------------------------------------- children (one per process)


def child_corpus(path: Path, n: int) -> dict:

    from qaeval.data.corpus import Corpus

    base = rss_mib()
    t0 = time.perf_counter()
    corpus = Corpus.open(path)
    opened = time.perf_counter() - t0
    grown = rss_mib() - base
    rng = random.Random(3)
    ids = [f"doc-{rng.randrange(n):07d}" for _ in range(10000)]
    times = []
    for pid in ids:
        t = time.perf_counter()
        corpus[pid]
        times.append(time.perf_counter() - t)
    t0 = time.perf_counter()
    count = sum(1 for _ in corpus)
    assert count == n
    return {
        "open_s": opened,
        "index_rss_mib": grown,
        "peak_rss_mib": peak_mib(),
        "access_us": statistics.median(times) * 1e6,
        "iterate_s": time.perf_counter() - t0,
    }


def _query_stats(search, qs) -> tuple[float, float]:
    times, hits = [], 0
    for question, gold in qs:
        t = time.perf_counter()
        found = search(question)
        times.append(time.perf_counter() - t)
        hits += gold is not None and gold in found
    return statistics.median(times) * 1e3, hits / sum(g is not None for _, g in qs)


def child_fts5(path: Path, n: int) -> dict:
    from qaeval.data.corpus import Corpus
    from qaeval.system.retriever import CorpusRetriever

    corpus = Corpus.open(path)
    qs = questions(corpus, n)
    cache = Path(tempfile.mkdtemp(prefix="bench-fts5-"))
    try:
        t0 = time.perf_counter()
        retriever = CorpusRetriever.build(corpus, cache)
        built = time.perf_counter() - t0
        size = retriever.path.stat().st_size / 2**20
        t0 = time.perf_counter()
        again = CorpusRetriever.build(corpus, cache)
        reopened = time.perf_counter() - t0
        assert not again.built
        plain, recall = _query_stats(lambda q: [p for p, _ in retriever.search(q, 10)], qs)
        floored, _ = _query_stats(lambda q: [p for p, _ in retriever.search(q, 10, floor=0.5)], qs)
        empty = sum(not retriever.search(q, 10, floor=0.5) for q, g in qs if g is None)
        agree = _agreement(retriever, qs[:200])
    finally:
        shutil.rmtree(cache)
    return {
        "build_s": built,
        "size_mib": size,
        "peak_rss_mib": peak_mib(),
        "reopen_s": reopened,
        "query_ms": plain,
        "query_floor_ms": floored,
        "recall@10": recall,
        "out_of_corpus_empty": empty / (QUESTIONS // 10),
        "top10_same_as_all_words": agree,
    }


def _agreement(retriever, qs) -> float:
    """Share of top-10 passages the common-word cutoff keeps, against ranking on every word."""
    from qaeval.system.retriever import match_expression, question_words

    sql = "SELECT rowid FROM passages WHERE passages MATCH ? ORDER BY rank, rowid LIMIT 10"
    db, same, total = retriever._db(), 0, 0
    for question, gold in qs:
        if gold is None:
            continue
        every = {r for (r,) in db.execute(sql, (match_expression(question_words(question)),))}
        cut = {int(pid.split("-")[1]) + 1 for pid, _ in retriever.search(question, 10)}
        same, total = same + len(every & cut), total + len(every)
    return same / total


def child_bm25s(path: Path, n: int) -> dict:
    import bm25s

    from qaeval.data.corpus import Corpus

    corpus = Corpus.open(path)
    qs = questions(corpus, n)
    folder = Path(tempfile.mkdtemp(prefix="bench-bm25s-"))
    try:
        t0 = time.perf_counter()
        tokenizer = bm25s.tokenization.Tokenizer(stopwords="en")
        ids: list[str] = []

        def texts():
            for passage in corpus:
                ids.append(passage.id)
                yield f"{passage.title or ''} {passage.text}"

        tokens = list(tokenizer.streaming_tokenize(texts()))
        model = bm25s.BM25()
        model.index(bm25s.tokenization.Tokenized(ids=tokens, vocab=tokenizer.get_vocab_dict()), show_progress=False)
        del tokens
        model.save(folder)
        built = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in folder.iterdir()) / 2**20
        t0 = time.perf_counter()
        model = bm25s.BM25.load(folder, mmap=True)
        reopened = time.perf_counter() - t0

        def search(question: str) -> list[str]:
            query = tokenizer.tokenize([question], update_vocab=False, return_as="ids", show_progress=False)
            if not query or not query[0]:
                return []
            docs, _ = model.retrieve(query, k=10, show_progress=False)
            return [ids[d] for d in docs[0].tolist()]

        plain, recall = _query_stats(search, qs)
    finally:
        shutil.rmtree(folder)
    return {
        "build_s": built,
        "size_mib": size,
        "peak_rss_mib": peak_mib(),
        "reopen_s": reopened,
        "query_ms": plain,
        "recall@10": recall,
    }


CHILDREN = {"corpus": child_corpus, "fts5": child_fts5, "bm25s": child_bm25s}


# --------------------------------------------------------------------------- parent


def measure(kind: str, path: Path, n: int) -> dict:
    done = subprocess.run(
        [sys.executable, __file__, "--child", kind, str(path), str(n)], capture_output=True, text=True, check=False
    )
    if done.returncode:
        sys.exit(f"{kind} on {n} passages failed:\n{done.stderr}")
    return json.loads(done.stdout)


def report(kind: str, n: int, runs: list[dict]) -> None:
    medians = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    shown = "  ".join(f"{key}={value:.4g}" for key, value in medians.items())
    print(f"{kind:6} n={n:>9,}  median of {len(runs)}:  {shown}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus-sizes", default="100000,1000000")
    parser.add_argument("--retriever-sizes", default="100000")
    parser.add_argument("--retrievers", default="fts5,bm25s")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("KIND", "FILE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, path, n = args.child
        print(json.dumps(CHILDREN[kind](Path(path), int(n))))
        return
    sizes = {int(s): [] for s in args.corpus_sizes.split(",") if s}
    for s in args.retriever_sizes.split(","):
        if s:
            sizes.setdefault(int(s), [])
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        for n in sorted(sizes):
            path = Path(tmp) / f"corpus-{n}.jsonl"
            t0 = time.perf_counter()
            write_corpus(path, n)
            print(
                f"generated {n:,} passages, {path.stat().st_size / 2**20:.0f} MiB, in {time.perf_counter() - t0:.1f} s",
                flush=True,
            )
            kinds = (["corpus"] if str(n) in args.corpus_sizes.split(",") else []) + (
                [k for k in args.retrievers.split(",") if k] if str(n) in args.retriever_sizes.split(",") else []
            )
            for kind in kinds:
                report(kind, n, [measure(kind, path, n) for _ in range(args.repeat)])
            os.unlink(path)


if __name__ == "__main__":
    main()
