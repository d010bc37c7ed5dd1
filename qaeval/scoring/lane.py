"""The scoring lane: every output of a run scored once, as it arrives, and the trials built from those scores.

A ``Stream`` hands its lane each place in the plan's order once its output and the judge's verdict are
in. The lane scores up to ``BATCH`` places of one trial at a time (``score_batch``) through every layer,
the registered checks and metrics asked one output at a time, and keeps the rows by place.

**The one step that reads more than one case** is the grounding check's prompt template
(``qaeval.scoring.checks``), learnt per trial from its first ``TEMPLATE_SAMPLE`` prompted outputs in its
order (``trial_order``): a trial's places wait for those, and for the run to declare the trial's cases.
Reading a record back learns it from the same outputs, so the two agree.

``trial_result(t)`` builds trial ``t``'s frames from the kept rows (``assemble``). An output replaced
after it was scored (a failure found after the answer) is scored again, its first score dropped (``rescore``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from qaeval.core.frames import frame, is_missing
from qaeval.data.cases import GoldenCase, Suite
from qaeval.scoring.checks import CHECK_SCHEMA, TEMPLATE_SAMPLE, check_outputs, prompt_template, trial_order
from qaeval.scoring.custom import CUSTOM_SCHEMA, NONE_REGISTERED, Registered
from qaeval.scoring.judge import VERDICT_SCHEMA, JudgeConfig, JudgeRequest, JudgeResponse, MemoEntry, verdict_frame
from qaeval.scoring.metrics import scoreboard_and_slices
from qaeval.scoring.outcomes import case_outcomes, check_samples
from qaeval.scoring.result import RunMeta, RunResult
from qaeval.scoring.retrieval import RETRIEVAL_SCHEMA, score_retrieval
from qaeval.scoring.trajectory import TRAJECTORY_SCHEMA, score_trajectories
from qaeval.scoring.trials import add_trial_columns
from qaeval.system.contract import OUTPUT_SCHEMA

BATCH = 2048  # places scored together at most (the layers' frames cost about the same for one or many)
# When outputs come fast, the lane lingers up to LINGER seconds for MIN_BATCH more before it scores (a
# batch of 30 costs about four times as much a place as one of 300).
MIN_BATCH = 1024
LINGER = 0.25
LAYERS = {  # each layer's columns: a trial with no row of a layer has an empty frame of them
    "checks": CHECK_SCHEMA,
    "retrieval": RETRIEVAL_SCHEMA,
    "verdicts": VERDICT_SCHEMA,
    "trajectory": TRAJECTORY_SCHEMA,
    "custom": CUSTOM_SCHEMA,
}

Item = tuple[int, GoldenCase, dict[str, Any]]  # (place, case, output)
Template = frozenset[tuple[str, ...]]


def keep_open(user: Any, on: bool, *, stopped: bool = False) -> None:
    """Tell a process-backed judge or checks runner (``keep_open``) to keep its process between calls while
    the stream runs, and to stop it after each call again afterwards; ``stopped`` (the run was
    interrupted): stop it for good, so a lane still finishing a call cannot start another process."""
    if user is not None and type(user).__module__.startswith("qaeval.host.") and hasattr(type(user), "keep_open"):
        user.keep_open = on
        if stopped:
            user.stopped = True
        if not on:
            user.close()


def used_responses(memo: dict[Any, MemoEntry], keys: Sequence[tuple[Any, ...]]) -> list[Any]:
    """The responses for ``keys`` from the run's memo, each use counted: a response's first use is as it came;
    every later one (the same output in another trial, or a verdict a journal gave back) is marked cached
    and without tokens, none having been spent on it."""
    out = []
    for key in keys:
        entry = memo[key]
        response = entry.response
        if entry.uses and isinstance(response, JudgeResponse):
            response = replace(response, cached=True, prompt_tokens=None, completion_tokens=None)
        entry.uses += 1
        out.append(response)
    return out


def trial_template(suite: Suite, items: Sequence[Item]) -> Template:
    """A trial's prompt template, learnt from ``items`` (its first prompted outputs in its order)."""
    if not items:
        return frozenset()
    part = Suite(tuple(case for _, case, _ in items), suite.root, suite.corpus)
    outputs = frame([row for *_, row in items], OUTPUT_SCHEMA)
    return prompt_template(
        part.to_frame(), outputs, part.sources_frame(), suite.corpus, trial=items[0][0] // len(suite)
    )


@dataclass
class TrialMembers:
    """Which places a trial holds (declared by the run) and how far its template's sample has arrived."""

    places: list[int]
    scanned: int = 0  # places[:scanned] have arrived
    sample: list[int] = field(default_factory=list)  # the prompted ones among them, up to TEMPLATE_SAMPLE
    template: Template | None = None

    def sample_ready(self, items: dict[int, tuple[GoldenCase, dict[str, Any]]]) -> bool:
        """(Holding the stream's condition.) Advance over arrived places; whether the sample is complete."""
        while len(self.sample) < TEMPLATE_SAMPLE and self.scanned < len(self.places):
            place = self.places[self.scanned]
            if place not in items:
                return False
            row = items[place][1]
            if is_missing(row["error"]) and row["model_was_called"]:
                self.sample.append(place)
            self.scanned += 1
        return True


@dataclass
class Scores:
    """What the lane kept: per layer, the frames of each batch with the place and version of each row."""

    n: int
    parts: dict[str, list[tuple[pd.DataFrame, np.ndarray, np.ndarray]]] = field(default_factory=dict)
    version: dict[int, int] = field(default_factory=dict)  # place -> its latest scoring
    outputs: dict[int, tuple[GoldenCase, dict[str, Any]]] = field(default_factory=dict)

    @property
    def scored(self) -> int:
        """Outputs scored, a replaced one's first score included (each output once)."""
        return sum(v + 1 for v in self.version.values())

    def keep(self, layer: str, df: pd.DataFrame, place_of: dict[str, int]) -> None:
        """Keep a batch's rows of one layer with each row's place and the version of that place's scoring."""
        places = np.fromiter((place_of[c] for c in df["case_id"].tolist()), dtype=np.int64, count=len(df))
        versions = np.fromiter((self.version[p] for p in places.tolist()), dtype=np.int64, count=len(df))
        self.parts.setdefault(layer, []).append((df, places, versions))

    def layer(self, name: str, trial: int) -> pd.DataFrame:
        """The kept rows of one layer for one trial, in suite order (each place's latest scoring only)."""
        kept = []
        for df, places, versions in self.parts.get(name, []):
            if not len(df) or places[0] // self.n != trial:  # a batch is of one trial
                continue
            latest = np.fromiter((self.version[p] for p in places.tolist()), dtype=np.int64, count=len(places))
            current = latest == versions
            kept.append((df, places) if current.all() else (df[current], places[current]))
        if not kept:
            return frame([], LAYERS[name])
        whole = pd.concat([df for df, _ in kept], ignore_index=True) if len(kept) > 1 else kept[0][0]
        order = np.argsort(np.concatenate([p for _, p in kept]), kind="stable")
        return whole.take(order).reset_index(drop=True)


class ScoringLane:
    """The thread that scores a ``Stream``'s outputs: see the module's docstring."""

    def __init__(self, stream: Any, *, config: JudgeConfig, k: int, runner: Any = None) -> None:
        self.stream, self.config, self.k, self.runner = stream, config, k, runner
        self.scores = Scores(len(stream.suite))
        self.members: dict[int, TrialMembers] = {}
        self.position = 0
        self.trial = 0  # the trial the registered checks were last asked about
        self.broken: BaseException | None = None
        self.replaced: list[int] = []  # places whose output came again after it was scored
        keep_open(runner, True)
        self._thread = threading.Thread(target=self._guarded, daemon=True, name="qaeval-scoring")
        self._thread.start()

    # ------------------------------------------------------------------ what the run tells it

    def declare(self, trial: int, indices: Sequence[int]) -> None:
        """(Holding the stream's condition.) Trial ``trial`` holds the suite's cases ``indices``, its template
        sample taken in the trial's order (``trial_order``)."""
        n, cases = len(self.stream.suite), self.stream.suite.cases
        chosen = sorted(indices)
        order = trial_order([cases[i].id for i in chosen], trial)
        self.members[trial] = TrialMembers([trial * n + chosen[j] for j in order])

    def arrived_again(self, place: int) -> None:
        """(Holding the stream's condition.) A place's output came again: if it was scored, score it again."""
        if place in self.scores.version:
            self.replaced.append(place)

    # ------------------------------------------------------------------ the thread

    def _guarded(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # noqa: BLE001  (raised again on the run's thread: finish/drain)
            with self.stream.cond:
                self.broken = exc
                self.stream.cond.notify_all()

    def _run(self) -> None:
        for start, end in self.stream.planned():
            position = start
            while position < end:
                batch = self._batch(position, end)
                if batch is None:
                    return
                self.score_batch(batch)
                position += len(batch)
                with self.stream.cond:
                    self.position = position
                    self.stream.cond.notify_all()

    def _ready(self, place: int) -> bool:
        """(Holding the stream's condition.) Arrived, judged, and its trial's template known or learnable."""
        stream = self.stream
        if place not in stream.items or not stream.judge.judged(place):
            return False
        members = self.members.get(place // len(stream.suite))
        return members is not None and (members.template is not None or members.sample_ready(stream.items))

    def _batch(self, position: int, end: int) -> list[Item] | None:
        """The next places to score: the one at ``position`` once it is ready, then (without waiting) the
        ready ones after it of the same trial, up to ``BATCH``; None when the stream was stopped."""
        stream, n = self.stream, len(self.stream.suite)
        first = stream.plan_order[position]
        if not stream.wait(lambda: self._ready(first)):
            return None
        batch: list[Item] = []
        with stream.cond:
            arrived = len(stream.items)
            ahead = stream.plan_order[position : min(end, position + MIN_BATCH)]
            if not all(p in stream.items for p in ahead):  # outputs still coming: linger for more
                stream.cond.wait_for(
                    lambda: stream.stopped or stream.closed or len(stream.items) - arrived >= MIN_BATCH, timeout=LINGER
                )
            while position + len(batch) < end and len(batch) < BATCH:
                place = stream.plan_order[position + len(batch)]
                if place // n != first // n or not self._ready(place):
                    break
                batch.append((place, *stream.items[place]))
            members = self.members[first // n]
            sample = [(p, *stream.items[p]) for p in members.sample] if members.template is None else None
        if sample is not None:
            members.template = trial_template(stream.suite, sample)
        return batch

    # ------------------------------------------------------------------ scoring

    def score_batch(self, batch: Sequence[Item]) -> None:
        """Score the outputs of ``batch`` (distinct cases of one trial) through every layer, once."""
        stream, n = self.stream, len(self.stream.suite)
        trial = batch[0][0] // n
        part = Suite(tuple(case for _, case, _ in batch), stream.suite.root, stream.suite.corpus)
        outputs = frame([row for *_, row in batch], OUTPUT_SCHEMA)
        cases, sources = part.to_frame(), part.sources_frame()
        template = self.members[trial].template
        layers = dict(
            checks=check_outputs(cases, outputs, sources, stream.suite.corpus, template=template),
            retrieval=score_retrieval(cases, outputs, k=self.k),
            verdicts=self._verdicts(batch),
            trajectory=score_trajectories(cases, outputs),
        )
        if self.runner is not None:
            layers["custom"] = self._custom(batch, part, outputs, layers, trial)
        place_of = {case.id: place for place, case, _ in batch}
        with stream.cond:
            for place, case, row in batch:
                self.scores.version[place] = self.scores.version.get(place, -1) + 1
                self.scores.outputs[place] = (case, row)
        for name, df in layers.items():
            self.scores.keep(name, df, place_of)

    def _verdicts(self, batch: Sequence[Item]) -> pd.DataFrame:
        """The verdict rows of the batch's judged outputs: the requests the judge's lane built, and the
        responses the run's memo holds for them."""
        judge = self.stream.judge
        with self.stream.cond:
            pairs: list[tuple[tuple[Any, ...], JudgeRequest]] = [
                judge.requests[place] for place, _, _ in batch if judge.requests.get(place) is not None
            ]
            responses = used_responses(self.stream.memo, [key for key, _ in pairs])
        return verdict_frame([req for _, req in pairs], responses, self.config)

    def _custom(
        self, batch: Sequence[Item], part: Suite, outputs: pd.DataFrame, layers: dict[str, pd.DataFrame], trial: int
    ) -> pd.DataFrame:
        """The registered checks and metrics' rows, each output asked for alone, in the plan's order."""
        samples = check_samples(
            part, outputs, layers["checks"], layers["retrieval"], layers["verdicts"], layers["trajectory"]
        )
        rows: list[dict[str, Any]] = []
        for sample in samples:
            if self.stream.stopped:
                break
            if trial != self.trial and hasattr(type(self.runner), "new_trial"):
                self.runner.new_trial()  # cases lost in a row are counted within a trial
            self.trial = trial
            rows += self.runner.score([sample])
        return frame(rows, CUSTOM_SCHEMA)

    def rescore(self) -> None:
        """After the run: score again the outputs that came again after they were scored (judged when they
        came: ``JudgeLanes.replaced``), a trial's places together, each case once."""
        stream, n = self.stream, len(self.stream.suite)
        with stream.cond:
            places = list(dict.fromkeys(self.replaced))
            self.replaced = []
        for trial in sorted({p // n for p in places}):
            with stream.cond:
                batch = [(p, *stream.items[p]) for p in places if p // n == trial]
            self.score_batch(batch)

    # ------------------------------------------------------------------ the run's side

    def caught_up(self) -> bool:
        """(Holding the stream's condition.) Whether every place planned so far is scored."""
        return self.broken is not None or self.position >= len(self.stream.plan_order)

    def join(self) -> None:
        self._thread.join()
        keep_open(self.runner, False)

    def abandon(self) -> None:
        keep_open(self.runner, False, stopped=True)

    def trial_result(self, trial: int, meta: Any, bootstrap_seed: int, *, empty: bool = False) -> Any:
        """Trial ``trial`` as a ``RunResult``, its frames from the kept rows; when it has no place, None (or,
        with ``empty``, the run of no case)."""
        n = len(self.stream.suite)
        places = sorted(p for p in self.scores.version if p // n == trial)
        if not places and not empty:
            return None
        layers = {name: self.scores.layer(name, trial) for name in LAYERS}
        suite = self.stream.suite
        part = Suite(tuple(self.scores.outputs[p][0] for p in places), suite.root, suite.corpus)
        outputs = frame([self.scores.outputs[p][1] for p in places], OUTPUT_SCHEMA)
        return assemble(
            part,
            meta,
            outputs,
            *(layers[name] for name in ("checks", "retrieval", "verdicts", "trajectory")),
            bootstrap_seed=bootstrap_seed,
            custom=None if self.runner is None else layers["custom"],
            registered=self.runner.registered if self.runner is not None else NONE_REGISTERED,
        )


def assemble(
    suite: Suite,
    meta: RunMeta,
    outputs: pd.DataFrame,
    checks: pd.DataFrame,
    retrieval: pd.DataFrame,
    verdicts: pd.DataFrame,
    trajectory: pd.DataFrame,
    *,
    bootstrap_seed: int = 0,
    skip_scoreboard: bool = False,
    custom: pd.DataFrame | None = None,
    registered: Registered = NONE_REGISTERED,
    runner: Any = None,
) -> RunResult:
    """A RunResult from its layer frames (scoring, or reading a record back, which brings its own
    scoreboard: ``skip_scoreboard``, and its registered outcomes: ``custom``)."""
    per_case, units, custom, registered = case_outcomes(
        suite, outputs, checks, retrieval, verdicts, trajectory, custom, registered, runner
    )
    per_case = add_trial_columns(per_case)
    run = RunResult(
        suite=suite,
        meta=meta,
        outputs=outputs,
        checks=checks,
        retrieval=retrieval,
        verdicts=verdicts,
        trajectory=trajectory,
        per_case=per_case,
        units=units,
        scoreboard=pd.DataFrame(),
        slices=pd.DataFrame(),
        custom=custom,
        registered=registered,
    )
    if skip_scoreboard:
        return run
    board, slices = scoreboard_and_slices(units, per_case, seed=bootstrap_seed, metrics=run.metrics)
    return replace(run, scoreboard=board, slices=slices)
