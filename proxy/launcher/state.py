"""The launcher's state on disk: an owner-only folder, validated state files, process ids.

The state folder (``$XDG_STATE_HOME/context-engine``) holds each background proxy's
launch secret and admin token, the shared ledger and store, the lock and the proxies'
logs, so it is the user's alone: made 0700 (an existing one of ours found looser is
tightened; one owned by another user is refused), files created 0600 from the start
(``os.open`` with the mode, never chmod after writing). A state file is trusted only
after every field checks out (types and ranges, a secret present); anything else counts
as no proxy. ``process_start`` (``/proc/<pid>/stat`` field 22) tells a pid still running
the process we started from a later process that got the same number.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DIR_MODE, FILE_MODE = 0o700, 0o600
MIN_SECRET = 32


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
    secret: str = field(repr=False)  # the launch secret: proves the proxy is this user's
    admin_token: str = field(repr=False)  # guards /stats, /metrics, /dashboard
    pid_start: int | None  # the process's start time in clock ticks (None: no /proc)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def private_state(folder: Path) -> None:
    """``folder`` exists, is a directory of this user's, and is 0700; LaunchError if not."""
    missing = []
    here = folder
    while not here.exists() and here != here.parent:
        missing.append(here)
        here = here.parent
    for path in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(path, DIR_MODE)
    st = os.stat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise LaunchError(f"the state folder {folder} is not a folder; move it away")
    if st.st_uid != os.getuid():
        raise LaunchError(f"the state folder {folder} is owned by uid {st.st_uid}, not by you "
                          f"(uid {os.getuid()}); set XDG_STATE_HOME to a folder of your own")
    if st.st_mode & 0o077:
        os.chmod(folder, DIR_MODE)


def open_private(path: Path, flags: int) -> int:
    """An fd for ``path``, created 0600 (no symlink followed); an existing file of ours found
    looser is tightened."""
    fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, FILE_MODE)
    st = os.fstat(fd)
    if st.st_mode & 0o077 and st.st_uid == os.getuid():
        os.fchmod(fd, FILE_MODE)
    return fd


def write_state(path: Path, proxy: Proxy) -> None:
    """Replace ``path`` atomically with ``proxy``'s state, 0600 from creation."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(asdict(proxy), indent=2) + "\n")
    os.replace(tmp, path)


def _int(value: Any, low: int, high: int) -> bool:
    return type(value) is int and low <= value <= high


def _valid(data: Any) -> bool:
    if not isinstance(data, dict) or set(data) != {f for f in Proxy.__dataclass_fields__}:
        return False
    strings = all(isinstance(data[k], str) for k in ("upstream", "ledger", "log"))
    secrets = all(isinstance(data[k], str) and len(data[k]) >= MIN_SECRET
                  for k in ("secret", "admin_token"))
    start = data["pid_start"] is None or _int(data["pid_start"], 0, 2**63)
    return (_int(data["pid"], 1, 2**31) and _int(data["port"], 1, 65535) and strings and secrets
            and start and type(data["started"]) in (int, float))


def read_state(path: Path) -> Proxy | None:
    """The proxy ``path`` describes, or None when it is missing, not ours or malformed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        with os.fdopen(fd) as fh:
            if os.fstat(fh.fileno()).st_uid != os.getuid():
                return None
            data = json.loads(fh.read(65536))
    except (OSError, ValueError):
        return None
    return Proxy(**data) if _valid(data) else None


def process_start(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), None when it is gone, a zombie, or
    there is no ``/proc`` to ask."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])  # field 22; fields[0] is field 3


def has_proc() -> bool:
    return Path("/proc/self/stat").exists()
