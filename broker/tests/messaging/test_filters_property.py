"""Filters, property-based: random syntax trees evaluated against a reference
evaluator, the printer round trip, and a parser and evaluator that fail only in the
ways they promise."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from hypothesis import given, settings
from hypothesis import strategies as st

from rocketcluster.broker.messaging.filters import (
    FilterSyntaxError,
    compile_filter,
    evaluate,
    parse,
    to_text,
)
from rocketcluster.broker.messaging.filters.syntax import (
    And,
    Between,
    BooleanLiteral,
    CompareOp,
    Comparison,
    In,
    IsNull,
    Match,
    MatchOp,
    Not,
    NumberLiteral,
    Operand,
    Or,
    Predicate,
    Property,
    StringLiteral,
)

# -- properties: a reference evaluator and the printer round trip --------------------------

NAMES = ["a", "b", "x.y", "_z", "TAGS"]
PROPERTY_VALUES = ["0", "1", "-1", "2.5", "10", "1e3", "-0", "5.", ".5", "1.0"]
PROPERTY_VALUES += ["abc", "", "true", "FALSE", "x'y", "a b", "ab"]
TEXT = st.text(alphabet="ab'x 1", max_size=4)

properties_st = st.sampled_from(NAMES).map(Property)
numbers_st = st.one_of(
    st.decimals(min_value=-100, max_value=100, places=2),
    st.sampled_from([Decimal("1E+3"), Decimal("-0"), Decimal("2.50"), Decimal("10")]),
).map(NumberLiteral)
strings_st = st.one_of(TEXT, st.sampled_from(PROPERTY_VALUES)).map(StringLiteral)
booleans_st = st.booleans().map(BooleanLiteral)
operands_st = st.one_of(properties_st, numbers_st, strings_st, booleans_st)
numeric_operands_st = st.one_of(properties_st, numbers_st)


def comparable(left: Operand, right: Operand) -> bool:
    literals = not isinstance(left, Property) and not isinstance(right, Property)
    return not literals or type(left) is type(right)


def ordered(between: Between) -> bool:
    low, high = between.low, between.high
    if isinstance(low, NumberLiteral) and isinstance(high, NumberLiteral):
        return low.value <= high.value
    return True


leaves_st: st.SearchStrategy[Predicate] = st.one_of(
    st.builds(
        Comparison, st.sampled_from([CompareOp.EQ, CompareOp.NE]), operands_st, operands_st
    ).filter(lambda c: comparable(c.left, c.right)),
    st.builds(
        Comparison,
        st.sampled_from([CompareOp.LT, CompareOp.LE, CompareOp.GT, CompareOp.GE]),
        numeric_operands_st,
        numeric_operands_st,
    ),
    st.builds(
        Between, numeric_operands_st, numeric_operands_st, numeric_operands_st, st.booleans()
    ).filter(ordered),
    st.builds(
        In,
        properties_st,
        st.lists(st.one_of(TEXT, st.sampled_from(PROPERTY_VALUES)), min_size=1, max_size=3).map(
            tuple
        ),
        st.booleans(),
    ),
    st.builds(IsNull, operands_st, st.booleans()),
    st.builds(Match, st.sampled_from(list(MatchOp)), st.one_of(properties_st, strings_st), TEXT),
    booleans_st,
)


def _extend(children: st.SearchStrategy[Predicate]) -> st.SearchStrategy[Predicate]:
    several = st.lists(children, min_size=2, max_size=3).map(tuple)
    return st.one_of(children.map(Not), several.map(And), several.map(Or))


predicates_st = st.recursive(leaves_st, _extend, max_leaves=10)
messages_st = st.dictionaries(st.sampled_from(NAMES), st.sampled_from(PROPERTY_VALUES))

# The reference uses Kleene logic as arithmetic on 0 (FALSE) < 1 (UNKNOWN) < 2 (TRUE):
# AND is min, OR is max, NOT is 2 - x.
RF, RU, RT = 0, 1, 2


def ref_truth(flag: bool) -> int:
    return RT if flag else RF


def ref_value(operand: Operand, message: dict[str, str]) -> object:
    if isinstance(operand, Property):
        return message.get(operand.name)
    return operand.value


def ref_number(value: object) -> Decimal | None:
    if isinstance(value, Decimal):
        return value
    if isinstance(value, str):
        try:
            return Decimal(value)  # PROPERTY_VALUES has no spaces, NaN or underscores
        except InvalidOperation:
            return None
    return None


def ref_compare(op: CompareOp, left: object, right: object) -> int:
    if left is None or right is None:
        return RU
    if isinstance(left, bool) or isinstance(right, bool):
        words = {"true": True, "false": False}
        lb = left if isinstance(left, bool) else words.get(str(left).lower())
        rb = right if isinstance(right, bool) else words.get(str(right).lower())
        if lb is None or rb is None:
            return RU
        return ref_truth((lb == rb) == (op is CompareOp.EQ))
    if isinstance(left, str) and isinstance(right, str) and not op.is_ordering:
        return ref_truth((left == right) == (op is CompareOp.EQ))
    ln, rn = ref_number(left), ref_number(right)
    if ln is None or rn is None:
        return RU
    outcomes = {
        CompareOp.EQ: ln == rn,
        CompareOp.NE: ln != rn,
        CompareOp.LT: ln < rn,
        CompareOp.LE: ln <= rn,
        CompareOp.GT: ln > rn,
        CompareOp.GE: ln >= rn,
    }
    return ref_truth(outcomes[op])


def reference(tree: Predicate, message: dict[str, str]) -> int:
    if isinstance(tree, And):
        return min(reference(p, message) for p in tree.operands)
    if isinstance(tree, Or):
        return max(reference(p, message) for p in tree.operands)
    if isinstance(tree, Not):
        return 2 - reference(tree.operand, message)
    if isinstance(tree, BooleanLiteral):
        return ref_truth(tree.value)
    if isinstance(tree, Comparison):
        return ref_compare(tree.op, ref_value(tree.left, message), ref_value(tree.right, message))
    if isinstance(tree, Between):
        v, lo, hi = (ref_value(o, message) for o in (tree.subject, tree.low, tree.high))
        if tree.negated:
            return max(ref_compare(CompareOp.LT, v, lo), ref_compare(CompareOp.GT, v, hi))
        return min(ref_compare(CompareOp.GE, v, lo), ref_compare(CompareOp.LE, v, hi))
    if isinstance(tree, In):
        value = message.get(tree.subject.name)
        if value is None:
            return RU
        return ref_truth(any(value == v for v in tree.values) != tree.negated)
    if isinstance(tree, IsNull):
        return ref_truth((ref_value(tree.subject, message) is None) != tree.negated)
    assert isinstance(tree, Match)
    text = ref_value(tree.subject, message)
    if text is None:
        return RU
    assert isinstance(text, str)
    if tree.pattern == "":
        return RF
    tests = {
        MatchOp.CONTAINS: tree.pattern in text,
        MatchOp.STARTSWITH: text[: len(tree.pattern)] == tree.pattern,
        MatchOp.ENDSWITH: text[len(text) - len(tree.pattern) :] == tree.pattern,
    }
    return ref_truth(tests[tree.op] != tree.negated)


@settings(max_examples=400, deadline=None)
@given(tree=predicates_st, messages=st.lists(messages_st, min_size=1, max_size=4))
def test_evaluator_agrees_with_reference_and_text_round_trips(
    tree: Predicate, messages: list[dict[str, str]]
) -> None:
    text = to_text(tree)
    assert parse(text) == tree, text
    compiled = compile_filter("SQL", text)
    for message in messages:
        expected = reference(tree, message)
        assert evaluate(tree, message.get) is {RT: True, RF: False, RU: None}[expected], (
            text,
            message,
        )
        assert compiled.matches(None, message) is (expected == RT)


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.sampled_from(list("ab1.-' ()=<>!NOTANDORIS\t")), max_size=40))
def test_parser_only_ever_raises_filter_syntax_error(text: str) -> None:
    try:
        tree = parse(text)
    except FilterSyntaxError as error:
        assert 0 <= error.position <= len(text)
    else:
        assert parse(to_text(tree)) == tree


@settings(max_examples=200, deadline=None)
@given(tree=predicates_st, message=st.dictionaries(st.sampled_from(NAMES), st.text()))
def test_evaluation_is_total_for_any_property_text(
    tree: Predicate, message: dict[str, str]
) -> None:
    assert evaluate(tree, message.get) in (True, False, None)
