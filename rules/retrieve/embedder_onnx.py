"""all-MiniLM-L6-v2 in ONNX Runtime, the graph built in memory from the pinned weights.

The graph is the numpy forward pass of ``embedders.MiniLMEmbedder`` written with the
``onnx`` helper API (opset 20: LayerNormalization, Gelu tanh form), fed the same
sha256-pinned ``model.safetensors``; nothing is downloaded or written to disk. Batches
hold texts of one token length (no padding, so no attention mask), as in numpy, and the
session runs on one intra-op thread, so a text's vector is the same bytes whatever it is
embedded with. On LoCoMo turns it is twice as fast as numpy with the same vectors to
within float rounding (``bench/embedders.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from context_engine.rules.retrieve.embedders import MiniLMEmbedder

HEADS, HEAD_DIM, HIDDEN = 12, 32, 384


def minilm_graph(w: dict[str, np.ndarray], layers: int = 6) -> Any:
    """The ONNX model: ``input_ids`` (batch, seq) int64 → last ``hidden`` states (batch, seq,
    384). ``w`` holds the weights as ``MiniLMEmbedder`` keeps them (dense kernels (in, out)).
    Pooling stays in numpy: ORT's ReduceMean takes another path for a batch of one, and its
    sums then differ in the last bit from the same text's in a larger batch."""
    from onnx import TensorProto, helper, numpy_helper

    inits: list[Any] = []
    nodes: list[Any] = []

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def norm(x: str, prefix: str, out: str) -> str:
        return node("LayerNormalization", [x, const(prefix + ".weight", w[prefix + ".weight"]),
                                           const(prefix + ".bias", w[prefix + ".bias"])],
                    out, axis=-1, epsilon=1e-12)

    def dense(x: str, prefix: str, out: str) -> str:
        h = node("MatMul", [x, const(prefix + ".weight", w[prefix + ".weight"])], out + ".mm")
        return node("Add", [h, const(prefix + ".bias", w[prefix + ".bias"])], out)

    i64 = np.int64
    const("split_shape", np.array([0, 0, HEADS, HEAD_DIM], dtype=i64))
    const("merge_shape", np.array([0, 0, HIDDEN], dtype=i64))
    const("scale", np.array(HEAD_DIM ** -0.5, dtype=np.float32))
    const("zero", np.array([0], dtype=i64))
    seq = node("Shape", ["input_ids"], "seq", start=1, end=2)
    pos = node("Slice", [const("position_table", w["embeddings.position_embeddings.weight"]),
                         "zero", seq, "zero"], "positions")
    x = node("Gather", [const("word_table", w["embeddings.word_embeddings.weight"]),
                        "input_ids"], "words")
    x = node("Add", [x, pos], "emb.pos")
    x = node("Add", [x, const("token_type", w["embeddings.token_type_embeddings.weight"][0])],
             "emb.sum")
    x = norm(x, "embeddings.LayerNorm", "emb")
    for i in range(layers):
        p = f"encoder.layer.{i}."
        q, k, v = (node("Reshape", [dense(x, p + f"attention.self.{n}", p + n), "split_shape"],
                        p + n + ".heads") for n in ("query", "key", "value"))
        q = node("Transpose", [q], p + "q.t", perm=[0, 2, 1, 3])
        k = node("Transpose", [k], p + "k.t", perm=[0, 2, 3, 1])
        v = node("Transpose", [v], p + "v.t", perm=[0, 2, 1, 3])
        s = node("Mul", [node("MatMul", [q, k], p + "qk"), "scale"], p + "scores")
        s = node("Softmax", [s], p + "probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [s, v], p + "ctx.h")], p + "ctx.t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "merge_shape"], p + "ctx")
        att = dense(ctx, p + "attention.output.dense", p + "att")
        x = norm(node("Add", [x, att], p + "att.res"), p + "attention.output.LayerNorm", p + "att.out")
        h = node("Gelu", [dense(x, p + "intermediate.dense", p + "inter")], p + "gelu",
                 approximate="tanh")
        out = dense(h, p + "output.dense", p + "ffn")
        x = norm(node("Add", [x, out], p + "ffn.res"), p + "output.LayerNorm",
                 "hidden" if i == layers - 1 else p + "out")
    graph = helper.make_graph(
        nodes, "minilm", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["b", "s", HIDDEN])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)


def ort_session(model: Any, threads: int = 1) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


class OnnxMiniLMEmbedder(MiniLMEmbedder):
    """The same model, tokenizer and batching as ``MiniLMEmbedder``; ONNX Runtime runs it."""

    name = "minilm-ort"

    def __init__(self, folder: str) -> None:
        super().__init__(folder)
        self.session = ort_session(minilm_graph(self.w))

    def _batch(self, ids: list[list[int]]) -> np.ndarray:
        arr = np.array(ids, dtype=np.int64)  # one token length per batch: no padding
        return self.session.run(["hidden"], {"input_ids": arr})[0].mean(1)
