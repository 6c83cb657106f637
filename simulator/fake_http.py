"""The stand-in's HTTP side: SGLang's endpoints and response formats (the simulator).

``/health``, ``/health_generate`` and ``/ready`` (503 until ready), ``/metrics`` (404 without
``--enable-metrics``), ``/server_info`` and ``/model_info`` (and their old aliases),
``/v1/models`` (answers before warm-up ends, as SGLang's does), ``/flush_cache``, and
``/generate`` with SGLang's cumulative SSE chunks (shared/reference/sglang.md).
"""

from __future__ import annotations

import argparse
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST

from simulator import content
from simulator.fake_engine import Engine, Metrics, Request


class Served(Protocol):
    """What the endpoints read of the server behind them (sglang_server.FakeServer)."""

    args: argparse.Namespace
    model_name: str
    ready: threading.Event
    engine: Engine
    metrics: Metrics

    def chunk(self, req: Request, tokens: int, done: bool) -> dict[str, Any]: ...

    def server_info(self) -> dict[str, Any]: ...


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet access log
        pass

    def _send(self, code: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, data: Any) -> None:
        self._send(code, json.dumps(data).encode())

    def do_GET(self) -> None:
        fake = self.server.fake
        path = self.path.split("?", 1)[0]
        if path in ("/health", "/health_generate", "/ready"):
            self._send(200 if fake.ready.is_set() else 503, b"")
        elif path == "/metrics":
            if not fake.args.enable_metrics:
                self._send(404, b'{"detail":"Not Found"}')
            else:
                self._send(200, fake.metrics.text(), CONTENT_TYPE_LATEST)
        elif path in ("/server_info", "/get_server_info"):
            self._json(200, fake.server_info())
        elif path in ("/model_info", "/get_model_info"):
            self._json(200, {"model_path": fake.args.model_path,
                             "tokenizer_path": fake.args.tokenizer_path, "is_generation": True})
        elif path == "/v1/models":  # answers before warm-up ends, as SGLang's does
            self._json(200, {"object": "list", "data": [{"id": fake.model_name,
                                                          "object": "model"}]})
        else:
            self._send(404, b'{"detail":"Not Found"}')

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.path.split("?", 1)[0]
        if path == "/flush_cache":
            fake.engine.flush()
            self._send(200, b"Cache flushed.\n", "text/plain")
            return
        if path != "/generate":
            self._send(404, b'{"detail":"Not Found"}')
            return
        if not fake.ready.is_set():
            self._json(503, {"error": {"message": "The server is not ready."}})
            return
        try:
            body = json.loads(raw or b"{}")
            ids = body.get("input_ids")
            text = None if isinstance(ids, list) else str(body.get("text") or "")
            prompt_len = len(ids) if isinstance(ids, list) else content.count_tokens(text or "")
            params = body.get("sampling_params") or {}
            max_new = int(params.get("max_new_tokens", 128))
        except (ValueError, TypeError, AttributeError) as err:
            self._json(400, {"error": {"message": f"bad request: {err}"}})
            return
        if prompt_len == 0 or max_new < 1:
            self._json(400, {"error": {"message": "input_ids or text and max_new_tokens >= 1"}})
            return
        req = Request(uuid.uuid4().hex, prompt_len, max_new,
                      accept_scale=content.accept_scale(text))
        fake.engine.submit(req)
        try:
            if body.get("stream"):
                self._stream(req)
            else:
                tokens, done = 0, False
                while not done:
                    tokens, done = req.out.get()
                self._json(200, fake.chunk(req, tokens, True))
        except (BrokenPipeError, ConnectionResetError):
            req.aborted = True

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _stream(self, req: Request) -> None:
        fake = self.server.fake
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        done = False
        while not done:
            tokens, done = req.out.get()
            payload = json.dumps(fake.chunk(req, tokens, done))
            self._write_chunk(f"data: {payload}\n\n".encode())
        self._write_chunk(b"data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


class FakeHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], fake: Served) -> None:
        super().__init__(address, Handler)
        self.fake = fake
