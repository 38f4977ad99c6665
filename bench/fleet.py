"""The several-replica topology of ``deploy/`` as local processes: PostgreSQL, nginx and
``serve`` replicas, each on a free loopback port in its own temporary folder.

Used by ``tests/test_replicas.py`` and ``bench/overhead.py --replicas N`` where Docker
is absent. PostgreSQL and nginx come from Debian's packages (``.ci/run`` installs them);
PostgreSQL refuses to run as root, so as root its server runs as the ``postgres`` user
the package creates. Redis is the one ``.ci/run`` starts.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
DEPLOY_NGINX = REPO / "deploy" / "nginx.conf"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_up(url: str, limit: float = 60.0, proc: Any = None) -> None:
    deadline = time.time() + limit
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the process serving {url} exited with {proc.returncode}")
        try:
            httpx.get(url, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not come up")


def pg_bin() -> str | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (on PATH, else Debian's newest)."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return os.path.dirname(os.path.realpath(found))
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
                      key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0)
    return os.path.dirname(versions[-1]) if versions else None


def nginx_bin() -> str | None:
    return shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.path.exists(p)), None)


class Postgres:
    """A throwaway PostgreSQL server (trust auth on loopback only, fsync off)."""

    def __init__(self) -> None:
        self.bin = pg_bin()
        if self.bin is None:
            raise FileNotFoundError("PostgreSQL is not installed (apt-get install postgresql)")
        self.port = free_port()
        root = os.geteuid() == 0  # the server then runs as postgres, who must reach its folder
        self.root = tempfile.mkdtemp(prefix="ce-pg-", dir="/tmp" if root else None)
        self.user: str | None = None
        if root:
            self.user = "postgres"
            entry = pwd.getpwnam(self.user)  # KeyError: no such user to run the server as
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.url = f"postgresql://ce@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([os.path.join(str(self.bin), args[0]), *args[1:]], cwd=self.root,
                       user=self.user, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=120)

    def __enter__(self) -> Postgres:
        self._run("initdb", "-D", self.data, "-U", "ce", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
        return self.start()

    @property
    def data(self) -> str:
        return os.path.join(self.root, "data")

    def start(self) -> Postgres:
        options = (f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off "
                   "-c synchronous_commit=off -c full_page_writes=off -c max_connections=50")
        self._run("pg_ctl", "-D", self.data, "-o", options, "-l", os.path.join(self.root, "log"),
                  "-w", "-t", "60", "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """``fast`` keeps what was committed; ``immediate`` (no fsync here) may not."""
        self._run("pg_ctl", "-D", self.data, "-m", mode, "-w", "stop")

    def database(self, name: str) -> str:
        """A fresh database ``name`` (dropped first if it exists); its URL."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + "/" + name

    def __exit__(self, *exc: Any) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


def nginx_conf(port: int, backends: list[int], root: str) -> str:
    """``deploy/nginx.conf`` for local processes: its replicas → ``backends`` (loopback
    ports), its listen port → ``port``, pid and temporary files under ``root``."""
    text = DEPLOY_NGINX.read_text()
    servers = re.findall(r"^ *server replica\d+:8787[^;]*;\n", text, flags=re.M)
    assert servers and "listen 8787;" in text, "deploy/nginx.conf changed shape"
    local = "".join(f"    server 127.0.0.1:{b} max_fails=0;\n" for b in backends)
    text = text.replace("".join(servers), local).replace("listen 8787;", f"listen 127.0.0.1:{port};")
    temp = "".join(f"  {k}_temp_path {root}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    text = text.replace("worker_processes auto;", "worker_processes 1;").replace("http {\n", "http {\n" + temp, 1)
    return f"daemon off;\npid {root}/nginx.pid;\n" + text.replace("/dev/stderr", f"{root}/error.log")


class Nginx:
    def __init__(self, backends: list[int]) -> None:
        binary = nginx_bin()
        if binary is None:
            raise FileNotFoundError("nginx is not installed (apt-get install nginx)")
        self.port = free_port()
        self.root = tempfile.mkdtemp(prefix="ce-nginx-")
        conf = os.path.join(self.root, "nginx.conf")
        Path(conf).write_text(nginx_conf(self.port, backends, self.root))
        self.cmd = [binary, "-c", conf, "-p", self.root, "-e", os.path.join(self.root, "error.log")]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: Any = None

    def __enter__(self) -> Nginx:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        wait_up(self.url + "/healthz", 30, self.proc)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGQUIT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)


class Replica:
    """``context-engine serve`` as its own process (``flags`` as --key value)."""

    def __init__(self, name: str, config: str, env: dict[str, str] | None = None,
                 **flags: str) -> None:
        self.name, self.port = name, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.cmd = [sys.executable, "-m", "context_engine.proxy.cli", "serve", "--port", str(self.port),
                    "--config", config]
        for key, value in flags.items():
            self.cmd += [f"--{key}", value]
        self.env = {**os.environ, "PYTHONPATH": str(REPO), "CONTEXT_ENGINE_REPLICA": name,
                    "CONTEXT_ENGINE_LOG_LEVEL": "warning", **(env or {})}
        self.proc: Any = None

    def launch(self) -> Replica:
        """Start the process (``wait`` for it to answer; several start in parallel)."""
        self.proc = subprocess.Popen(self.cmd, env=self.env, cwd=str(REPO))
        return self

    def wait(self) -> Replica:
        wait_up(self.url + "/healthz", 120, self.proc)
        return self

    def start(self) -> Replica:
        return self.launch().wait()

    def stop(self) -> None:
        """SIGTERM: requests in flight finish, the ledger is flushed, then it exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> Replica:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
