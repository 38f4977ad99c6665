"""The user's background proxy: started once, shared by every agent run, ended by ``stop``.

State lives under ``$XDG_STATE_HOME/context-engine`` (else ``~/.local/state/context-engine``),
a folder of the user's alone (0700; ``state.py``): ``ledger.db`` and ``store/`` (one ledger
for all runs, so ``report`` sees them together) and, per upstream, ``proxy-<id>.json``
(0600) with the port, pid, start time, launch secret and admin token of the proxy serving
it (Claude Code's Anthropic and Codex's OpenAI need a proxy each; every run of an agent
shares one). A lock file makes two ``run`` starting at once share the proxy too.

Only a proxy this user started is ever used or stopped: this process binds the listening
socket itself and hands it to the child (``serve --fd``), so no other process can take
the port between choice and bind; the child gets a random launch secret and admin token
in its environment, never on its command line; and every later use first checks the
proxy's proof of that secret (``handshake.identify``).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from context_engine.proxy.edge.launch_identity import SECRET_ENV
from context_engine.proxy.launcher.handshake import ask_to_stop, identify
from context_engine.proxy.launcher.state import (
    LaunchError,
    Proxy,
    has_proc,
    open_private,
    private_state,
    process_start,
    read_state,
    write_state,
)

__all__ = ["LaunchError", "Proxy", "ensure", "private_state", "read_state", "running", "stop"]

START_TIMEOUT = 60.0  # seconds for a new proxy to answer (imports, embedder)
STOP_TIMEOUT = 15.0
ADMIN_ENV = "CONTEXT_ENGINE_ADMIN_TOKEN"


def state_dir(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    root = env.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(root) / "context-engine"


def _key(upstream: str) -> str:
    return hashlib.sha256(upstream.rstrip("/").encode()).hexdigest()[:12]


def state_file(folder: Path, upstream: str) -> Path:
    return folder / f"proxy-{_key(upstream)}.json"


def running(folder: Path) -> list[Proxy]:
    """The proxies whose state files name a live proxy that proves it is ours."""
    if not folder.exists():
        return []
    private_state(folder)
    found = (read_state(path) for path in sorted(folder.glob("proxy-*.json")))
    return [proxy for proxy in found if proxy is not None and identify(proxy)]


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    private_state(folder)
    fd = open_private(folder / "proxy.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure(upstream: str, folder: Path, config: str | None = None) -> tuple[Proxy, bool]:
    """The running proxy for ``upstream``, or a new one; True when this call started it.
    A state file whose proxy does not prove it is ours is replaced, never used."""
    with _locked(folder):
        path = state_file(folder, upstream)
        proxy = read_state(path)
        if proxy is not None and identify(proxy):
            return proxy, False
        proxy = _start(upstream, folder, config)
        write_state(path, proxy)
        return proxy, True


def child_command(upstream: str, folder: Path, config: str | None, listener: socket.socket,
                  secret: str, admin_token: str) -> tuple[list[str], dict[str, str]]:
    """The proxy's command line (nothing secret: every local user can read it) and its
    environment (the launch secret and the admin token: readable by this user only)."""
    port = listener.getsockname()[1]
    ledger = os.environ.get("CONTEXT_ENGINE_LEDGER") or str(folder / "ledger.db")
    store = os.environ.get("CONTEXT_ENGINE_STORE") or str(folder / "store")
    cmd = [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--host", "127.0.0.1",
           "--port", str(port), "--fd", str(listener.fileno()), "--upstream", upstream,
           "--ledger", ledger, "--store", store,
           "--config", os.path.abspath(config) if config else os.devnull]
    return cmd, {**_same_code(), SECRET_ENV: secret, ADMIN_ENV: admin_token}


def _spawn(upstream: str, folder: Path, config: str | None) -> tuple[subprocess.Popen[bytes], Proxy]:
    secret, admin_token = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    log = folder / f"proxy-{_key(upstream)}.log"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))  # bound here, before the child exists: no port race
        listener.listen(128)
        cmd, env = child_command(upstream, folder, config, listener, secret, admin_token)
        out = open_private(log, os.O_WRONLY | os.O_APPEND)
        try:
            child = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                     cwd=folder, env=env, pass_fds=(listener.fileno(),),
                                     start_new_session=True)  # outlives this run
        finally:
            os.close(out)
    ledger = cmd[cmd.index("--ledger") + 1]
    return child, Proxy(child.pid, int(cmd[cmd.index("--port") + 1]), upstream, ledger, str(log),
                        time.time(), secret, admin_token, process_start(child.pid))


def _start(upstream: str, folder: Path, config: str | None) -> Proxy:
    child, proxy = _spawn(upstream, folder, config)
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise LaunchError(f"the proxy exited at start-up (code {child.returncode}); its log "
                              f"{proxy.log} ends with:\n{_tail(Path(proxy.log))}")
        if identify(proxy, timeout=1.0):
            return proxy
        time.sleep(0.1)
    child.terminate()
    raise LaunchError(f"the proxy did not answer within {START_TIMEOUT:.0f} s; see {proxy.log}")


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


def _same_process(proxy: Proxy) -> bool:
    """``proxy.pid`` is still the process we started (its start time is unchanged)."""
    return proxy.pid_start is not None and process_start(proxy.pid) == proxy.pid_start


def _still_up(proxy: Proxy) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(proxy.pid, os.WNOHANG)  # reap it if it was our child
    if proxy.pid_start is not None and has_proc():
        return _same_process(proxy)
    return identify(proxy, timeout=0.5)  # no /proc: up while it still answers


def _end(proxy: Proxy) -> bool:
    """Stop a proxy that proved it is ours: it ends itself (SIGTERM: the ledger is flushed);
    SIGKILL only when it outlives STOP_TIMEOUT and its pid is verified."""
    if not ask_to_stop(proxy):
        return False
    deadline = time.monotonic() + STOP_TIMEOUT
    while _still_up(proxy) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _still_up(proxy) and _same_process(proxy):
        os.kill(proxy.pid, signal.SIGKILL)
    return True


def stop(folder: Path) -> list[Proxy]:
    """End every proxy the state files name that proves it is ours; the stopped. A state
    file whose proxy cannot prove it (gone, or never ours) is removed, its pid never
    signalled; one whose proxy proved itself but refused to stop stays, for another try."""
    if not folder.exists():
        return []
    stopped = []
    with _locked(folder):
        for path in sorted(folder.glob("proxy-*.json")):
            proxy = read_state(path)
            if proxy is not None and identify(proxy):
                if not _end(proxy):
                    continue
                stopped.append(proxy)
            path.unlink(missing_ok=True)
    return stopped
