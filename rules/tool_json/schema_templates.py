"""Schema templates for ``tool_json``: which fields of a tool's JSON result to keep.

A template file is YAML mapping tool names to a template::

    get_user_details:
      keep: [name, dob, payment_methods, membership, reservations]   # dotted paths
      aliases: {payment_methods: pm}                                 # key renames
      clip: {notes: 80}                                              # max chars per field

Paths are dotted keys. Arrays are transparent (``flights.flight_number`` reaches every
element; ``flights[*].flight_number`` means the same) and ``*`` matches any object key.
Keeping a path keeps its whole subtree.

Learned templates are the same paths, found instead of written: the leaves of a result
whose values later turns used (in assistant text or tool-call arguments), with array
positions and id-like object keys generalised to ``*``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

_MISSING: Any = object()
_DIGIT = re.compile(r"\d")
_WORD = re.compile(r"[A-Za-z0-9_@+\-]+(?:[./][A-Za-z0-9_@+\-]+)*")
_IDENT_CHAR = re.compile(r"[\d_@]")
_SPACE = re.compile(r"\s")
_DATE_OR_TIME = re.compile(r"[\d:T+-]+")


def _id_like(key: str) -> bool:
    """A key holding a digit on one line ("HAT069", "2024-05-01"): stands for an item."""
    return "\n" not in key and _DIGIT.search(key) is not None


@dataclass(frozen=True)
class Template:
    keep: tuple[tuple[str, ...], ...] = ()
    aliases: dict[str, str] = field(default_factory=dict)
    clip: dict[str, int] = field(default_factory=dict)


def parse_path(path: str) -> tuple[str, ...]:
    return tuple(p for p in path.replace("[*]", "").replace("[]", "").split(".") if p)


def parse_template(raw: Any, where: str) -> Template:
    if not isinstance(raw, dict) or not isinstance(raw.get("keep", []), list):
        raise TypeError(f"{where}: a template is a mapping with a 'keep' list")
    aliases = raw.get("aliases") or {}
    clip = raw.get("clip") or {}
    if not isinstance(aliases, dict) or not isinstance(clip, dict):
        raise TypeError(f"{where}: 'aliases' and 'clip' must be mappings")
    return Template(
        keep=tuple(parse_path(str(p)) for p in raw.get("keep", [])),
        aliases={str(k): str(v) for k, v in aliases.items()},
        clip={str(k): int(v) for k, v in clip.items()},
    )


def load_templates(paths: list[Path]) -> dict[str, Template]:
    """Templates from YAML files (a directory means its ``*.yaml``); later files win."""
    files: list[Path] = []
    for p in paths:
        if not p.exists():
            raise ValueError(f"{p}: no such template file or directory")
        files.extend(sorted(p.glob("*.yaml")) if p.is_dir() else [p])
    out: dict[str, Template] = {}
    for f in files:
        try:
            data = yaml.safe_load(f.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as exc:
            raise ValueError(f"{f}: not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise TypeError(f"{f}: expected a mapping of tool name to template")
        for tool, raw in data.items():
            out[str(tool)] = parse_template(raw, f"{f}:{tool}")
    return out


# --- applying paths -----------------------------------------------------------------------


def keep_paths(value: Any, paths: list[tuple[str, ...]] | tuple[tuple[str, ...], ...]) -> Any:
    """``value`` with only the subtrees the paths reach (``_MISSING`` when none)."""
    if any(not p for p in paths):
        return value
    if isinstance(value, list):
        kept = [keep_paths(x, paths) for x in value]
        return [x for x in kept if x is not _MISSING] or _MISSING
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            sub = [p[1:] for p in paths if p[0] in (k, "*")]
            if sub:
                x = keep_paths(v, sub)
                if x is not _MISSING:
                    out[k] = x
        return out or _MISSING
    return _MISSING


def apply_template(value: Any, t: Template) -> Any:
    """Kept, clipped and renamed value (``None`` when nothing is kept)."""
    kept = keep_paths(value, t.keep) if t.keep else value
    if kept is _MISSING:
        return None
    if t.clip:
        kept = _clip(kept, (), {parse_path(k): n for k, n in t.clip.items()})
    return _rename(kept, t.aliases) if t.aliases else kept


def _clip(v: Any, path: tuple[str, ...], limits: dict[tuple[str, ...], int]) -> Any:
    if isinstance(v, dict):
        return {k: _clip(x, path + (k,), limits) for k, x in v.items()}
    if isinstance(v, list):
        return [_clip(x, path, limits) for x in v]
    n = limits.get(path)
    if isinstance(v, str) and n is not None and len(v) > n:
        return v[:n] + "..."
    return v


def _rename(v: Any, aliases: dict[str, str]) -> Any:
    if isinstance(v, dict):
        return {aliases.get(k, k): _rename(x, aliases) for k, x in v.items()}
    if isinstance(v, list):
        return [_rename(x, aliases) for x in v]
    return v


# --- learned templates -----------------------------------------------------------------------


def used_words(texts: list[str]) -> tuple[set[str], str]:
    """The words of later turns' texts, and the texts joined (for multi-word values)."""
    joined = "\n".join(texts)
    return set(_WORD.findall(joined)), joined


def leaf_used(v: Any, words: set[str], joined: str) -> bool:
    if isinstance(v, bool) or v is None:
        return False
    if isinstance(v, (int, float)):
        return str(v) in words
    s = str(v)
    if len(s) < 3:
        return False
    return s in words or (" " in s and s in joined)


def _is_identifier(s: Any) -> bool:
    """An id, code or handle: a digit, ``_`` or ``@``, no space, not a date or a time."""
    if not isinstance(s, str) or len(s) < 3:
        return False
    return (_IDENT_CHAR.search(s) is not None and _SPACE.search(s) is None
            and not _DATE_OR_TIME.fullmatch(s))


def learned_paths(value: Any, words: set[str], joined: str,
                  keep_ids: bool = False) -> list[tuple[str, ...]]:
    """Generalised paths of the leaves whose values later turns used (sorted, unique).

    With ``keep_ids``, string leaves that look like identifiers (a digit, ``_`` or ``@``,
    no space, not a date or time: ids, codes, e-mails) count as used: later steps pass
    them on verbatim.
    """
    found: set[tuple[str, ...]] = set()
    _walk(value, (), words, joined, found)
    if keep_ids:
        _walk(value, (), set(), "", found, ident=True)
    return sorted(found)


def _walk(v: Any, path: tuple[str, ...], words: set[str], joined: str,
          found: set[tuple[str, ...]], ident: bool = False) -> None:
    if isinstance(v, dict):
        for k, x in v.items():
            if not ident and leaf_used(k, words, joined) and _id_like(k):
                found.add(path + ("*",))
            _walk(x, path + ("*" if _id_like(k) else k,), words, joined, found, ident)
    elif isinstance(v, list):
        for x in v:
            _walk(x, path, words, joined, found, ident)
    elif (_is_identifier(v) if ident else leaf_used(v, words, joined)):
        found.add(path)
