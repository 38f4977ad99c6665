"""The model behind ``context-engine eval``: plain ``POST {base_url}/chat/completions``, as
OpenAI, vLLM, Ollama (``/v1``), llama.cpp's server and LM Studio all serve it, with an
answer cache on disk.

- The cache is one JSONL file (``answers.jsonl`` in the ``--cache`` folder), one line per
  answered request, keyed by the SHA-256 of the base URL and the request body. A line is
  written (and flushed) as soon as its answer arrives, so an interrupted run resumes
  where it stopped; a line cut off by a crash is ignored on load.
- Usage is what the server reported (``None`` when it omits ``usage``, as some local
  servers do; the caller then counts tokens itself).
- 429, 5xx and transport errors are retried with exponential backoff (``Retry-After``
  honoured, at most 30 s); other 4xx fail at once. A failure is never cached.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

CACHE_FILE = "answers.jsonl"


@dataclass(frozen=True)
class Answer:
    text: str
    usage: dict[str, Any] | None = None
    cached: bool = False  # read from the answer cache, not asked now
    error: str | None = None


def request_key(base_url: str, body: dict[str, Any]) -> str:
    blob = json.dumps([base_url.rstrip("/"), body], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


class AnswerCache:
    """Answers by request hash, kept in memory and appended to a JSONL file."""

    def __init__(self, folder: str | None) -> None:
        self.path = Path(folder) / CACHE_FILE if folder else None
        self.answers: dict[str, dict[str, Any]] = {}
        if self.path is not None and self.path.is_file():
            with open(self.path, encoding="utf-8") as fh:
                for line in fh:
                    try:
                        row = json.loads(line)
                        self.answers[str(row["key"])] = row
                    except (ValueError, KeyError, TypeError):
                        continue  # a line cut off by an interruption

    def get(self, key: str) -> Answer | None:
        row = self.answers.get(key)
        return None if row is None else Answer(str(row.get("text", "")), row.get("usage"), True)

    def put(self, key: str, answer: Answer) -> None:
        row = {"key": key, "text": answer.text, "usage": answer.usage}
        self.answers[key] = row
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()


def _content(data: Any) -> str:
    try:
        content = data["choices"][0]["message"].get("content")
    except (KeyError, IndexError, TypeError, AttributeError):
        raise ValueError("no choices[0].message in the response") from None
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(30.0, float(response.headers.get("retry-after", "")))
    except ValueError:
        return None


class ChatClient:
    """Asks one server; ``ask`` never raises for a server or network fault (the answer
    carries the error instead)."""

    def __init__(self, base_url: str, api_key: str | None, cache: AnswerCache,
                 concurrency: int = 4, retries: int = 4, timeout: float = 120.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.cache = cache
        self.retries = retries
        self.limit = asyncio.Semaphore(max(1, concurrency))
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(headers=headers, timeout=timeout, transport=transport)
        self.asked = 0  # requests answered by the server in this run
        self.pending: dict[str, asyncio.Future[Answer]] = {}  # one request per key in flight

    async def ask(self, body: dict[str, Any]) -> Answer:
        key = request_key(self.base_url, body)
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        if key in self.pending:
            return await asyncio.shield(self.pending[key])
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.pending[key] = future
        try:
            async with self.limit:
                answer = await self._post(body)
            if answer.error is None:
                self.asked += 1
                self.cache.put(key, answer)
            future.set_result(answer)
            return answer
        finally:
            del self.pending[key]
            if not future.done():
                future.cancel()

    async def _post(self, body: dict[str, Any]) -> Answer:
        url = self.base_url + "/chat/completions"
        error = ""
        for attempt in range(self.retries + 1):
            wait: float | None = None
            try:
                response = await self.http.post(url, json=body)
            except httpx.TransportError as exc:
                error = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    try:
                        data = response.json()
                        usage = data.get("usage") if isinstance(data, dict) else None
                        return Answer(_content(data), usage if isinstance(usage, dict) else None)
                    except ValueError as exc:
                        return Answer("", error=f"bad response: {exc}")
                error = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code != 429 and response.status_code < 500:
                    break
                wait = _retry_after(response)
            if attempt < self.retries:
                await asyncio.sleep(wait if wait is not None else min(30.0, 2.0 ** attempt))
        return Answer("", error=error)

    async def aclose(self) -> None:
        await self.http.aclose()


def api_key_from(flag: str | None) -> str | None:
    """``--api-key``, else ``CONTEXT_ENGINE_EVAL_API_KEY``, else ``OPENAI_API_KEY``."""
    return flag or os.environ.get("CONTEXT_ENGINE_EVAL_API_KEY") or os.environ.get("OPENAI_API_KEY")
