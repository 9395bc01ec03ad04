"""The question rewrite (seed 002, section 2) by rules: entity, time scope, attributes,
intent (the question type) and the query variants."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from skilldeck.nodes.retrieval.terms import (
    ABBREVIATIONS,
    ATTRIBUTE_TOKENS,
    ATTRIBUTES,
    CATEGORIES,
    CATEGORY_TOKENS,
    CJK,
    GENERIC,
    GENERIC_TOKENS,
    WORDS,
    is_chinese,
    split_words,
    token_set,
)

__all__ = [
    "INTENTS",
    "REWRITE_SCHEMA",
    "TEXT_KINDS",
    "Rewrite",
    "classify",
    "rewrite_question",
    "scope_of",
]

#: Intents a rewrite may name; the first five are pure text questions (rag first).
INTENTS = (
    "definition",
    "concept",
    "workflow",
    "policy",
    "explanation",
    "value",
    "lookup",
    "list",
    "ranking",
    "comparison",
    "summary",
    "extraction",
    "historical",
    "mixed",
    "unclear",
)
#: The pure text question types (their plans go rag first).
TEXT_KINDS = frozenset(INTENTS[:5])
#: JSON Schema of a model's rewrite.
REWRITE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["entity", "time_scope", "attributes", "intent", "variants"],
    "properties": {
        "entity": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "time_scope": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "attributes": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "intent": {"enum": list(INTENTS)},
        "variants": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {"type": "string", "minLength": 1},
        },
    },
}

_AGGRESSIVE = {  # category words a broad request adds to its widest variant
    "list": "catalog list 列表 清单",
    "historical": "history timeline former previously 历史 沿革",
    "summary": "overview summary 概述 汇总",
    "extraction": "list details 明细",
}
# Cue words of the question types: regex alternations, case-insensitive.
_CUES = {
    "historical": r"\bhistor|\btimeline\b|\bover the years\b|\bsince\b|\btrend|\bformer(?:ly)?\b"
    r"|\barchive|历史|历年|时间线|沿革|曾经|趋势",
    "comparison": r"\bcompar|\bvs\.?(?:\s|$)|\bversus\b|\bdiffer|\bbetween\b"
    r"|\b(?:higher|lower|more|less) than\b|比较|对比|区别|差异|相比",
    "list": r"\blist\b|\ball\b|\bevery\b|\beach\b|\bcatalog|\broster\b"
    r"|列出|所有|全部|哪些|清单|名单|目录",
    "ranking": r"\b(?:highest|lowest|largest|smallest|biggest|most|least|top|best|worst|rank\w*"
    r"|maximum|minimum|cheapest|priciest)\b|最高|最低|最大|最小|最多|最少|排名|最贵|最便宜",
    "summary": r"\bsummar|\boverview\b|\bbreakdown\b|汇总|总结|概述|概况",
    "extraction": r"\bextract|\bpull out\b|提取|抽取",
    "value": r"\bhow (?:much|many)\b|\bprice|\bcost|\bamount\b|\btotal\b|\bnumber of\b|\bcount\b"
    r"|\bquantit|\bstock\b|\binventor|\brevenue|\bsales\b|\bpercent|\bratio\b|\brate\b"
    r"|\baverage\b|\bvalue\b|\bspec|\b(?:increase|decrease|growth|decline|change)\b|[$€£¥%]|\d"
    r"|多少|价格|价钱|金额|数量|库存|总计|合计|总额|比例|百分比|增长|下降|变化|规格|参数|平均",
    "lookup": r"^\W*(?:who|which|when|where)\b|\bname of\b|\bwho\b"
    r"|谁|名称|名字|叫什么|哪个|何时|哪里|在哪",
    "explanation": r"\bwhy\b|\bexplain|\breasons?\b|\bcauses?\b|为什么|为何|原因|解释",
    "definition": r"\bdefin|\bmeaning\b|\bmean\b|\bwhat (?:is|are) (?:a|an)\b|\bstand for\b"
    r"|\bconcept\b|什么是|什么意思|定义|含义|概念|指的是",
    "workflow": r"\bprocess\b|\bprocedure\b|\bsteps?\b|\bworkflow\b|\bhow to\b"
    r"|\bhow (?:do|can|should|does) (?:i|we|you|one)\b|流程|步骤|手续|如何|怎么|怎样",
    "policy": r"\bpolic(?:y|ies)\b|\brules?\b|\bguidelines?\b|\bregulations?\b|\bterms\b"
    r"|\ballowed\b|政策|规定|制度|规则|条款|规范",
}
_CUE_RES = {kind: re.compile(pattern, re.IGNORECASE) for kind, pattern in _CUES.items()}
# Data question types, strongest cue first: a question with several is of the first one.
_DATA_KINDS = split_words("historical comparison list ranking summary extraction value lookup")

_YEAR = re.compile(r"(?<!\d)(1[89]\d{2}|20\d{2})(?!\d)")
_RANGE = re.compile(
    r"(?<!\d)((?:19|20)\d{2})\s*(?:-|–|—|~|to|through|until|至|到)\s*((?:19|20)\d{2})(?!\d)"
)
_RELATIVE = re.compile(
    r"\b(?:last|this|next|previous|prior|current) (?:year|month|quarter|week)\b|\bq[1-4]\b|"
    r"\b(?:first|second|third|fourth) quarter\b|\bfiscal (?:year )?\d{2,4}\b|\bfy\s?\d{2,4}\b|"
    r"\b(?:january|february|march|april|may|june|july|august|september|october|november|"
    r"december) (?:19|20)\d{2}\b|去年|今年|明年|前年|上个?月|本月|上季度|本季度|第[一二三四]季度|"
    r"(?:19|20)\d{2}年(?:\d{1,2}月)?|近[一二三四五六七八九十\d]+年",
    re.IGNORECASE,
)
# Words that carry no search value in English questions (beyond the stop words).
_DROP_EN = frozenset(
    split_words(
        "much many please tell show give find know want like let us also kind list every each "
        "summarize summarise describe explain compare versus vs overview breakdown extract "
        "provide according information details detail exactly currently happen happened "
        "happens occur occurred occurs"
    )
)
_NOT_ENTITY = frozenset(
    split_words(
        "what which who whom whose when where why how is are was were do does did can could "
        "should would will list show tell give find compare summarize summarise explain "
        "describe please the a an in for on of according i if and or to from per by"
    )
)
_MONTHS = frozenset(
    split_words(
        "january february march april may june july august september october november december"
    )
)
# Chinese filler and function phrases; a question is cut at them into its key segments.
_ZH_FILLER = split_words(
    "请问 请告诉我 告诉我 我想知道 想知道 帮我查一下 帮我查 帮我 查一下 查询 一下 能否 "
    "可以 是什么意思 什么意思 什么是 是什么 是多少 有多少 有哪些 有什么 都有 哪些 多少 "
    "什么 怎么样 怎么办 怎么 如何 怎样 为什么 为何 列出 所有 全部 比较 对比 区别 差异 "
    "相比 分别 之间 关于 哪个 哪一个 由哪家 哪一家 哪家 哪位 谁 何时 哪里 什么时候 多久 多长 "
    "几点 需要 应该 对于 以及 还有 类 请 吗 呢 吧 啊 的 了 是 和 与 及 或"
)
_ZH_SPLIT = re.compile("|".join(sorted(_ZH_FILLER, key=len, reverse=True)) + r"|[\s\W\d]+")
_ZH_CATEGORY_SPLIT = re.compile(
    "|".join(sorted((w for g in CATEGORIES for w in g if CJK.search(w)), key=len, reverse=True))
)
_ZH_ATTRIBUTE_SPLIT = re.compile(
    "(?:"
    + "|".join(sorted((w for g in ATTRIBUTES for w in g if CJK.search(w)), key=len, reverse=True))
    + ")(?!$)"
)
_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|「([^」]+)」|『([^』]+)』|《([^》]+)》')
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_&.\-/]*")


@dataclass(frozen=True, slots=True)
class Rewrite:
    """A question prepared for retrieval: what it is about, and the queries to send."""

    entity: tuple[str, ...]
    time_scope: tuple[str, ...]
    attributes: tuple[str, ...]
    intent: str
    variants: tuple[str, ...]
    by: str = "rules"

    def to_dict(self) -> dict[str, Any]:
        """The rewrite as JSON-native values (lists), as the run's records keep it."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Rewrite:
        """A rewrite as :meth:`to_dict` wrote it (lists come back from JSON)."""
        fields = ("entity", "time_scope", "attributes", "variants")
        return cls(
            **{k: tuple(value[k]) for k in fields},
            intent=str(value["intent"]),
            by=str(value.get("by", "rules")),
        )

    @classmethod
    def from_model(cls, value: Mapping[str, Any], question: str) -> Rewrite:
        """A rewrite from model output already checked against :data:`REWRITE_SCHEMA`.

        The model may add queries, never requirements the question does not make (seed 002:
        preserve the meaning). So the question itself is always the first query; a variant
        is kept only if it shares a word with the question; and an entity, time scope or
        attribute only if the question writes every word of it. Where none of the model's
        terms of a kind is the question's, the rules' terms stand. (A small model copies the
        prompt's own examples, "price, stock, supplier", into every rewrite; as requirements
        they would make every result look insufficient.)
        """
        asked = token_set(question)
        rules = rewrite_question(question)

        def grounded(terms: Any, fallback: tuple[str, ...]) -> tuple[str, ...]:
            kept = [t for t in terms if (words := token_set(t)) and words <= asked]
            return tuple(dict.fromkeys(kept)) or fallback

        variants = [" ".join(question.split())]
        variants += [
            " ".join(v.split()) for v in value["variants"] if token_set(v) & asked - GENERIC_TOKENS
        ]
        return cls(
            entity=grounded(value["entity"], rules.entity),
            time_scope=grounded(value["time_scope"], rules.time_scope),
            attributes=grounded(value["attributes"], rules.attributes),
            intent=str(value["intent"]),
            variants=tuple(dict.fromkeys(variants)),
            by="model",
        )


def _cues(question: str) -> set[str]:
    return {kind for kind, pattern in _CUE_RES.items() if pattern.search(question)}


def classify(question: str) -> str:
    """The question type by its cue words; table-first types unless clearly pure text."""
    cues = _cues(question)
    data = [kind for kind in _DATA_KINDS if kind in cues]
    if data and "explanation" in cues:
        return "mixed"
    if data:
        return data[0]
    for kind in ("definition", "workflow", "policy", "explanation"):
        if kind in cues:
            return kind
    words = WORDS.tokens(question)
    if re.match(r"^\W*what (?:is|are)\b", question, re.IGNORECASE) and 0 < len(words) <= 3:
        return "concept"  # "What is Skilldeck?": a short subject and nothing structured
    return "unclear"


def scope_of(question: str) -> tuple[list[str], list[str]]:
    """The time phrases of ``question`` and the years they name (ranges spelled out)."""
    phrases: list[str] = []
    years: list[str] = []
    for start, end in _RANGE.findall(question):
        lo, hi = sorted((int(start), int(end)))
        phrases.append(f"{lo}-{hi}")
        if hi - lo <= 12:
            years += [str(y) for y in range(lo, hi + 1)]
    phrases += [m.group(0) for m in _RELATIVE.finditer(question)]
    found = _YEAR.findall(question)
    years += found
    phrases += [y for y in found if not any(y in p for p in phrases)]
    return list(dict.fromkeys(phrases)), list(dict.fromkeys(years))


def _entities(question: str) -> list[str]:
    """Quoted strings, capitalised runs, codes and abbreviations; Chinese key segments."""
    found = [next(g for g in m.groups() if g) for m in _QUOTED.finditer(question)]
    words = list(_WORD.finditer(question))
    run: list[str] = []
    for i, match in enumerate(words):
        word = match.group(0).rstrip(".")
        lower = word.lower()
        capital = word[:1].isupper() or (any(c.isdigit() for c in word) and not word.isdigit())
        first = i == 0 or question[: match.start()].rstrip().endswith(("?", ".", "!", ":"))
        skip = lower in _NOT_ENTITY or lower in _MONTHS or _YEAR.fullmatch(word) is not None
        skip = skip or re.fullmatch(r"q[1-4]|fy\d*", lower) is not None
        if first and not skip and capital and not word.isupper():
            nxt = words[i + 1].group(0) if i + 1 < len(words) else ""
            skip = not nxt[:1].isupper()  # a sentence's first word is capitalised anyway
        adjacent = bool(run) and question[words[i - 1].end() : match.start()].strip() == ""
        if capital and not skip and (not run or adjacent):
            run.append(word)
            continue
        if run:
            found.append(" ".join(run))
        run = [word] if capital and not skip else []
    if run:
        found.append(" ".join(run))
    if is_chinese(question):
        segments = _zh_segments(question)
        # Two-character words are mostly topic words ("价格", "员工"), longer runs are names.
        found += [s for s in segments if len(s) >= 3 or len(segments) == 1]
    return list(dict.fromkeys(e for e in found if e.lower() not in _NOT_ENTITY | GENERIC))


def _zh_segments(question: str) -> list[str]:
    """The key segments of a Chinese question: the text between its filler words."""
    undated = _RELATIVE.sub(" ", question)  # "2022年" is the scope, not part of a name
    cjk = "".join(c if is_chinese(c) else " " for c in undated)
    attributes = {s for group in ATTRIBUTES for s in group}
    pieces = [p.strip() for p in _ZH_SPLIT.split(cjk)]
    # Category words ("公司", "历史") are topics, not names: cut them out of the segments; so
    # are attribute words, unless one ends a segment ("七天无理由退货" is one name).
    pieces = [q for p in pieces for q in _ZH_CATEGORY_SPLIT.split(p) if q]
    pieces = [q for p in pieces for q in _ZH_ATTRIBUTE_SPLIT.split(p) if q]
    return [p for p in pieces if len(p) >= 2 and p not in attributes and p not in GENERIC]


def _attribute_groups(text: str) -> list[tuple[int, str]]:
    """The attribute groups ``text`` mentions, with the surface it uses."""
    tokens = token_set(text)
    hits = []
    for index, (group, alts) in enumerate(zip(ATTRIBUTES, ATTRIBUTE_TOKENS, strict=True)):
        for surface, alt in zip(group, alts, strict=False):
            if all(t in tokens for t in alt):
                hits.append((index, surface))
                break
    return hits


def rewrite_question(question: str) -> Rewrite:
    """The rule-based rewrite: entity, time scope, attributes, intent and 2-3 variants.

    The first variant keeps the question's own terms without filler; the second adds
    synonyms, translations and abbreviation expansions; broad requests get a third with
    category terms. Nothing is added that is not tied to a term of the question.
    """
    question = " ".join(question.split())
    intent = classify(question)
    scope, _ = scope_of(question)
    entities = _entities(question)
    attributes = [surface for _, surface in _attribute_groups(question)]
    if is_chinese(question):
        english = " ".join(
            w
            for w in WORDS.tokens(re.sub(CJK.pattern + "+", " ", _RELATIVE.sub(" ", question)))
            if w not in _DROP_EN and not _YEAR.fullmatch(w)
        )
        core = [*entities, *_zh_segments(question), *attributes, english, *scope]
    else:
        taken = {w.lower() for phrase in (*entities, *scope) for w in phrase.split()}
        keep = [
            w
            for w in WORDS.tokens(question)
            if w not in _DROP_EN and w not in taken and not _YEAR.fullmatch(w)
        ]
        quoted = [f'"{e}"' if " " in e else e for e in entities]
        core = [*quoted, *keep, *scope]
    first = " ".join(dict.fromkeys(p for p in core if p)) or question
    extra: list[str] = []
    present = token_set(first)
    asked = token_set(question)
    groups = [(ATTRIBUTES[i], ATTRIBUTE_TOKENS[i]) for i, _ in _attribute_groups(question)]
    groups += [
        (group, alts)
        for group, alts in zip(CATEGORIES, CATEGORY_TOKENS, strict=True)
        if any(all(t in asked for t in alt) for alt in alts)
    ]
    for group, alts in groups:
        for surface, alt in zip(group, alts, strict=False):
            if not all(t in present for t in alt):
                extra.append(surface)
                present.update(alt)
    lower = question.lower()
    for short, long in ABBREVIATIONS.items():
        if re.search(rf"(?<!\w){re.escape(short)}(?!\w)", lower):
            extra.append(long)
        elif long in lower:
            extra.append(short.upper())
    variants = [first]
    if extra:
        variants.append(f"{first} {' '.join(dict.fromkeys(extra))}")
    if intent in _AGGRESSIVE:
        variants.append(f"{variants[-1]} {_AGGRESSIVE[intent]}")
    return Rewrite(
        entity=tuple(entities),
        time_scope=tuple(scope),
        attributes=tuple(attributes),
        intent=intent,
        variants=tuple(dict.fromkeys(variants)),
    )
