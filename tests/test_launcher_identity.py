"""The launcher trusts only the proxy it started: a stale state file pointing at another
process's port, a port taken between choice and bind, a pid that is not (or no longer) our
proxy, and malformed state files never get the agent, its key or a signal. State is owner
only (folder 0700, files 0600), and the launcher's proxy guards /stats with its own token."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from context_engine.proxy.launcher import background
from tests.fakes.impostor import Impostor
from tests.launcher_env import User, make_user

KEY = "sk-launcher-identity-test-key"


@pytest.fixture
def impostor() -> Iterator[Impostor]:
    server = Impostor()
    yield server
    server.close()


@pytest.fixture
def decoy() -> Iterator[subprocess.Popen[bytes]]:
    """A live process of this user whose command line looks like a proxy's, but is not."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                             "context_engine.proxy.cli", "serve"])
    yield proc
    proc.kill()
    proc.wait()


def _start_ticks(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _state(upstream: str, pid: int, port: int, folder: Path, **extra: Any) -> dict[str, Any]:
    """A state file as this version writes it (every field the launcher's Proxy has)."""
    values: dict[str, Any] = {"pid": pid, "port": port, "upstream": upstream,
                              "ledger": str(folder / "ledger.db"), "log": str(folder / "p.log"),
                              "started": time.time(), "secret": "s" * 43, "admin_token": "a" * 43,
                              "pid_start": _start_ticks(pid)}
    values.update(extra)
    return {f.name: values[f.name] for f in dataclasses.fields(background.Proxy)}


def _plant(folder: Path, upstream: str, state: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = next(iter(folder.glob("proxy-*.json")), None) or background.state_file(folder, upstream)
    path.write_text(json.dumps(state))
    os.chmod(path, 0o600)
    return path


def _gone(pid: int) -> bool:
    """The process ended (a zombie no one has reaped yet counts: it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except OSError:
        return True


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# A command that talks to OPENAI_BASE_URL with an API key, as an SDK would.
CLIENT = f"""
import os, httpx
r = httpx.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", timeout=30,
               headers={{"authorization": "Bearer {KEY}"}},
               json={{"model": "gpt-4o-mini", "messages": [{{"role": "user", "content": "hi"}}]}})
print("status", r.status_code, flush=True)
"""


@pytest.fixture
def user(tmp_path) -> Iterator[User]:
    yield from make_user(tmp_path)


@pytest.mark.slow  # starts a proxy process
def test_run_never_hands_the_key_to_a_stale_state_files_port(user, mock, impostor):
    upstream = mock.url + "/v1"
    stale = _plant(user.state, upstream, _state(upstream, os.getpid(), impostor.port, user.state))
    done = user.run("run", "--upstream", upstream, "--", sys.executable, "-c", CLIENT)
    assert done.returncode == 0 and "status 200" in done.stdout, done.stderr
    assert impostor.keys_seen(KEY) == [] and not any(p.startswith("/v1") for _, p, _ in impostor.seen)
    assert f"Bearer {KEY}" in [r.headers.get("authorization") for r in mock.received]
    assert "started the proxy" in done.stderr and "this run: 1 requests" in done.stderr
    state = json.loads(stale.read_text())  # replaced: it names the proxy run started
    assert state["port"] != impostor.port and state["pid"] != os.getpid()
    # owner only: the folder, the state file, the lock, the log, the ledger inside
    assert _mode(user.state) == 0o700
    for name in (stale.name, "proxy.lock", Path(state["log"]).name):
        assert _mode(user.state / name) == 0o600, name
    assert Path(state["ledger"]).parent == user.state
    argv = Path(f"/proc/{state['pid']}/cmdline").read_bytes().decode()  # what any user can read
    assert "serve" in argv and state["secret"] not in argv and state["admin_token"] not in argv
    # /stats needs the launcher's admin token; `context-engine status` has it
    url = f"http://127.0.0.1:{state['port']}"
    assert httpx.get(url + "/stats").status_code == 401
    assert httpx.get(url + "/dashboard").status_code == 401
    status = user.run("status", "--once")
    assert status.returncode == 0 and "1 requests" in status.stdout, status.stdout + status.stderr
    stopped = user.run("stop")
    assert "stopped the proxy" in stopped.stderr, stopped.stderr
    assert _gone(state["pid"])


def _race(upstream: str, stop: threading.Event, won: list[Impostor]) -> None:
    """The port race: watch the process list for the launcher's child and bind the port
    its command line names before the child does."""
    while not stop.is_set() and not won:
        for entry in Path("/proc").iterdir():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"serve" in argv and upstream.encode() in argv and b"--port" in argv:
                port = int(argv[argv.index(b"--port") + 1])
                try:
                    won.append(Impostor(port))
                except OSError:
                    stop.set()  # the port is already bound: nothing to take
                break
        time.sleep(0.002)


@pytest.mark.slow  # starts a proxy process
def test_a_port_taken_after_the_launcher_chose_it_never_gets_the_agent(tmp_path, mock, monkeypatch):
    monkeypatch.delenv("CONTEXT_ENGINE_LEDGER", raising=False)
    monkeypatch.delenv("CONTEXT_ENGINE_STORE", raising=False)
    upstream, folder = mock.url + "/v1", tmp_path / "context-engine"
    stop, won = threading.Event(), list[Impostor]()
    racer = threading.Thread(target=_race, args=(upstream, stop, won), daemon=True)
    racer.start()
    try:
        proxy, started = background.ensure(upstream, folder, os.devnull)
        stop.set()
        racer.join(10)
        r = httpx.post(proxy.url + "/v1/chat/completions", headers={"authorization": f"Bearer {KEY}"},
                       json={"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]},
                       timeout=30)
        assert started and r.status_code == 200, r.text
        assert f"Bearer {KEY}" in [x.headers.get("authorization") for x in mock.received]
        assert all(not server.seen for server in won)  # if it bound anything, nobody came
    finally:
        stop.set()
        for server in won:
            server.close()
        background.stop(folder)


@pytest.mark.parametrize("same_start", [True, False])
def test_stop_never_signals_a_process_that_does_not_prove_it_is_our_proxy(tmp_path, decoy, impostor,
                                                                         same_start):
    folder = tmp_path / "context-engine"
    time.sleep(0.2)  # the decoy's /proc entry exists
    start = _start_ticks(decoy.pid) + (0 if same_start else 1)
    path = _plant(folder, "http://up/v1", _state("http://up/v1", decoy.pid, impostor.port, folder,
                                                 pid_start=start))
    assert background.stop(folder) == []
    time.sleep(0.3)
    assert decoy.poll() is None  # not signalled
    assert not path.exists()  # and the state file that named it is gone


MALFORMED = [
    {"port": "80; rm -rf ~"}, {"pid": "x"}, {"pid": True}, {"pid": 0}, {"pid": -5},
    {"port": 0}, {"port": 70000}, {"port": 8787.5}, {"upstream": ["x"]}, {"secret": ""},
    {"secret": None}, {"admin_token": 5}, {"pid_start": "soon"}, {"started": "yesterday"},
]


@pytest.mark.parametrize("change", MALFORMED + ["missing secret", "missing port", "a list",
                                                "not json"])
def test_malformed_state_files_are_ignored(tmp_path, decoy, impostor, change):
    folder = tmp_path / "context-engine"
    time.sleep(0.1)
    state: Any = _state("http://up/v1", decoy.pid, impostor.port, folder)
    if isinstance(change, dict):
        state.update(change)
    elif change.startswith("missing"):
        del state[change.split()[1]]
    elif change == "a list":
        state = [state]
    path = _plant(folder, "http://up/v1", state)
    if change == "not json":
        path.write_text("{pid: 1")
    assert background.read_state(path) is None
    assert background.running(folder) == [] and background.stop(folder) == []
    assert decoy.poll() is None and impostor.seen == []


def test_the_state_folder_is_made_owner_only(tmp_path):
    folder = tmp_path / "state" / "context-engine"
    background.private_state(folder)
    assert _mode(folder) == 0o700
    os.chmod(folder, 0o755)  # an older version's folder, or the user's umask
    background.private_state(folder)
    assert _mode(folder) == 0o700


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder another user owns needs root")
def test_a_state_folder_owned_by_another_user_is_refused(tmp_path):
    folder = tmp_path / "context-engine"
    folder.mkdir(mode=0o700)
    os.chown(folder, 4242, 4242)
    os.chmod(tmp_path, 0o755)
    with pytest.raises(background.LaunchError, match="owned by uid 4242"):
        background.ensure("http://up/v1", folder)
    with pytest.raises(background.LaunchError, match="owned by uid 4242"):
        background.stop(folder)


def test_the_identity_endpoint_proves_the_secret_without_showing_it():
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    from context_engine.proxy.edge.launch_identity import launcher_routes, proof

    secret = "k" * 43
    client = TestClient(Starlette(routes=launcher_routes(secret)))
    nonce = "n" * 32
    r = client.post("/_launcher/identity", json={"nonce": nonce})
    assert r.status_code == 200 and secret not in r.text
    assert r.json() == {"pid": os.getpid(), "proof": proof(secret, "identity", nonce, os.getpid())}
    for bad in ({}, {"nonce": 5}, {"nonce": "short"}, {"nonce": "n" * 1000}):
        assert client.post("/_launcher/identity", json=bad).status_code == 400
    assert client.post("/_launcher/identity", content=b"{").status_code == 400
    # stop needs the secret's proof for its own nonce: a wrong or replayed one is refused
    wrong = {"nonce": nonce, "proof": proof("x" * 43, "stop", nonce, os.getpid())}
    assert client.post("/_launcher/stop", json=wrong).status_code == 403
    other = {"nonce": nonce, "proof": r.json()["proof"]}  # an identity proof is not a stop proof
    assert client.post("/_launcher/stop", json=other).status_code == 403


def test_no_secret_in_the_childs_command_line(tmp_path):
    """What a child is started with: the secrets in its environment, never in argv."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        cmd, env = background.child_command("http://up/v1", tmp_path, None, listener, "s" * 43,
                                            "a" * 43)
    assert not any(re.search("s{43}|a{43}", part) for part in cmd)
    assert "s" * 43 in env.values() and "a" * 43 in env.values()


@pytest.mark.slow  # starts a proxy process
def test_a_proxy_whose_config_wants_client_tokens_is_still_recognised(tmp_path, mock, monkeypatch):
    monkeypatch.delenv("CONTEXT_ENGINE_LEDGER", raising=False)
    monkeypatch.delenv("CONTEXT_ENGINE_STORE", raising=False)
    config, folder = tmp_path / "config.yaml", tmp_path / "context-engine"
    config.write_text('client_tokens: "a-client-token-of-20"\n')
    try:
        first, started = background.ensure(mock.url + "/v1", folder, str(config))
        again, started_again = background.ensure(mock.url + "/v1", folder, str(config))
        assert started and not started_again and again.pid == first.pid
        assert background.running(folder) == [again]
    finally:
        assert len(background.stop(folder)) == 1
