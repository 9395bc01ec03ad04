"""The rules of the retrieval policy (seed 002) that need no model, English and Chinese.

* :func:`rewrite_question`: entity, time scope, attributes, intent and query variants.
* :func:`make_plan`: the question type (table first or rag first), ``top_k`` and the terms,
  facets and scope that results are judged against.
* :func:`parse_result` and :func:`judge`: a tool result as evidence, and whether it suffices
  (section 4: empty, ``Error:``, ``no excel files found``, off-topic, missing entity or scope,
  no usable evidence, partial or truncated coverage).
* :func:`compose_answer` and :func:`check_answer`: the rule-based answer, and the citation
  contract every answer (rules or model) must pass.

Everything here is pure: no I/O, no model. Matching is on the knowledge base's own tokens
(stemmed English words, CJK bigrams), so a term matches a result as the search matched it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import asdict, dataclass, field
from typing import Any

from skilldeck.tools.tables import row_text
from skilldeck.tools.text import Tokenizer

__all__ = [
    "INTENTS",
    "LOCAL",
    "RAG",
    "REWRITE_SCHEMA",
    "STANDARD",
    "TABLE",
    "TOP_K",
    "Evidence",
    "Plan",
    "Rewrite",
    "Term",
    "Verdict",
    "check_answer",
    "citations_in",
    "compose_answer",
    "is_chinese",
    "judge",
    "make_plan",
    "no_information",
    "parse_result",
    "rewrite_question",
    "select_evidence",
]

RAG = "knowledge__rag_retrieve"
TABLE = "knowledge__table_rag_retrieve"
LOCAL = "file__local_search"
STANDARD = (RAG, TABLE, LOCAL)
TOP_K = (30, 50, 100)
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
_TEXT_KINDS = frozenset(INTENTS[:5])
_FULL_COVERAGE = frozenset({"list", "historical", "comparison", "mixed"})  # section 4
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

_TOK = Tokenizer(stem=True, stopwords=True)
_WORDS = Tokenizer(stem=False, stopwords=True)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7ff]")


# -- vocabulary --------------------------------------------------------------------------------
def _split(text: str) -> tuple[str, ...]:
    """Space-separated words; ``_`` joins the words of a phrase ("office_hours")."""
    return tuple(w.replace("_", " ") for w in text.split())


# Synonym groups: a question term matches a result through any member, and variants add the
# other members. Attribute groups name what a request asks for, so each one a question names
# must be covered by the evidence; category groups only widen queries.
_ATTRIBUTES = tuple(
    _split(group)
    for group in (
        "price cost pricing 价格 价钱 售价",
        "stock inventory on_hand 库存 存货",
        "supplier vendor supplies supplied 供应商 供货商",
        "revenue sales turnover 收入 营收 销售额",
        "profit earnings net_income 利润 盈利",
        "expense expenses expenditure spending 支出 费用",
        "salary wage compensation 工资 薪资 薪水",
        "refund return returns money_back 退货 退款",
        "shipping delivery dispatch shipment 配送 发货",
        "warranty guarantee 保修 质保",
        "office_hours opening_hours business_hours 营业时间 办公时间",
        "backup backups 备份",
        "address location 地址 位置",
        "phone telephone 电话",
        "department division 部门",
        "specification specs 规格 参数",
        "tax taxes taxation 税 税费",
        "asset assets 资产",
        "liability liabilities 负债",
        "dividend dividends 股息 分红",
        "headcount employees staff 员工 人数",
    )
)
_CATEGORIES = tuple(
    _split(group)
    for group in (
        "product item goods catalog 产品 商品",
        "company firm organisation organization 公司 企业",
        "policy rule regulation guideline 政策 规定 制度",
        "history timeline former_name previously 历史 沿革 曾用名",
        "amount quantity count 数量 总数",
    )
)
_ABBREVIATIONS = {
    "r&d": "research and development",
    "yoy": "year over year",
    "fy": "fiscal year",
    "eps": "earnings per share",
    "ebitda": "earnings before interest taxes depreciation amortization",
    "sku": "stock keeping unit",
    "hr": "human resources",
    "ceo": "chief executive officer",
    "cfo": "chief financial officer",
    "roi": "return on investment",
    "sla": "service level agreement",
    "faq": "frequently asked questions",
    "capex": "capital expenditure",
    "opex": "operating expenses",
    "kpi": "key performance indicator",
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
_DATA_KINDS = _split("historical comparison list ranking summary extraction value lookup")

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
    _split(
        "much many please tell show give find know want like let us also kind list every each "
        "summarize summarise describe explain compare versus vs overview breakdown extract "
        "provide according information details detail exactly currently happen happened "
        "happens occur occurred occurs"
    )
)
_NOT_ENTITY = frozenset(
    _split(
        "what which who whom whose when where why how is are was were do does did can could "
        "should would will list show tell give find compare summarize summarise explain "
        "describe please the a an in for on of according i if and or to from per by"
    )
)
_MONTHS = frozenset(
    _split("january february march april may june july august september october november december")
)
# Words that name the kind of answer, not its content: never entities nor core terms.
_GENERIC = frozenset(
    _split(
        "condition conditions requirement requirements information detail details thing things "
        "way ways question situation definition definitions meaning mean explanation "
        "description concept example examples 条件 要求 内容 情况 方式 方法 信息 资料 问题 详情 "
        "范围 标准 事项 相关 具体"
    )
)
_GENERIC_TOKENS = frozenset(t for w in _GENERIC for t in _TOK.tokens(w))
# Chinese filler and function phrases; a question is cut at them into its key segments.
_ZH_FILLER = _split(
    "请问 请告诉我 告诉我 我想知道 想知道 帮我查一下 帮我查 帮我 查一下 查询 一下 能否 "
    "可以 是什么意思 什么意思 什么是 是什么 是多少 有多少 有哪些 有什么 都有 哪些 多少 "
    "什么 怎么样 怎么办 怎么 如何 怎样 为什么 为何 列出 所有 全部 比较 对比 区别 差异 "
    "相比 分别 之间 关于 哪个 哪一个 由哪家 哪一家 哪家 哪位 谁 何时 哪里 什么时候 多久 多长 "
    "几点 需要 应该 对于 以及 还有 类 请 吗 呢 吧 啊 的 了 是 和 与 及 或"
)
_ZH_SPLIT = re.compile("|".join(sorted(_ZH_FILLER, key=len, reverse=True)) + r"|[\s\W\d]+")
_ZH_CATEGORY_SPLIT = re.compile(
    "|".join(sorted((w for g in _CATEGORIES for w in g if _CJK.search(w)), key=len, reverse=True))
)
_ZH_ATTRIBUTE_SPLIT = re.compile(
    "(?:"
    + "|".join(sorted((w for g in _ATTRIBUTES for w in g if _CJK.search(w)), key=len, reverse=True))
    + ")(?!$)"
)
_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”|「([^」]+)」|『([^』]+)』|《([^》]+)》')
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_&.\-/]*")


def _surface_tokens(groups: Iterable[tuple[str, ...]]) -> list[tuple[tuple[str, ...], ...]]:
    return [tuple(tuple(_TOK.tokens(s)) for s in group) for group in groups]


_ATTRIBUTE_TOKENS = _surface_tokens(_ATTRIBUTES)
_CATEGORY_TOKENS = _surface_tokens(_CATEGORIES)
_GROUP_OF: dict[str, tuple[tuple[str, ...], ...]] = {}
for _alts in (*_ATTRIBUTE_TOKENS, *_CATEGORY_TOKENS):
    for _alt in _alts:
        if len(_alt) == 1:
            _GROUP_OF.setdefault(_alt[0], _alts)


def is_chinese(text: str) -> bool:
    """Whether ``text`` holds CJK characters (answers are then framed in Chinese)."""
    return bool(_CJK.search(text))


def _tokens(text: str) -> set[str]:
    return set(_TOK.tokens(text))


def _has(alt: Sequence[str], tokens: Set[str]) -> bool:
    """A multi-token alternative matches when most of its tokens (all, up to two) are there."""
    if not alt:
        return False
    need = len(alt) if len(alt) <= 2 else math.ceil(len(alt) * 2 / 3)
    return sum(t in tokens for t in alt) >= need


@dataclass(frozen=True, slots=True)
class Term:
    """A term that evidence must mention, through any of its alternatives (token tuples)."""

    label: str
    alts: tuple[tuple[str, ...], ...]

    def found_in(self, tokens: Set[str]) -> bool:
        return any(_has(alt, tokens) for alt in self.alts)


def _entity_term(entity: str) -> Term:
    """An entity and its abbreviation or long form ("SKU" <-> "stock keeping unit")."""
    own = tuple(_TOK.tokens(entity))
    lower = " ".join(entity.lower().split())
    aliases = [long for short, long in _ABBREVIATIONS.items() if lower == short]
    aliases += [short for short, long in _ABBREVIATIONS.items() if lower == long]
    return Term(entity, (own, *(tuple(_TOK.tokens(a)) for a in aliases)))


def _term(label: str, own: tuple[str, ...] | None = None) -> Term:
    """A term and its synonyms; ``own`` gives its tokens when they are known (stems must not be
    stemmed again: "warehous" would become "wareh")."""
    own = tuple(_TOK.tokens(label)) if own is None else own
    group = next((_GROUP_OF[t] for t in own if t in _GROUP_OF), ())
    return Term(label, tuple(dict.fromkeys((own, *group))))


# -- rewrite -----------------------------------------------------------------------------------
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
        return asdict(self)

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
    def from_model(cls, value: Mapping[str, Any]) -> Rewrite:
        """A rewrite from model output already checked against :data:`REWRITE_SCHEMA`."""
        variants = [" ".join(v.split()) for v in value["variants"] if v.strip()]
        return cls(
            entity=tuple(value["entity"]),
            time_scope=tuple(value["time_scope"]),
            attributes=tuple(value["attributes"]),
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
    words = _WORDS.tokens(question)
    if re.match(r"^\W*what (?:is|are)\b", question, re.IGNORECASE) and 0 < len(words) <= 3:
        return "concept"  # "What is Skilldeck?": a short subject and nothing structured
    return "unclear"


def _time_scope(question: str) -> tuple[list[str], list[str]]:
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
    return list(dict.fromkeys(e for e in found if e.lower() not in _NOT_ENTITY | _GENERIC))


def _zh_segments(question: str) -> list[str]:
    """The key segments of a Chinese question: the text between its filler words."""
    undated = _RELATIVE.sub(" ", question)  # "2022年" is the scope, not part of a name
    cjk = "".join(c if is_chinese(c) else " " for c in undated)
    attributes = {s for group in _ATTRIBUTES for s in group}
    pieces = [p.strip() for p in _ZH_SPLIT.split(cjk)]
    # Category words ("公司", "历史") are topics, not names: cut them out of the segments; so
    # are attribute words, unless one ends a segment ("七天无理由退货" is one name).
    pieces = [q for p in pieces for q in _ZH_CATEGORY_SPLIT.split(p) if q]
    pieces = [q for p in pieces for q in _ZH_ATTRIBUTE_SPLIT.split(p) if q]
    return [p for p in pieces if len(p) >= 2 and p not in attributes and p not in _GENERIC]


def _attribute_groups(text: str) -> list[tuple[int, str]]:
    """The attribute groups ``text`` mentions, with the surface it uses."""
    tokens = _tokens(text)
    hits = []
    for index, (group, alts) in enumerate(zip(_ATTRIBUTES, _ATTRIBUTE_TOKENS, strict=True)):
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
    scope, _ = _time_scope(question)
    entities = _entities(question)
    attributes = [surface for _, surface in _attribute_groups(question)]
    if is_chinese(question):
        english = " ".join(
            w
            for w in _WORDS.tokens(re.sub(_CJK.pattern + "+", " ", _RELATIVE.sub(" ", question)))
            if w not in _DROP_EN and not _YEAR.fullmatch(w)
        )
        core = [*entities, *_zh_segments(question), *attributes, english, *scope]
    else:
        taken = {w.lower() for phrase in (*entities, *scope) for w in phrase.split()}
        keep = [
            w
            for w in _WORDS.tokens(question)
            if w not in _DROP_EN and w not in taken and not _YEAR.fullmatch(w)
        ]
        quoted = [f'"{e}"' if " " in e else e for e in entities]
        core = [*quoted, *keep, *scope]
    first = " ".join(dict.fromkeys(p for p in core if p)) or question
    extra: list[str] = []
    present = _tokens(first)
    asked = _tokens(question)
    groups = [(_ATTRIBUTES[i], _ATTRIBUTE_TOKENS[i]) for i, _ in _attribute_groups(question)]
    groups += [
        (group, alts)
        for group, alts in zip(_CATEGORIES, _CATEGORY_TOKENS, strict=True)
        if any(all(t in asked for t in alt) for alt in alts)
    ]
    for group, alts in groups:
        for surface, alt in zip(group, alts, strict=False):
            if not all(t in present for t in alt):
                extra.append(surface)
                present.update(alt)
    lower = question.lower()
    for short, long in _ABBREVIATIONS.items():
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


# -- plan --------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Plan:
    """How one question is retrieved and judged."""

    question: str
    kind: str
    table_first: bool
    breadth: str
    top_k: int
    variants: tuple[str, ...]
    entities: tuple[Term, ...]
    any_entity: bool  # a comparison of several entities: each result covers one of them
    years: tuple[str, ...]
    core: tuple[Term, ...]
    facets: tuple[Term, ...]
    zh: bool

    @property
    def full_coverage(self) -> bool:
        """Full-list, historical, comparison and mixed requests reject partial coverage."""
        return self.kind in _FULL_COVERAGE

    def summary(self) -> dict[str, Any]:
        """The plan as the trajectory records it."""
        return {
            "kind": self.kind,
            "first": TABLE if self.table_first else RAG,
            "breadth": self.breadth,
            "top_k": self.top_k,
            "entities": [t.label for t in self.entities],
            "years": list(self.years),
            "facets": [t.label for t in self.facets],
        }


def make_plan(question: str, rewrite: Rewrite) -> Plan:
    """The retrieval plan of ``question``.

    rag_retrieve goes first only for a pure text question (definition, concept, workflow,
    policy, explanation) without any data cue, whatever a model says; everything else,
    unclear cases included, starts with table_rag_retrieve.
    """
    rules_kind = classify(question)
    kind = rewrite.intent if rewrite.intent in INTENTS else rules_kind
    if kind in _TEXT_KINDS and rules_kind not in _TEXT_KINDS | {"unclear"}:
        kind = rules_kind  # the question has a data cue after all
    table_first = kind not in _TEXT_KINDS
    _, years = _time_scope(" ".join((question, *rewrite.time_scope)))
    entities = tuple(dict.fromkeys(e.strip() for e in rewrite.entity if _TOK.tokens(e)))
    entity_terms = tuple(_entity_term(e) for e in entities)
    facets = [_term(a) for a in dict.fromkeys(rewrite.attributes) if _TOK.tokens(a)]
    if len(years) >= 2:
        facets += [Term(y, ((y,),)) for y in years]
    any_entity = kind in ("comparison", "list", "ranking") and len(entity_terms) >= 2
    if any_entity:
        facets += entity_terms
    skip = {t for term in entity_terms for alt in term.alts for t in alt} | set(years)
    skip |= _GENERIC_TOKENS
    core = [
        _term(t, (t,)) for t in dict.fromkeys(_TOK.tokens(rewrite.variants[0])) if t not in skip
    ]
    width = max(len(facets), len(entity_terms))
    if kind in ("list", "historical", "summary", "unclear") or width >= 3:
        breadth = "broad"  # "if unsure, use 100"
    elif kind in ("comparison", "ranking", "mixed", "explanation", "extraction") or width == 2:
        breadth = "moderate"
    else:
        breadth = "simple"
    return Plan(
        question=question,
        kind=kind,
        table_first=table_first,
        breadth=breadth,
        top_k={"simple": 30, "moderate": 50, "broad": 100}[breadth],
        variants=rewrite.variants,
        entities=entity_terms,
        any_entity=any_entity,
        years=tuple(years),
        core=tuple(core),
        facets=tuple(facets),
        zh=is_chinese(question),
    )


# -- evidence ----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Evidence:
    """One citable piece of a tool result: a chunk, a table's shown rows, or local lines.

    ``counts`` is ``(N+M, N, M)`` of the table result it came from, when that was truncated.
    """

    source: str
    kind: str
    ref: str
    text: str
    citation: str
    step: int
    heading: str = ""
    header: tuple[str, ...] = ()
    rows: tuple[tuple[str, ...], ...] = ()
    counts: tuple[int, int, int] | None = None
    tokens: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["tokens"]
        return out

    @classmethod
    def from_dict(cls, value: Mapping[str, Any]) -> Evidence:
        counts = value.get("counts")
        return _evidence(
            value["source"],
            value["kind"],
            value["ref"],
            value["text"],
            value["citation"],
            int(value["step"]),
            heading=value.get("heading", ""),
            header=tuple(value.get("header", ())),
            rows=tuple(tuple(r) for r in value.get("rows", ())),
            counts=(int(counts[0]), int(counts[1]), int(counts[2])) if counts else None,
        )


def _evidence(
    source: str, kind: str, ref: str, text: str, citation: str, step: int, **extra: Any
) -> Evidence:
    searchable = " ".join([ref, extra.get("heading", ""), *extra.get("header", ()), text])
    tokens = frozenset(_TOK.tokens(searchable))
    return Evidence(source, kind, ref, text, _normal(citation), step, **extra, tokens=tokens)


@dataclass(frozen=True, slots=True)
class Result:
    """A parsed tool result: its evidence and what the sufficiency rules need to know."""

    items: tuple[Evidence, ...]
    returned: int  # chunks, shown rows or lines returned
    truncated: bool
    summary: str


def parse_result(tool: str, content: str, step: int) -> Result:
    """The evidence of one tool result (rag, table, local, or any tool with citations)."""
    try:
        body = json.loads(content)
    except json.JSONDecodeError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("chunks"), list):
        chunks = [c for c in body["chunks"] if isinstance(c, dict) and c.get("citation")]
        items = tuple(
            _evidence(
                tool,
                "chunk",
                str(c.get("file_ref", "")),
                str(c.get("text", "")),
                str(c["citation"]),
                step,
                heading=str(c.get("heading", "")),
            )
            for c in chunks
        )
        best = f"; best {items[0].ref}" if items else ""
        summary = f"{len(items)} chunks (top_k {body.get('top_k', '?')}){best}"
        return Result(items, len(items), False, summary)
    if isinstance(body, dict) and isinstance(body.get("tables"), list):
        total, shown = int(body.get("total", 0)), int(body.get("shown", 0))
        omitted = int(body.get("omitted", 0))
        counts = (total, shown, omitted) if omitted else None
        items = tuple(
            _evidence(
                tool,
                "table",
                str(t.get("file_ref_table", "")),
                "\n".join(" ".join(r) for r in t["rows"]),
                str(t["citation"]),
                step,
                header=tuple(t.get("header", ())),
                rows=tuple(tuple(r) for r in t["rows"]),
                counts=counts,
            )
            for t in body["tables"]
            if isinstance(t, dict) and t.get("citation") and t.get("rows")
        )
        refs = ", ".join(i.ref for i in items[:3])
        summary = f"{total} rows matched (N+M), {shown} shown (N), {omitted} omitted (M)" + (
            f" in {refs}" if refs else ""
        )
        return Result(items, shown, omitted > 0, summary)
    if isinstance(body, dict) and isinstance(body.get("matches"), list):
        items = _line_runs(tool, [m for m in body["matches"] if isinstance(m, dict)], step)
        total = int(body.get("total", len(body["matches"])))
        summary = f"{total} lines matched in {len({i.ref for i in items})} files"
        return Result(items, len(body["matches"]), bool(body.get("truncated")), summary)
    cited = citations_in(content)
    text = content.strip()
    items = (_evidence(tool, "text", tool, text, cited[0], step),) if text and cited else ()
    summary = f"{len(text)} characters, {len(cited)} citations" if text else "empty"
    return Result(items, len(items), False, summary)


def _line_runs(tool: str, matches: Sequence[Mapping[str, Any]], step: int) -> tuple[Evidence, ...]:
    """Local matches as runs of consecutive lines per file, best run first."""
    by_file: dict[str, dict[int, str]] = {}
    for m in matches:
        by_file.setdefault(str(m.get("path", "")), {})[int(m.get("line", 0))] = str(m["text"])
    runs: list[Evidence] = []
    for path, lines in by_file.items():
        numbers = sorted(lines)
        start = prev = numbers[0]
        for number in [*numbers[1:], None]:
            if number is not None and number == prev + 1:
                prev = number
                continue
            text = " ".join(lines[n] for n in range(start, prev + 1))
            file = path.replace('"', "&quot;")
            citation = f'<CITATION file="{file}" lines="{start}-{prev}" />'
            runs.append(_evidence(tool, "lines", path, text, citation, step))
            if number is not None:
                start = prev = number
    return tuple(runs)


# -- sufficiency -------------------------------------------------------------------------------
#: Verdict codes after which a larger top_k may help (results were many but not enough).
EXPANDABLE = frozenset({"missing_entity", "missing_scope", "no_usable_evidence", "partial"})


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the evidence so far suffices; ``code``/``why`` say why not."""

    sufficient: bool
    code: str | None
    why: str | None
    usable: tuple[Evidence, ...]


def _labels(terms: Iterable[Term]) -> str:
    return ", ".join(repr(t.label) for t in terms)


def usable(plan: Plan, item: Evidence) -> bool:
    """Whether ``item`` is evidence for the question: its entity, scope and most core terms."""
    tokens = item.tokens
    if plan.entities:
        hits = [e.found_in(tokens) for e in plan.entities]
        if not (any(hits) if plan.any_entity else all(hits)):
            return False
    if plan.years and not any(y in tokens for y in plan.years):
        return False
    found = sum(t.found_in(tokens) for t in plan.core)
    return found * 2 >= len(plan.core)


def judge(
    plan: Plan,
    result: Result,
    *,
    ok: bool,
    content: str,
    before: Sequence[Evidence],
    top_k: int | None = None,
) -> Verdict:
    """Apply section 4 to one step; partial coverage counts the evidence gathered ``before``."""
    if not ok or content.lstrip().startswith("Error:"):
        first = content.strip().splitlines()[0] if content.strip() else "Error"
        return Verdict(False, "error", f"starts with Error: {first[:160]}", ())
    if "no excel files found" in content.lower():
        return Verdict(False, "no_excel_files", "says 'no excel files found'", ())
    if not result.items:
        return Verdict(False, "empty", f"empty: {result.summary}", ())
    terms = (*plan.entities, *plan.core, *plan.facets)
    if terms and not any(t.found_in(i.tokens) for i in result.items for t in terms):
        why = f"off-topic: none of {len(result.items)} results mentions {_labels(terms[:6])}"
        return Verdict(False, "off_topic", why, ())
    good = tuple(i for i in result.items if usable(plan, i))
    if not good:
        if plan.entities and not any(
            any(e.found_in(i.tokens) for e in plan.entities) for i in result.items
        ):
            why = f"misses the core entity: no result mentions {_labels(plan.entities)}"
            return Verdict(False, "missing_entity", why, ())
        about = [i for i in result.items if all(e.found_in(i.tokens) for e in plan.entities)]
        if plan.years and not any(y in i.tokens for i in about for y in plan.years):
            why = f"misses the scope: no result about the entity mentions {', '.join(plan.years)}"
            return Verdict(False, "missing_scope", why, ())
        why = f"no usable evidence: no result covers half of {_labels(plan.core[:8])}"
        return Verdict(False, "no_usable_evidence", why, ())
    if plan.full_coverage and result.truncated:
        return Verdict(False, "truncated", f"partial: truncated, {result.summary}", good)
    cut = next((i for i in before if i.counts), None)
    if plan.full_coverage and cut is not None and cut.counts is not None:
        why = f"partial: the {cut.ref} rows stay truncated ({cut.counts[2]} omitted, M)"
        return Verdict(False, "partial", why, good)
    if plan.kind in ("list", "historical") and top_k is not None and result.returned >= top_k:
        why = f"partial: {result.returned} chunks fill top_k {top_k}; a {plan.kind} may have more"
        return Verdict(False, "partial", why, good)
    gathered = (*before, *good)
    missing = [f for f in plan.facets if not any(f.found_in(i.tokens) for i in gathered)]
    if missing:
        why = f"partial: nothing covers {_labels(missing)} yet"
        return Verdict(False, "partial", why, good)
    if plan.kind == "mixed":
        data = any(i.kind == "table" or re.search(r"\d", i.text) for i in gathered)
        text = any(i.kind != "table" for i in gathered)
        if not (data and text):
            half = "an explanation" if data else "the data"
            return Verdict(False, "partial", f"partial: a mixed request still lacks {half}", good)
    return Verdict(True, None, None, good)


# -- answers -----------------------------------------------------------------------------------
_FRAME = {
    False: {
        "partial": "Note: this answer may be incomplete: every source was searched and none "
        "covered the whole request.",
        "none": "No relevant information was found for this question after trying every "
        "applicable source: {sources}.",
        "from": "From {ref}:",
        "counts": "{t} rows matched (N+M = {t}); {s} are shown (N = {s}) and {o} are omitted "
        "(M = {o}).",
    },
    True: {
        "partial": "注意：以下回答可能不完整：所有来源都已检索，但没有一个完整覆盖该问题。",
        "none": "已尝试所有适用的来源（{sources}），未找到与该问题相关的信息。",
        "from": "来自 {ref}：",
        "counts": "共匹配 {t} 行（N+M = {t}），显示 {s} 行（N = {s}），省略 {o} 行（M = {o}）。",
    },
}
_FRAME_TOKENS = frozenset(
    t for lang in _FRAME.values() for text in lang.values() for t in _TOK.tokens(text)
)
_CITATION = re.compile(r"<CITATION\b[^>]*?/>")
_CAPS = {"table": 3, "lines": 3, "text": 3}
_CHUNK_CAPS = {"simple": 3, "moderate": 5, "broad": 8}


def citations_in(text: str) -> list[str]:
    """The ``<CITATION .../>`` tags of ``text``, normalised, in order, without repeats."""
    return list(dict.fromkeys(_normal(tag) for tag in _CITATION.findall(text)))


def _normal(tag: str) -> str:
    return re.sub(r"\s*/>$", " />", " ".join(tag.split()))


def select_evidence(plan: Plan, items: Sequence[Evidence]) -> list[Evidence]:
    """The evidence an answer uses: usable items in retrieval order, a few of each kind."""
    caps = {**_CAPS, "chunk": _CHUNK_CAPS[plan.breadth]}
    taken: dict[str, int] = {}
    out: list[Evidence] = []
    seen: set[str] = set()
    for item in items:
        if item.citation in seen or taken.get(item.kind, 0) >= caps.get(item.kind, 3):
            continue
        seen.add(item.citation)
        taken[item.kind] = taken.get(item.kind, 0) + 1
        out.append(item)
    return out


def _terms_tokens(plan: Plan) -> set[str]:
    return {t for term in (*plan.entities, *plan.core, *plan.facets) for a in term.alts for t in a}


def _excerpt(plan: Plan, text: str, limit: int = 600) -> str:
    """The sentences of ``text`` that mention the question's terms (the start if none do)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    wanted = _terms_tokens(plan) | set(plan.years)
    sentences = re.split(r"(?<=[.!?。！？；;])\s*", flat)
    picked: list[str] = []
    for sentence in sentences:
        if wanted & _tokens(sentence) and sum(map(len, picked)) + len(sentence) <= limit:
            picked.append(sentence)
    return " ".join(picked) if picked else flat[:limit].rsplit(" ", 1)[0] + " …"


def _row_item(item: Evidence, row: Sequence[str]) -> Evidence:
    return _evidence(item.source, "row", item.ref, " ".join(row), "", item.step, header=item.header)


def _render(plan: Plan, item: Evidence, state_counts: bool) -> str:
    frame = _FRAME[plan.zh]
    if item.kind == "table":
        # Rows that are evidence on their own first, then rows that share a term, then any.
        rows = [r for r in item.rows if usable(plan, _row_item(item, r))]
        wanted = _terms_tokens(plan) | set(plan.years)
        rows = rows or [r for r in item.rows if wanted & _tokens(" ".join(r))]
        rows = rows[:10] or list(item.rows[:5])
        lines = [frame["from"].format(ref=item.ref)]
        if state_counts and item.counts:
            t, s, o = item.counts
            lines.append(frame["counts"].format(t=t, s=s, o=o))
        lines += [f"- {row_text(item.header, row)}" for row in rows]
        return "\n".join([*lines, item.citation])
    lead = f"{item.heading}: " if item.heading else f"{item.ref}: " if item.kind == "lines" else ""
    return f"{lead}{_excerpt(plan, item.text)} {item.citation}"


def no_information(plan: Plan, sources: Sequence[str]) -> str:
    """The reply when every applicable source was tried without usable evidence."""
    return _FRAME[plan.zh]["none"].format(sources=", ".join(dict.fromkeys(sources)) or "none")


def compose_answer(
    plan: Plan, used: Sequence[Evidence], *, complete: bool, sources: Sequence[str]
) -> str:
    """The rule-based answer: one paragraph per used item, each followed by its citation.

    A truncated table result states ``N+M``, ``N`` and ``M`` once; an answer from partial
    evidence says so first; without evidence the answer says nothing relevant was found.
    """
    if not used:
        return no_information(plan, sources)
    blocks = [] if complete else [_FRAME[plan.zh]["partial"]]
    stated: set[int] = set()
    for item in used:
        blocks.append(_render(plan, item, item.step not in stated))
        if item.counts:
            stated.add(item.step)
    return "\n\n".join(blocks)


def _uses_knowledge(body: str, vocabulary: Set[str], question: Set[str]) -> bool:
    """Whether a paragraph states retrieved facts: two of their words, or one of their numbers."""
    shared = (_tokens(body) - question - _FRAME_TOKENS) & vocabulary
    return len(shared) >= 2 or any(any(c.isdigit() for c in t) for t in shared)


def check_answer(
    answer: str,
    *,
    question: str,
    shown: Sequence[Evidence],
    known: Mapping[str, tuple[int, int, int] | None],
) -> list[dict[str, str]]:
    """Errors of an answer against the citation contract (empty when it passes).

    Every paragraph (blank-line separated block) that states retrieved facts ends with at
    least one citation; every citation is one the tools returned (``known``, with ``N+M``,
    ``N``, ``M`` for truncated table results); no block holds citations alone; a cited
    truncated table result has its three counts stated.
    """
    errors: list[str] = []
    vocabulary = {t for item in shown for t in item.tokens}
    asked = _tokens(question)
    blocks = [b.strip() for b in re.split(r"\n\s*\n", answer) if b.strip()]
    if not blocks:
        errors.append("the answer is empty")
    for number, block in enumerate(blocks, start=1):
        tags = [_normal(t) for t in _CITATION.findall(block)]
        body = _CITATION.sub(" ", block).strip()
        where = f"paragraph {number} ({' '.join(body.split())[:60]!r})"
        if tags and not body:
            errors.append(
                f"paragraph {number} holds only citations: place each one right after the "
                "paragraph that uses it, never collected in a block of their own"
            )
            continue
        errors += [
            f"{where} cites {tag}, which no tool returned: copy the <CITATION .../> tags of "
            "the evidence exactly"
            for tag in tags
            if tag not in known
        ]
        if tags and not block.rstrip().endswith("/>"):
            errors.append(
                f"{where} goes on after its citation: put the <CITATION .../> right after the "
                "paragraph, at its end"
            )
        if not tags and _uses_knowledge(body, vocabulary, asked):
            errors.append(f"{where} uses retrieved knowledge but has no <CITATION .../> after it")
    for tag in citations_in(answer):
        counts = known.get(tag)
        if counts and not all(re.search(rf"(?<![\d.]){n}(?![\d.])", answer) for n in counts):
            t, s, o = counts
            errors.append(
                f"{tag} is from a truncated table result: state the total matches (N+M = {t}), "
                f"the displayed count (N = {s}) and the omitted count (M = {o})"
            )
    return [{"path": "$.data.answer", "message": e} for e in errors]
