"""Tokenizer and query parser: English and CJK text, stems, stop words, quoted phrases."""

from __future__ import annotations

import pytest

from skilldeck.tools.text import Query, Tokenizer, parse_query

pytestmark = pytest.mark.L2

PLAIN = Tokenizer()
FULL = Tokenizer(stem=True, stopwords=True)


def test_english_words_are_case_folded_in_order() -> None:
    assert PLAIN.tokens("The Quick BROWN fox, straße!") == [
        "the",
        "quick",
        "brown",
        "fox",
        "strasse",
    ]


def test_apostrophes_inside_words_are_dropped() -> None:
    assert PLAIN.tokens("Don't stop, it’s 'quoted'") == ["dont", "stop", "its", "quoted"]


def test_numbers_and_underscores() -> None:
    assert PLAIN.tokens("in 2023 v3.5 snake_case") == ["in", "2023", "v3", "5", "snake", "case"]


def test_stemming_is_off_by_default() -> None:
    assert PLAIN.tokens("running cats") == ["running", "cats"]
    assert Tokenizer(stem=True).tokens("running cats Running") == ["run", "cat", "run"]


def test_stop_words_are_dropped_only_when_asked() -> None:
    text = "the cat is on the mat"
    assert PLAIN.tokens(text) == ["the", "cat", "is", "on", "the", "mat"]
    assert Tokenizer(stopwords=True).tokens(text) == ["cat", "mat"]


def test_stop_words_are_checked_before_stemming() -> None:
    # "during" stems to "dure", not a stop word; "wills" stems to the stop word "will".
    assert FULL.tokens("during wills gardens") == ["will", "garden"]


def test_cjk_runs_become_overlapping_bigrams() -> None:
    assert PLAIN.tokens("不吃辣") == ["不吃", "吃辣"]
    assert PLAIN.tokens("东京タワー") == ["东京", "京タ", "タワ", "ワー"]
    assert PLAIN.tokens("한국어") == ["한국", "국어"]


def test_a_lone_cjk_character_is_a_unigram() -> None:
    assert PLAIN.tokens("辣") == ["辣"]
    assert PLAIN.tokens("我, 你") == ["我", "你"]


def test_mixed_scripts_split_cjk_runs() -> None:
    assert PLAIN.tokens("我喜欢Python和咖啡") == ["我喜", "喜欢", "python", "和咖", "咖啡"]


def test_stems_and_stop_words_leave_cjk_alone() -> None:
    assert FULL.tokens("the 不吃辣 running") == ["不吃", "吃辣", "run"]


def test_nfkc_normalises_full_width_forms() -> None:
    assert PLAIN.tokens("ＡＢＣ １２３") == ["abc", "123"]
    assert PLAIN.tokens("ｶﾀｶﾅ") == ["カタ", "タカ", "カナ"]


def test_combining_marks_stay_inside_words() -> None:
    assert PLAIN.tokens("हिन्दी भाषा") == ["हिन्दी", "भाषा"]


def test_empty_and_punctuation_only_text() -> None:
    assert PLAIN.tokens("") == []
    assert PLAIN.tokens(" ,.!? 。，") == []


def test_query_without_quotes_has_no_phrases() -> None:
    assert parse_query("cats cats dogs", PLAIN) == Query(("cats", "cats", "dogs"), ())


def test_ascii_quotes_make_a_phrase() -> None:
    query = parse_query('best "new york" pizza', PLAIN)
    assert query.terms == ("best", "new", "york", "pizza")
    assert query.phrases == (("new", "york"),)


def test_seed_query_is_a_chinese_phrase() -> None:
    query = parse_query('"不吃辣"', PLAIN)
    assert query.terms == ("不吃", "吃辣")
    assert query.phrases == (("不吃", "吃辣"),)


def test_chinese_quotes_make_phrases() -> None:
    query = parse_query("我 “不吃 辣” 的「偏好 设置」", PLAIN)
    assert query.terms == ("我", "不吃", "辣", "的", "偏好", "设置")
    assert query.phrases == (("不吃", "辣"), ("偏好", "设置"))


def test_a_one_token_phrase_is_just_a_term() -> None:
    assert parse_query('"cats" dogs', PLAIN) == Query(("cats", "dogs"), ())


def test_an_unbalanced_quote_leaves_the_rest_as_text() -> None:
    assert parse_query('a "b c', PLAIN) == Query(("a", "b", "c"), ())
    query = parse_query('"new york" pizza "hot slice', PLAIN)
    assert query.terms == ("new", "york", "pizza", "hot", "slice")
    assert query.phrases == (("new", "york"),)
    assert parse_query("“不吃辣", PLAIN) == Query(("不吃", "吃辣"), ())


def test_phrases_use_the_tokenizer() -> None:
    query = parse_query('"The Running Dogs" fast', FULL)
    assert query.terms == ("run", "dog", "fast")
    assert query.phrases == (("run", "dog"),)
