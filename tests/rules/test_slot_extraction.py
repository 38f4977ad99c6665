"""Rule-based slot extraction: sentence classes, tool_results lines, ids, clipping."""

from __future__ import annotations

import json

from context_engine.proxy.engine.originals import cited_id
from context_engine.rules.summarize.slots import Slots, clip, extract_slots, tool_line


def call(args: str, name: str = "lookup") -> dict:
    return {"id": "c1", "type": "function", "function": {"name": name, "arguments": args}}


def test_a_tool_json_marker_names_the_stored_original():
    marked = "(2 rows)\n[tool_json: middle cut; original: orig:0123456789ab]"
    assert cited_id(marked) == "orig:0123456789ab"
    assert cited_id("plain") == "orig:a116c9ed46d6"  # sha256("plain")[:12]


def test_tool_lines_for_every_output_shape():
    assert tool_line(call('{"id": "ZFA04Y"}'), None, 200) == "lookup(id=ZFA04Y) → (no result)"
    assert tool_line(call("not json"), "", 200) == "lookup(not json) → (empty)"
    assert tool_line(call("[1, 2]"), "42", 200) == "lookup([1, 2]) → 42"
    assert tool_line(call("{}"), "line one\nline two", 200) == "lookup() → line one"
    listed = json.dumps([{"flight": "HAT069"}, {"flight": "HAT083"}])
    assert tool_line(call("{}"), listed, 200) == "lookup() → 2 items: flight=HAT069; ids: HAT083"
    keyed = json.dumps({"payment_methods": {"credit_card_4421486": {"brand": "visa"}}})
    assert tool_line(call('{"q": {"a": 1}}'), keyed, 200) == (
        "lookup(q=…) → payment_methods=…; ids: credit_card_4421486")
    assert tool_line(call("{}"), "{}", 200) == "lookup() → {}"


def test_long_outputs_carry_their_original_id():
    big = json.dumps({"status": "ok", "rows": list(range(200))})
    line = tool_line(call("{}"), big, 120)
    assert line.endswith(f"[{cited_id(big)}]") and line.startswith("lookup() → status=ok")


def test_images_and_list_content_are_read_as_text():
    msgs = [{"role": "user", "content": [
        {"type": "text", "text": "My order number is A-1023 from 2024-03-05."},
        {"type": "image_url", "image_url": {"url": "data:"}}]}]
    assert extract_slots(msgs, 500, 200).confirmed_facts == (
        "user: My order number is A-1023 from 2024-03-05.",)


def test_speaker_labels_and_session_headers_are_kept():
    msgs = [{"role": "user", "content": "[Session 3, 2:00 pm on 7 May, 2023]\n"
                                        "Caroline: I adopted a dog named Max in April 2022."}]
    assert extract_slots(msgs, 500, 200).confirmed_facts == (
        "[Session 3, 2:00 pm on 7 May, 2023]", "Caroline: I adopted a dog named Max in April 2022.")


def test_the_budget_keeps_the_best_ranked_items_and_all_tasks():
    msgs = [{"role": "user", "content": "Please call me back. I was in Paris on 2023-05-01 with "
                                        "Anna and Bob. The weather was nice there all week long."}]
    slots = extract_slots(msgs, 10, 200)
    assert slots == Slots(pending_tasks=("user: Please call me back.",))
    roomy = extract_slots(msgs, 500, 200)
    assert roomy.confirmed_facts == ("user: I was in Paris on 2023-05-01 with Anna and Bob.",)


def test_assistant_requests_are_not_pending_tasks():
    msgs = [{"role": "assistant", "content": "Please confirm the booking of HAT069 for $199."}]
    assert extract_slots(msgs, 500, 200).pending_tasks == ()


def test_clip():
    assert clip("a  b\nc", 10) == "a b c"
    assert clip("alpha beta gamma delta", 12) == "alpha beta…"
    assert clip("x" * 30, 10) == "x" * 9 + "…"
