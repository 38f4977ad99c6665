"""How ``context-engine eval`` scores an answer, and how sure a difference is.

- token F1 against the gold answer after SQuAD's normalisation (lower case, punctuation
  and the articles a/an/the removed, whitespace collapsed), the measure LoCoMo and mem0
  report beside a judge's verdict; with several gold answers (a question that any of
  several values answers), the best of them, as SQuAD scores;
- an LLM judge's verdict (``judge_prompt`` / ``judge_verdict``): CORRECT or WRONG, with
  the generous wording mem0's LoCoMo judge uses (same topic and facts = correct);
- a paired bootstrap: the mean of per-question differences (rewritten − original) with a
  percentile 95% interval over resampled questions, from a fixed seed (same input, same
  interval).
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from collections.abc import Sequence

_PUNCT = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
JUDGE_HEAD = "Label the generated answer to the question as CORRECT or WRONG."


def normalize(text: str) -> str:
    """SQuAD's answer normalisation."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(prediction: str, gold: str) -> float:
    pred, ref = normalize(prediction).split(), normalize(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def best_f1(prediction: str, golds: Sequence[str]) -> float:
    return max((token_f1(prediction, g) for g in golds), default=0.0)


def strip_reasoning(text: str) -> str:
    """The answer without a ``<think>…</think>`` block (Qwen3, DeepSeek-R1 on Ollama or
    vLLM without a reasoning parser); an unclosed block (cut by max_tokens) goes whole."""
    return _THINK.sub("", text).strip()


def judge_prompt(question: str, golds: Sequence[str], answer: str) -> str:
    gold = " | ".join(golds)
    return (f"{JUDGE_HEAD} The gold answer is the ground truth. Be generous: an answer "
            "that names the same thing, date or fact as the gold answer is CORRECT even "
            "if it is longer or worded differently; a date in another format is CORRECT; "
            "where several gold answers are given (separated by |), any one of them is. "
            "Reply with one word, CORRECT or WRONG.\n\n"
            f"Question: {question}\nGold answer: {gold}\nGenerated answer: {answer}")


def judge_verdict(reply: str) -> float | None:
    """1.0 for CORRECT, 0.0 for WRONG (the last one named wins), None when neither."""
    words = re.findall(r"\b(CORRECT|WRONG)\b", strip_reasoning(reply).upper())
    return None if not words else float(words[-1] == "CORRECT")


def mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def paired_bootstrap(original: Sequence[float], rewritten: Sequence[float],
                     resamples: int = 2000, seed: int = 0) -> dict[str, float | None]:
    """Mean difference (rewritten − original) and its 95% percentile interval."""
    if len(original) != len(rewritten):
        raise ValueError("paired scores must have the same length")
    diffs = [b - a for a, b in zip(original, rewritten)]
    n = len(diffs)
    if n == 0:
        return {"diff": None, "low": None, "high": None}
    rng = random.Random(seed)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    return {"diff": sum(diffs) / n, "low": means[int(0.025 * (resamples - 1))],
            "high": means[int(0.975 * (resamples - 1))]}
