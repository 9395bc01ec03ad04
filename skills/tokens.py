"""Token counts without a tokenizer download.

tiktoken fetches its encodings over the network, so references are budgeted with an estimate:
one token per CJK character and one per four other non-space characters. It over-counts English
a little, which keeps the budget on the safe side.
"""

from __future__ import annotations

import math
import re

__all__ = ["estimate_tokens", "truncate_to_tokens"]

_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


def estimate_tokens(text: str) -> int:
    """Estimate the token count of ``text``."""
    cjk = len(_CJK.findall(text))
    other = len(re.sub(r"\s+", "", text)) - cjk
    return cjk + math.ceil(other / 4)


def truncate_to_tokens(text: str, budget: int) -> str:
    """Cut ``text`` at a line boundary so that it fits ``budget`` tokens."""
    kept: list[str] = []
    used = 0
    for line in text.splitlines(keepends=True):
        cost = estimate_tokens(line)
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "".join(kept)
