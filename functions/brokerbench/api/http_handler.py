"""What the local HTTP servers share (the API server, the console's signing proxy): every method to one `_serve`,
an answer sent with its length and without hop-by-hop headers, no access log."""

from __future__ import annotations

from collections.abc import Iterable
from http.server import BaseHTTPRequestHandler

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "te", "trailer", "upgrade"}


class AnyMethodHandler(BaseHTTPRequestHandler):
    """A request handler whose every method (GET, POST, OPTIONS, ... and ones the API does not route) is `_serve`."""

    def _serve(self) -> None:
        raise NotImplementedError

    def __getattr__(self, name: str):
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def _answer(self, status: int, headers: dict | Iterable[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in (headers.items() if isinstance(headers, dict) else headers):
            if name.lower() not in HOP_BY_HOP:
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass
