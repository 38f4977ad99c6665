"""Lossless compaction of a JSON value into a short, readable text (used by ``tool_json``).

The text keeps every fact of the value; only the notation changes:

- objects become ``key:value`` lines at the top (``key: value`` with ``tight_keys``
  off) and ``{key:value,…}`` inside, with strings unquoted when that is unambiguous (a
  string that reads like a number, a boolean or ``null``, is empty, has a separator or
  needs an escape stays JSON-quoted, escaped the way the original text was:
  ``\\uXXXX`` when the original was pure ASCII);
- ``null`` fields, and unless ``drop_empty`` is off, empty strings/arrays/objects, are
  dropped from objects (never from arrays: positions carry meaning); ``drop_defaults``
  also drops ``false`` and ``0`` (off by default: a ``0`` or ``false`` can be a fact);
- an array of objects (or an object whose values are all objects) becomes a table: one
  line naming it and its row count, one CSV header line (nested keys flattened with
  dots), one CSV line per row; a cell holding a comma, a quote or a line break is
  JSON-quoted, so a value is never split;
- a column that holds the same value in every row is factored out of the table into
  its first line (``all: origin=JFK``); a key column that repeats each row's ``id``
  is dropped (``keyed by id``).

The output depends only on the value and the options: same input, same bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_NUMBER = re.compile(r"-?\d+(\.\d+)?([eE][+-]?\d+)?")
_BARE_KEY = re.compile(r"[A-Za-z_$@][A-Za-z0-9_$@-]*")
_INLINE_UNSAFE = set(',{}[]"')
_CELL_UNSAFE = set(',"')
_WORDS = {"true", "false", "null", ""}


@dataclass(frozen=True)
class CompactOptions:
    drop_empty: bool = True
    drop_defaults: bool = False
    tables: bool = True
    factor: bool = True
    ascii_only: bool = True
    min_rows: int = 2
    min_fill: float = 0.6
    tight_keys: bool = True

    @property
    def key_sep(self) -> str:
        """Between a top-level key and its value: ``key:value`` (tight) or ``key: value``."""
        return ":" if self.tight_keys else ": "


MAX_DEPTH = 64  # deeper JSON is left as text: the compaction recurses once per level


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """Levels of arrays/objects in ``value``, level by level (no recursion), at most
    ``limit + 1``."""
    depth, level = 0, [value]
    while depth <= limit:
        containers = [v for v in level if isinstance(v, (dict, list))]
        if not containers:
            break
        depth += 1
        level = [c for v in containers for c in (v.values() if isinstance(v, dict) else v)]
    return depth


def prune(value: Any, opts: CompactOptions) -> Any:
    """Drop null (and empty / default-valued) object fields, recursively."""
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            v = prune(v, opts)
            if not _droppable(v, opts):
                out[k] = v
        return out
    if isinstance(value, list):
        return [prune(v, opts) for v in value]
    return value


def _droppable(v: Any, opts: CompactOptions) -> bool:
    if v is None:
        return True
    if opts.drop_empty and (v == "" or v == [] or v == {}):
        return True
    return opts.drop_defaults and (v is False or (v == 0 and not isinstance(v, bool)))


def render(value: Any, opts: CompactOptions) -> str:
    """The compact text of an (already pruned) JSON value."""
    if isinstance(value, dict) and value:
        return "\n".join(_dict_lines(value, "", opts))
    if isinstance(value, list) and _table_rows(value, opts) is not None:
        return "\n".join(_table_lines("", value, opts))
    return _inline(value, opts)


def compact(value: Any, opts: CompactOptions) -> str:
    return render(prune(value, opts), opts)


def parse_container(text: str) -> Any:
    """The JSON object or array ``text`` holds, else None (also when nested deeper than
    ``MAX_DEPTH``: such a result is clipped as text, never recursed into)."""
    if text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, (dict, list)) or not value or nesting_depth(value) > MAX_DEPTH:
        return None
    return value


# --- scalars and inline values ----------------------------------------------------------


def _quoted(s: str, opts: CompactOptions) -> str:
    return json.dumps(s, ensure_ascii=opts.ascii_only)


def _plain(s: str, opts: CompactOptions) -> bool:
    """True when the string needs no escape and cannot be read as another type."""
    if s.strip() != s or s.lower() in _WORDS or _NUMBER.fullmatch(s):
        return False
    return json.dumps(s, ensure_ascii=opts.ascii_only)[1:-1] == s


def _scalar(v: Any, opts: CompactOptions, unsafe: set[str]) -> str:
    if isinstance(v, str):
        if _plain(v, opts) and not unsafe.intersection(v):
            return v
        return _quoted(v, opts)
    return json.dumps(v, ensure_ascii=opts.ascii_only)


def _key(k: str, opts: CompactOptions) -> str:
    return k if _BARE_KEY.fullmatch(k) else _quoted(k, opts)


def _inline(v: Any, opts: CompactOptions) -> str:
    if isinstance(v, dict):
        return "{" + ",".join(f"{_key(k, opts)}:{_inline(x, opts)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_inline(x, opts) for x in v) + "]"
    return _scalar(v, opts, _INLINE_UNSAFE)


# --- objects as lines ----------------------------------------------------------------------


def _has_table(v: Any, opts: CompactOptions) -> bool:
    if isinstance(v, list):
        return _table_rows(v, opts) is not None
    if isinstance(v, dict):
        return _table_rows(v, opts) is not None or any(_has_table(x, opts) for x in v.values())
    return False


def _dict_lines(d: dict[str, Any], prefix: str, opts: CompactOptions) -> list[str]:
    lines: list[str] = []
    for k, v in d.items():
        path = prefix + _key(k, opts)
        if isinstance(v, (list, dict)) and v and _table_rows(v, opts) is not None:
            lines.extend(_table_lines(path, v, opts))
        elif isinstance(v, dict) and v and _has_table(v, opts):
            lines.extend(_dict_lines(v, path + ".", opts))
        else:
            lines.append(f"{path}{opts.key_sep}{_inline(v, opts)}")
    return lines


# --- tables ----------------------------------------------------------------------------------


def _flatten(v: Any, prefix: str, out: dict[str, Any], opts: CompactOptions) -> None:
    if isinstance(v, dict) and v:
        for k, x in v.items():
            _flatten(x, f"{prefix}{_key(k, opts)}.", out, opts)
    elif isinstance(v, list) and v and all(isinstance(x, (dict, list)) for x in v):
        for i, x in enumerate(v):
            _flatten(x, f"{prefix}{i}.", out, opts)
    else:
        out[prefix[:-1]] = v


def _table_rows(value: Any, opts: CompactOptions) -> list[tuple[str | None, dict[str, Any]]] | None:
    """Flattened rows when ``value`` is worth a table, else None."""
    if not opts.tables or len(value) < opts.min_rows:
        return None
    items = list(value.items()) if isinstance(value, dict) else [(None, x) for x in value]
    rows = []
    for key, x in items:
        if not isinstance(x, (dict, list)) or not x:
            return None
        if isinstance(x, list) and not all(isinstance(e, dict) for e in x):
            return None
        flat: dict[str, Any] = {}
        _flatten(x, "", flat, opts)
        rows.append((key, flat))
    columns = {c for _, r in rows for c in r}
    if sum(len(r) for _, r in rows) < opts.min_fill * len(rows) * len(columns):
        return None
    return rows


def _columns(rows: list[tuple[str | None, dict[str, Any]]]) -> list[str]:
    seen: dict[str, None] = {}
    for _, r in rows:
        for c in r:
            seen.setdefault(c, None)
    return list(seen)


def _constant_columns(rows: list[tuple[str | None, dict[str, Any]]], columns: list[str],
                      opts: CompactOptions) -> dict[str, Any]:
    if not opts.factor or len(rows) < 2:
        return {}
    out = {}
    for c in columns:
        first = rows[0][1].get(c, _MISSING)
        if first is not _MISSING and all(
                c in r and r[c] == first and type(r[c]) is type(first) for _, r in rows):
            out[c] = first
    return out


_MISSING = object()


def _table_lines(path: str, value: Any, opts: CompactOptions) -> list[str]:
    rows = _table_rows(value, opts)
    assert rows is not None
    columns = _columns(rows)
    constants = _constant_columns(rows, columns, opts)
    columns = [c for c in columns if c not in constants]
    keyed = rows[0][0] is not None
    by_id = keyed and all(r.get("id") == k for k, r in rows) and "id" not in constants
    title = f"{len(rows)} rows" + (", keyed by id" if by_id else "")
    if constants:
        title += "; all: " + ", ".join(
            f"{c}={_scalar(v, opts, _CELL_UNSAFE | {'='})}" for c, v in constants.items())
    head = ([] if not keyed or by_id else ["@key"]) + columns
    lines = [f"{path} ({title}):" if path else f"({title}):", ",".join(head)]
    for key, r in rows:
        cells = [] if not keyed or by_id else [_scalar(key, opts, _CELL_UNSAFE)]
        cells += ["" if c not in r else _cell(r[c], opts) for c in columns]
        lines.append(",".join(cells))
    return lines


def _cell(v: Any, opts: CompactOptions) -> str:
    if isinstance(v, (dict, list)):
        text = _inline(v, opts)
        return _quoted(text, opts) if _CELL_UNSAFE.intersection(text) else text
    return _scalar(v, opts, _CELL_UNSAFE)
