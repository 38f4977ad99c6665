"""Retail operations on tau-bench's retail database (users, orders, products; MIT).

The environment answers like tau-bench's retail tools (compact ``json.dumps`` of the
record, ``Error: ...`` strings) and checks the same preconditions. The scripted agent
works a queue of customers: it looks each one up, reads every order and the products in
them, and only then files returns, exchanges, item changes or cancellations whose
arguments (order ids, item ids, payment method ids) come from results read many calls
earlier; it closes with a ``calculate`` over refund amounts it saw in the orders.
"""

from __future__ import annotations

import copy
import json
import random
from dataclasses import dataclass
from typing import Any

from context_engine.bench.long_tools.recorder import Recorder, ToolError, add_up, dump
from context_engine.bench.long_tools.sources import TAU, Mirror, Source, tau_schemas

__all__ = ["TAU", "load", "session"]
TOOLS = ["calculate", "cancel_pending_order", "exchange_delivered_order_items", "find_user_id_by_email",
         "find_user_id_by_name_zip", "get_order_details", "get_product_details", "get_user_details",
         "list_all_product_types", "modify_pending_order_address", "modify_pending_order_items",
         "modify_pending_order_payment", "return_delivered_order_items"]
DATA = "tau_bench/envs/retail/data/"
SYSTEM = ("You are an operations assistant for an online retail store. Use the tools to look up "
          "customers, orders and products, and only change an order after checking its status, "
          "items and payment methods. Work through every request in the queue.")


@dataclass
class RetailEnv:
    users: dict[str, Any]
    orders: dict[str, Any]
    products: dict[str, Any]

    def run(self, name: str, args: dict[str, Any]) -> str:
        if name == "find_user_id_by_name_zip":
            for uid, u in self.users.items():
                if (u["name"]["first_name"].lower(), u["name"]["last_name"].lower(), u["address"]["zip"]) == (
                        args["first_name"].lower(), args["last_name"].lower(), args["zip"]):
                    return uid
            raise ToolError("user not found")
        if name == "find_user_id_by_email":
            return next((uid for uid, u in self.users.items() if u["email"] == args["email"]), "Error: user not found")
        if name == "calculate":
            return add_up(args["expression"])
        if name == "list_all_product_types":
            return dump({p["name"]: pid for pid, p in sorted(self.products.items(), key=lambda kv: kv[1]["name"])}, False)
        table = {"get_user_details": (self.users, "user_id", "user"), "get_order_details": (self.orders, "order_id", "order"),
                 "get_product_details": (self.products, "product_id", "product")}
        if name in table:
            rows, key, what = table[name]
            if args[key] not in rows:
                raise ToolError(f"{what} not found")
            return dump(rows[args[key]], False)
        return self._change(name, args)

    def _change(self, name: str, args: dict[str, Any]) -> str:
        order = self.orders.get(args["order_id"])
        if order is None:
            raise ToolError("order not found")
        wanted = "delivered" if "delivered" in name else "pending"
        if order["status"] != wanted:
            raise ToolError(f"non-{wanted} order cannot be {name.split('_')[0]}ed")
        pay = args.get("payment_method_id")
        if pay is not None and pay not in self.users[order["user_id"]]["payment_methods"]:
            raise ToolError("payment method not found")
        items = {i["item_id"] for i in order["items"]}
        if any(i not in items for i in args.get("item_ids", [])):
            raise ToolError("some item not found")
        if name == "return_delivered_order_items":
            order.update(status="return requested", return_items=sorted(args["item_ids"]), return_payment_method_id=pay)
        elif name == "exchange_delivered_order_items":
            order.update(status="exchange requested", exchange_items=sorted(args["item_ids"]),
                         exchange_new_items=sorted(args["new_item_ids"]), exchange_payment_method_id=pay)
        elif name == "cancel_pending_order":
            order.update(status="cancelled", cancel_reason=args["reason"])
        elif name == "modify_pending_order_address":
            order["address"] = {k: args[k] for k in ("address1", "address2", "city", "state", "country", "zip")}
        elif name == "modify_pending_order_payment":
            order["payment_history"].append({"transaction_type": "payment", "amount": 0.0, "payment_method_id": pay})
        elif name == "modify_pending_order_items":
            order["status"] = "pending (item modified)"
        return dump(order, False)


def load(mirror: Mirror) -> tuple[RetailEnv, list[dict[str, Any]], list[Source]]:
    names = ("users", "orders", "products")
    data = [mirror.json(f"{DATA}{n}.json") for n in names]
    sources = [mirror.source(f"{DATA}{n}.json") for n in names]
    return RetailEnv(*data), tau_schemas(mirror, "retail", TOOLS), sources


def _request(rng: random.Random, env: RetailEnv, uid: str) -> tuple[str, str] | None:
    """(kind, task line) for one customer, chosen from what their orders allow."""
    u = env.users[uid]
    statuses = sorted({env.orders[o]["status"] for o in u["orders"] if o in env.orders})
    kinds = [k for k, s in (("return", "delivered"), ("exchange", "delivered"), ("cancel", "pending"),
                            ("modify", "pending")) if s in statuses]
    if not kinds:
        return None
    kind = rng.choice(kinds)
    who = f"{u['name']['first_name']} {u['name']['last_name']}"
    where = f"zip {u['address']['zip']}" if rng.random() < 0.6 else f"email {u['email']}"
    lines = {"return": f"{who} ({where}) wants to return the most expensive item of a delivered order; refund it to the payment method used for that order.",
             "exchange": f"{who} ({where}) wants to exchange an item from a delivered order for another available variant of the same product.",
             "cancel": f"{who} ({where}) ordered by mistake: cancel their pending order (reason: ordered by mistake).",
             "modify": f"{who} ({where}) wants the items of their pending order switched to a different available variant, paid with the same method."}
    return kind, lines[kind]


def _find(rec: Recorder, env: RetailEnv, uid: str, line: str) -> str:
    u = env.users[uid]
    if "email " in line:
        return rec.call("find_user_id_by_email", {"email": u["email"]}, rec.maybe(0.3, "Looking up the next customer."))
    n = u["name"]
    return rec.call("find_user_id_by_name_zip", {"first_name": n["first_name"], "last_name": n["last_name"],
                                                 "zip": u["address"]["zip"]})


def _research(rec: Recorder, env: RetailEnv, uid: str, line: str) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    found = _find(rec, env, uid, line)
    user = json.loads(rec.call("get_user_details", {"user_id": found}))
    ids = list(user["orders"])
    if ids and rec.rng.random() < 0.25:  # the schema warns about the '#': a real slip
        rec.call("get_order_details", {"order_id": ids[0].lstrip("#")})
    outs = rec.fan_out([("get_order_details", {"order_id": o}) for o in ids],
                       rec.maybe(0.5, f"The customer has {len(ids)} orders; reading each one."))
    orders = [json.loads(o) for o in outs if not o.startswith("Error")]
    pids = sorted({i["product_id"] for o in orders for i in o["items"]})
    pids = pids[: rec.rng.randint(2, 5)]
    prods = rec.fan_out([("get_product_details", {"product_id": p}) for p in pids])
    return user, orders, {p: json.loads(s) for p, s in zip(pids, prods)}


def _act(rec: Recorder, kind: str, user: dict[str, Any], orders: list[dict[str, Any]],
         prods: dict[str, Any]) -> float:
    want = "delivered" if kind in ("return", "exchange") else "pending"
    order = next(o for o in orders if o["status"] == want)
    pay = order["payment_history"][0]["payment_method_id"]
    item = max(order["items"], key=lambda i: i["price"])
    if kind == "return":
        rec.call("return_delivered_order_items", {"order_id": order["order_id"], "item_ids": [item["item_id"]],
                                                  "payment_method_id": pay}, rec.maybe(0.5, "Filing the return."))
        return float(item["price"])
    if kind == "cancel":
        rec.call("cancel_pending_order", {"order_id": order["order_id"], "reason": "ordered by mistake"})
        return float(order["payment_history"][0]["amount"])
    old, new = [], []
    for i in order["items"]:
        variants = prods.get(i["product_id"], {}).get("variants", {})
        alt = sorted(v for v, d in variants.items() if d["available"] and v != i["item_id"])
        if alt:
            old.append(i["item_id"])
            new.append(rec.rng.choice(alt))
    if not old:
        return 0.0
    name = "exchange_delivered_order_items" if kind == "exchange" else "modify_pending_order_items"
    n = 1 if kind == "exchange" else len(old)
    rec.call(name, {"order_id": order["order_id"], "item_ids": old[:n], "new_item_ids": new[:n],
                    "payment_method_id": pay})
    if kind == "modify" and rec.rng.random() < 0.4:
        a = user["address"]
        rec.call("modify_pending_order_address", {"order_id": order["order_id"], **{k: a[k] for k in sorted(a)}},
                 "Also confirming the shipping address on file.")
    return 0.0


def session(rec: Recorder, env: RetailEnv, with_system: bool) -> None:
    """A queue of 4-8 customers: research all of one customer, then act; total at the end."""
    rng = rec.rng
    env = RetailEnv(env.users, copy.deepcopy(env.orders), env.products)
    rec.env = env
    queue: list[tuple[str, str, str]] = []
    size = rng.choice([5, 6, 8, 10, 13])
    for uid in rng.sample(sorted(env.users), 40):
        req = _request(rng, env, uid)
        if req and len(queue) < size:
            queue.append((uid, *req))
    lines = [f"{n}. {line}" for n, (_, _, line) in enumerate(queue, 1)]
    task = "Here is today's support queue. Please handle each request:\n" + "\n".join(lines) + \
        "\nWhen done, tell me the total amount refunded or cancelled."
    rec.start(task, SYSTEM if with_system else None)
    if rng.random() < 0.3:
        rec.call("list_all_product_types", {}, "First, the product catalogue.")
    amounts: list[float] = []
    waiting: list[tuple[str, dict[str, Any], list[dict[str, Any]], dict[str, Any]]] = []
    for uid, kind, line in queue:
        waiting.append((kind, *_research(rec, env, uid, line)))
        if rng.random() < 0.5:  # act now, or batch the changes after reading more customers
            amounts += [_act(rec, *w) for w in waiting]
            waiting = []
    amounts += [_act(rec, *w) for w in waiting]
    refunds = [str(a) for a in amounts if a]
    if refunds:
        rec.call("calculate", {"expression": " + ".join(refunds)})
    rec.finish("All requests in the queue are handled.")
