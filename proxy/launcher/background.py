"""The user's background proxy: started once, shared by every agent run, ended by ``stop``.

State lives under ``$XDG_STATE_HOME/context-engine`` (else ``~/.local/state/context-engine``):
``ledger.db`` and ``store/`` (one ledger for all runs, so ``report`` sees them together)
and, per upstream, ``proxy-<id>.json`` with the port and pid of the proxy serving it
(Claude Code's Anthropic and Codex's OpenAI need a proxy each; every run of an agent
shares one). A lock file makes two ``run`` starting at once share the proxy too.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx

START_TIMEOUT = 60.0  # seconds for a new proxy to answer /healthz (imports, embedder)
STOP_TIMEOUT = 15.0


class LaunchError(Exception):
    """The proxy could not start, or be found; the message says why and what to do."""


@dataclass
class Proxy:
    pid: int
    port: int
    upstream: str
    ledger: str
    log: str
    started: float

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def state_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    root = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(root) / "context-engine"


def _key(upstream: str) -> str:
    return hashlib.sha256(upstream.rstrip("/").encode()).hexdigest()[:12]


def _state_file(folder: Path, upstream: str) -> Path:
    return folder / f"proxy-{_key(upstream)}.json"


def _read(path: Path) -> Proxy | None:
    try:
        return Proxy(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def healthy(proxy: Proxy, timeout: float = 2.0) -> bool:
    """True when ``proxy`` answers ``/healthz`` (any status it reports: it is up)."""
    try:
        return httpx.get(f"{proxy.url}/healthz", timeout=timeout).status_code in (200, 503)
    except httpx.HTTPError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running(folder: Path) -> list[Proxy]:
    """The proxies whose state files name a live, answering process."""
    found = []
    for path in sorted(folder.glob("proxy-*.json")):
        proxy = _read(path)
        if proxy is not None and _alive(proxy.pid) and healthy(proxy):
            found.append(proxy)
    return found


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "proxy.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure(upstream: str, folder: Path, config: str | None = None) -> tuple[Proxy, bool]:
    """The running proxy for ``upstream``, or a new one; True when this call started it."""
    with _locked(folder):
        path = _state_file(folder, upstream)
        proxy = _read(path)
        if proxy is not None and _alive(proxy.pid) and healthy(proxy):
            return proxy, False
        proxy = _start(upstream, folder, config)
        path.write_text(json.dumps(asdict(proxy), indent=2) + "\n")
        return proxy, True


def _start(upstream: str, folder: Path, config: str | None) -> Proxy:
    port = free_port()
    log = folder / f"proxy-{_key(upstream)}.log"
    ledger = os.environ.get("CONTEXT_ENGINE_LEDGER") or str(folder / "ledger.db")
    store = os.environ.get("CONTEXT_ENGINE_STORE") or str(folder / "store")
    cmd = [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--host", "127.0.0.1",
           "--port", str(port), "--upstream", upstream, "--ledger", ledger, "--store", store,
           "--config", os.path.abspath(config) if config else os.devnull]
    with open(log, "ab") as out:
        child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 cwd=folder, env=_same_code(), start_new_session=True)  # outlives this run
    proxy = Proxy(child.pid, port, upstream, ledger, str(log), time.time())
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise LaunchError(f"the proxy exited at start-up (code {child.returncode}); its log "
                              f"{log} ends with:\n{_tail(log)}")
        if healthy(proxy, timeout=1.0):
            return proxy
        time.sleep(0.1)
    child.terminate()
    raise LaunchError(f"the proxy did not answer /healthz within {START_TIMEOUT:.0f} s; see {log}")


def _same_code() -> dict[str, str]:
    """The environment for the proxy: it imports the same ``context_engine`` as this process."""
    import context_engine

    root = str(Path(context_engine.__file__).resolve().parent.parent)
    paths = [root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _ours(pid: int) -> bool:
    """The pid still runs our proxy (not a process that reused the number)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return _alive(pid)  # no /proc: trust the state file
    return b"context_engine.proxy.cli" in cmdline and b"serve" in cmdline


def stop(folder: Path) -> list[Proxy]:
    """End every proxy the state files name (SIGTERM: the ledger is flushed); the stopped."""
    stopped = []
    with _locked(folder):
        for path in sorted(folder.glob("proxy-*.json")):
            proxy = _read(path)
            if proxy is not None and _alive(proxy.pid) and _ours(proxy.pid):
                os.kill(proxy.pid, signal.SIGTERM)
                deadline = time.monotonic() + STOP_TIMEOUT
                while _alive(proxy.pid) and time.monotonic() < deadline:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(proxy.pid, os.WNOHANG)  # reap it if it was our child
                    time.sleep(0.05)
                if _alive(proxy.pid):
                    os.kill(proxy.pid, signal.SIGKILL)
                stopped.append(proxy)
            path.unlink(missing_ok=True)
    return stopped
