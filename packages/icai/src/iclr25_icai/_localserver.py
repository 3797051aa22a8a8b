"""A tiny OpenAI-compatible chat endpoint on 127.0.0.1, in a thread of this process, that adds a fixed latency to
every reply: what ``bench`` measures ``--concurrency`` against (a real server's time per request is mostly waiting,
which concurrent requests overlap). It records the largest number of requests it held at once."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["LatencyEndpoint"]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the client's connection pool reuses connections

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        srv: Any = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.in_flight += 1
            srv.requests += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
        try:
            time.sleep(srv.latency_s)
            content = srv.reply(body["messages"])
            data = json.dumps(
                {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
            ).encode()
        finally:
            with srv.lock:
                srv.in_flight -= 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class LatencyEndpoint:
    """``with LatencyEndpoint(reply, latency_s=0.05) as ep: ...`` serves ``POST {ep.url}/chat/completions`` with
    ``reply(messages) -> str`` after sleeping ``latency_s``; ``ep.max_in_flight`` and ``ep.requests`` count.

    Raises:
        ValueError: ``latency_s < 0``.
    """

    def __init__(self, reply: Callable[[list[dict[str, str]]], str], *, latency_s: float = 0.05) -> None:
        if not latency_s >= 0:
            raise ValueError(f"latency_s must be >= 0, got {latency_s}")
        self._server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.reply = reply
        self._server.latency_s = float(latency_s)
        self._server.lock = threading.Lock()
        self._server.in_flight = self._server.max_in_flight = self._server.requests = 0
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def max_in_flight(self) -> int:
        return int(self._server.max_in_flight)

    @property
    def requests(self) -> int:
        return int(self._server.requests)

    def reset(self) -> None:
        with self._server.lock:
            self._server.max_in_flight = self._server.requests = 0

    def __enter__(self) -> LatencyEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
