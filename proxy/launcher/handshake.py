"""The launcher's side of ``proxy/edge/launch_identity.py``: is the proxy at this port ours?

``identify`` sends a fresh random nonce and accepts only the HMAC of it under the launch
secret from the state file, made by the pid the state file names: whatever else answers
on the port (another user's server after a crash or a reboot freed it, a stale state
file) gets nothing more from ``run``, ``status`` or ``stop``: not the agent, not its API
key, not the admin token, not a signal. ``ask_to_stop`` proves the secret back so the
proxy ends itself.
"""

from __future__ import annotations

import hmac
import secrets

import httpx

from context_engine.proxy.edge.launch_identity import IDENTITY_PATH, STOP_PATH, proof
from context_engine.proxy.launcher.state import Proxy


def identify(proxy: Proxy, timeout: float = 2.0) -> bool:
    """True when the process at ``proxy.port`` proves it holds ``proxy.secret`` and is
    ``proxy.pid``."""
    nonce = secrets.token_urlsafe(24)
    try:
        r = httpx.post(proxy.url + IDENTITY_PATH, json={"nonce": nonce}, timeout=timeout)
        answer = r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return False
    if not isinstance(answer, dict) or answer.get("pid") != proxy.pid:
        return False
    given = answer.get("proof")
    expected = proof(proxy.secret, "identity", nonce, proxy.pid)
    return isinstance(given, str) and hmac.compare_digest(given.encode(), expected.encode())


def ask_to_stop(proxy: Proxy, timeout: float = 5.0) -> bool:
    """Ask the proxy (already identified) to end itself; True when it agreed."""
    nonce = secrets.token_urlsafe(24)
    body = {"nonce": nonce, "proof": proof(proxy.secret, "stop", nonce, proxy.pid)}
    try:
        return httpx.post(proxy.url + STOP_PATH, json=body, timeout=timeout).status_code == 202
    except httpx.HTTPError:
        return False
