"""Spreadsheet work on the ISO country-code table (datasets/country-codes, ODC-PDDL-1.0).

A workbook with a ``countries`` sheet (the CSV's main columns, one row per country)
and an empty ``audit`` sheet, served by sheets tools that answer with compact JSON and
A1 ranges as spreadsheet MCP servers do. The scripted analyst pages through the table,
finds each country it was asked about, reads its row, and later marks rows verified
(``sheets_update`` on a cell whose row it learned from a find many calls back) and
appends audit rows built from values it read earlier.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from typing import Any

from context_engine.bench.long_tools.recorder import Recorder, ToolError, dump
from context_engine.bench.long_tools.sources import COUNTRIES, Mirror, Source

__all__ = ["COUNTRIES", "load", "session"]
PATH = "data/country-codes.csv"
COLUMNS = ["CLDR display name", "official_name_en", "ISO3166-1-Alpha-2", "ISO3166-1-Alpha-3", "ISO3166-1-numeric",
           "Dial", "Capital", "Continent", "Region Name", "Sub-region Name", "TLD", "Languages",
           "ISO4217-currency_alphabetic_code", "ISO4217-currency_name", "Geoname ID", "official_name_fr",
           "official_name_es", "official_name_ru", "official_name_ar", "UNTERM English Formal", "is_independent",
           "wikidata_id", "verified"]
AUDIT = ["country", "alpha_3", "currency", "dial", "capital", "source_row"]
CELL = re.compile(r"([A-Z]+)(\d+)")
PAGE = 50
SYSTEM = ("You are a data assistant working in the user's spreadsheet through the sheets tools. Read before "
          "you write, use A1 ranges, and never overwrite cells you have not checked.")


def col_name(n: int) -> str:
    out = ""
    n += 1
    while n:
        n, r = divmod(n - 1, 26)
        out = chr(65 + r) + out
    return out


def _parse(ref: str) -> tuple[int, int]:
    m = CELL.fullmatch(ref)
    if not m:
        raise ToolError(f"invalid A1 reference {ref!r}")
    col = 0
    for ch in m.group(1):
        col = col * 26 + ord(ch) - 64
    return int(m.group(2)) - 1, col - 1


@dataclass
class SheetsEnv:
    sheets: dict[str, list[list[str]]] = field(default_factory=dict)

    def _grid(self, name: str) -> list[list[str]]:
        if name not in self.sheets:
            raise ToolError(f"sheet {name!r} not found; available: {', '.join(sorted(self.sheets))}")
        return self.sheets[name]

    def run(self, name: str, args: dict[str, Any]) -> str:
        if name == "sheets_list":
            return dump([{"sheet": s, "rows": len(g), "columns": len(g[0]), "header": g[0]} for s, g in self.sheets.items()], False)
        grid = self._grid(args["sheet"])
        if name == "sheets_find":
            q = args["query"].lower()
            hits = [{"cell": f"{col_name(c)}{r + 1}", "value": v} for r, row in enumerate(grid)
                    for c, v in enumerate(row) if q in v.lower()]
            return dump({"matches": hits[:20], "total": len(hits)}, False)
        if name == "sheets_append":
            grid.append([str(v) for v in args["values"]])
            return dump({"updatedRange": f"{args['sheet']}!A{len(grid)}:{col_name(len(args['values']) - 1)}{len(grid)}"}, False)
        start, _, end = args["range"].partition(":")
        (r0, c0), (r1, c1) = _parse(start), _parse(end or start)
        if r0 >= len(grid):
            raise ToolError(f"range {args['range']} is outside the sheet ({len(grid)} rows)")
        if name == "sheets_read_range":
            rows = [row[c0: c1 + 1] for row in grid[r0: r1 + 1]]
            return dump({"range": f"{args['sheet']}!{args['range']}", "values": rows}, False)
        for i, vals in enumerate(args["values"]):
            grid[r0 + i][c0: c0 + len(vals)] = [str(v) for v in vals]
        return dump({"updatedRange": f"{args['sheet']}!{args['range']}", "updatedCells": sum(map(len, args["values"]))}, False)


def _fn(name: str, description: str, props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": sorted(props)}}}


SHEET = {"type": "string", "description": "Sheet name."}
RANGE = {"type": "string", "description": "A1 range, e.g. A1:D20."}
ROWS = {"type": "array", "items": {"type": "array", "items": {"type": "string"}}, "description": "Rows of cell values."}
TOOLS = [
    _fn("sheets_list", "List the sheets of the workbook with their size and header row.", {}),
    _fn("sheets_read_range", "Read a range of cells; returns the rows as JSON.", {"sheet": SHEET, "range": RANGE}),
    _fn("sheets_find", "Find cells whose value contains the query (case-insensitive); returns A1 refs.",
        {"sheet": SHEET, "query": {"type": "string", "description": "Text to look for."}}),
    _fn("sheets_update", "Overwrite a range of cells with values.", {"sheet": SHEET, "range": RANGE, "values": ROWS}),
    _fn("sheets_append", "Append one row after the last row of a sheet.",
        {"sheet": SHEET, "values": {"type": "array", "items": {"type": "string"}, "description": "The row."}}),
]


def load(mirror: Mirror) -> tuple[SheetsEnv, list[dict[str, Any]], list[Source]]:
    rows = list(csv.DictReader(io.StringIO(mirror.read(PATH))))
    table = [COLUMNS] + [[r.get(c, "").strip() for c in COLUMNS[:-1]] + [""] for r in rows]
    return SheetsEnv({"countries": table, "audit": [AUDIT]}), TOOLS, [mirror.source(PATH)]


def _look_up(rec: Recorder, country: str) -> tuple[int, list[str]] | None:
    """Find the country's row (by display name), then read the whole row."""
    found = json.loads(rec.call("sheets_find", {"sheet": "countries", "query": country},
                                rec.maybe(0.3, f"Locating {country}.")))
    cells = [m["cell"] for m in found["matches"] if m["cell"].startswith("A") and m["value"] == country]
    if not cells:
        return None
    row = int(cells[0][1:])
    out = json.loads(rec.call("sheets_read_range", {"sheet": "countries", "range": f"A{row}:{col_name(len(COLUMNS) - 1)}{row}"}))
    return row, out["values"][0]


def session(rec: Recorder, env: SheetsEnv, with_system: bool) -> None:
    rng = rec.rng
    rec.env = env = SheetsEnv({k: [list(r) for r in v] for k, v in env.sheets.items()})
    grid = env.sheets["countries"]
    names = sorted({r[0] for r in grid[1:] if r[0] and r[6]})
    targets = rng.sample(names, rng.choice([10, 12, 16, 20, 26]))
    task = ("In the workbook, audit the country table for our expansion list:\n" + ", ".join(targets) +
            f"\nFor each one, check its row, mark it verified (column {col_name(len(COLUMNS) - 1)}, 'yes'), and add a row to the 'audit' sheet "
            "with country, ISO alpha-3, currency code, dial code, capital and the source row number.\n"
            "Also tell me how many of them share a currency with another country on the list.")
    rec.start(task, SYSTEM if with_system else None)
    rec.call("sheets_list", {})
    last = col_name(len(COLUMNS) - 1)
    for start in range(2, 2 + PAGE * rng.randint(3, 5), PAGE):
        rec.call("sheets_read_range", {"sheet": "countries", "range": f"A{start}:{last}{start + PAGE - 1}"},
                 rec.maybe(0.3, "Paging through the table."))
    if rng.random() < 0.3:  # a wrong sheet name, then the right one
        rec.call("sheets_read_range", {"sheet": "Audit", "range": "A1:F1"})
    rec.call("sheets_read_range", {"sheet": "audit", "range": "A1:F1"})
    seen: list[tuple[int, list[str]]] = []
    every: list[tuple[int, list[str]]] = []
    for country in targets:
        hit = _look_up(rec, country)
        if hit:
            seen.append(hit)
            every.append(hit)
        if len(seen) >= 3 and rng.random() < 0.35:  # write back a batch of rows read several calls ago
            _write(rec, seen)
            seen = []
    _write(rec, seen)
    codes = sorted({r[12] for _, r in every if r[12]})
    for code in codes[: rng.randint(1, 3)]:
        rec.call("sheets_find", {"sheet": "countries", "query": code}, rec.maybe(0.5, f"Who else uses {code}?"))
    rec.call("sheets_read_range", {"sheet": "audit", "range": f"A1:F{len(env.sheets['audit'])}"}, "Checking the audit sheet.")
    rec.finish("The audit sheet is filled in and every listed country is marked verified.")


def _write(rec: Recorder, rows: list[tuple[int, list[str]]]) -> None:
    batch: list[tuple[str, dict[str, Any]]] = []
    for row, r in rows:
        batch.append(("sheets_update", {"sheet": "countries", "range": f"{col_name(len(COLUMNS) - 1)}{row}", "values": [["yes"]]}))
        batch.append(("sheets_append", {"sheet": "audit", "values": [r[0], r[3], r[12], r[5], r[6], str(row)]}))
    rec.fan_out(batch, rec.maybe(0.5, f"Writing back {len(rows)} verified rows."))
