"""Travel planning on tau-bench's airline database (users, reservations, flights; MIT).

Results are pretty-printed JSON (indent 2), as many MCP servers return them. The
scripted travel coordinator reads each traveller's profile and existing reservations,
searches direct flights over many dates and routes, and then books, re-books, adds bags
or cancels with flight numbers, dates, reservation ids and payment ids from results read
many calls earlier.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

from context_engine.bench.long_tools.recorder import Recorder, ToolError, add_up, dump
from context_engine.bench.long_tools.sources import TAU, Mirror, Source, tau_schemas

__all__ = ["TAU", "load", "session"]
TOOLS = ["book_reservation", "calculate", "cancel_reservation", "get_reservation_details", "get_user_details",
         "search_direct_flight", "update_reservation_baggages", "update_reservation_flights"]
DATA = "tau_bench/envs/airline/data/"
SYSTEM = ("You are a corporate travel assistant. You can search flights, read traveller profiles and "
          "reservations, and book or change trips. Prefer the cheapest available economy fare and pay "
          "with a credit card on the traveller's profile.")
DATES = [f"2024-05-{d:02d}" for d in range(16, 31)]


@dataclass
class AirlineEnv:
    users: dict[str, Any]
    reservations: dict[str, Any]
    flights: dict[str, Any]

    def run(self, name: str, args: dict[str, Any]) -> str:
        if name == "search_direct_flight":
            out = []
            for f in self.flights.values():
                day = f["dates"].get(args["date"], {})
                if (f["origin"], f["destination"]) == (args["origin"], args["destination"]) and day.get("status") == "available":
                    out.append({k: v for k, v in f.items() if k != "dates"} | day)
            return dump(out, True)
        if name == "calculate":
            return add_up(args["expression"])
        if name in ("get_user_details", "get_reservation_details"):
            rows, key = (self.users, "user_id") if name == "get_user_details" else (self.reservations, "reservation_id")
            if args[key] not in rows:
                raise ToolError(f"{key.split('_')[0]} not found")
            return dump(rows[args[key]], True)
        if name == "book_reservation":
            return self._book(args)
        res = self.reservations.get(args["reservation_id"])
        if res is None:
            raise ToolError("reservation not found")
        if name == "cancel_reservation":
            res["status"] = "cancelled"
        elif name == "update_reservation_baggages":
            res.update(total_baggages=args["total_baggages"], nonfree_baggages=args["nonfree_baggages"])
        else:
            res["flights"] = [self._priced(f, args["cabin"]) for f in args["flights"]]
        return dump(res, True)

    def _priced(self, leg: dict[str, Any], cabin: str) -> dict[str, Any]:
        f = self.flights.get(leg["flight_number"])
        if f is None or f["dates"].get(leg["date"], {}).get("status") != "available":
            raise ToolError(f"flight {leg['flight_number']} not available on date {leg['date']}")
        return {"origin": f["origin"], "destination": f["destination"], "flight_number": leg["flight_number"],
                "date": leg["date"], "price": f["dates"][leg["date"]]["prices"][cabin]}

    def _book(self, args: dict[str, Any]) -> str:
        if args["user_id"] not in self.users:
            raise ToolError("user not found")
        legs = [self._priced(f, args["cabin"]) for f in args["flights"]]
        rid = "HAT" + "ABCDEFGHJK"[len(self.reservations) % 10] + "XYZ"[len(self.reservations) % 3] + "Q"
        res = {"reservation_id": rid, **{k: args[k] for k in ("user_id", "origin", "destination", "flight_type", "cabin")},
               "flights": legs, "passengers": args["passengers"], "payment_history": args["payment_methods"],
               "created_at": "2024-05-15T15:00:00", "total_baggages": args["total_baggages"],
               "nonfree_baggages": args["nonfree_baggages"], "insurance": args["insurance"]}
        self.reservations[rid] = res
        return dump(res, True)


def load(mirror: Mirror) -> tuple[AirlineEnv, list[dict[str, Any]], list[Source]]:
    names = ("users", "reservations", "flights")
    data = [mirror.json(f"{DATA}{n}.json") for n in names]
    return AirlineEnv(*data), tau_schemas(mirror, "airline", TOOLS), [mirror.source(f"{DATA}{n}.json") for n in names]


def _traveller(rec: Recorder, env: AirlineEnv, uid: str, route: tuple[str, str]) -> dict[str, Any]:
    """Read the profile and reservations, then search the route over several dates."""
    user = json.loads(rec.call("get_user_details", {"user_id": uid}, rec.maybe(0.4, "Checking the traveller's profile.")))
    reads = sorted(user["reservations"])[: rec.rng.randint(2, 6)]
    outs = rec.fan_out([("get_reservation_details", {"reservation_id": r}) for r in reads])
    existing = [json.loads(o) for o in outs if not o.startswith("Error")]
    dates = sorted(rec.rng.sample(DATES, rec.rng.randint(4, 8)))
    found: list[dict[str, Any]] = []
    for back in (False, True):
        o, d = route[::-1] if back else route
        outs = rec.fan_out([("search_direct_flight", {"origin": o, "destination": d, "date": day}) for day in dates],
                           rec.maybe(0.5, f"Searching {o} to {d} over {len(dates)} dates."))
        found += [f | {"date": day} for day, out in zip(dates, outs) for f in json.loads(out)]
    return {"uid": uid, "user": user, "existing": existing, "found": found, "route": route}


def _cheapest(found: list[dict[str, Any]], o: str) -> dict[str, Any] | None:
    legs = [f for f in found if f["origin"] == o and f["available_seats"]["economy"] > 2]
    return min(legs, key=lambda f: (f["prices"]["economy"], f["date"], f["flight_number"]), default=None)


def _book(rec: Recorder, t: dict[str, Any]) -> str | None:
    user, (o, d) = t["user"], t["route"]
    out, back = _cheapest(t["found"], o), _cheapest(t["found"], d)
    cards = sorted(p for p in user["payment_methods"] if p.startswith("credit_card"))
    if out is None or not cards:
        return None
    legs = [out] + ([back] if back and back["date"] > out["date"] else [])
    me = {k: user["name"][k] for k in ("first_name", "last_name")} | {"dob": user["dob"]}
    pax = [me] + user["saved_passengers"][: rec.rng.randint(0, 1)]
    total = sum(f["prices"]["economy"] for f in legs) * len(pax)
    flight_type = "round_trip" if len(legs) == 2 else "one_way"
    return rec.call("book_reservation", {
        "user_id": t["uid"], "origin": o, "destination": d, "flight_type": flight_type, "cabin": "economy",
        "flights": [{"flight_number": f["flight_number"], "date": f["date"]} for f in legs], "passengers": pax,
        "payment_methods": [{"payment_id": rec.rng.choice(cards), "amount": total}],
        "total_baggages": len(pax), "nonfree_baggages": 0, "insurance": rec.rng.choice(["yes", "no"])},
        rec.maybe(0.6, f"Booking {' and '.join(f['flight_number'] for f in legs)} in economy."))


def _change(rec: Recorder, t: dict[str, Any]) -> None:
    """Add a bag to, re-time, or cancel one of the traveller's existing reservations."""
    live = [r for r in t["existing"] if r.get("status") != "cancelled"]
    if not live:
        return
    r = rec.rng.choice(live)
    choice = rec.rng.random()
    if choice < 0.4:
        rec.call("update_reservation_baggages", {"reservation_id": r["reservation_id"],
                                                 "total_baggages": r["total_baggages"] + 1,
                                                 "nonfree_baggages": r["nonfree_baggages"] + 1,
                                                 "payment_id": sorted(t["user"]["payment_methods"])[0]})
    elif choice < 0.7:
        rec.call("cancel_reservation", {"reservation_id": r["reservation_id"]}, "Cancelling the old trip as asked.")
    else:
        legs = [{"flight_number": f["flight_number"], "date": f["date"]} for f in r["flights"]]
        rec.call("update_reservation_flights", {"reservation_id": r["reservation_id"], "cabin": r["cabin"],
                                                "flights": legs, "payment_id": sorted(t["user"]["payment_methods"])[0]})


def session(rec: Recorder, env: AirlineEnv, with_system: bool) -> None:
    """Trips for 3-6 travellers: research each one, book at the end, then change old trips."""
    rng = rec.rng
    env = AirlineEnv(env.users, copy.deepcopy(env.reservations), env.flights)
    rec.env = env
    routes = sorted({(f["origin"], f["destination"]) for f in env.flights.values()})
    people = rng.sample(sorted(u for u in env.users if len(env.users[u]["reservations"]) >= 2), rng.randint(4, 8))
    plan = [(uid, rng.choice(routes)) for uid in people]
    lines = [f"- {uid}: {o} -> {d} and back, cheapest economy in the second half of May 2024" for uid, (o, d) in plan]
    task = ("Please organise the offsite trips for these travellers (user ids below).\n" + "\n".join(lines) +
            "\nBook each trip, and for each traveller also tidy up one of their existing reservations "
            "(extra bag, re-confirm the flights, or cancel).\nSummarise the total spend at the end.")
    rec.start(task, SYSTEM if with_system else None)
    trips = [_traveller(rec, env, uid, route) for uid, route in plan]
    booked = [json.loads(b) for b in (_book(rec, t) for t in trips) if b and not b.startswith("Error")]
    for t in trips:
        _change(rec, t)
    if booked:
        rec.call("calculate", {"expression": " + ".join(str(r["payment_history"][0]["amount"]) for r in booked)})
    rec.finish("All trips are booked and the existing reservations are updated.")
