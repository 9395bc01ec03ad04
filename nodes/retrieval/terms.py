"""The retrieval rules' vocabulary: tokens, synonym groups and the terms evidence must mention.

Matching is on the knowledge base's own tokens (stemmed English words, CJK bigrams), so a term
matches a result as the search matched it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence, Set
from dataclasses import dataclass

from skilldeck.tools.text import Tokenizer

__all__ = [
    "ABBREVIATIONS",
    "ATTRIBUTES",
    "ATTRIBUTE_TOKENS",
    "CATEGORIES",
    "CATEGORY_TOKENS",
    "CJK",
    "GENERIC",
    "GENERIC_TOKENS",
    "TOKENS",
    "WORDS",
    "Term",
    "entity_term",
    "is_chinese",
    "make_term",
    "split_words",
    "token_set",
]

#: The knowledge base's own tokenizer (stems, no stop words): terms match as searches matched.
TOKENS = Tokenizer(stem=True, stopwords=True)
#: Unstemmed words, for queries a search engine reads.
WORDS = Tokenizer(stem=False, stopwords=True)
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7ff]")


def split_words(text: str) -> tuple[str, ...]:
    """Space-separated words; ``_`` joins the words of a phrase ("office_hours")."""
    return tuple(w.replace("_", " ") for w in text.split())


# Synonym groups: a question term matches a result through any member, and variants add the
# other members. Attribute groups name what a request asks for, so each one a question names
# must be covered by the evidence; category groups only widen queries.
ATTRIBUTES = tuple(
    split_words(group)
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
CATEGORIES = tuple(
    split_words(group)
    for group in (
        "product item goods catalog 产品 商品",
        "company firm organisation organization 公司 企业",
        "policy rule regulation guideline 政策 规定 制度",
        "history timeline former_name previously 历史 沿革 曾用名",
        "amount quantity count 数量 总数",
    )
)
ABBREVIATIONS = {
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
# Words that name the kind of answer, not its content: never entities nor core terms.
GENERIC = frozenset(
    split_words(
        "condition conditions requirement requirements information detail details thing things "
        "way ways question situation definition definitions meaning mean explanation "
        "description concept example examples 条件 要求 内容 情况 方式 方法 信息 资料 问题 详情 "
        "范围 标准 事项 相关 具体"
    )
)
GENERIC_TOKENS = frozenset(t for w in GENERIC for t in TOKENS.tokens(w))


def _surface_tokens(groups: Iterable[tuple[str, ...]]) -> list[tuple[tuple[str, ...], ...]]:
    return [tuple(tuple(TOKENS.tokens(s)) for s in group) for group in groups]


ATTRIBUTE_TOKENS = _surface_tokens(ATTRIBUTES)
CATEGORY_TOKENS = _surface_tokens(CATEGORIES)
_GROUP_OF: dict[str, tuple[tuple[str, ...], ...]] = {}
for _alts in (*ATTRIBUTE_TOKENS, *CATEGORY_TOKENS):
    for _alt in _alts:
        if len(_alt) == 1:
            _GROUP_OF.setdefault(_alt[0], _alts)


def is_chinese(text: str) -> bool:
    """Whether ``text`` holds CJK characters (answers are then framed in Chinese)."""
    return bool(CJK.search(text))


def token_set(text: str) -> set[str]:
    """The distinct :data:`TOKENS` of ``text``."""
    return set(TOKENS.tokens(text))


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


def entity_term(entity: str) -> Term:
    """An entity and its abbreviation or long form ("SKU" <-> "stock keeping unit")."""
    own = tuple(TOKENS.tokens(entity))
    lower = " ".join(entity.lower().split())
    aliases = [long for short, long in ABBREVIATIONS.items() if lower == short]
    aliases += [short for short, long in ABBREVIATIONS.items() if lower == long]
    return Term(entity, (own, *(tuple(TOKENS.tokens(a)) for a in aliases)))


def make_term(label: str, own: tuple[str, ...] | None = None) -> Term:
    """A term and its synonyms; ``own`` gives its tokens when they are known (stems must not be
    stemmed again: "warehous" would become "wareh")."""
    own = tuple(TOKENS.tokens(label)) if own is None else own
    group = next((_GROUP_OF[t] for t in own if t in _GROUP_OF), ())
    return Term(label, tuple(dict.fromkeys((own, *group))))
