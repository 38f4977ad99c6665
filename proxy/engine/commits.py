"""Committing a request's held store writes once the upstream has answered it.

``Engine.rewrite`` holds a request's writes in a ``PendingWrites``
(``proxy/engine/pending_writes.py``); the edge hands the upstream's status to
``Engine.settle``. A refusal drops them at once (on the event loop: a dict let go) and
tells the rules to forget the session's queued background work (``forgetting``: the
rules offering ``Forgetting``). Anything
else is committed in one commit thread, in the order requests were answered (a Redis or
diskcache write never runs on the event loop), and the edge waits for it before the
answer goes to the client: a client's next request, on this replica or another sharing
the store, reads what this one wrote, as when the rules wrote the store directly (the
writes moved from before the upstream call to after its status; the request's latency
is the same). The session's next rewrite also waits for its last commit (``wait``, at
most ``COMMIT_WAIT_S``). A request that wrote nothing skips the thread. Background work
(``on_commit``: the rules' prefetch) is queued after the commit, never for a refused
request.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Sequence

from context_engine.proxy.engine.contract import Forgetting
from context_engine.proxy.engine.pending_writes import PendingWrites, refused

log = logging.getLogger("context_engine.engine")
COMMIT_WAIT_S = 5.0  # longest a session's rewrite waits for its previous request's commit


class Commits:
    def __init__(self, on_commit: Callable[[], None] | None = None,
                 forgetting: Sequence[Forgetting] = ()) -> None:
        self.on_commit, self.forgetting = on_commit, tuple(forgetting)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="commit")
        self._latest: dict[str, concurrent.futures.Future[int]] = {}  # session → last commit
        self._lock = threading.Lock()
        self.committed = self.dropped = 0  # requests (for /healthz and tests)

    def settle(self, pending: PendingWrites, status: int) -> concurrent.futures.Future[int] | None:
        """Drop or commit ``pending``; the commit's future (None: nothing left to wait for)."""
        if refused(status):
            pending.drop()
            self.dropped += 1
            for rule in self.forgetting:
                rule.forget(pending.session)
            return None
        if not pending.keys():  # nothing to write: no thread hop
            self._commit(pending)
            return None
        try:
            future = self._pool.submit(self._commit, pending)
        except RuntimeError:  # shutting down: commit here, the request is answered
            self._commit(pending)
            return None
        with self._lock:
            self._latest[pending.session] = future
        future.add_done_callback(lambda f: self._done(pending.session, f))
        return future

    def _commit(self, pending: PendingWrites) -> int:
        try:
            written = pending.commit()
        except Exception:  # the edge of the commit thread: a lost write is only logged
            log.exception("committing a request's store writes failed")
            return 0
        self.committed += 1
        if self.on_commit is not None:
            self.on_commit()
        return written

    def _done(self, session: str, future: concurrent.futures.Future[int]) -> None:
        with self._lock:
            if self._latest.get(session) is future:
                del self._latest[session]

    def wait(self, session: str, timeout: float = COMMIT_WAIT_S) -> None:
        """Block until ``session``'s last commit is written (at most ``timeout`` s)."""
        with self._lock:
            future = self._latest.get(session)
        if future is not None:
            concurrent.futures.wait([future], timeout)

    def drain(self, timeout: float = COMMIT_WAIT_S) -> None:
        """Block until every commit queued so far is written (tests, shutdown)."""
        with self._lock:
            futures = list(self._latest.values())
        concurrent.futures.wait(futures, timeout)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
