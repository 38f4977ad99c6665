"""The demo's sample: an order-support agent session, written for this project.

A customer asks about a delayed order; the agent looks things up with tools whose
results are verbose JSON (as real APIs return), checks the same status twice, and the
customer sends the usual acknowledgements. Built by code so it stays small and readable.
"""

from __future__ import annotations

import json
from typing import Any

SYSTEM = (
    "You are Lumen Outfitters' order-support agent. Verify the customer before sharing "
    "order details. Use the tools to look things up; never invent tracking numbers, "
    "amounts or dates. Refunds above $200 need a supervisor. Be brief and concrete."
)

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": name, "description": desc,
        "parameters": {"type": "object", "properties": {arg: {"type": "string"}},
                       "required": [arg]}}}
    for name, desc, arg in [
        ("get_customer", "Look up a customer by email.", "email"),
        ("get_order", "Order details by order id.", "order_id"),
        ("list_shipments", "Shipment events of an order.", "order_id"),
        ("issue_refund", "Refund an order line.", "line_id"),
    ]
]


def _customer() -> dict[str, Any]:
    return {"customer_id": "CUS-88412", "name": "Dana Whitfield", "email": "dana.w@example.com",
            "tier": "gold", "phone": None, "addresses": [
                {"id": "ADR-1", "line1": "14 Harbor Lane", "city": "Portland", "zip": "04101",
                 "country": "US", "default": True, "notes": ""},
                {"id": "ADR-2", "line1": "900 Pine St", "city": "Seattle", "zip": "98101",
                 "country": "US", "default": False, "notes": ""}],
            "marketing_opt_in": False, "tags": [], "created_at": "2021-03-02T10:11:00Z"}


def _order() -> dict[str, Any]:
    lines = [{"line_id": f"LN-{i}", "sku": sku, "title": title, "qty": qty, "unit_price": price,
              "currency": "USD", "discount": None, "gift_wrap": False, "warehouse": "PDX-2"}
             for i, (sku, title, qty, price) in enumerate([
                 ("TNT-2P", "Ridgeline 2P tent", 1, 249.0),
                 ("PAD-UL", "Ultralight sleeping pad", 2, 89.5),
                 ("STV-MINI", "Mini canister stove", 1, 44.0)], start=1)]
    return {"order_id": "ORD-551903", "customer_id": "CUS-88412", "status": "in_transit",
            "placed_at": "2026-11-18T15:02:00Z", "promised_by": "2026-11-24",
            "lines": lines, "shipping": {"method": "ground", "carrier": "UPS",
                                         "tracking": "1Z999AA10123456784", "cost": 0.0},
            "coupon": None, "notes": [], "total": 472.0}


def _shipments() -> dict[str, Any]:
    events = [{"ts": f"2026-11-{d}T0{h}:00:00Z", "location": loc, "status": st, "code": code,
               "signed_by": None, "exception": None}
              for d, h, loc, st, code in [
                  (19, 8, "Portland, OR", "label_created", "MP"),
                  (20, 6, "Portland, OR", "picked_up", "PU"),
                  (21, 9, "Boise, ID", "in_transit", "IT"),
                  (22, 7, "Salt Lake City, UT", "in_transit", "IT"),
                  (23, 5, "Salt Lake City, UT", "delayed_weather", "WX"),
                  (25, 8, "Denver, CO", "in_transit", "IT")]]
    return {"order_id": "ORD-551903", "carrier": "UPS", "events": events, "eta": "2026-11-28"}


def conversation() -> list[dict[str, Any]]:
    """The whole session as chat-completions messages, in order."""
    msgs: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    n = 0

    def user(text: str) -> None:
        msgs.append({"role": "user", "content": text})

    def say(text: str) -> None:
        msgs.append({"role": "assistant", "content": text})

    def call(name: str, args: dict[str, str], result: Any) -> None:
        nonlocal n
        n += 1
        cid = f"call_demo_{n:02d}"
        msgs.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": cid, "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]})
        msgs.append({"role": "tool", "tool_call_id": cid, "content": json.dumps(result, indent=2)})

    user("Hi, my order hasn't arrived. It was promised for the 24th. Email is dana.w@example.com")
    call("get_customer", {"email": "dana.w@example.com"}, _customer())
    say("Thanks Dana, I found your account. Let me pull up the order.")
    user("ok")
    call("get_order", {"order_id": "ORD-551903"}, _order())
    call("list_shipments", {"order_id": "ORD-551903"}, _shipments())
    say("Your order ORD-551903 (UPS 1Z999AA10123456784) was delayed by weather in Salt Lake "
        "City on Nov 23 and is now in Denver; the new ETA is Nov 28.")
    user("thanks")
    user("Can you check again whether it has moved since this morning?")
    call("list_shipments", {"order_id": "ORD-551903"}, _shipments())
    say("No new scan since Denver this morning; the ETA is still Nov 28.")
    user("got it")
    user("If it doesn't come by the 28th I want a refund for the tent only.")
    say("Understood: if ORD-551903 has not arrived by Nov 28, I will refund line LN-1, the "
        "Ridgeline 2P tent ($249.00). That is above $200, so a supervisor will approve it.")
    user("ok thanks")
    user("Actually, send any updates to my Seattle address instead of Portland.")
    call("get_customer", {"email": "dana.w@example.com"}, _customer())
    say("Noted: updates go to 900 Pine St, Seattle (ADR-2).")
    user("Great. What's the tracking number again, and when did it leave Boise?")
    return msgs


def request_points(messages: list[dict[str, Any]]) -> list[int]:
    """Indices after which the model must answer: a user turn or the last tool result."""
    points = []
    for i, m in enumerate(messages):
        nxt = messages[i + 1] if i + 1 < len(messages) else None
        if m["role"] == "user" and (nxt is None or nxt["role"] != "user"):
            points.append(i)
        elif m["role"] == "tool" and (nxt is None or nxt["role"] != "tool"):
            points.append(i)
    return points
