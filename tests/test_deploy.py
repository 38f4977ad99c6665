"""deploy/: the compose file and nginx config describe the topology tests/test_replicas.py
runs as processes (two replicas, Redis, PostgreSQL, nginx with session affinity)."""

from __future__ import annotations

import re

import yaml

from context_engine.proxy.settings import ALL_KEYS
from tests.conftest import REPO

DEPLOY = REPO / "deploy"


def test_compose_runs_two_replicas_on_shared_redis_and_postgres_behind_nginx():
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"replica1", "replica2", "redis", "postgres", "nginx"}
    envs = [services[f"replica{i}"]["environment"] for i in (1, 2)]
    for env in envs:
        assert env["CONTEXT_ENGINE_STORE"].startswith("redis://redis:")
        ledger = env["CONTEXT_ENGINE_LEDGER"]
        assert ledger.startswith("postgresql://") and "@postgres:5432/" in ledger
        assert "CONTEXT_ENGINE_ADMIN_TOKEN" in env and "CONTEXT_ENGINE_SESSION_KEY" in env
        for key in env:  # every setting the file passes is one the proxy reads
            if key.startswith("CONTEXT_ENGINE_"):
                assert key[len("CONTEXT_ENGINE_"):].lower() in ALL_KEYS, key
    assert envs[0]["CONTEXT_ENGINE_SESSION_KEY"] == envs[1]["CONTEXT_ENGINE_SESSION_KEY"]
    assert envs[0]["CONTEXT_ENGINE_REPLICA"] != envs[1]["CONTEXT_ENGINE_REPLICA"]
    assert services["nginx"]["volumes"] == ["./nginx.conf:/etc/nginx/nginx.conf:ro"]
    assert services["replica1"]["build"] == ".."


def test_nginx_pins_sessions_by_x_session_id_over_both_replicas():
    conf = (DEPLOY / "nginx.conf").read_text()
    assert re.search(r"map \$http_x_session_id \$affinity \{[^}]*default \$http_x_session_id;", conf)
    assert "hash $affinity consistent;" in conf
    assert re.findall(r"server (replica\d):8787", conf) == ["replica1", "replica2"]
    assert "proxy_buffering off;" in conf and "proxy_set_header Host $http_host;" in conf


def test_the_image_can_use_postgres_and_opentelemetry():
    assert "'.[redis,postgres,otel]'" in (REPO / "Dockerfile").read_text()


def test_the_image_runs_as_a_user_who_owns_only_the_data_folder():
    lines = [line.strip() for line in (REPO / "Dockerfile").read_text().splitlines()]
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "the container runs as root"
    text = "\n".join(lines)
    assert "useradd" in text and f"chown -R {users[-1]}" in text and "/app/.context-engine" in text
    assert text.index("USER ") > text.index("pip install")  # installed as root, run as the user
