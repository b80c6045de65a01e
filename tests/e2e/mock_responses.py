"""A loopback stand-in for the OpenAI Responses API: every request is logged, every answer is a
short streamed assistant message (``OK-DONE``) with no tool calls."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import attrs


@attrs.define(eq=False)
class MockModel:
    server: ThreadingHTTPServer
    requests: list[str] = attrs.Factory(list)
    lock: threading.Lock = attrs.Factory(threading.Lock)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def bodies(self) -> list[str]:
        with self.lock:
            return list(self.requests)

    def seen(self, text: str) -> bool:
        return any(text in body for body in self.bodies())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _events() -> bytes:
    def sse(kind: str, data: dict[str, object]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n"

    item = {"type": "message", "role": "assistant", "id": "msg_1",
            "content": [{"type": "output_text", "text": "OK-DONE", "annotations": []}]}
    usage = {"input_tokens": 1, "input_tokens_details": None, "output_tokens": 1,
             "output_tokens_details": None, "total_tokens": 2}
    return (sse("response.created", {"response": {"id": "resp_1"}})
            + sse("response.output_item.done", {"output_index": 0, "item": item})
            + sse("response.completed", {"response": {"id": "resp_1", "usage": usage}})).encode()


def start() -> MockModel:
    holder: list[MockModel] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            body = json.dumps({"data": [], "object": "list"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length).decode(errors="replace")
            mock = holder[0]
            with mock.lock:
                mock.requests.append(raw)
            body = _events()
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    mock = MockModel(server)
    holder.append(mock)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return mock
