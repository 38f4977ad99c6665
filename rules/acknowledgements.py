"""Acknowledgements: turns that are only thanks, ok or filler. One vocabulary, read by two
decisions:

- ``fold_duplicates`` folds a turn made only of ``ACK_PHRASES`` (it carries nothing);
- ``retrieve`` skips long memory for a query that ``is_acknowledgement`` (nothing to look
  up). That check also accepts ``NO_LOOKUP_WORDS``: bare answers and emotions ("no",
  "yes", "lol", "love it"), which need no lookup but are information, so they are never
  folded.
"""

from __future__ import annotations

import re

from context_engine.proxy.engine.messages import made_of

ACK_PHRASES: tuple[str, ...] = (
    "ok", "okay", "okey", "k", "kk", "thanks", "thank you", "thank you so much",
    "thanks a lot", "many thanks", "thx", "ty", "got it", "sure", "cool", "great",
    "alright", "all right", "noted", "understood", "i see", "sounds good", "perfect",
    "nice", "will do", "one moment", "one sec", "hold on", "hmm", "mm", "ah", "oh",
    "np", "no problem", "you're welcome", "you are welcome", "welcome",
    "嗯", "嗯嗯", "好", "好的", "好吧", "好滴", "行", "收到", "谢谢", "谢谢你", "多谢",
    "感谢", "明白", "明白了", "知道了", "了解", "稍等", "等一下", "哦", "噢",
)
# Extra words a query may be made of and still need no lookup (English, lowercase).
NO_LOOKUP_WORDS = frozenset({
    "ok", "okay", "k", "kk", "thanks", "thank", "you", "thx", "ty", "cool", "great", "nice",
    "good", "got", "it", "sure", "yes", "yeah", "yep", "no", "nope", "fine", "alright",
    "awesome", "perfect", "lol", "haha", "wow", "hmm", "hm", "sounds", "so", "much", "very",
    "a", "lot", "np", "noted", "understood", "right", "cheers", "appreciate", "that", "love",
    "bye", "👍", "🙏", "😊",
})
NO_LOOKUP_ZH = frozenset(("好的", "好", "谢谢", "多谢", "感谢", "收到", "明白", "了解", "行", "可以",
                          "没问题", "哈", "赞", "稍等", "知道了", "辛苦了", *"啊呀吧哦噢嗯了的!！。,.，~～"))
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def is_acknowledgement(text: str) -> bool:
    """True for a turn that is only thanks, ok or emotion: nothing to look up."""
    stripped = text.strip()
    if not stripped:
        return True
    if _CJK.search(stripped):
        return made_of(stripped, NO_LOOKUP_ZH, 3)
    words = re.findall(r"[\w']+|[^\w\s]", stripped.lower())
    words = [w for w in words if w.strip(".,!?;:~-") and w not in ("'",)]
    return len(words) <= 8 and all(w in NO_LOOKUP_WORDS for w in words)
