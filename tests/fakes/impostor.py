"""Another local user's HTTP server on loopback: 200 with plausible JSON to every request,
remembering what it was sent (tests/test_launcher_identity.py points state files at it and
races the launcher for its port)."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Impostor:
    """Another local user's server: 200 to everything, remembering what it was sent."""

    def __init__(self, port: int = 0) -> None:
        seen: list[tuple[str, str, dict[str, str]]] = []

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                self.rfile.read(length)
                seen.append((self.command, self.path, dict(self.headers)))
                body = json.dumps({"status": "ok", "pid": os.getpid(), "proof": "0" * 64}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_DELETE = _any

            def log_message(self, *args: Any) -> None:
                pass

        self.seen = seen
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def keys_seen(self, key: str) -> list[str]:
        return [h["Authorization"] for _, _, h in self.seen if key in h.get("Authorization", "")]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
