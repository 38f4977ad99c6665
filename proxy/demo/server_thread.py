"""An ASGI app served by uvicorn on loopback in a background thread (the mock upstream,
the demo and the tests' proxies)."""

from __future__ import annotations

import threading
import time
from typing import Any

import uvicorn


class ServerThread:
    """Runs an ASGI app with uvicorn on 127.0.0.1 in a background thread."""

    def __init__(self, app: Any, port: int = 0) -> None:
        self.config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                     lifespan="on", access_log=False)
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> ServerThread:
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started:
            if time.time() > deadline or not self.thread.is_alive():
                raise RuntimeError("server did not start")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        return int(self.server.servers[0].sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
