"""Session scoping (``context_engine.proxy.engine.session``): what keeps two callers, or
two tasks of one caller, from sharing memory."""

from __future__ import annotations

import hashlib
import hmac
from typing import Any

from context_engine.proxy.engine.session import caller_hash, session_id, session_key

KEY = b"team-secret"
TASK = [{"role": "system", "content": "You are an airline agent."},
        {"role": "user", "content": "Cancel reservation HAT123."}]
ALICE = {"authorization": "Bearer sk-alice"}
BOB = {"authorization": "Bearer sk-bob"}


def later(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same task a few turns on."""
    return [*messages, {"role": "assistant", "content": "Done."},
            {"role": "user", "content": "And the refund?"}]


def test_the_same_caller_and_task_keep_one_id_across_turns() -> None:
    first = session_id(ALICE, TASK, KEY)
    assert first.startswith("s-") and len(first) == 2 + 24
    assert session_id(ALICE, later(TASK), KEY) == first


def test_two_callers_with_the_same_task_get_two_sessions() -> None:
    assert session_id(ALICE, TASK, KEY) != session_id(BOB, TASK, KEY)


def test_another_task_of_the_same_caller_is_another_session() -> None:
    other_prompt = [{**TASK[0], "content": "You are a hotel agent."}, TASK[1]]
    other_question = [TASK[0], {**TASK[1], "content": "Book a flight to Oslo."}]
    ids = {session_id(ALICE, m, KEY) for m in (TASK, other_prompt, other_question)}
    assert len(ids) == 3


def test_a_developer_message_is_the_prompt_when_there_is_no_system_one() -> None:
    dev = [{"role": "developer", "content": "You are an airline agent."}, TASK[1]]
    assert session_id(ALICE, dev, KEY) == session_id(ALICE, TASK, KEY)


def test_the_header_names_the_session_within_the_callers_scope() -> None:
    alice = session_id({**ALICE, "x-session-id": "  run-7 "}, TASK, KEY)
    assert alice == f"run-7~{caller_hash(ALICE, KEY)}"
    assert session_id({**ALICE, "x-session-id": "run-7"}, later(TASK), KEY) == alice
    assert session_id({**BOB, "x-session-id": "run-7"}, TASK, KEY) != alice
    assert session_id({**ALICE, "x-session-id": "run-8"}, TASK, KEY) != alice


def test_a_blank_header_falls_back_to_the_derived_id() -> None:
    assert session_id({**ALICE, "x-session-id": "   "}, TASK, KEY) == session_id(ALICE, TASK, KEY)


def test_a_long_header_is_cut_to_200_characters() -> None:
    sid = session_id({**ALICE, "x-session-id": "x" * 5000}, TASK, KEY)
    assert sid == "x" * 200 + "~" + caller_hash(ALICE, KEY)


def test_the_scope_is_a_full_length_keyed_hash_of_the_api_key() -> None:
    scope = caller_hash(ALICE, KEY)
    assert scope == hmac.new(KEY, b"Bearer sk-alice", hashlib.sha256).hexdigest()
    assert len(scope) == 64
    assert "sk-alice" not in session_id({**ALICE, "x-session-id": "r"}, TASK, KEY)
    assert caller_hash(ALICE, b"another-key") != scope  # another deployment, another scope


def test_every_header_that_carries_a_key_scopes_the_caller() -> None:
    anon = caller_hash({}, KEY)
    azure = caller_hash({"api-key": "sk-alice"}, KEY)
    anthropic = caller_hash({"x-api-key": "sk-alice"}, KEY)
    assert azure == anthropic  # one key, whichever header carries it
    assert len({anon, azure, caller_hash({"api-key": "sk-bob"}, KEY)}) == 3
    # several are scoped together: any one of them differing is another caller
    assert caller_hash({**ALICE, "x-api-key": "sk-bob"}, KEY) != caller_hash(ALICE, KEY)
    assert caller_hash({**ALICE, "x-api-key": "sk-bob"}, KEY) != \
        caller_hash({**ALICE, "x-api-key": "sk-eve"}, KEY)


def test_keys_that_are_not_utf8_still_scope() -> None:
    odd = {"authorization": "Bearer \udcff\udcfe"}
    assert caller_hash(odd, KEY) != caller_hash(ALICE, KEY)
    assert session_id({**odd, "x-session-id": "s\udca0"}, TASK, KEY).endswith(caller_hash(odd, KEY))


def test_the_session_key_is_the_configured_secret_else_derived_from_the_store() -> None:
    assert session_key("team-secret", "redis://a:6379/0") == b"team-secret"
    derived = session_key("", "redis://a:6379/0")
    assert len(derived) == 32 and derived == session_key("", "redis://a:6379/0")
    assert derived != session_key("", "redis://b:6379/0")
    assert session_id(ALICE, TASK, derived) != session_id(ALICE, TASK, session_key("", "memory://"))


def test_through_the_server_two_keys_never_share_a_session(start_proxy: Any) -> None:
    proxy = start_proxy(session_key="team-secret")
    for api_key in ("sk-alice", "sk-bob", "sk-alice"):
        client = proxy.client(api_key=api_key, default_headers={"X-Session-Id": "shared-name"})
        client.chat.completions.create(model="gpt-4o", messages=TASK)
    client = proxy.client(api_key="sk-alice")
    client.chat.completions.create(model="gpt-4o", messages=TASK)
    client.chat.completions.create(model="gpt-4o", messages=later(TASK))
    sessions = [row["session"] for row in proxy.rows()]
    alice, bob = ({"authorization": f"Bearer {k}"} for k in ("sk-alice", "sk-bob"))
    named = {"x-session-id": "shared-name"}
    assert sessions == [session_id({**alice, **named}, TASK, KEY),
                        session_id({**bob, **named}, TASK, KEY),
                        session_id({**alice, **named}, TASK, KEY),
                        session_id(alice, TASK, KEY), session_id(alice, TASK, KEY)]
    assert len(set(sessions)) == 3
