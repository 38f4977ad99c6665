"""Stopping within a container's grace period (Docker's default is 10 s, Kubernetes' 30 s).

On SIGTERM (or Ctrl-C) the server stops accepting, and:

1. writes the ledger rows already queued (at most ``FLUSH_S``), so a kill later loses
   none of the finished requests;
2. lets requests in flight run for ``shutdown_grace`` seconds (5 by default), then cuts
   them (one still waiting for the upstream gets its ledger row: status 503, ``cut by
   shutdown before the upstream answered``);
3. in the app's shutdown (``finish_then_close``): waits ``DRAIN_S`` for the rows being
   finished, then cancels what is left (shadow rewrites: the row says ``shadow skipped:
   shutting down``) and waits ``CANCEL_S`` more; flushes the ledger again (``FLUSH_S``)
   and closes it without waiting past ``CLOSE_S`` for a writer that cannot write.

So the process is gone within ``shutdown_grace`` + about 4 s: 9 s with the default.
A second Ctrl-C exits at once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

import uvicorn

log = logging.getLogger("context_engine.shutdown")
FLUSH_S = 1.0
DRAIN_S = 1.0
CANCEL_S = 0.5
CLOSE_S = 0.5


async def flush(ledger: Any, seconds: float = FLUSH_S) -> None:
    """Write the queued rows, waiting at most ``seconds`` (off the event loop)."""
    if not await asyncio.to_thread(ledger.flush, seconds):
        log.warning("shutdown: ledger rows still queued after %.1f s", seconds)


def close_within(close: Any, timeout: float = CLOSE_S) -> None:
    """Run ``close`` (the ledger's: it joins its writer) for at most ``timeout`` seconds;
    a writer stuck on an unreachable database is left to die with the process."""
    closer = threading.Thread(target=close, name="ledger-close", daemon=True)
    closer.start()
    closer.join(timeout)
    if closer.is_alive():
        log.warning("shutdown: the ledger did not close within %.1f s", timeout)


class GracefulServer(uvicorn.Server):
    """uvicorn's server, flushing the ledger as it starts waiting for requests in flight."""

    def __init__(self, config: uvicorn.Config, ledger: Any) -> None:
        super().__init__(config)
        self.ledger = ledger

    async def shutdown(self, sockets: Any = None) -> None:
        flushing = asyncio.create_task(flush(self.ledger))
        await super().shutdown(sockets)
        await flushing


def serve(app: Any, options: dict[str, Any]) -> None:
    """Run ``app`` (``create_app``'s) with uvicorn's ``options`` (``cli.server_options``:
    ``timeout_graceful_shutdown`` is ``shutdown_grace``)."""
    GracefulServer(uvicorn.Config(app, **options), app.state.ledger).run()
