"""Shared fixtures: a real mock upstream and real proxies on loopback."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hyp_settings

from context_engine.bench.cases import DATA_ENV, data_dir
from context_engine.proxy.demo.mock_upstream import MockUpstream, ServerThread
from context_engine.proxy.edge.app import create_app
from context_engine.proxy.engine.engine import Engine
from context_engine.proxy.settings import load_settings
from context_engine.proxy.store.stores import MemoryStore

# "fast" (the default, and CI's): the same examples on every run, so a fresh clone replays
# exactly what passed here; "deep" draws 1,000 new ones per test each run to go on finding
# cases (HYPOTHESIS_PROFILE=deep python3 -m pytest tests/rules)
hyp_settings.register_profile("fast", max_examples=60, deadline=None, derandomize=True, database=None)
hyp_settings.register_profile("deep", max_examples=1000, deadline=None)
hyp_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))

REPO = Path(__file__).resolve().parents[1]
# The shared data (LoCoMo, agent traces, injections): $CONTEXT_ENGINE_DATA, else the nearest
# shared/data above the checkout (a worktree sits deeper than the main checkout).
DATA = data_dir() or Path(os.environ.get(DATA_ENV) or REPO.parent / "shared" / "data")


def data_file(name: str) -> Path:
    """One file of the shared data; the test is skipped when the data is not present."""
    path = DATA / name
    if not path.is_file():
        pytest.skip(f"shared data not found at {path} (set {DATA_ENV})")
    return path


def needs_data(*names: str) -> pytest.MarkDecorator:
    """Skip a test or module when one of the named shared data files is missing."""
    missing = [name for name in names if not (DATA / name).is_file()]
    return pytest.mark.skipif(bool(missing), reason=f"shared data not found: {missing} in {DATA}")


@pytest.fixture(scope="session")
def mock() -> Iterator[MockUpstream]:
    m = MockUpstream()  # ServerThread.__enter__ is typed as returning a ServerThread
    with m:
        yield m


@pytest.fixture
def raw() -> Iterator[Any]:
    """The raw-socket upstream that misbehaves on cue (``tests/fakes/raw_upstream.py``)."""
    from tests.fakes import raw_upstream

    server = raw_upstream.start()
    yield server
    server.close()


@dataclasses.dataclass
class RunningProxy:
    server: ServerThread
    app: Any
    ledger_path: str

    @property
    def url(self) -> str:
        return self.server.url

    def client(self, **kw: Any) -> Any:
        from openai import OpenAI

        kw.setdefault("api_key", "sk-test-key")
        kw.setdefault("max_retries", 0)
        return OpenAI(base_url=self.url + "/v1", **kw)

    def rows(self) -> list[dict[str, Any]]:
        """The ledger, once every request so far has been finished and written."""
        import time

        from context_engine.proxy.recording.ledger import read_rows

        deadline = time.time() + 20
        while self.app.state.finisher.unfinished and time.time() < deadline:
            time.sleep(0.005)
        self.app.state.ledger.flush()
        return read_rows(self.ledger_path)


@pytest.fixture
def start_proxy(mock: MockUpstream, tmp_path: Path) -> Iterator[Any]:
    """Start a proxy in front of the mock; ``rules`` overrides the rule instances, ``enabled``
    names configured rules (default: none)."""
    running: list[ServerThread] = []

    def start(rules: list[Any] | None = None, upstream: str | None = None, enabled: str = "",
              **flags: Any) -> RunningProxy:
        flags.setdefault("rules", enabled)
        flags.setdefault("store", "memory://")
        # the rules deadline is a timing safety net (tests/test_lanes.py drives it with
        # events): functional tests must not depend on how loaded the machine is
        flags.setdefault("rules_deadline_ms", 0)
        flags.setdefault("ledger", str(tmp_path / f"ledger{len(running)}.db"))
        flags["upstream"] = upstream or mock.url + "/v1"
        settings = load_settings(flags=flags, env={}, config_path=os.devnull)
        engine = Engine(settings, store=MemoryStore(), rules=rules)
        app = create_app(settings, engine=engine)
        server = ServerThread(app).__enter__()
        running.append(server)
        return RunningProxy(server, app, settings.ledger)

    yield start
    for server in running:
        server.__exit__(None, None, None)


def _service(what: str, start: Any) -> Any:
    """Start a local service; without its Debian package, skip here but fail in CI
    (``.ci/run`` installs it)."""
    try:
        return start()
    except (FileNotFoundError, KeyError) as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is needed in CI: {exc}")
        pytest.skip(f"{what} is not available: {exc}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[Any]:
    """A throwaway PostgreSQL server from Debian's binaries, on a free loopback port."""
    from context_engine.bench.fleet import Postgres

    server = _service("PostgreSQL", Postgres)
    with server:
        yield server


@pytest.fixture
def pg_ledger(postgres: Any, request: Any) -> str:
    """The URL of a fresh, empty database for one test's ledger."""
    import re

    return str(postgres.database("t_" + re.sub(r"\W", "_", request.node.name)[:50].lower()))
