"""The retrieval policy of seed 002 as code: order, fallback, top_k, sufficiency, citations.

The policy runs here against scripted tool results (the shapes the real tools return), so
every rule can be driven exactly; tests/test_rag_skill.py runs it on a real knowledge base.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from skilldeck.nodes.retrieval import run_policy, source_order
from skilldeck.nodes.retrieval_rules import (
    LOCAL,
    RAG,
    TABLE,
    Evidence,
    Plan,
    Rewrite,
    check_answer,
    compose_answer,
    judge,
    make_plan,
    parse_result,
    rewrite_question,
    select_evidence,
)
from skilldeck.tools.registry import ToolResult

pytestmark = pytest.mark.L2

ALL = {RAG, TABLE, LOCAL}
ALIASES = {"rag_retrieve": RAG, "table_rag_retrieve": TABLE, "local_file_search": LOCAL}


def plan_for(question: str) -> Plan:
    return make_plan(question, rewrite_question(question))


# -- tool results in the shapes the real tools return ------------------------------------------
def chunks(*texts: str, top_k: int = 30) -> str:
    items = [
        {
            "file_ref": f"doc{i}.md#L1-L2",
            "heading": "",
            "text": text,
            "score": 0.1,
            "citation": f'<CITATION file="doc{i}.md" lines="1-2" />',
        }
        for i, text in enumerate(texts)
    ]
    return json.dumps({"query": "q", "top_k": top_k, "chunks": items, "instruction": "x"})


def rows(header: list[str], *cells: list[str], omitted: int = 0, ref: str = "t.csv") -> str:
    numbers = list(range(2, 2 + len(cells)))
    shown = len(cells)
    table = {
        "file_ref_table": ref,
        "header": header,
        "rows": [list(c) for c in cells],
        "row_numbers": numbers,
        "shown": shown,
        "omitted": omitted,
        "total": shown + omitted,
        "citation": f'<CITATION file="{ref}" rows="{",".join(map(str, numbers))}" />',
    }
    body = {
        "query": "q",
        "tables": [table] if cells else [],
        "shown": shown,
        "omitted": omitted,
        "total": shown + omitted,
        "truncated": omitted > 0,
        "instruction": "[INSTRUCTION] ...",
    }
    return json.dumps(body)


def lines(*found: tuple[str, int, str], truncated: bool = False) -> str:
    matches = [{"path": p, "line": n, "text": t, "score": 1} for p, n, t in found]
    return json.dumps(
        {
            "query": "q",
            "root": ".",
            "matches": matches,
            "total": len(matches),
            "truncated": truncated,
        }
    )


EMPTY = {RAG: chunks(), TABLE: rows(["a"]), LOCAL: lines()}


class Tools:
    """Scripted tools: ``results[name]`` is a result or a function of the call's args."""

    def __init__(self, results: Mapping[str, str | Callable[[dict[str, Any]], str]]) -> None:
        self.results = {**EMPTY, **results}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, name: str, args: dict[str, Any]) -> ToolResult:
        self.calls.append((name, dict(args)))
        result = self.results[name]
        content = result(args) if callable(result) else result
        return ToolResult(not content.startswith("Error:"), content)

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.calls]


def run(question: str, tools: Tools, allowed: set[str] = ALL) -> tuple[Plan, Any]:
    plan = plan_for(question)
    order = source_order(list(ALIASES), ALIASES.get, plan.table_first)
    return plan, run_policy(plan, order, allowed, tools)


# -- source order --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "question",
    [
        "How much does Widget Pro cost?",
        "List all products in the tools category",
        "Which product is the cheapest?",
        "Compare the revenue of 2021 and 2022",
        "Summarize the sales by region",
        "Who is the supplier of Widget Pro?",
        "What is the history of Northwind Tools?",
        "Why did revenue fall in 2022 and how much was it?",
        "Widget",
        "扳手的价格是多少？",
        "列出所有工具类产品的库存",
        "比较2021年和2022年的收入",
        "七天无理由退货的条件",
    ],
)
def test_table_first_for_data_mixed_and_unclear_questions(question: str) -> None:
    plan = plan_for(question)
    assert plan.table_first, plan.kind
    assert source_order(list(ALIASES), ALIASES.get, plan.table_first) == [TABLE, RAG, LOCAL]


@pytest.mark.parametrize(
    "question",
    [
        "What is a SKU?",
        "What does backorder mean?",
        "How do I install the package?",
        "What is the refund policy?",
        "Explain the backup procedure",
        "What is Skilldeck?",
        "退货政策是什么？",
        "什么是SKU？",
        "如何申请退货？",
    ],
)
def test_rag_first_only_for_pure_text_questions(question: str) -> None:
    plan = plan_for(question)
    assert not plan.table_first, plan.kind
    assert source_order(list(ALIASES), ALIASES.get, plan.table_first) == [RAG, TABLE, LOCAL]


def test_a_text_intent_with_a_data_cue_still_goes_table_first() -> None:
    rewrite = Rewrite((), ("2022",), ("price",), "definition", ("price 2022",), by="model")
    assert make_plan("What was the price policy in 2022?", rewrite).table_first
    pure = Rewrite(("SKU",), (), (), "definition", ("SKU",), by="model")
    assert not make_plan("Tell me about SKUs", pure).table_first


def test_skill_enabled_tools_come_first_in_meta_order() -> None:
    tools = ["faq_search", "rag_retrieve", "kb__wiki", "table_rag_retrieve", "local_file_search"]
    resolve = {**ALIASES, "faq_search": "faq__search", "kb__wiki": "kb__wiki"}.get
    assert source_order(tools, resolve, True) == ["faq__search", "kb__wiki", TABLE, RAG, LOCAL]
    assert source_order(tools, resolve, False) == ["faq__search", "kb__wiki", RAG, TABLE, LOCAL]


# -- fallback ------------------------------------------------------------------------------------
def test_table_first_then_the_other_rag_tool_then_local_files() -> None:
    supplier = ("suppliers.md", 3, "Widget Pro is supplied by Acme Metals.")
    tools = Tools(
        {TABLE: rows(["product", "price"], ["Widget Pro", "19.99"]), LOCAL: lines(supplier)}
    )
    _, result = run("Who supplies Widget Pro?", tools)
    assert tools.names == [TABLE, RAG, LOCAL]
    assert [s["tool"] for s in result.steps] == tools.names
    assert [s["sufficient"] for s in result.steps] == [False, False, True]
    assert result.answered_by == LOCAL


def test_rag_first_then_table_then_local_files() -> None:
    tools = Tools({})
    _, result = run("What is a SKU?", tools)
    assert tools.names == [RAG, TABLE, LOCAL]
    assert result.answered_by is None


def test_rag_found_relevant_results_but_local_files_are_still_tried() -> None:
    fire = "The Lyon warehouse was closed in 2022 after a fire."
    move = ("notes.txt", 2, "The Lyon warehouse moves to Villeurbanne in March 2025.")
    tools = Tools({RAG: chunks(fire), LOCAL: lines(move)})
    _, result = run("What happened to the Lyon warehouse in 2022 and 2025?", tools)
    assert tools.names == [TABLE, RAG, LOCAL]
    _, rag, local = result.steps
    assert rag["usable"] == 1 and not rag["sufficient"]  # relevant, yet not enough
    assert rag["why"] == "partial: nothing covers '2025' yet"
    assert local["sufficient"]
    assert [e.ref for e in result.usable] == ["doc0.md#L1-L2", "notes.txt"]


def test_a_sufficient_source_ends_the_search() -> None:
    tools = Tools({TABLE: rows(["product", "price"], ["Widget Pro", "19.99"])})
    _, result = run("How much does Widget Pro cost?", tools)
    assert tools.names == [TABLE]
    assert result.answered_by == TABLE


def test_a_local_miss_says_nothing_about_rag() -> None:
    # Local files come last: their miss never skips or replaces the knowledge-base sources.
    tools = Tools({RAG: chunks("A SKU is a stock keeping unit code.")})
    _, result = run("What is a SKU?", tools)
    assert tools.names == [RAG]
    assert result.answered_by == RAG


def test_sources_run_one_at_a_time() -> None:
    tools = Tools({})
    active: list[str] = []
    peak: list[int] = []

    def probe(name: str, args: dict[str, Any]) -> ToolResult:
        active.append(name)
        peak.append(len(active))
        time.sleep(0.01)  # a parallel runner would overlap here
        try:
            return tools(name, args)
        finally:
            active.remove(name)

    plan = plan_for("What is the price of the Quantum Toaster?")
    order = source_order(list(ALIASES), ALIASES.get, plan.table_first)
    result = run_policy(plan, order, ALL, probe)
    assert peak == [1, 1, 1]
    assert [s["why"].split(":")[0] for s in result.steps] == ["empty", "empty", "empty"]


def test_any_tool_result_with_citations_is_evidence() -> None:
    cited = 'Widget Pro ships in 2 days. <CITATION file="faq.md" lines="3-3" />'
    [item] = parse_result("kb__faq", cited, 0).items
    assert (item.kind, item.citation) == ("text", '<CITATION file="faq.md" lines="3-3" />')
    assert parse_result("kb__faq", "Widget Pro ships in 2 days.", 0).items == ()


def test_no_information_only_after_every_applicable_source() -> None:
    tools = Tools({})
    plan, _ = run("What is the capital of Mars?", tools)
    assert tools.names == [RAG, TABLE, LOCAL]
    answer = compose_answer(
        plan,
        [],
        complete=False,
        sources=["rag_retrieve", "table_rag_retrieve", "local_file_search"],
    )
    assert answer.startswith("No relevant information was found")
    assert answer.endswith("rag_retrieve, table_rag_retrieve, local_file_search.")


def test_a_source_outside_the_meta_is_refused_not_called() -> None:
    tools = Tools({})
    _, result = run("What is a SKU?", tools, allowed={RAG, TABLE})
    assert tools.names == [RAG, TABLE]
    assert result.steps[-1] == {
        "tool": LOCAL,
        "args": {},
        "refused": True,
        "why": "refused: not among the skill's tools",
    }


# -- top_k ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question", "top_k"),
    [
        ("What is a SKU?", 30),
        ("How much does Widget Pro cost?", 30),
        ("Compare Widget Pro and Widget Mini", 50),
        ("Why did revenue fall in 2022 and how much was it?", 50),
        ("List all products in the tools category", 100),
        ("What is the history of Northwind Tools?", 100),
        ("公司的历史沿革", 100),
    ],
)
def test_start_top_k_follows_the_breadth(question: str, top_k: int) -> None:
    assert plan_for(question).top_k == top_k


def test_top_k_expands_30_50_100_while_results_fill_it_and_fall_short() -> None:
    def near_misses(args: dict[str, Any]) -> str:
        k = args["top_k"]
        return chunks(*["Widget Pro cost 19.99 in 2021."] * k, top_k=k)

    tools = Tools({RAG: near_misses})
    _, result = run("What did Widget Pro cost in 2019?", tools)
    rag = [args for name, args in tools.calls if name == RAG]
    assert [a["top_k"] for a in rag] == [30, 50, 100]
    first, wider = '"Widget Pro" cost 2019', '"Widget Pro" cost 2019 price 价格 价钱 售价'
    assert [a["query"] for a in rag] == [first, wider, wider]
    steps = result.steps[1:4]
    assert [s.get("next") for s in steps] == ["top_k 30 -> 50", "top_k 50 -> 100", None]
    assert all(s["why"].startswith("misses the scope") for s in steps)
    assert tools.names == [TABLE, RAG, RAG, RAG, LOCAL]


def test_top_k_does_not_expand_when_fewer_results_than_top_k() -> None:
    tools = Tools({RAG: chunks(*["Widget Pro cost 19.99 in 2021."] * 29)})
    _, result = run("What did Widget Pro cost in 2019?", tools)
    assert tools.names == [TABLE, RAG, LOCAL]
    assert result.steps[1]["why"].startswith("misses the scope") and "next" not in result.steps[1]


def test_top_k_does_not_expand_off_topic_results() -> None:
    tools = Tools(
        {RAG: lambda a: chunks(*["Lunch is served at noon."] * a["top_k"], top_k=a["top_k"])}
    )
    _, result = run("What is a SKU?", tools)
    assert tools.names == [RAG, TABLE, LOCAL]
    assert result.steps[0]["why"].startswith("off-topic")


def test_a_moderate_question_expands_from_50_to_100_only() -> None:
    def full(args: dict[str, Any]) -> str:
        k = args["top_k"]
        return chunks(*["Widget Pro is popular."] * k, top_k=k)

    tools = Tools({RAG: full})
    _, result = run("Compare Widget Pro and Widget Mini", tools)
    assert [a["top_k"] for n, a in tools.calls if n == RAG] == [50, 100]
    assert result.steps[1]["why"] == "partial: nothing covers 'Widget Mini' yet"


# -- sufficiency (section 4) ---------------------------------------------------------------------
PRICE = rows(["product", "price"], ["Widget Pro", "19.99"])


COST = "How much does Widget Pro cost?"
GOODS = ["product", "category"]


@pytest.mark.parametrize(
    ("question", "tool", "content", "ok", "code"),
    [
        (COST, TABLE, rows(["product"]), True, "empty"),
        (COST, RAG, chunks(), True, "empty"),
        (COST, LOCAL, lines(), True, "empty"),
        (COST, TABLE, "Error: the base is down", False, "error"),
        (COST, "kb__x", "Error: quota exceeded", True, "error"),
        (COST, "kb__x", "No Excel files found in /data", True, "no_excel_files"),
        (COST, RAG, chunks("Lunch is served at noon."), True, "off_topic"),
        (COST, TABLE, rows(["product", "price"], ["Gadget", "5"]), True, "missing_entity"),
        ("Widget Pro price in 2019?", RAG, chunks("Widget Pro was 19.99 in 2021."), True,
         "missing_scope"),
        ("Widget Pro cost to ship to Lyon?", RAG, chunks("Widget Pro is blue."), True,
         "no_usable_evidence"),
        ("What are the price and the stock of Widget Pro?", TABLE, PRICE, True, "partial"),
        ("List all tools products", TABLE, rows(GOODS, ["Widget", "tools"], omitted=5), True,
         "truncated"),
        ("Why did Widget Pro sales fall?", TABLE, rows(["product", "sales"], ["Widget Pro", "1"]),
         True, "partial"),
        (COST, TABLE, PRICE, True, None),
    ],
)  # fmt: skip
def test_sufficiency_rules(question: str, tool: str, content: str, ok: bool, code: str) -> None:
    plan = plan_for(question)
    verdict = judge(plan, parse_result(tool, content, 0), ok=ok, content=content, before=[])
    assert verdict.code == code, verdict.why
    assert verdict.sufficient is (code is None)


def test_a_list_that_fills_top_k_is_partial() -> None:
    plan = plan_for("List all tools products")
    content = chunks(*["Widget tools products catalog entry."] * 30)
    verdict = judge(
        plan, parse_result(RAG, content, 0), ok=True, content=content, before=[], top_k=30
    )
    assert (verdict.code, verdict.sufficient) == ("partial", False)
    assert "fill top_k 30" in str(verdict.why)


def test_evidence_gathered_before_counts_toward_coverage() -> None:
    plan = plan_for("What are the price and the stock of Widget Pro?")
    stock = parse_result(TABLE, rows(["product", "stock"], ["Widget Pro", "12"]), 0)
    content = PRICE
    verdict = judge(
        plan, parse_result(TABLE, content, 1), ok=True, content=content, before=stock.items
    )
    assert verdict.sufficient


def test_a_truncated_table_keeps_a_full_list_partial_at_later_steps() -> None:
    plan = plan_for("List all tools products")
    cut = parse_result(TABLE, rows(["product", "category"], ["Widget", "tools"], omitted=3), 0)
    content = chunks("All tools products are listed in the catalog.")
    verdict = judge(plan, parse_result(RAG, content, 1), ok=True, content=content, before=cut.items)
    assert verdict.code == "partial" and "stay truncated" in str(verdict.why)


# -- answers and citations -----------------------------------------------------------------------
def _evidence(question: str) -> tuple[Plan, list[Evidence]]:
    plan = plan_for(question)
    items = [
        *parse_result(
            TABLE, rows(["product", "category"], *[["Widget", "tools"]] * 2, omitted=3), 0
        ).items,
        *parse_result(RAG, chunks("Widget tools are sold in the tools catalog."), 1).items,
        *parse_result(LOCAL, lines(("notes.txt", 4, "Widget tools ship from Lyon.")), 2).items,
    ]
    return plan, items


def test_rules_answer_puts_each_citation_right_after_its_paragraph() -> None:
    plan, items = _evidence("List all Widget tools")
    answer = compose_answer(plan, items, complete=False, sources=["table_rag_retrieve"])
    blocks = answer.split("\n\n")
    assert blocks[0].startswith("Note: this answer may be incomplete")
    assert [b.rsplit("\n", 1)[-1].split(" <CITATION")[0] for b in blocks[1:]]  # sanity
    for block, item in zip(blocks[1:], items, strict=True):
        assert block.endswith(item.citation)  # each paragraph ends with its own citation
        assert block.count("<CITATION") == 1
    known = {i.citation: i.counts for i in items}
    assert check_answer(answer, question=plan.question, shown=items, known=known) == []


def test_truncated_table_answers_state_n_plus_m() -> None:
    plan, items = _evidence("List all Widget tools")
    answer = compose_answer(plan, items[:1], complete=True, sources=[])
    assert "5 rows matched (N+M = 5); 2 are shown (N = 2) and 3 are omitted (M = 3)." in answer
    zh = plan_for("列出所有工具")
    assert "共匹配 5 行（N+M = 5），显示 2 行（N = 2），省略 3 行（M = 3）。" in compose_answer(
        zh, items[:1], complete=True, sources=[]
    )


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("Widget tools are sold in the tools catalog.", "has no <CITATION"),
        (
            'Widget tools are sold in the catalog.\n\n<CITATION file="doc0.md" lines="1-2" />',
            "holds only citations",
        ),
        (
            'Widget tools ship from Lyon. <CITATION file="other.md" lines="9-9" />',
            "no tool returned",
        ),
        (
            'Widget tools are sold. <CITATION file="doc0.md" lines="1-2" /> More catalog tools.',
            "goes on after its citation",
        ),
        ('Here are widgets. <CITATION file="t.csv" rows="2,3" />', "truncated table result"),
        ("   ", "the answer is empty"),
    ],
)
def test_answer_contract_errors(answer: str, message: str) -> None:
    plan, items = _evidence("List all Widget tools")
    known = {i.citation: i.counts for i in items}
    errors = check_answer(answer, question=plan.question, shown=items, known=known)
    assert any(message in e["message"] for e in errors), errors


def test_a_paragraph_without_facts_needs_no_citation() -> None:
    plan, items = _evidence("List all Widget tools")
    known = {i.citation: i.counts for i in items}
    cite = '<CITATION file="notes.txt" lines="4-4" />'
    answer = f"Here is what I found.\n\nWidget tools ship from Lyon. {cite}"
    assert check_answer(answer, question=plan.question, shown=items, known=known) == []


def test_select_evidence_caps_by_kind_and_breadth() -> None:
    plan = plan_for("What is a SKU?")
    items = list(parse_result(RAG, chunks(*[f"SKU fact {i}" for i in range(9)]), 0).items)
    assert len(select_evidence(plan, items)) == 3
    broad = plan_for("List all SKU codes")
    assert len(select_evidence(broad, items)) == 8


# -- query rewrite -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("question", "entity", "scope", "attributes", "intent", "first"),
    [
        (COST, ["Widget Pro"], [], ["cost"], "value", '"Widget Pro" cost'),
        ("What is a SKU?", ["SKU"], [], [], "definition", "SKU"),
        ("Please tell me the refund policy", [], [], ["refund"], "policy", "refund policy"),
        ("Revenue of Northwind Tools from 2019 to 2021", ["Northwind Tools"], ["2019-2021"],
         ["revenue"], "value", '"Northwind Tools" revenue 2019-2021'),
        ("What was the stock last year?", [], ["last year"], ["stock"], "value",
         "stock last year"),
        ("扳手的价格是多少？", ["扳手"], [], ["价格"], "value", "扳手 价格"),
        ("请问七天无理由退货的条件是什么？", ["七天无理由退货"], [], ["退货"], "unclear",
         "七天无理由退货 退货"),
        ("2022年华东区的销售额", ["华东区"], ["2022年"], ["销售额"], "value",
         "华东区 销售额 2022年"),
    ],
)  # fmt: skip
def test_rules_rewrite(
    question: str,
    entity: list[str],
    scope: list[str],
    attributes: list[str],
    intent: str,
    first: str,
) -> None:
    rewrite = rewrite_question(question)
    assert list(rewrite.entity) == entity
    assert list(rewrite.time_scope) == scope
    assert list(rewrite.attributes) == attributes
    assert rewrite.intent == intent
    assert rewrite.variants[0] == first
    assert rewrite.by == "rules"


def test_rewrite_variants_add_synonyms_translations_and_abbreviations() -> None:
    price = rewrite_question("How much does Widget Pro cost?").variants
    assert price[1].startswith(price[0]) and {"price", "价格"} <= set(price[1].split())
    assert "stock keeping unit" in rewrite_question("What is a SKU?").variants[1]
    assert "R&D" in rewrite_question("research and development spending").variants[1]
    zh = rewrite_question("退货政策是什么？").variants
    assert "refund" in zh[1] and "policy" in zh[1]


def test_rewrite_expands_list_and_timeline_questions_more() -> None:
    assert len(rewrite_question("How much does Widget Pro cost?").variants) == 2
    listing = rewrite_question("List all products in the tools category").variants
    assert len(listing) == 3 and listing[2].endswith("catalog list 列表 清单")
    history = rewrite_question("What is the history of Northwind Tools?").variants
    assert "former" in history[-1] and "历史" in history[-1]


def test_rewrite_preserves_meaning() -> None:
    # Nothing is added that no word of the question asked for.
    plain = rewrite_question("When does the Lyon warehouse move?")
    assert plain.variants == ("Lyon warehouse move",)


def test_a_range_of_years_makes_each_year_a_facet() -> None:
    plan = plan_for("Revenue of Northwind Tools from 2019 to 2021")
    assert plan.years == ("2019", "2020", "2021")
    assert [f.label for f in plan.facets] == ["revenue", "2019", "2020", "2021"]


def test_model_rewrite_round_trips() -> None:
    value = {
        "entity": ["Widget Pro"],
        "time_scope": ["2024"],
        "attributes": ["price"],
        "intent": "value",
        "variants": ["Widget Pro price 2024", "Widget Pro cost 2024", "Widget Pro price 2024"],
    }
    question = "How much was Widget Pro in 2024?"
    rewrite = Rewrite.from_model(value, question)
    assert rewrite.by == "model" and len(rewrite.variants) == 3
    assert Rewrite.from_dict(json.loads(json.dumps(rewrite.to_dict()))) == rewrite
    plan = make_plan(question, rewrite)
    # The model's queries add to the question: it is never dropped.
    assert plan.variants[:2] == (question, "Widget Pro price 2024") and plan.years == ("2024",)


def test_a_model_rewrite_adds_queries_but_no_requirements_of_its_own() -> None:
    """A small model copies the prompt's examples ("price, stock, supplier", "main query")
    into its rewrite: as requirements they would make every result insufficient."""
    question = "What is the amount of total sales in 2019?"
    value = {
        "entity": ["total sales", "product", "organisation"],
        "time_scope": ["2019", "FY2018"],
        "attributes": ["price", "stock", "supplier"],
        "intent": "value",
        "variants": ["main query", "total sales 2019 revenue", "price"],
    }
    rewrite = Rewrite.from_model(value, question)
    assert rewrite.entity == ("total sales",) and rewrite.time_scope == ("2019",)
    assert rewrite.attributes == rewrite_question(question).attributes  # none was the question's
    assert rewrite.variants == (question, "total sales 2019 revenue")
    plan = make_plan(question, rewrite)
    assert not {"price", "stock", "supplier"} & {f.label for f in plan.facets}


def test_evidence_round_trips_through_json() -> None:
    _, items = _evidence("List all Widget tools")
    for item in items:
        again = Evidence.from_dict(json.loads(json.dumps(item.to_dict())))
        assert again == item and again.tokens == item.tokens
