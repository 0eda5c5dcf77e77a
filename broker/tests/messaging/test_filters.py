from __future__ import annotations

import zlib
from decimal import Decimal

import pytest

from rocketcluster.broker.messaging.filters import (
    FilterCache,
    FilterError,
    FilterKind,
    FilterLimits,
    FilterSyntaxError,
    SqlFilter,
    TagFilter,
    UnsupportedFilterKindError,
    compile_filter,
    evaluate,
    parse,
    tag_hash,
    to_text,
)
from rocketcluster.broker.messaging.filters.syntax import (
    And,
    Between,
    CompareOp,
    Comparison,
    Not,
    NumberLiteral,
    Or,
    Predicate,
    Property,
)

T, F, U = True, False, None  # SQL TRUE, FALSE, UNKNOWN


def run(expression: str, properties: dict[str, str]) -> bool | None:
    return evaluate(parse(expression), properties.get)


# -- evaluation: every operator, NULLs and type mismatches ----------------------------

EVALUATION_CASES: list[tuple[str, dict[str, str], bool | None]] = [
    # = and <> against numbers: the property is read as an exact decimal
    ("a = 1", {"a": "1"}, T),
    ("a = 1", {"a": "1.0"}, T),
    ("a = 1", {"a": "+1"}, T),
    ("a = 1", {"a": "2"}, F),
    ("a = 1", {"a": "one"}, U),
    ("a = 1", {}, U),
    ("a <> 1", {"a": "2"}, T),
    ("a <> 1", {"a": "1"}, F),
    ("a <> 1", {"a": "one"}, U),
    ("a <> 1", {}, U),
    ("a = 1.5E3", {"a": "1500"}, T),
    ("a = 1000", {"a": "1e3"}, T),
    ("a = 5", {"a": "5."}, T),
    ("a = -0.5", {"a": "-0.50"}, T),
    ("a = 0", {"a": "-0"}, T),
    ("a = 5", {"a": " 5"}, U),
    ("a = 5", {"a": "NaN"}, U),
    ("a = 5", {"a": "Infinity"}, U),
    ("a = 16", {"a": "0x10"}, U),
    ("a = 1", {"a": "1e99999999999999999999999"}, U),
    # = and <> against strings: exact, case-sensitive text
    ("a = 'x'", {"a": "x"}, T),
    ("a = 'x'", {"a": "X"}, F),
    ("a = 'x'", {}, U),
    ("a = '1'", {"a": "1.0"}, F),
    ("a <> 'x'", {"a": "y"}, T),
    ("a <> 'x'", {"a": "x"}, F),
    ("a = ''", {"a": ""}, T),
    # against booleans: 'true'/'false' in any case, anything else is a mismatch
    ("a = TRUE", {"a": "true"}, T),
    ("a = TRUE", {"a": "TRUE"}, T),
    ("a = TRUE", {"a": "false"}, F),
    ("a = TRUE", {"a": "yes"}, U),
    ("a <> FALSE", {"a": "true"}, T),
    # two properties: strings for =, numbers for ordering
    ("a = b", {"a": "x", "b": "x"}, T),
    ("a = b", {"a": "1", "b": "1.0"}, F),
    ("a = b", {"a": "x"}, U),
    ("a < b", {"a": "9", "b": "10"}, T),
    ("a < b", {"a": "x", "b": "10"}, U),
    # ordering
    ("a < 10", {"a": "9"}, T),
    ("a < 10", {"a": "10"}, F),
    ("a <= 10", {"a": "10"}, T),
    ("a <= 10", {"a": "10.01"}, F),
    ("a > -1.5", {"a": "-1"}, T),
    ("a>-1.5", {"a": "-2"}, F),
    ("a >= 2.5", {"a": "2.50"}, T),
    ("a > 999", {"a": "1e3"}, T),
    ("a > 5", {"a": "abc"}, U),
    ("a > 5", {}, U),
    ("NOT a > 5", {"a": "abc"}, U),
    # literals on both sides
    ("1 = 1", {}, T),
    ("1 < 2", {}, T),
    ("2 > a", {"a": "1"}, T),
    ("'a' = 'a'", {}, T),
    ("TRUE = FALSE", {}, F),
    # BETWEEN is inclusive; NOT BETWEEN is `< low OR > high`
    ("a BETWEEN 1 AND 3", {"a": "1"}, T),
    ("a BETWEEN 1 AND 3", {"a": "3"}, T),
    ("a BETWEEN 1 AND 3", {"a": "2.5"}, T),
    ("a BETWEEN 1 AND 3", {"a": "0"}, F),
    ("a BETWEEN 1 AND 3", {"a": "4"}, F),
    ("a BETWEEN 1 AND 3", {"a": "x"}, U),
    ("a BETWEEN 1 AND 3", {}, U),
    ("a BETWEEN -3 AND -1", {"a": "-2"}, T),
    ("a NOT BETWEEN 1 AND 3", {"a": "0"}, T),
    ("a NOT BETWEEN 1 AND 3", {"a": "4"}, T),
    ("a NOT BETWEEN 1 AND 3", {"a": "2"}, F),
    ("a NOT BETWEEN 1 AND 3", {"a": "x"}, U),
    ("a NOT BETWEEN 1 AND 3", {}, U),
    ("a BETWEEN b AND 3", {"a": "2"}, U),
    ("a BETWEEN b AND 3", {"a": "5"}, F),
    ("a NOT BETWEEN b AND 3", {"a": "5"}, T),
    # IN: a property against string literals
    ("a IN ('x', 'y')", {"a": "x"}, T),
    ("a IN ('x', 'y')", {"a": "z"}, F),
    ("a IN ('x', 'y')", {}, U),
    ("a IN ('1')", {"a": "1.0"}, F),
    ("a NOT IN ('x')", {"a": "y"}, T),
    ("a NOT IN ('x')", {"a": "x"}, F),
    ("a NOT IN ('x')", {}, U),
    # IS [NOT] NULL: the only tests that see absence as TRUE/FALSE
    ("a IS NULL", {}, T),
    ("a IS NULL", {"a": ""}, F),
    ("a IS NOT NULL", {"a": ""}, T),
    ("a IS NOT NULL", {}, F),
    ("NOT a IS NULL", {}, F),
    ("'x' IS NULL", {}, F),
    ("1 IS NOT NULL", {}, T),
    # CONTAINS / STARTSWITH / ENDSWITH, case-sensitive; an empty pattern never matches
    ("a CONTAINS 'b'", {"a": "abc"}, T),
    ("a CONTAINS 'b'", {"a": "xyz"}, F),
    ("a CONTAINS 'B'", {"a": "abc"}, F),
    ("a CONTAINS 'b'", {}, U),
    ("a NOT CONTAINS 'b'", {"a": "xyz"}, T),
    ("a NOT CONTAINS 'b'", {"a": "abc"}, F),
    ("a NOT CONTAINS 'b'", {}, U),
    ("a STARTSWITH 'ab'", {"a": "abc"}, T),
    ("a STARTSWITH 'ab'", {"a": "cab"}, F),
    ("a NOT STARTSWITH 'ab'", {"a": "cab"}, T),
    ("a NOT STARTSWITH 'ab'", {}, U),
    ("a ENDSWITH 'bc'", {"a": "abc"}, T),
    ("a ENDSWITH 'bc'", {"a": "bca"}, F),
    ("a NOT ENDSWITH 'bc'", {"a": "abc"}, F),
    ("a CONTAINS ''", {"a": "abc"}, F),
    ("a NOT CONTAINS ''", {"a": "abc"}, F),
    ("a STARTSWITH ''", {"a": "abc"}, F),
    ("'abc' CONTAINS 'b'", {}, T),
    # Kleene logic: UNKNOWN absorbs only where the other side does not decide
    ("a = 1 AND b = 1", {"a": "1"}, U),
    ("a = 1 AND b = 1", {"a": "2"}, F),
    ("a = 1 OR b = 1", {"a": "1"}, T),
    ("a = 1 OR b = 1", {"a": "2"}, U),
    ("NOT a = 1", {}, U),
    ("NOT a = 1", {"a": "2"}, T),
    ("NOT NOT a = 1", {"a": "1"}, T),
    ("TRUE", {}, T),
    ("FALSE", {}, F),
    ("NOT FALSE", {}, T),
    # quoting
    ("a = 'it''s'", {"a": "it's"}, T),
    ("a = ''''", {"a": "'"}, T),
    ("a = 'AND'", {"a": "AND"}, T),
    ("a = ' x '", {"a": " x "}, T),
    ("a = 'x' AND b = 'y'", {"a": "x", "b": "y"}, T),
    ("a='x'AND b='y'", {"a": "x", "b": "y"}, T),
    # identifiers: letters, digits, '_' and '.', case-sensitive
    ("x.y = 1", {"x.y": "1"}, T),
    ("_a1 = 1", {"_a1": "1"}, T),
    ("A = 1", {"a": "1"}, U),
    ("\ta\n=\r1 ", {"a": "1"}, T),
]


@pytest.mark.parametrize(("expression", "properties", "expected"), EVALUATION_CASES)
def test_evaluation(expression: str, properties: dict[str, str], expected: bool | None) -> None:
    assert run(expression, properties) is expected
    sql = compile_filter(FilterKind.SQL, expression)
    assert sql.matches(None, properties) is (expected is True)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("n = 1 and b = 'x'", T),
        ("n = 1 AnD b = 'y'", F),
        ("n between 1 and 3", T),
        ("n Not Between 1 aNd 3 or FALSE", F),
        ("b not in ('y')", T),
        ("b is not null", T),
        ("c is NULL", T),
        ("s contains 'b' and s startswith 'a' and s endswith 'c'", T),
        ("s NOT contains 'b' oR s NoT StartsWith 'a'", F),
        ("true and not false", T),
        ("True = tRUE", T),
    ],
)
def test_keywords_are_case_insensitive(expression: str, expected: bool) -> None:
    assert run(expression, {"n": "1", "b": "x", "s": "abc"}) is expected
    assert parse(to_text(parse(expression))) == parse(expression)


# -- precedence: NOT > AND > OR ---------------------------------------------------------

A1 = Comparison(CompareOp.EQ, Property("a"), NumberLiteral(Decimal(1)))
B1 = Comparison(CompareOp.EQ, Property("b"), NumberLiteral(Decimal(1)))
C1 = Comparison(CompareOp.EQ, Property("c"), NumberLiteral(Decimal(1)))


@pytest.mark.parametrize(
    ("expression", "tree"),
    [
        ("a = 1 OR b = 1 AND c = 1", Or((A1, And((B1, C1))))),
        ("a = 1 AND b = 1 OR c = 1", Or((And((A1, B1)), C1))),
        ("(a = 1 OR b = 1) AND c = 1", And((Or((A1, B1)), C1))),
        ("NOT a = 1 AND b = 1", And((Not(A1), B1))),
        ("NOT (a = 1 AND b = 1)", Not(And((A1, B1)))),
        ("a = 1 AND b = 1 AND c = 1", And((A1, B1, C1))),
        ("(a = 1 AND b = 1) AND c = 1", And((And((A1, B1)), C1))),
        (
            "a BETWEEN 1 AND 2 AND b = 1",
            And((Between(Property("a"), NumberLiteral(Decimal(1)), NumberLiteral(Decimal(2))), B1)),
        ),
        ("((a = 1))", A1),
    ],
)
def test_precedence_shapes_the_tree(expression: str, tree: Predicate) -> None:
    assert parse(expression) == tree
    assert parse(to_text(tree)) == tree


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("TRUE OR TRUE AND FALSE", T),
        ("(TRUE OR TRUE) AND FALSE", F),
        ("NOT TRUE OR TRUE", T),
        ("NOT (TRUE OR TRUE)", F),
        ("NOT FALSE AND FALSE", F),
        ("FALSE AND FALSE OR TRUE", T),
    ],
)
def test_precedence_decides_the_result(expression: str, expected: bool) -> None:
    assert run(expression, {}) is expected


def test_tag_is_visible_as_the_tags_property() -> None:
    sql = compile_filter("SQL", "TAGS = 'A' OR TAGS IS NULL AND b = '1'")
    assert sql.matches("A", {})
    assert sql.matches(None, {"TAGS": "A"})
    assert not sql.matches("B", {"TAGS": "A"})  # the message's tag wins
    assert sql.matches(None, {"b": "1"})
    assert not sql.matches("", {})
    assert sql.matches_code(12345) and sql.matches_code(0)


def test_long_flat_chains_do_not_recurse() -> None:
    expression = " OR ".join(["a = 1"] * 400) + " OR b = 2"
    assert len(expression) < 4096
    assert run(expression, {"b": "2"}) is T
    assert run(expression, {}) is U


# -- malformed expressions: the position and the problem ---------------------------------

MALFORMED_CASES: list[tuple[str, int, str]] = [
    ("", 0, "empty"),
    ("   ", 0, "empty"),
    ("a = (1", 4, "expected a property or a literal after '='"),
    ("(a = 1", 6, "expected ')' to close the '(' at position 0"),
    ("((a = 1)", 8, "expected ')' to close the '(' at position 0"),
    ("a = 1)", 5, "unbalanced ')'"),
    ("()", 1, "expected a condition, found ')'"),
    ("a =", 3, "found end of expression"),
    ("a = 1 AND", 9, "expected a condition, found end of expression"),
    ("a = 1 AND NOT", 13, "expected a condition"),
    ("OR a = 1", 0, "expected a condition, found keyword OR"),
    ("a = 1 OR OR b = 1", 9, "found keyword OR"),
    ("a = 1 b = 2", 6, "expected AND, OR or end of expression, found property b"),
    ("a = 1.", 4, "malformed number '1.'"),
    ("a = 1.2.3", 4, "malformed number"),
    ("a = 12abc", 4, "malformed number '12abc'"),
    ("a = 1e", 4, "malformed number"),
    ("a = - 1", 4, "'-' must be followed directly by a number"),
    ("a = 'x", 4, "unterminated string"),
    ("a = 'it''s", 4, "unterminated string"),
    ('a = "x"', 4, "single quotes"),
    ("a == 1", 2, "use '='"),
    ("a != 1", 2, "use '<>'"),
    ("a = 1 # b", 6, "unexpected character '#'"),
    ("a \u2260 1", 2, "unexpected character"),
    ("a LIKE 'x'", 2, "unknown operator 'LIKE'"),
    ("a NOT LIKE 'x'", 6, "expected BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT"),
    ("a NOT", 5, "after NOT, found end of expression"),
    ("in = 1", 0, "IN is a reserved word"),
    ("a = and", 4, "found keyword AND"),
    ("a", 1, "expected an operator"),
    ("'x'", 3, "expected an operator"),
    ("a = NULL", 4, "NULL can only be tested with IS NULL"),
    ("NULL IS NULL", 0, "NULL can only be tested"),
    ("a IS 5", 5, "expected NULL after IS,"),
    ("a IS NOT 5", 9, "expected NULL after IS NOT"),
    ("a > 'x'", 4, "'>' compares numbers, but string 'x' is not a number"),
    ("a <= TRUE", 5, "compares numbers"),
    ("'x' < a", 0, "compares numbers"),
    ("'a' = 1", 6, "cannot compare string 'a' with number 1"),
    ("TRUE <> 'x'", 8, "cannot compare"),
    ("a BETWEEN 'x' AND 3", 10, "BETWEEN compares numbers"),
    ("a NOT BETWEEN 1 AND 'x'", 20, "NOT BETWEEN compares numbers"),
    ("'a' BETWEEN 1 AND 3", 0, "compares numbers"),
    ("a BETWEEN 5 AND 1", 10, "bounds are reversed: 5 is greater than 1"),
    ("a BETWEEN 1 OR 2", 12, "expected AND between the bounds of BETWEEN"),
    ("a BETWEEN 1", 11, "expected AND"),
    ("a IN ()", 6, "empty IN list"),
    ("a IN (1)", 6, "string literals only"),
    ("a NOT IN ('x', 2)", 15, "NOT IN lists string literals only"),
    ("a IN 'x'", 5, "expected '(' after IN"),
    ("a IN ('x' 'y')", 10, "expected ',' or ')' in the IN list"),
    ("a IN ('x',", 10, "found end of expression"),
    ("5 IN ('x')", 0, "IN needs a property on its left"),
    ("a CONTAINS 5", 11, "CONTAINS needs a string literal"),
    ("a NOT ENDSWITH b", 15, "NOT ENDSWITH needs a string literal"),
    ("5 STARTSWITH 'x'", 0, "STARTSWITH tests text"),
]


@pytest.mark.parametrize(("expression", "position", "reason"), MALFORMED_CASES)
def test_malformed_expressions_say_where_and_what(
    expression: str, position: int, reason: str
) -> None:
    with pytest.raises(FilterSyntaxError) as caught:
        compile_filter("SQL", expression)
    error = caught.value
    assert error.expression == expression
    assert error.position == position, str(error)
    assert reason in error.reason
    assert f"at position {position}" in str(error) and reason in str(error)
    assert isinstance(error, FilterError) and isinstance(error, ValueError)


def test_length_is_bounded() -> None:
    ok = "a = '" + "x" * (4096 - 6) + "'"
    assert len(ok) == 4096
    parse(ok)
    too_long = "a = '" + "x" * 5000 + "'"
    with pytest.raises(FilterSyntaxError, match="the limit is 4096") as caught:
        parse(too_long)
    assert caught.value.position == 4096
    assert len(str(caught.value)) < 300  # the message quotes an excerpt, not the whole text


@pytest.mark.parametrize("wrap", ["NOT {}", "({})"])
def test_depth_is_bounded(wrap: str) -> None:
    def nest(levels: int) -> str:
        text = "a = 1"
        for _ in range(levels):
            text = wrap.format(text)
        return text

    assert run(nest(64), {"a": "1"}) is not None
    with pytest.raises(FilterSyntaxError, match="nested more than 64 levels") as caught:
        parse(nest(65))
    assert caught.value.position == (64 * 4 if wrap.startswith("NOT") else 64)


def test_limits_are_configurable() -> None:
    limits = FilterLimits(max_length=12, max_depth=1)
    parse("NOT a = 1", limits)
    with pytest.raises(FilterSyntaxError, match="nested"):
        parse("NOT (a = 1)", limits)
    with pytest.raises(FilterSyntaxError, match="limit is 12"):
        compile_filter("TAG", "a||b||c||d||e", limits)


# -- TAG filters ---------------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["*", "", "  ", " * ", "a||*"])
def test_tag_match_all_selects_everything(expression: str) -> None:
    tag_filter = compile_filter("TAG", expression)
    assert isinstance(tag_filter, TagFilter) and tag_filter.tags is None
    for tag in ("a", "zzz", None, ""):
        assert tag_filter.matches_code(tag_hash(tag)) and tag_filter.matches(tag)


@pytest.mark.parametrize(
    ("expression", "tags"),
    [
        ("a||b", {"a", "b"}),
        (" a || b ", {"a", "b"}),
        ("a||||b||", {"a", "b"}),
        ("a", {"a"}),
        ("big order||x", {"big order", "x"}),
    ],
)
def test_tag_set(expression: str, tags: set[str]) -> None:
    tag_filter = compile_filter("tag", expression)
    assert isinstance(tag_filter, TagFilter) and tag_filter.tags == frozenset(tags)
    for tag in tags:
        assert tag_filter.matches_code(tag_hash(tag)) and tag_filter.matches(tag, {})
    for other in ("c", "A", "a ", None, ""):
        assert not tag_filter.matches(other)
    assert not tag_filter.matches_code(tag_hash("c"))
    assert not tag_filter.matches_code(0)  # untagged entries are skipped without a read


def test_tag_code_prefilter_is_only_a_prefilter() -> None:
    first, second = "uejgtcuo", "iiwucoup"
    assert tag_hash(first) == tag_hash(second)  # a CRC32 collision
    tag_filter = compile_filter("TAG", first)
    assert tag_filter.matches_code(tag_hash(second))
    assert tag_filter.matches(first) and not tag_filter.matches(second)


def test_tag_hash_is_the_stores_tags_code() -> None:
    from rocketcluster.broker.store.record import tags_code

    for tag in ("TagA", "x", "b\u00fccher", "\u6d88\u606f", "", None):
        assert tag_hash(tag) == tags_code(tag)
    assert tag_hash("TagA") == zlib.crc32(b"TagA") and tag_hash(None) == 0


@pytest.mark.parametrize(
    ("expression", "position", "reason"),
    [("||", 0, "lists no tags"), (" || || ", 0, "lists no tags"), ("a|b", 1, "contains '|'")],
)
def test_malformed_tag_expressions(expression: str, position: int, reason: str) -> None:
    with pytest.raises(FilterSyntaxError) as caught:
        compile_filter("TAG", expression)
    assert caught.value.position == position and reason in caught.value.reason


# -- entry point and cache -----------------------------------------------------------------


def test_compile_filter_dispatches_on_kind() -> None:
    assert isinstance(compile_filter(FilterKind.TAG, "a"), TagFilter)
    assert isinstance(compile_filter("sql", "a = 1"), SqlFilter)
    assert compile_filter("SQL", "a = 1").kind is FilterKind.SQL
    assert compile_filter("TAG", "a").kind is FilterKind.TAG
    assert compile_filter("TAG", "a = 1").matches("a = 1")  # TAG text is never parsed as SQL
    with pytest.raises(UnsupportedFilterKindError, match="XPATH") as caught:
        compile_filter("XPATH", "a")
    assert caught.value.kind == "XPATH" and isinstance(caught.value, FilterError)


def test_cache_reuses_and_evicts_least_recently_used() -> None:
    cache = FilterCache(capacity=2)
    first = cache.get("SQL", "a = 1")
    assert cache.get(FilterKind.SQL, "a = 1") is first
    assert cache.get("sql", "a = 1") is first
    assert (cache.hits, cache.misses) == (2, 1)
    tag = cache.get("TAG", "a = 1")
    assert isinstance(tag, TagFilter)  # the key includes the kind
    cache.get("SQL", "a = 1")  # refresh: the TAG entry is now least recently used
    cache.get("SQL", "b = 1")
    assert len(cache) == 2
    assert cache.get("SQL", "a = 1") is first
    assert cache.get("TAG", "a = 1") is not tag
    cache.clear()
    assert len(cache) == 0


def test_cache_does_not_keep_errors() -> None:
    cache = FilterCache(capacity=4)
    for _ in range(2):
        with pytest.raises(FilterSyntaxError):
            cache.get("SQL", "a =")
    with pytest.raises(UnsupportedFilterKindError):
        cache.get("JSON", "{}")
    assert len(cache) == 0 and cache.misses == 2
    with pytest.raises(ValueError, match="at least 1"):
        FilterCache(capacity=0)


def test_separate_caches_share_nothing() -> None:
    one, two = FilterCache(), FilterCache()
    one.get("SQL", "a = 1")
    assert len(two) == 0
