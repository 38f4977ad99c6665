"""The PostgreSQL ledger through a database restart under load: no row may be lost.

Starts a throwaway PostgreSQL (Debian's binaries, ``bench/fleet.py``), records a row
every ``--every`` seconds the way a busy server does, stops the database for
``--down`` seconds, starts it again, and counts: rows recorded, written, dropped, the
health state and the oldest row's wait during the outage, and how long the queue took
to drain. Run as ``python3 -m context_engine.bench.ledger_outage --down 30``.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

from context_engine.bench.fleet import Postgres
from context_engine.proxy.recording.ledger import Ledger, LedgerRow, read_rows


def probe(down: float, every: float) -> dict[str, object]:
    with Postgres() as server:
        url = server.database("outage_probe")
        ledger = Ledger(url, replica="probe")
        stop, sent = threading.Event(), [0]

        def feed() -> None:
            while not stop.is_set():
                sent[0] += 1
                ledger.record(LedgerRow(model=f"r{sent[0]}"))
                time.sleep(every)

        feeder = threading.Thread(target=feed)
        feeder.start()
        time.sleep(1.0)
        server.stop()
        t0, states, oldest = time.monotonic(), set(), 0.0
        while time.monotonic() - t0 < down:
            health = ledger.health()
            states.add(health["state"])
            oldest = max(oldest, float(health["oldest_s"]))
            time.sleep(0.25)
        server.start()
        time.sleep(1.0)
        stop.set()
        feeder.join()
        t1 = time.monotonic()
        drained = ledger.flush(120)
        drain_s = time.monotonic() - t1
        health = ledger.health()
        rows = [r["model"] for r in read_rows(url)]
        ledger.close()
    return {"down_s": down, "recorded": sent[0], "written": len(rows), "dropped": health["dropped"],
            "in_order": rows == [f"r{i + 1}" for i in range(sent[0])], "drained": drained,
            "drain_s": round(drain_s, 2), "states_during_outage": sorted(states),
            "max_oldest_s": round(oldest, 1), "state_after": health["state"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--down", type=float, default=30.0, help="seconds the database is down")
    parser.add_argument("--every", type=float, default=0.005, help="seconds between rows")
    args = parser.parse_args()
    print(json.dumps(probe(args.down, args.every), indent=2))


if __name__ == "__main__":
    main()
