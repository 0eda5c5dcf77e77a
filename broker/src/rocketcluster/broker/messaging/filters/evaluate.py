"""Evaluate a `syntax` tree against one message's properties, in SQL three-valued logic.

`None` is SQL UNKNOWN: an absent property makes a comparison unknown, NOT UNKNOWN is
UNKNOWN, and only TRUE selects a message. A property that cannot be read as the type
the other side needs (`price > 5` with price = 'cheap') is also UNKNOWN: RocketMQ
throws while converting and drops the message whatever surrounds the comparison, and
UNKNOWN is the value that reproduces that, even under NOT.

Pure and total: no lookup value can make evaluation raise.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Final, TypeAlias

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

Lookup: TypeAlias = Callable[[str], str | None]
"""Property name -> value, or None when the message does not carry it."""

Value: TypeAlias = str | Decimal | bool

# What a property must look like to be compared with a number: the forms Java's
# number parsing accepts for plain decimals, but no whitespace, NaN or Infinity.
_NUMERIC_PROPERTY: Final = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BOOLEAN_PROPERTY: Final = {"true": True, "false": False}


def evaluate(predicate: Predicate, lookup: Lookup) -> bool | None:
    """TRUE, FALSE or UNKNOWN (None) for one message."""
    match predicate:
        case Or(operands):
            result: bool | None = False
            for operand in operands:
                value = evaluate(operand, lookup)
                if value is True:
                    return True
                if value is None:
                    result = None
            return result
        case And(operands):
            result = True
            for operand in operands:
                value = evaluate(operand, lookup)
                if value is False:
                    return False
                if value is None:
                    result = None
            return result
        case Not(operand):
            value = evaluate(operand, lookup)
            return None if value is None else not value
        case Comparison(op, left, right):
            return compare(op, _value(left, lookup), _value(right, lookup))
        case Between(subject, low, high, negated):
            return _between(
                _value(subject, lookup), _value(low, lookup), _value(high, lookup), negated
            )
        case In(subject, values, negated):
            text = lookup(subject.name)
            return None if text is None else (text in values) != negated
        case IsNull(subject, negated):
            return (_value(subject, lookup) is None) != negated
        case Match(op, subject, pattern, negated):
            return _match(op, _value(subject, lookup), pattern, negated)
        case BooleanLiteral(value):
            return value


def compare(op: CompareOp, left: Value | None, right: Value | None) -> bool | None:
    """One comparison, converting a property's text to the other side's type.

    Ordering always compares numbers. For `=`/`<>`, a number or boolean on one side
    converts the other side to that type; two texts (two properties, or a property
    and a string literal) compare as strings.
    """
    if left is None or right is None:
        return None
    if op.is_ordering:
        return _order(op, _as_number(left), _as_number(right))
    if isinstance(left, bool) or isinstance(right, bool):
        equal = _equal(_as_boolean(left), _as_boolean(right))
    elif isinstance(left, Decimal) or isinstance(right, Decimal):
        equal = _equal(_as_number(left), _as_number(right))
    else:
        equal = left == right
    if equal is None:
        return None
    return equal if op is CompareOp.EQ else not equal


def parse_number(text: str) -> Decimal | None:
    """A property's text as an exact number, or None if it does not spell one."""
    if _NUMERIC_PROPERTY.fullmatch(text) is None:
        return None
    try:
        return Decimal(text)
    except (InvalidOperation, ValueError):  # an exponent beyond what Decimal represents
        return None


def _between(
    value: Value | None, low: Value | None, high: Value | None, negated: bool
) -> bool | None:
    """RocketMQ's definitions: `v >= low AND v <= high`, and `v < low OR v > high`."""
    if negated:
        below, above = compare(CompareOp.LT, value, low), compare(CompareOp.GT, value, high)
        return True if True in (below, above) else (None if None in (below, above) else False)
    at_least, at_most = compare(CompareOp.GE, value, low), compare(CompareOp.LE, value, high)
    return (
        False if False in (at_least, at_most) else (None if None in (at_least, at_most) else True)
    )


def _match(op: MatchOp, value: Value | None, pattern: str, negated: bool) -> bool | None:
    if value is None:
        return None
    if not isinstance(value, str) or not pattern:
        return False  # RocketMQ: an empty pattern matches neither form
    match op:
        case MatchOp.CONTAINS:
            found = pattern in value
        case MatchOp.STARTSWITH:
            found = value.startswith(pattern)
        case MatchOp.ENDSWITH:
            found = value.endswith(pattern)
    return found != negated


def _value(operand: Operand, lookup: Lookup) -> Value | None:
    match operand:
        case Property(name):
            return lookup(name)
        case StringLiteral(value) | BooleanLiteral(value):
            return value
        case NumberLiteral(value):
            return value


def _as_number(value: Value) -> Decimal | None:
    if isinstance(value, bool):
        return None
    return value if isinstance(value, Decimal) else parse_number(value)


def _as_boolean(value: Value) -> bool | None:
    if isinstance(value, bool):
        return value
    return _BOOLEAN_PROPERTY.get(value.lower()) if isinstance(value, str) else None


def _equal(left: Value | None, right: Value | None) -> bool | None:
    return None if left is None or right is None else left == right


def _order(op: CompareOp, left: Decimal | None, right: Decimal | None) -> bool | None:
    if left is None or right is None:
        return None
    match op:
        case CompareOp.LT:
            return left < right
        case CompareOp.LE:
            return left <= right
        case CompareOp.GT:
            return left > right
        case _:
            return left >= right
