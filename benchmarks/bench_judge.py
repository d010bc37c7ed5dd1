#!/usr/bin/env python3
"""Wall time of the OpenAI-compatible judge against a local server with fixed latency.

    python benchmarks/bench_judge.py                       # 240 calls, 80 ms each, concurrency 8, 5 runs
    python benchmarks/bench_judge.py --calls 400 --latency 0.05 --concurrency 16

The ideal wall time is calls x latency / concurrency; the target is within 1.3x of it. The script prints
the figure, the target and whether it was met; it exits 0 either way (a busy machine is not a failure),
or 2 with ``--strict`` when the target was missed. Requests are
built from the golden set (the hub's answered cases, repeated with distinct questions so none is a cache
hit; the cache is off anyway). Also prints calls per answered case and the tokens the server reported.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=240)
    parser.add_argument("--latency", type=float, default=0.08)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--strict", action="store_true", help="exit 2 when the median misses the 1.3x target")
    args = parser.parse_args()

    from qaeval import api
    from qaeval.judges.fake_server import FakeJudgeServer
    from qaeval.judges.openai import OpenAIJudge
    from qaeval.scoring.judge import build_requests

    run = api.run(str(ROOT / "golden"))
    base = build_requests(run.suite.to_frame(), run.outputs, run.suite.sources_frame())
    answered = len(base)
    requests = [
        dataclasses.replace(base[i % answered], case_id=f"{base[i % answered].case_id}#{i}") for i in range(args.calls)
    ]
    ideal = args.calls * args.latency / args.concurrency
    print(
        f"{args.calls} calls, {args.latency * 1000:.0f} ms latency, concurrency {args.concurrency}: ideal {ideal:.2f} s"
    )
    times = []
    with FakeJudgeServer(latency=args.latency) as server:
        judge = OpenAIJudge(
            model="bench",
            base_url=server.url,
            api_key="bench",
            concurrency=args.concurrency,
            cache=None,
            show_progress=False,
        )
        for _ in range(args.repeat):
            start = time.perf_counter()
            responses = judge.judge(requests)
            times.append(time.perf_counter() - start)
            assert not any(r.error for r in responses), "the benchmark expects every call to succeed"
        tokens = sum((r.prompt_tokens or 0) + (r.completion_tokens or 0) for r in responses)
        peak = server.max_in_flight
    med = statistics.median(times)
    print(
        f"median wall {med:.2f} s over {args.repeat} runs (min {min(times):.2f}, max {max(times):.2f}): "
        f"{med / ideal:.2f}x ideal; peak in flight {peak}"
    )
    print(
        f"calls per answered case: 1 ({answered} answered of {len(run.suite)} golden cases; "
        f"abstentions cost 0); tokens per call: {tokens / args.calls:.0f}"
    )
    met = med <= TARGET * ideal
    print(f"target: within {TARGET}x of ideal ({TARGET * ideal:.2f} s): {'met' if met else 'MISSED'}")
    if args.strict and not met:
        sys.exit(2)


if __name__ == "__main__":
    main()
