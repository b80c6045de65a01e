"""A loopback stand-in for two model APIs at once: the Anthropic Messages API (``POST
/v1/messages``, used by Pi) and the OpenAI chat-completions API (``POST /v1/chat/completions``,
used by omp and OpenCode). Every request body is logged; every answer is one short assistant
message, ``OK-DONE``, streamed when the client asked for a stream, unless a test's
:attr:`MockApi.script` answers a chat-completions request with tool calls instead."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

REPLY = "OK-DONE"


@attrs.frozen
class Request:
    path: str
    body: str
    #: What :attr:`MockApi.probe` returned while this request was being answered.
    probe: object = None


@attrs.frozen
class ToolCall:
    """One function call the mock answers with, as an OpenAI-compatible model sends it."""

    name: str
    arguments: dict[str, object] = attrs.Factory(dict)
    id: str = attrs.Factory(lambda: f"call_{uuid.uuid4().hex[:16]}")


#: A test's model: given a chat-completions request (parsed), the tool calls to answer with,
#: or None (or none) for the usual ``OK-DONE`` text.
Script = Callable[[dict[str, Any]], Sequence[ToolCall] | None]


@attrs.define(eq=False)
class MockApi:
    server: ThreadingHTTPServer
    requests: list[Request] = attrs.Factory(list)
    lock: threading.Lock = attrs.Factory(threading.Lock)
    answering: threading.Lock = attrs.Factory(threading.Lock)
    #: Called in the handler before the answer is sent: a snapshot of the world at the moment
    #: the harness asked (the harness is blocked on the answer, so nothing it drives moves on).
    probe: Callable[[], object] | None = None
    #: Consulted for every chat-completions request, in arrival order (one at a time).
    script: Script | None = None

    @property
    def root(self) -> str:
        """The base URL with no ``/v1`` (Pi appends ``/v1/messages`` itself)."""
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    @property
    def openai_url(self) -> str:
        return f"{self.root}/v1"

    def log(self) -> list[Request]:
        with self.lock:
            return list(self.requests)

    def bodies(self) -> list[str]:
        return [request.body for request in self.log()]

    def paths(self) -> list[str]:
        return [request.path for request in self.log()]

    def first(self, text: str) -> Request | None:
        """The first request whose newest user turn carries *text*."""
        return next((r for r in self.log() if text in newest_user_text(r.body)), None)

    def seen(self, text: str) -> bool:
        return any(text in body for body in self.bodies())

    def count(self, text: str) -> int:
        """How many requests' *newest* user turn carries *text*: a wake delivered once shows up
        in the history of every later request, but as the newest user turn of exactly one."""
        return sum(text in newest_user_text(body) for body in self.bodies())

    def answer(self, request: dict[str, Any]) -> Sequence[ToolCall]:
        """The tool calls :attr:`script` answers *request* with (none without a script). One
        request at a time, so a script may keep its own state without a lock."""
        if self.script is None:
            return ()
        with self.answering:
            return self.script(request) or ()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_content_text(part.get("text", "") if isinstance(part, dict) else part)
                         for part in content)
    return ""


def newest_user_text(body: str) -> str:
    """The text of the last ``user`` message in a request body (both API shapes), else ""."""
    try:
        messages = json.loads(body).get("messages") or []
    except (ValueError, AttributeError):
        return ""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            return _content_text(message.get("content"))
    return ""


def _sse(events: list[tuple[str | None, object]]) -> bytes:
    out = []
    for name, data in events:
        payload = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {payload}\n\n")
    return "".join(out).encode()


def anthropic_stream(model: str) -> bytes:
    return _sse([
        ("message_start", {"type": "message_start", "message": {
            "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        ("content_block_start", {"type": "content_block_start", "index": 0,
                                 "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                 "delta": {"type": "text_delta", "text": REPLY}}),
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta",
                           "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                           "usage": {"output_tokens": 2}}),
        ("message_stop", {"type": "message_stop"}),
    ])


def anthropic_message(model: str) -> dict[str, object]:
    return {"id": "msg_mock", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": REPLY}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 2}}


def _openai_calls(calls: Sequence[ToolCall]) -> list[dict[str, object]]:
    return [{"index": index, "id": call.id, "type": "function",
             "function": {"name": call.name, "arguments": json.dumps(call.arguments)}}
            for index, call in enumerate(calls)]


def openai_stream(model: str, calls: Sequence[ToolCall] = ()) -> bytes:
    base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    # Each call whole in one delta: its id, its name and its complete arguments.
    delta = {"tool_calls": _openai_calls(calls)} if calls else {"content": REPLY}
    return _sse([
        (None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                     "finish_reason": None}]}),
        (None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}),
        (None, {**base, "choices": [{"index": 0, "delta": {},
                                     "finish_reason": "tool_calls" if calls else "stop"}]}),
        (None, {**base, "choices": [], "usage": usage}),
        (None, "[DONE]"),
    ])


def openai_completion(model: str, calls: Sequence[ToolCall] = ()) -> dict[str, object]:
    message: dict[str, object] = {"role": "assistant", "content": None if calls else REPLY}
    if calls:
        message["tool_calls"] = _openai_calls(calls)
    return {"id": "chatcmpl-mock", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [{"index": 0, "message": message,
                                         "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}}


def start() -> MockApi:
    holder: list[MockApi] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def _send(self, code: int, content_type: str, data: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _json(self, obj: object, code: int = 200) -> None:
            self._send(code, "application/json", json.dumps(obj).encode())

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:
            self._json({"object": "list", "data": [{"id": "mock-model", "object": "model"}]})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode(errors="replace")
            path = self.path.split("?", 1)[0]
            if path.endswith("/count_tokens"):
                self._json({"input_tokens": 10})
                return
            mock = holder[0]
            probe = mock.probe
            try:
                seen = probe() if probe is not None else None
            except Exception as exc:  # a probe failure is evidence, not a reason to hang
                seen = f"probe failed: {exc!r}"
            with mock.lock:
                mock.requests.append(Request(path, raw, seen))
            try:
                request = json.loads(raw)
            except ValueError:
                request = {}
            model = str(request.get("model") or "mock-model")
            stream = bool(request.get("stream"))
            if path.endswith("/messages"):
                if stream:
                    self._send(200, "text/event-stream", anthropic_stream(model))
                else:
                    self._json(anthropic_message(model))
            elif path.endswith("/chat/completions"):
                calls = mock.answer(request if isinstance(request, dict) else {})
                if stream:
                    self._send(200, "text/event-stream", openai_stream(model, calls))
                else:
                    self._json(openai_completion(model, calls))
            else:
                self._json({"error": {"message": f"mock: no route for {path}"}}, 404)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    mock = MockApi(server)
    holder.append(mock)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return mock
