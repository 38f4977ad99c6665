"""``wordllama``: a static embedder whose weights a PyPI package ships (no model run).

WordLlama (MIT, ``pip install --no-deps wordllama``) ships a 32,000 × 256 token table
(``l2_supercat``: LLM input embeddings trained on sentence pairs) and its tokenizer inside
the wheel. A text's vector is the mean of its tokens' rows, L2-normalised: about 10 ms
for a LoCoMo conversation's 419 turns on one core, where MiniLM takes seconds, so a cold
request can embed its whole history. Only the two files are read (both sha256-pinned);
the package's own loader is not imported (it fetches its tokenizer from the network).
Its vectors are weaker than MiniLM's once a store is warm (LoCoMo, every chunk
embedded: 95/135 against 103), so it is the dense half of cold requests only
(``retrieve.cold_embedder``), where the alternative is BM25 alone (89/135), and an
embedder of its own by choice (``embedder: wordllama``); docs/benchmarks.md.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os

import numpy as np

PACKAGE = "wordllama"
WEIGHTS = ("weights/l2_supercat_256.safetensors",
           "64b47a2dc493cb8e85944076601189739852d7b64e0e1eedcb1937a251cd9fd5")
TOKENIZER = ("tokenizers/l2_supercat_tokenizer_config.json",
             "93248f2a9ec36c7b35f700a033d5f36228aae48db61aee31007fa49062cdeb68")


def wordllama_dir() -> str | None:
    """The installed ``wordllama`` package's folder (found without importing it), or None."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = next(iter(spec.submodule_search_locations))
    return folder if os.path.isfile(os.path.join(folder, WEIGHTS[0])) else None


def _pinned(folder: str, entry: tuple[str, str]) -> str:
    path = os.path.join(folder, entry[0])
    with open(path, "rb") as fh:
        digest = hashlib.sha256(fh.read()).hexdigest()
    if digest != entry[1]:
        raise ValueError(f"wordllama {entry[0]} sha256 {digest} != pinned {entry[1]}")
    return path


class StaticEmbedder:
    """Mean of the text's token rows in WordLlama's table, unit length."""

    name = "wordllama"
    dim = 256

    def __init__(self, folder: str) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        table = load_file(_pinned(folder, WEIGHTS))["embedding.weight"]
        self.table = np.ascontiguousarray(table, dtype=np.float32)
        self.tok = Tokenizer.from_file(_pinned(folder, TOKENIZER))
        self.tok.no_padding()
        self.tok.no_truncation()
        self.calls = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, enc in enumerate(self.tok.encode_batch(texts, add_special_tokens=False)):
            if enc.ids:
                # one text at a time: its vector never depends on what it is embedded with
                row = self.table[enc.ids].mean(0)
                out[i] = row / max(float(np.linalg.norm(row)), 1e-12)
        return out


def cold_embedder(spec: str) -> StaticEmbedder | None:
    """``retrieve.cold_embedder``: ``auto`` (wordllama when installed) | ``wordllama`` |
    ``none``. Only a cheap static table can embed a whole cold history on the request."""
    folder = wordllama_dir() if spec != "none" else None
    if folder is None and spec == "wordllama":
        raise ValueError("cold_embedder wordllama: install wordllama (pip --no-deps)")
    return StaticEmbedder(folder) if folder is not None else None
