"""A local OpenAI-compatible chat-completions server that grades deterministically, for tests,
benchmarks and trying ``qaeval.judges.openai`` without a model: it binds 127.0.0.1 only, answers ``POST
/v1/chat/completions`` with a rubric-shaped verdict whose quotes are copied from the prompt, and can add
latency and inject failures (``FakeJudgeServer``'s parameters).

It also answers the generation prompt (a user message starting ``REQUEST:``) from the passages it was
sent. ``generation_faults`` maps a fault to ``k``: every k-th request it applies to gets it, counted per
fault (``answerable`` applies to must-abstain requests, ``not_in_passage`` and ``copies`` to the others,
the rest to all): ``malformed`` (not JSON), ``wrong_request`` (another request's id), ``not_in_passage``,
``copies`` (a question copied from the passage), ``duplicate`` (the last question again), ``answerable``
(a must-abstain question the corpus answers), ``hang`` (no reply for ``hang_seconds``).

    with FakeJudgeServer(latency=0.05, fail_every=5) as server:
        qaeval.run("golden", judge="qaeval.judges.openai:make_judge", judge_base_url=server.url)

``python -m qaeval.judges.fake_server --port 8765`` serves until interrupted."""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_KIND_FAULTS = ("answerable", "not_in_passage", "copies")  # answerable: must-abstain requests; the others: the rest
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]{3,}|\d[\d,.]*")
_SYLLABLES = ("zor", "blat", "quen", "nix", "vel", "dran", "mop", "trel", "skiv", "olu", "prax", "dim")


def _invented(seed: str, n: int) -> list[str]:
    import hashlib

    digest = hashlib.sha256(seed.encode("utf-8", "surrogatepass")).digest()
    return ["".join(_SYLLABLES[digest[2 * i + j] % len(_SYLLABLES)] for j in range(2)) + "ite" for i in range(n)]


def generate(user_message: str, fault: str | None = None, previous: str | None = None) -> dict[str, Any]:
    """A candidate for one generation prompt (``qaeval/rubric/generate-v1/user.txt``)."""
    request = re.search(r"^REQUEST: (.*)$", user_message, re.M)
    kind = re.search(r"^KIND: (.*)$", user_message, re.M)
    found = re.findall(r"^\[([^\]]+)\](?: \(.*?\))? (.*)$", user_message, re.M)
    rid = request.group(1) if request else ""
    kind_name = kind.group(1) if kind else "single"
    ids = [pid for pid, _ in found]
    texts = [text for _, text in found]
    if fault == "wrong_request":
        rid = rid[:-1] + ("0" if not rid.endswith("0") else "1")
    if kind_name == "abstain" or not texts:
        a, b = _invented(rid, 2)
        question = f"What is the {a} of the {b}?"
        if fault == "answerable" and texts:
            question = "What " + " ".join(texts[0].split()[:7]) + "?"
        return {"request": rid, "question": question, "answer": None, "source_ids": []}
    words = _WORD.findall(texts[-1])
    answer = next((w for w in reversed(words) if w[0].isdigit()), words[-1] if words else texts[-1].split()[-1])
    answer = answer.rstrip(".,")
    cue = [w for w in _WORD.findall(texts[0]) if w.lower() != answer.lower()][:3]
    label = " and ".join(ids)
    question = f"Per {label}, which detail goes with {' '.join(cue)}?"
    if fault == "copies":
        question = "Which passage says " + " ".join(texts[0].split()[:10]) + "?"
    if fault == "duplicate" and previous:
        question = previous
    if fault == "not_in_passage":
        answer = "a thing no passage says"
    return {
        "request": rid,
        "question": question,
        "answer": answer,
        "source_ids": ids if kind_name == "multi" else ids[:1],
    }


def grade(user_message: str) -> dict[str, Any]:
    """A verdict for one rubric prompt: full marks, with quotes copied from the prompt's own text."""

    def section(name: str) -> str:
        match = re.search(rf"^{name}:\n(.*?)(?:\n\n[A-Z][A-Z ()]+:|\Z)", user_message, re.S | re.M)
        return match.group(1).strip() if match else ""

    def first_words(text: str, n: int = 8) -> str:
        return " ".join(text.split()[:n])

    answer = section("ANSWER")
    cited = re.sub(r"^\[[^\]]+\] ", "", section("CITED SNIPPETS").split("\n")[0])
    citations = [
        dict(snippet_id=sid, quote=first_words(text.strip()), rationale="the cited source states the claim", score=2)
        for sid, text in re.findall(r"- snippet_id=(.*)\n  claim: .*\n  cited: (.*)", user_message)
    ]
    return {
        "faithfulness": {"quote": first_words(cited), "rationale": "the answer restates the cited source", "score": 2},
        "answer_correctness": {"quote": first_words(answer), "rationale": "deterministic stand-in grade", "score": 2},
        "citations": citations,
    }


class _QuietServer(ThreadingHTTPServer):
    """A client that gave up (a judge timeout) is not an error worth a traceback on stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipeError, ConnectionResetError
            return
        super().handle_error(request, client_address)


class FakeJudgeServer:
    def __init__(
        self,
        *,
        port: int = 0,
        latency: float = 0.0,
        fail_every: int = 0,
        fail_always: bool = False,
        reject_response_format: bool = False,
        garbage: bool = False,
        reply: str | None = None,
        no_choices: bool = False,
        generation_faults: dict[str, int] | None = None,
        hang_seconds: float = 5.0,
        drip: float = 0.0,
        drip_bytes: int = 240,
        echo_reply: bool = False,
    ) -> None:
        """``garbage``: prose instead of JSON; ``reply``: this exact content for every call;
        ``no_choices``: a completion whose ``choices`` is null; ``generation_faults``: see the module;
        ``drip``: every reply, from its status line on, is sent one byte each ``drip`` seconds, for at most
        ``drip_bytes`` bytes (then the connection closes) or until the server stops: a server no per-read
        timeout ever catches; ``echo_reply``: a request's own ``reply`` field (the openai client's
        ``extra_body``) is the content, so a traced example system decides what its model answers."""
        self.latency, self.fail_every, self.fail_always = latency, fail_every, fail_always
        self.reject_response_format, self.garbage = reject_response_format, garbage
        self.reply, self.no_choices, self.echo_reply = reply, no_choices, echo_reply
        self.generation_faults, self.hang_seconds = dict(generation_faults or {}), hang_seconds
        self.drip, self.drip_bytes = drip, drip_bytes
        self.generations = 0
        self._fault_counts: dict[str, int] = {}
        self._last_question: str | None = None
        self._stop = threading.Event()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.failures_sent = 0
        self._count = 0  # requests numbered from 1, whatever a caller does to ``requests``
        self._lock = threading.Lock()
        self._server = _QuietServer(("127.0.0.1", port), self._handler())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def calls(self) -> int:
        return len(self.requests)

    def __enter__(self) -> FakeJudgeServer:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()  # a hanging reply ends now
        self._server.shutdown()
        self._server.server_close()

    def _generation(self, user: str) -> str | None:
        """The reply to one generation prompt, with this request's fault if any (None: it hung)."""
        kind = re.search(r"^KIND: (.*)$", user, re.M)
        answerable = (kind.group(1) if kind else "single") != "abstain"
        fault = None
        with self._lock:
            self.generations += 1
            previous = self._last_question
            for name, k in self.generation_faults.items():  # the k-th request each fault can apply to gets it
                applies = (not answerable) if name == "answerable" else answerable if name in _KIND_FAULTS else True
                if not k or not applies:
                    continue
                self._fault_counts[name] = self._fault_counts.get(name, 0) + 1
                if fault is None and self._fault_counts[name] % k == 0:
                    fault = name
        if fault == "hang":
            self._stop.wait(self.hang_seconds)
            return None
        if fault == "malformed":
            return '{"request": "truncated'
        candidate = generate(user, fault, previous)
        with self._lock:
            self._last_question = candidate["question"]
        return json.dumps(candidate)

    def _admit(self, body: dict[str, Any], headers: list[tuple[str, str]]) -> int:
        """Record one request as it arrives (counted, kept, in flight); its number, from 1."""
        with self._lock:
            self._count += 1
            number = self._count
            self.requests.append(body)
            self.headers.append({k.lower(): v for k, v in headers})
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        return number

    def _reply(
        self, path: str, body: dict[str, Any], number: int
    ) -> tuple[int, dict[str, Any], dict[str, str] | None] | None:
        """(status, payload, extra headers) for one request, or None for no reply (a generation that hung)."""
        if not path.endswith("/chat/completions"):
            return 404, {"error": {"message": "not found"}}, None
        if self.fail_always or (self.fail_every and number % self.fail_every == 0):
            with self._lock:
                self.failures_sent += 1
            status = 429 if number % 2 else 503
            return status, {"error": {"message": "try again"}}, {"retry-after-ms": "5"}
        if self.reject_response_format and "response_format" in body:
            return 400, {"error": {"message": "response_format json_schema is not supported"}}, None
        user = next((m["content"] for m in body.get("messages", []) if m.get("role") == "user"), "")
        content = self._content(user, body)
        if content is None:
            return None
        return 200, self._completion(number, body, user, content), None

    def _content(self, user: str, body: dict[str, Any]) -> str | None:
        """The assistant's message: a generation candidate or a grade, unless the server is told what to say."""
        if user.startswith("REQUEST: "):
            content = self._generation(user)
            if content is None:
                return None  # it hung
        else:
            content = "I think it is fine." if self.garbage else json.dumps(grade(user))
        if self.reply is not None:
            content = self.reply
        if self.echo_reply and isinstance(body.get("reply"), str):
            content = body["reply"]
        return content

    def _completion(self, number: int, body: dict[str, Any], user: str, content: str) -> dict[str, Any]:
        """A chat.completion payload carrying ``content`` (with null ``choices`` when ``no_choices``)."""
        message = {"role": "assistant", "content": content}
        choices = None if self.no_choices else [{"index": 0, "finish_reason": "stop", "message": message}]
        asked, said = len(user.split()), len(content.split())
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake"),
            "choices": choices,
            "usage": {"prompt_tokens": asked, "completion_tokens": said, "total_tokens": asked + said},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(payload).encode()
                if outer.drip:
                    self._drip(status, data)
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _drip(self, status: int, data: bytes) -> None:
                head = f"HTTP/1.1 {status} OK\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
                self.close_connection = True
                for byte in (head.encode() + data)[: outer.drip_bytes]:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    if outer._stop.wait(outer.drip):  # the pace of the drip; a stopped server ends it
                        return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                number = outer._admit(body, list(self.headers.items()))
                try:
                    if outer.latency:
                        time.sleep(outer.latency)  # the server's simulated model latency
                    reply = outer._reply(self.path, body, number)
                    if reply is not None:
                        self._send(*reply)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

        return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="A local OpenAI-compatible judge for trying qaeval offline.")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--latency", type=float, default=0.0)
    args = parser.parse_args()
    with FakeJudgeServer(port=args.port, latency=args.latency) as server:
        print(f"serving on {server.url} (Ctrl-C to stop)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
