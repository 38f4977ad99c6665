"""``wordllama``: a static embedder whose weights a PyPI package ships (no model run).

WordLlama (MIT, ``pip install --no-deps wordllama``) ships a 32,000 × 256 token table
(``l2_supercat``: LLM input embeddings trained on sentence pairs) and its tokenizer inside
the wheel. A text's vector is the mean of its tokens' rows, L2-normalised: a few tens of
ms for a LoCoMo conversation's 419 turns on one core (tokenizing is most of it), where
MiniLM takes seconds, so a cold request can embed its whole history. A cold request
weights each token by its idf over the session's own chunks (``CorpusEmbedder``). Only
the two files are read (both sha256-pinned); the package's own loader is not imported
(it fetches its tokenizer from the network).
Its vectors are weaker than MiniLM's once a store is warm (LoCoMo, every chunk
embedded: 95/135 against 103), so it is the dense half of cold requests only
(``retrieve.cold_embedder``), where the alternative is BM25 alone (89/135), and an
embedder of its own by choice (``embedder: wordllama``); docs/benchmarks.md.
"""

from __future__ import annotations

import functools
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


Bag = tuple[np.ndarray, np.ndarray]  # a text's distinct token ids, and how often each occurs


def bag(ids: list[int]) -> Bag:
    """A token list as its distinct ids (sorted) and their counts, as float32."""
    uniq, counts = np.unique(np.asarray(ids, dtype=np.int64), return_counts=True)
    return uniq, counts.astype(np.float32)


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
        self.calls = 0  # vectors computed (tests)

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Each text's token ids."""
        # encode_batch_fast (tokenizers >= 0.20): the same ids without offsets, ~20% faster
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        return [enc.ids for enc in encode(texts, add_special_tokens=False)]

    def vectors(self, ids: list[list[int]], weights: np.ndarray | None = None) -> np.ndarray:
        """Each token list's vector: the (``weights``-weighted) sum of its rows, unit
        length; one text at a time, so a vector never depends on what it is embedded with."""
        return self.bag_vectors([bag(row) for row in ids], weights)

    def bag_vectors(self, bags: list[Bag], weights: np.ndarray | None = None) -> np.ndarray:
        """``vectors`` of texts given as bags of token ids (``bag``): each distinct
        token's row once, times its count (and weight), summed as one small product."""
        self.calls += 1
        out = np.zeros((len(bags), self.dim), dtype=np.float32)
        for i, (uniq, counts) in enumerate(bags):
            if not len(uniq):
                continue
            scale = counts if weights is None else counts * weights[uniq]
            row = scale @ self.table[uniq]
            out[i] = row / max(float(np.linalg.norm(row)), 1e-12)
        return out

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.vectors(self.encode(texts))

    def for_corpus(self, texts: list[str]) -> CorpusEmbedder:
        """This table weighted for one session's chunks ``texts`` (``CorpusEmbedder``)."""
        return CorpusEmbedder(self, texts)


class CorpusEmbedder:
    """The static table with each token weighted by its idf over one session's chunks,
    ``log((n + 1) / (df + 1)) + 1``: the words most turns hold (a speaker's name, "I",
    "the") weigh least in a turn's vector and the question's, the rarer ones most. An
    unweighted mean lets those common tokens pull every vector together (LoCoMo cold,
    chosen on the dev file: multi-hop 17 → 20/35, the others unchanged). A function of
    the texts alone (determinism); each is tokenized once, for the weights and its vector."""

    name = "wordllama-idf"
    dim = StaticEmbedder.dim

    def __init__(self, base: StaticEmbedder, texts: list[str]) -> None:
        self.base = base
        self.bags = dict(zip(texts, map(bag, base.encode(texts))))
        bags = list(self.bags.values())
        seen = [uniq for uniq, _ in bags] + [np.zeros(0, np.int64)]
        df = np.bincount(np.concatenate(seen), minlength=len(base.table))
        n = len(bags)
        self.weights = (np.log((n + 1) / (df + 1)) + 1.0).astype(np.float32)

    def embed(self, texts: list[str]) -> np.ndarray:
        unknown = [t for t in texts if t not in self.bags]
        fresh = dict(zip(unknown, map(bag, self.base.encode(unknown)))) if unknown else {}
        return self.base.bag_vectors([self.bags[t] if t in self.bags else fresh[t] for t in texts],
                                     self.weights)


def cold_embedder(spec: str) -> StaticEmbedder | None:
    """``retrieve.cold_embedder``: ``auto`` (wordllama when installed) | ``wordllama`` |
    ``none``. Only a cheap static table can embed a whole cold history on the request."""
    folder = wordllama_dir() if spec != "none" else None
    if folder is None and spec == "wordllama":
        raise ValueError("cold_embedder wordllama: install wordllama (pip --no-deps)")
    return _loaded(folder) if folder is not None else None


@functools.lru_cache(maxsize=4)
def _loaded(folder: str) -> StaticEmbedder:
    """One table per process: every pipeline (profiles, the lossless one) and every engine
    shares it (32,000 x 256 floats, read and hashed once)."""
    return StaticEmbedder(folder)
