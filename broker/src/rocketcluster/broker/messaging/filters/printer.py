"""Render a `syntax` tree back to filter text that parses to the same tree.

Used to log and display compiled filters in one canonical spelling, and by the
property tests (`parse(to_text(tree)) == tree`). Parentheses are added only where
precedence or the grouping of nested AND/OR lists requires them.
"""

from __future__ import annotations

from rocketcluster.broker.messaging.filters.syntax import (
    And,
    Between,
    BooleanLiteral,
    Comparison,
    In,
    IsNull,
    Match,
    Not,
    NumberLiteral,
    Operand,
    Or,
    Predicate,
    Property,
    StringLiteral,
)


def to_text(predicate: Predicate) -> str:
    """The canonical SQL92 spelling of `predicate`: upper-case keywords, minimal parens."""
    match predicate:
        case Or(operands):
            return " OR ".join(_grouped(p, Or) for p in operands)
        case And(operands):
            return " AND ".join(_grouped(p, (Or, And)) for p in operands)
        case Not(operand):
            return f"NOT {_grouped(operand, (Or, And))}"
        case Comparison(op, left, right):
            return f"{_operand(left)} {op} {_operand(right)}"
        case Between(subject, low, high, negated):
            keyword = "NOT BETWEEN" if negated else "BETWEEN"
            return f"{_operand(subject)} {keyword} {_operand(low)} AND {_operand(high)}"
        case In(subject, values, negated):
            keyword = "NOT IN" if negated else "IN"
            listed = ", ".join(quote(v) for v in values)
            return f"{_operand(subject)} {keyword} ({listed})"
        case IsNull(subject, negated):
            return f"{_operand(subject)} IS {'NOT NULL' if negated else 'NULL'}"
        case Match(op, subject, pattern, negated):
            keyword = f"NOT {op}" if negated else str(op)
            return f"{_operand(subject)} {keyword} {quote(pattern)}"
        case BooleanLiteral():
            return _operand(predicate)


def quote(text: str) -> str:
    """A single-quoted string literal, doubling embedded quotes."""
    return "'" + text.replace("'", "''") + "'"


def _grouped(predicate: Predicate, needs_parens: type | tuple[type, ...]) -> str:
    text = to_text(predicate)
    return f"({text})" if isinstance(predicate, needs_parens) else text


def _operand(operand: Operand) -> str:
    match operand:
        case Property(name):
            return name
        case StringLiteral(value):
            return quote(value)
        case NumberLiteral(value):
            return str(value)
        case BooleanLiteral(value):
            return "TRUE" if value else "FALSE"
