"""The options of ``retrieve`` (``context-engine rules`` lists them with their help)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from context_engine.proxy.engine.contract import option

POSITIONS = ("before_last_user", "after_system")


@dataclass(frozen=True)
class RetrieveConfig:
    sessions: str = option("chat", "chat: long memory for chats only (an agent session keeps its turns; compact plans it); all: agent sessions too")
    window: int = option(4, "units (turns) always kept raw at the end of the request (summarize: window)")
    block: int = option(4, "older units leave the request in closed blocks of this size")
    min_closed_tokens: int = option(3000, "do nothing until the turns that would leave hold this many tokens (a cache miss must pay off)")
    min_drop_ratio: float = option(2.0, "…and at least this many times the system prompt plus the first window units that stay")
    top_k: int = option(32, "at most this many best-scoring snippets per query (before neighbours)")
    threshold: float = option(0.3, "minimum fused score (normalised, best chunk ≈ 1) of a snippet")
    neighbours: int = option(2, "turns on each side of a hit that may come with it")
    neighbour_decay: float = option(0.7, "a turn d turns from a hit competes with the hit's score times this to the power d")
    max_overlap: float = option(0.55, "drop a snippet whose word bigrams overlap the visible window more")
    max_snippet_tokens: int = option(1200, "token budget of one memory zone")
    budget_share: float = option(0.08, "a zone may also take this share of the tokens of the history it replaces, when that is more than its budget above (a 120k-token history has more to bring back than a 20k one)")
    max_zone_tokens: int = option(7000, "a zone never takes more than this, however long the history it replaces (0 = no cap)")
    broad_budget: int = option(4500, "token budget of a zone for a question that asks for several things or a judgement (What books…, Would she…, How many…; 0 = max_snippet_tokens)")
    self_share: float = option(0.25, "share of the zone kept for the user's own statements (user turns saying something about the user, best score first) when the turn asks for advice: Any tips…, What should I…; such a turn also passes the gate with what it tells; between a user and an assistant only (0 = off)")
    self_gate: str = option("always", "which questions get self_share of the zone for the user's own statements: always (every question between a user and an assistant) | advice (only those asking for advice)")
    mark_updates: bool = option(True, "when snippets of several turns name the question's subject (its rarest word), mark the latest and the earlier ones: (latest on yoga), (earlier than #213 on yoga); between a user and an assistant, the gate does not count that subject as seen while the memory holds statements on it that the window lacks")
    bm25_weight: float = option(0.4, "weight of BM25 in the fused score (the rest is embeddings)")
    bm25_weight_exact: float = option(0.75, "BM25 weight when the query holds ids, numbers, dates or code")
    speaker_weight: float = option(1.0, "score factor of turns by other speakers when the query names one")
    fusion: str = option("minmax", "score fusion: minmax (weighted normalised scores) | rrf (reciprocal rank)")
    expansion: float = option(0.0, "entity-linked expansion: weight of a BM25 pass over names and titles in the three best hits that the query lacks (0 = off)")
    name_blind: bool = option(True, "search without the names of the conversation's speakers (each turn is said by one of them to the other: a name only finds the turns that say it)")
    date_boost: float = option(0.2, "score added to turns from sessions dated in a month and year the query names (0 = off)")
    length_prior: float = option(0.4, "in a conversation between named people (each turn opens with its speaker's name), a turn shorter than 100 tokens fills the zone with its score times (tokens / 100) to this power: a reaction (Wow, that's great!) tells less than the turns that say something; between a user and an assistant nothing changes (an assistant's long turns are its verbosity; 0 = off)")
    gate: str = option("auto", "auto: retrieve only for turns that name an id or mainly ask (not news with a question back) about something the window lacks; always: every non-ack turn")
    position: str = option("before_last_user", "where the zone goes: before_last_user | after_system (after the system prompt and the task)")
    embedder: str = option("auto", "auto | minilm | minilm-ort | wordllama | hashing | litellm:<model>")
    ranking: str = option("request", "request: every chunk of a session is ranked on the request with cold_embedder's static table (or BM25 alone without it), so the bytes sent depend only on the request and the committed zones, never on how far background embedding has got (replicas agree); stored: the main embedder's vectors once the background has stored them, the static table until then")
    cold_embedder: str = option("auto", "dense half of a cold request (no vector of the session's chunks stored yet), every chunk embedded on the request: auto (wordllama when installed, else none) | wordllama | none (BM25 alone)")
    keep_tool_units: bool = option(True, "tool calls and their results stay in the request (tool_json compresses them); only conversation turns leave")
    context_chars: int = option(200, "characters of the turns before and after searched with each turn (0 = off)")
    max_chunk_chars: int = option(1200, "long tool output is cut by records into chunks this long")
    knowledge_dir: str = option("", "folder of Markdown/JSON/YAML knowledge documents ('' = none)")
    knowledge_date: str = option("", "ISO date for knowledge validity ('' = the date at start-up)")
    max_sessions: int = option(64, "session indexes kept in process (LRU; rebuilt from the store)")
    max_embed: int = option(2, "texts one request may embed at most, the best BM25 candidates first; the rest are embedded in the background and ranked by BM25 until then; a cold request (no vector of the session's chunks stored yet) embeds none with its embedder (see cold_embedder; 0 = no cap: every text embedded on the request)")

    def __post_init__(self) -> None:
        if self.position not in POSITIONS:
            raise ValueError(f"position must be one of {', '.join(POSITIONS)}")
        if self.cold_embedder not in ("auto", "wordllama", "none"):
            raise ValueError("cold_embedder must be auto, wordllama or none")
        if self.ranking not in ("request", "stored"):
            raise ValueError("ranking must be request or stored")
        if self.self_gate not in ("advice", "always"):
            raise ValueError("self_gate must be advice or always")
        if self.gate not in ("auto", "always"):
            raise ValueError("gate must be auto or always")
        if self.window < 1 or self.block < 1 or self.top_k < 1:
            raise ValueError("window, block and top_k must be at least 1")
        if self.max_zone_tokens < 0:
            raise ValueError("max_zone_tokens must be at least 0")
        if self.length_prior < 0:
            raise ValueError("length_prior must be at least 0")
        if self.max_embed < 0 or self.max_sessions < 1:
            raise ValueError("max_embed must be at least 0 and max_sessions at least 1")
        if not 0.0 <= self.neighbour_decay <= 1.0:
            raise ValueError("neighbour_decay must be between 0 and 1")
        if not 0.0 <= self.budget_share <= 1.0 or not 0.0 <= self.self_share <= 1.0:
            raise ValueError("budget_share and self_share must be between 0 and 1")
        if self.knowledge_date:
            try:
                dt.date.fromisoformat(self.knowledge_date)
            except ValueError:
                raise ValueError(f"knowledge_date must be an ISO date (YYYY-MM-DD), got {self.knowledge_date!r}") from None
