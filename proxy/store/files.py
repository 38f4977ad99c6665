"""Owner-only files for what the proxy keeps at rest: the ledger, the store, their folders.

The ledger holds every request's metadata and the store holds tool results in plain text,
so nothing the proxy creates may be readable by another local user: folders are made
0700 and files 0600. ``private_umask`` is the class-wide guard for the serving process
(every file it creates afterwards, from any library, is owner-only); ``private_dir`` and
``private_file`` make a path tight when the ledger or the store is used as a library in
a process with a looser umask, and tighten a folder or file of ours found looser (an
older version made them 0755/0644), logging that once per path.
"""

from __future__ import annotations

import logging
import os
import stat

log = logging.getLogger("context_engine.files")

DIR_MODE = 0o700
FILE_MODE = 0o600
UMASK = 0o077  # what the serving process creates: owner only
STATE_DIR = ".context-engine"  # the proxy's own folder (ledger, store, logs by default)


def private_umask() -> int:
    """Make every file the process creates from now on owner-only; the previous umask."""
    return os.umask(UMASK)


def _tighten(path: str, mode: int) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return
    if st.st_mode & 0o077 and st.st_uid == os.getuid():
        os.chmod(path, mode)
        log.warning("%s was readable by others (mode %o); now %o",
                    path, stat.S_IMODE(st.st_mode), mode)


def private_dir(path: str, tighten: bool = True) -> None:
    """Create ``path`` and its missing parents 0700. An existing ``path`` is tightened
    when ``tighten`` (a folder that is ours alone: the store's), and so is an existing
    proxy state folder (``STATE_DIR``) among its parents; other existing parents are
    left alone (they may be shared, like the working directory)."""
    if not path:
        return
    missing = []
    folder = os.path.abspath(path)
    while not os.path.isdir(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, DIR_MODE)
        except FileExistsError:  # made meanwhile by another process
            pass
    if tighten:
        _tighten(path, DIR_MODE)
    folder = os.path.abspath(path)
    while folder != os.path.dirname(folder):
        if os.path.basename(folder) == STATE_DIR:
            _tighten(folder, DIR_MODE)
        folder = os.path.dirname(folder)


def private_file(path: str) -> None:
    """Create ``path`` empty 0600 if it is missing; tighten it if it exists looser."""
    try:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        _tighten(path, FILE_MODE)


def private_tree(path: str) -> None:
    """``path`` 0700 and everything in it (folders 0700, files 0600): a store folder whose
    files another library (diskcache, SQLite) created."""
    private_dir(path)
    for root, dirs, files in os.walk(path):
        for name in dirs:
            _tighten(os.path.join(root, name), DIR_MODE)
        for name in files:
            _tighten(os.path.join(root, name), FILE_MODE)


def tighten_sidecars(path: str) -> None:
    """SQLite's files beside ``path`` (-wal, -shm, -journal), once they exist."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        _tighten(path + suffix, FILE_MODE)
