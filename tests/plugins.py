"""Adapters, judges and hooks the tests name as module:factory."""

from __future__ import annotations

from qaeval import Citation, Passage, SUTOutput

RECEIVED: list = []
ALARMS: list = []


class Raising:
    def answer(self, case):
        raise RuntimeError("backend down")


class Hanging:
    """Never answers, and swallows everything that tries to interrupt it."""

    def answer(self, case):
        import time

        while True:
            try:
                time.sleep(5)
            except BaseException:  # noqa: BLE001  (a hostile plugin swallows everything, by design)
                pass


def make_hanging():
    return Hanging()


class Malformed:
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def answer(self, case):
        if self.kind == "dict":
            return {"answer": "x"}
        if self.kind == "citation":
            return SUTOutput(
                answer="x",
                citations=[("s1", "x")],
                retrieved_ids=["s1"],
                model_was_called=True,
                prompt_to_model=case.question,
            )
        if self.kind == "retrieved":
            return SUTOutput(answer="x", retrieved_ids="s1", model_was_called=True, prompt_to_model=case.question)
        return SUTOutput(answer=None)


class Recording:
    """Keeps every CaseView it is handed (in its own process), and answers like a careful system."""

    def answer(self, case):
        RECEIVED.append(case)
        best = case.sources[0]
        return SUTOutput(
            answer=best.text,
            citations=[Citation(best.id, best.text)],
            retrieved_ids=[best.id],
            model_was_called=True,
            prompt_to_model=f"{case.question}\n{best.text}",
        )


def make_raising():
    return Raising()


def make_crashing_factory():
    raise RuntimeError("no credentials")


class SocketReporter:
    """Answers with whether each socket its process holds (the worker's) is in blocking mode."""

    def answer(self, case):
        import json
        import os

        return SUTOutput(answer=json.dumps([os.get_blocking(fd) for fd in _socket_fds()]), abstained=False)


def make_socket_reporter():
    return SocketReporter()


def make_factory_ending_behind_a_descendant():
    """Leaves a descendant (out of its process group) holding the worker's socket, then ends the worker
    while building the adapter: no end-of-file ever comes, only the exit says it has gone."""
    import os
    import time

    child = os.fork()
    if child == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(20)  # the socket stays open here (the run ends long before)
        os._exit(0)
    os.waitpid(child, 0)
    os._exit(3)


def make_process_ending_factory():
    """Ends its process while building the adapter (only ever called in a worker)."""
    import os

    os._exit(3)


def notify(alarms):
    ALARMS.extend(alarms)


def notify_exits(alarms):
    raise SystemExit(0)


not_callable = 42


class WrapsHub:
    """Test adapters that change one thing about the reference system."""

    def __init__(self) -> None:
        from qaeval.system.reference import ReferenceHub

        self.hub = ReferenceHub()


class AbstainOn(WrapsHub):
    """The reference hub, except that it abstains on questions containing a word (a wrong refusal)."""

    def __init__(self, word: str) -> None:
        super().__init__()
        self.word = word

    def answer(self, case):
        if self.word in case.question:
            return SUTOutput(abstained=True)
        return self.hub.answer(case)


def make_abstain_on_dvd():
    return AbstainOn("DVD")


class OwnIds(WrapsHub):
    """The reference hub under ids of its own ("doc-" + the source id), returning the passages' text: its
    answers are as good as the hub's, and no id it retrieves is one the cases know."""

    def answer(self, case):
        from dataclasses import replace

        from qaeval import Passage

        out = self.hub.answer(case)
        if out.abstained:
            return out
        text = {s.id: s.text for s in case.sources}
        return replace(
            out,
            retrieved_ids=[f"doc-{r}" for r in out.retrieved_ids],
            citations=[Citation(f"doc-{c.source_id}", c.claim) for c in out.citations],
            passages=[Passage(f"doc-{r}", text[r]) for r in out.retrieved_ids],
        )


def make_own_ids():
    return OwnIds()


MARKUP = (
    "<script>document.body.setAttribute('data-pwned','script')</script>"
    "<img src=x onerror=\"document.body.setAttribute('data-pwned','img')\"> costs $5 and $6"
)


class Hostile:
    """Answers with markup and cites a snippet it never retrieved, so the gate blocks on it."""

    def answer(self, case):
        first, last = case.sources[0], case.sources[-1]
        return SUTOutput(
            answer=MARKUP,
            citations=[Citation(last.id, MARKUP)],
            retrieved_ids=[first.id],
            model_was_called=True,
            prompt_to_model=f"{case.question}\n{first.text}",
        )


def make_hostile():
    return Hostile()


# --------------------------------------------------------------------------- adversarial adapters


def _secret_hashes() -> set[str]:
    import os

    return set(filter(None, os.environ.get("QAEVAL_TEST_SECRETS", "").split(",")))


class Snooper:
    """Walks every frame, inspect.stack() and every gc-tracked container it can reach, hashing each
    string it finds, and reports how many of them hash like a secret label (it never sees the labels)."""

    def __init__(self) -> None:
        self.secrets = _secret_hashes()

    def answer(self, case):
        import gc
        import hashlib
        import inspect
        import sys

        seen, hits = 0, set()

        def look(value):
            nonlocal seen
            if isinstance(value, str):
                seen += 1
                digest = hashlib.sha256(value.encode("utf-8", "replace")).hexdigest()
                if digest in self.secrets:
                    hits.add(digest)

        frame = sys._getframe()
        while frame is not None:
            for v in list(frame.f_locals.values()):
                look(v)
            frame = frame.f_back
        for info in inspect.stack():
            for v in list(info.frame.f_locals.values()):
                look(v)
        for obj in gc.get_objects():
            if isinstance(obj, dict):
                for k, v in list(obj.items()):
                    look(k)
                    look(v)
            elif isinstance(obj, (list, tuple, set, frozenset)):
                for v in list(obj):
                    look(v)
            for slot in getattr(type(obj), "__slots__", ()) if not isinstance(obj, type) else ():
                try:
                    look(getattr(obj, slot))
                except Exception:  # noqa: BLE001  (a hostile plugin swallows everything, by design)
                    pass
        print(f"snooper: {len(hits)} secret(s) among {seen} strings")
        return SUTOutput(abstained=True)


def make_snooper():
    return Snooper()


class Tamperer:
    """Looks for the harness's cases in its own process and tries to mark every case must-abstain, then
    abstains on everything: in-process this would make an always-abstaining system look perfect."""

    def answer(self, case):
        import gc

        for obj in gc.get_objects():
            if type(obj).__name__ == "GoldenCase":
                object.__setattr__(obj, "expected_behavior", "unanswerable_must_abstain")
        return SUTOutput(abstained=True)


def make_tamperer():
    return Tamperer()


class Exits:
    def __init__(self, how: str) -> None:
        self.how = how

    def answer(self, case):
        import os
        import sys

        if self.how == "sys":
            sys.exit(0)
        os._exit(0)


def make_sys_exit():
    return Exits("sys")


def make_os_exit():
    return Exits("os")


class Spammer:
    """Prints fake scoreboard lines on every channel it has, then answers like a careful system."""

    def answer(self, case):
        import os
        import sys

        print("deterministic_pass_rate         1.000 FAKE")
        print("GATE: PASS (FAKE)", file=sys.stderr)
        os.write(1, b"fd1: faithfulness_rate 1.000 FAKE\n")
        os.write(2, b"fd2: GATE: PASS FAKE\n")
        for i in range(2000):
            print(f"noise line {i}")
        best = case.sources[0]
        return SUTOutput(
            answer=best.text,
            citations=[Citation(best.id, best.text)],
            retrieved_ids=[best.id],
            model_was_called=True,
            prompt_to_model=f"{case.question}\n{best.text}",
        )


def make_spammer():
    return Spammer()


class Lingerer:
    """Leaves a non-daemon thread sleeping for ten minutes behind every case."""

    def answer(self, case):
        import threading
        import time

        threading.Thread(target=time.sleep, args=(600,), daemon=False).start()
        return SUTOutput(abstained=True)


def make_lingerer():
    return Lingerer()


class Reporter:
    """Answers with what its process looks like: argv, working directory, environment and pid."""

    def answer(self, case):
        import json
        import os
        import sys
        import threading

        policy = os.sched_getscheduler if hasattr(os, "sched_getscheduler") else lambda pid: None
        started: list[int | None] = []
        thread = threading.Thread(target=lambda: started.append(policy(0)))  # a thread the adapter starts
        thread.start()
        thread.join()
        return SUTOutput(
            answer=json.dumps(
                {
                    "argv": sys.argv,
                    "cwd": os.getcwd(),
                    "pid": os.getpid(),
                    "env": dict(os.environ),
                    "question": case.question,
                    "policy": policy(0),
                    "thread_policy": started[0],
                    "nice": os.nice(0),
                }
            ),
            abstained=False,
        )


def make_reporter():
    return Reporter()


class TypeReporter:
    """Answers with the question and each source's fields, and the name of each one's type."""

    def answer(self, case):
        import json

        fields = [case.question] + [v for s in case.sources for v in (s.id, s.text, s.title)]
        return SUTOutput(answer=json.dumps([[v, type(v).__name__] for v in fields]), abstained=False)


def make_type_reporter():
    return TypeReporter()


class Slow:
    """Sleeps a little (longer for earlier cases, so they finish out of order), then quotes its first source."""

    def answer(self, case):
        import os
        import time

        time.sleep(0.02 * (len(case.question) % 5))
        best = case.sources[0]
        print(f"pid {os.getpid()}")
        return SUTOutput(
            answer=best.text,
            citations=[Citation(best.id, best.text)],
            retrieved_ids=[best.id],
            model_was_called=True,
            prompt_to_model=f"{case.question}\n{best.text}",
        )


def make_slow():
    return Slow()


class AsyncHub(WrapsHub):
    """The reference system behind an ``async def answer``."""

    async def answer(self, case):
        import asyncio

        await asyncio.sleep(0)
        return self.hub.answer(case)


def make_async_hub():
    return AsyncHub()


class RaisesOnThird(WrapsHub):
    """The reference system, except that one case (the second of the frozen split) raises."""

    question = "What does a non-resident pay for an annual library card?"

    def answer(self, case):
        if case.question == self.question:
            raise RuntimeError("backend down for this one")
        return self.hub.answer(case)


def make_raises_on_one():
    return RaisesOnThird()


class ExitsOnOne(RaisesOnThird):
    """The reference system, except that its process ends (``os._exit``) on that one case."""

    def answer(self, case):
        import os

        if case.question == self.question:
            os._exit(3)
        return self.hub.answer(case)


def make_exits_on_one():
    return ExitsOnOne()


class CallsModelWithoutPrompt(WrapsHub):
    def answer(self, case):
        out = self.hub.answer(case)
        out.prompt_to_model = None
        return out


def make_no_prompt():
    return CallsModelWithoutPrompt()


class Repeats(WrapsHub):
    """Games retrieval by listing its first retrieved id five times."""

    def answer(self, case):
        out = self.hub.answer(case)
        if out.retrieved_ids:
            out.retrieved_ids = [out.retrieved_ids[0]] * 5 + out.retrieved_ids
        return out


def make_repeats():
    return Repeats()


class AbstainsButAnswers(WrapsHub):
    """Marks abstained on what it should refuse, but still shows the user an answer and a citation."""

    def answer(self, case):
        out = self.hub.answer(case)
        if out.abstained:
            best = case.sources[0]
            out.answer, out.citations = best.text, [Citation(best.id, best.text)]
        return out


def make_abstains_but_answers():
    return AbstainsButAnswers()


class HugeAggregate:
    def answer(self, case):
        return SUTOutput(abstained=True, computed_aggregate=10**400)


def make_huge_aggregate():
    return HugeAggregate()


class Counting(WrapsHub):
    """The reference system that appends one line per call to the file named by QAEVAL_TEST_CALLS."""

    def answer(self, case):
        import os

        with open(os.environ["QAEVAL_TEST_CALLS"], "a") as f:
            f.write(case.id + "\n")
        return self.hub.answer(case)


def make_counting():
    return Counting()


def make_exiting_factory():
    raise SystemExit(0)


def abstains_never(case, output, passages):
    """An informational check: fails a case the system abstained on."""
    return (not output.abstained, "abstained" if output.abstained else "answered")


class StopsOnDigitalLoans:
    """Answers with its pid, except on the digital-loans question, where it hangs (``hang``) or exits
    (otherwise): the case a worker holds when it is stopped, with another case queued behind it."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang

    def answer(self, case):
        import os

        if "digital loans" in case.question:
            import select

            select.select(_socket_fds(), [], [], 30)  # until the harness has queued the next case behind this one
            if not self.hang:
                os._exit(3)
            read, _ = os.pipe()
            os.read(read, 1)  # nothing will ever arrive
        return SUTOutput(answer=f"pid {os.getpid()}", abstained=False)


def _socket_fds() -> list[int]:
    from hostile_adapters import _socket_fds as fds  # the worker's socket, found the way the attackers find it

    return fds()


def make_hangs_on_one():
    return StopsOnDigitalLoans(hang=True)


def make_exits_on_digital_loans():
    return StopsOnDigitalLoans(hang=False)


class ExitHookAdapter:
    """Under isolation none: registers an exit hook in the harness's process that writes a file, the
    way a library (a tracker's flush, a temporary folder's removal) does, then quotes its first source."""

    def __init__(self) -> None:
        import atexit
        import os

        path = os.environ["QAEVAL_TEST_EXIT_HOOK"]
        atexit.register(lambda: open(path, "w").write("exit hooks ran"))

    def answer(self, case):
        return SUTOutput(answer=case.sources[0].text, abstained=False)


def make_exit_hook_adapter():
    return ExitHookAdapter()


class TakesItsTime:
    """Spends 1.5 s on the digital-loans question and 1.2 s on the meeting-room one (the next living
    case), as a slow model would; instant on the others."""

    def answer(self, case):
        import time

        if "digital loans" in case.question:
            time.sleep(1.5)
        elif "meeting room" in case.question:
            time.sleep(1.2)
        return SUTOutput(answer=case.sources[0].text, abstained=False)


def make_takes_its_time():
    return TakesItsTime()


class AnswersTwice:
    """On the digital-loans question: once the harness has queued the next case, writes a reply of its own
    for this case to the socket, then returns normally, so the worker sends a second reply for it."""

    def answer(self, case):
        import json
        import os
        import select
        import struct

        if "digital loans" in case.question:
            sockets = _socket_fds()
            select.select(sockets, [], [], 30)
            body = json.dumps({"id": case.id, "output": {"not_output": "str"}, "logs": ""}).encode()
            for fd in sockets:
                os.write(fd, struct.pack("!I", len(body)) + body)
        return SUTOutput(answer=f"pid {os.getpid()}", abstained=False)


def make_answers_twice():
    return AnswersTwice()


class SlowOnTheFirst:
    """Takes 2.5 s on the question "first", instant on the others."""

    def answer(self, case):
        import os
        import time

        if case.question == "first":
            time.sleep(2.5)
        return SUTOutput(answer=f"pid {os.getpid()}", abstained=False)


def make_slow_on_the_first():
    return SlowOnTheFirst()


class PidTeller:
    """Answers with the pid of the process it runs in."""

    def answer(self, case):
        import os

        return SUTOutput(answer=str(os.getpid()))


def make_pid_teller():
    """Leaves a mark (the file QAEVAL_TEST_MARK names) when it is built: user code has run."""
    import os

    mark = os.environ.get("QAEVAL_TEST_MARK")
    if mark:
        with open(mark, "a") as handle:
            handle.write(f"{os.getpid()}\n")
    return PidTeller()


class Announces:
    """Writes its pid to the FIFO that QAEVAL_TEST_FIFO names when it is asked a case, then never answers:
    a test waits on the FIFO (no sleep) to know a worker is inside ``answer``."""

    def answer(self, case):
        import os
        import time

        with open(os.environ["QAEVAL_TEST_FIFO"], "w") as fifo:
            fifo.write(f"{os.getpid()}\n")
        while True:
            time.sleep(5)


def make_announcer():
    return Announces()


class AbstainEveryOther(WrapsHub):
    """The reference hub, except that it abstains on the DVD question every second time it is asked in this
    process (a flaky wrong refusal: with one worker or in-process, trials alternate pass and fail)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def answer(self, case):
        if "DVD" in case.question:
            self.asked += 1
            if self.asked % 2 == 0:
                return SUTOutput(abstained=True)
        return self.hub.answer(case)


def make_abstain_every_other():
    return AbstainEveryOther()


class MiscitesEveryOther(WrapsHub):
    """The reference hub, except that every second time it is asked the DVD question its citation names a
    passage it never retrieved (citation resolvability fails in that trial only)."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def answer(self, case):
        out = self.hub.answer(case)
        if "DVD" in case.question:
            self.asked += 1
            if self.asked % 2 == 0 and out.citations:
                out.citations = [Citation("nowhere", c.claim) for c in out.citations]
        return out


def make_miscites_every_other():
    return MiscitesEveryOther()


class TrajectoryEveryOther(WrapsHub):
    """The reference hub, except on the seed-library question (a multi-step case): every first, third, ...
    time it is asked it answers it right by both hops, citing both gold passages; every second time it
    answers with no citation, so that trial's trajectory fails."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def answer(self, case):
        if "seed library" not in case.question:
            return self.hub.answer(case)
        self.asked += 1
        texts = {s.id: s.text for s in case.sources}
        ids = ["seed-library", "leadership"]
        prompt = f"Question: {case.question}\n" + "\n".join(texts[i] for i in ids)
        first = "Northgate hosts the seed library."
        second = "Marisol Okafor previously ran the Northgate Branch."
        citations = [Citation("seed-library", first), Citation("leadership", second)] if self.asked % 2 else []
        return SUTOutput(
            answer=f"{first} {second}",
            citations=citations,
            retrieved_ids=ids,
            passages=[Passage(i, texts[i]) for i in ids],
            abstained=False,
            model_was_called=True,
            prompt_to_model=prompt,
        )


def make_trajectory_every_other():
    return TrajectoryEveryOther()


class CallCounter(WrapsHub):
    """The reference hub, appending one line per call to the file named by QAEVAL_TEST_CALLS (absolute)."""

    def answer(self, case):
        import os

        with open(os.environ["QAEVAL_TEST_CALLS"], "a") as f:
            f.write(case.question + "\n")
        return self.hub.answer(case)


def make_call_counter():
    return CallCounter()


class Varying(WrapsHub):
    """Answers with a fresh random token each call (an output that never repeats)."""

    def answer(self, case):
        import secrets

        out = self.hub.answer(case)
        return SUTOutput(
            answer=out.answer + " " + secrets.token_hex(4) if not out.abstained else "",
            citations=out.citations,
            retrieved_ids=out.retrieved_ids,
            abstained=out.abstained,
            model_was_called=out.model_was_called,
            prompt_to_model=out.prompt_to_model,
        )


def make_varying():
    return Varying()


class HostileVarying(WrapsHub):
    """Answers with markup and a fresh token each call, so its trials differ and are drawn side by side."""

    def answer(self, case):
        import secrets

        out = self.hub.answer(case)
        if out.abstained:
            return out
        return SUTOutput(
            answer=f"{MARKUP} {secrets.token_hex(4)}",
            citations=out.citations,
            retrieved_ids=out.retrieved_ids,
            model_was_called=True,
            prompt_to_model=out.prompt_to_model,
        )


def make_hostile_varying():
    return HostileVarying()


class InterruptsTheRun(CallCounter):
    """Counts its calls (QAEVAL_TEST_CALLS), and once this worker has answered QAEVAL_TEST_STOP_AFTER cases,
    sends Ctrl-C (SIGINT) to the harness that started it, as a person would."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = 0

    def answer(self, case):
        import os
        import signal

        out = super().answer(case)
        self.answered += 1
        if self.answered == int(os.environ.get("QAEVAL_TEST_STOP_AFTER", "0")):
            # in a worker the harness is its parent; under isolation none it is this process
            os.kill(os.getpid() if os.environ.get("QAEVAL_TEST_IN_HARNESS") else os.getppid(), signal.SIGINT)
        return out


def make_interrupter():
    return InterruptsTheRun()


def make_counted_raising_factory():
    """A factory that fails, counting its calls in QAEVAL_TEST_CALLS (issue 40: the pytest plugin called it
    once per case)."""
    import os

    with open(os.environ["QAEVAL_TEST_CALLS"], "a") as f:
        f.write("built\n")
    raise RuntimeError("the index is not there")


class ShardDown:
    """Raises from a helper two calls deep, as a retriever with a missing shard would."""

    def answer(self, case):
        return self.retrieve(case.question)

    def retrieve(self, question):
        shards = {0: [], 1: [], 2: []}
        return shards[3]  # KeyError: 3


def make_shard_down():
    return ShardDown()


class CitesSecond(WrapsHub):
    """The reference hub with an off-by-one: it cites the passage ranked second where there is one."""

    def answer(self, case):
        from dataclasses import replace

        out = self.hub.answer(case)
        if out.abstained or len(out.retrieved_ids) < 2:
            return out
        return replace(out, citations=[Citation(out.retrieved_ids[1], c.claim) for c in out.citations])


def make_cites_second():
    return CitesSecond()


class PidGenerator:
    """A custom case generator: answers each request from its passages and says which process it ran in."""

    def __init__(self) -> None:
        from qaeval.judges.generator import GeneratorConfig

        self.config = GeneratorConfig(name="pid", model="test")

    def generate(self, requests):
        import json
        import os
        import re

        from qaeval.judges.generator import GenerationReply

        out = []
        for r in requests:
            ids = [p.id for p in r.passages]
            if r.kind == "abstain":
                body = {
                    "request": r.request_id,
                    "question": f"What colour is the zorblat {r.request_id[-6:]} pid {os.getpid()}?",
                    "answer": None,
                    "source_ids": [],
                }
            else:
                number = re.findall(r"\d+", r.passages[-1].text)[0]
                body = {
                    "request": r.request_id,
                    "question": f"Which year is in {' '.join(ids)} per generator pid {os.getpid()}?",
                    "answer": number,
                    "source_ids": ids if r.kind == "multi" else ids[:1],
                }
            out.append(GenerationReply(r.request_id, json.dumps(body)))
        return out


def make_pid_generator():
    return PidGenerator()


class RaisingGenerator(PidGenerator):
    def generate(self, requests):
        raise RuntimeError("the model is down")


def make_raising_generator():
    return RaisingGenerator()


class HangingGenerator(PidGenerator):
    def generate(self, requests):
        import threading

        threading.Event().wait()  # never answers: its chunk's deadline ends it


def make_hanging_generator():
    return HangingGenerator()


class AnswersThenHangs(PidGenerator):
    """Answers its first chunk, then never again (the mark file, $QAEVAL_TEST_MARK, outlives its process)."""

    def generate(self, requests):
        import os
        import threading
        from pathlib import Path

        mark = Path(os.environ["QAEVAL_TEST_MARK"])
        if not mark.exists():
            mark.write_text("answered once")
            return super().generate(requests)
        threading.Event().wait()
        return []


def make_answers_then_hangs():
    return AnswersThenHangs()


class LiarGenerator(PidGenerator):
    """Says, in its own error text, what qaeval's proxy says when it gives up on a process."""

    def generate(self, requests):
        from qaeval.judges.generator import GenerationReply

        return [GenerationReply(r.request_id, error="not asked: made up") for r in requests]


def make_liar_generator():
    return LiarGenerator()


class ConfiglessGenerator(PidGenerator):
    config = {"model": 3}


def make_configless_generator():
    return ConfiglessGenerator.__new__(ConfiglessGenerator)


class ConfigRaises(PidGenerator):
    def __init__(self):  # no config of its own: asking for it raises
        pass

    @property
    def config(self):
        raise RuntimeError("no config")


def make_config_raises():
    return ConfigRaises()


class ExitsInGenerate(PidGenerator):
    def generate(self, requests):
        raise SystemExit(0)


def make_exits_in_generate():
    return ExitsInGenerate()


class SecondBest(WrapsHub):
    """The reference hub, except that on some calls it answers from its second-best passage, quoted and
    cited: faithful to what it cites, and wrong. Which calls: every other question (by a hash of it), or,
    with ``half_the_time``, each call of a question by a hash of the question and how often this process
    has been asked it (so trials of one case differ, the same way on every run with one worker)."""

    def __init__(self, half_the_time: bool = False) -> None:
        super().__init__()
        self.half_the_time = half_the_time
        self.asked: dict[str, int] = {}

    def answer(self, case):
        import hashlib

        out = self.hub.answer(case)
        retrieved = self.hub.retrieve(case)
        count = self.asked[case.question] = self.asked.get(case.question, 0) + 1
        key = case.question + (f"#{count}" if self.half_the_time else "")
        if out.abstained or len(retrieved) < 2 or hashlib.sha256(key.encode()).digest()[0] % 2:
            return out
        second = retrieved[1]
        return SUTOutput(
            answer=second.text,
            citations=[Citation(second.id, second.text)],
            retrieved_ids=out.retrieved_ids,
            model_was_called=True,
            prompt_to_model=out.prompt_to_model,
        )


def make_second_best():
    return SecondBest()


def make_second_best_half_the_time():
    return SecondBest(half_the_time=True)


class AbstainFirstTimeAsked(WrapsHub):
    """The reference hub, except that it abstains the first time it is asked each question: every case
    fails one of its trials (too few for any case to regress), and over-refusal moves with all of them."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()

    def answer(self, case):
        if case.question not in self.seen:
            self.seen.add(case.question)
            return SUTOutput(abstained=True)
        return self.hub.answer(case)


def make_abstain_first_time_asked():
    return AbstainFirstTimeAsked()
