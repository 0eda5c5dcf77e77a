"""The SQL92 filter's abstract syntax tree: immutable, hashable, comparable.

Values are frozen dataclasses so a parsed filter can be cached and shared between
subscriptions, and so tests can check `parse(to_text(tree)) == tree`. Literal types
are separate classes because `True == Decimal(1)` in Python, and the tree must not
confuse TRUE with 1.

Named `syntax` rather than `ast` so it never shadows the standard library module.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import TypeAlias


class CompareOp(StrEnum):
    """Binary comparisons; the value is the operator's spelling in the language."""

    EQ = "="
    NE = "<>"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="

    @property
    def is_ordering(self) -> bool:
        """Ordering operators compare numbers only (RocketMQ rejects string operands)."""
        return self not in (CompareOp.EQ, CompareOp.NE)


class MatchOp(StrEnum):
    """Substring tests RocketMQ added to the JMS selector grammar."""

    CONTAINS = "CONTAINS"
    STARTSWITH = "STARTSWITH"
    ENDSWITH = "ENDSWITH"


@dataclass(frozen=True, slots=True)
class Property:
    """A message property looked up by name; absent properties are SQL NULL."""

    name: str


@dataclass(frozen=True, slots=True)
class StringLiteral:
    value: str


@dataclass(frozen=True, slots=True)
class NumberLiteral:
    """Decimal, not float, so `price = 0.1` means exactly what the user wrote."""

    value: Decimal


@dataclass(frozen=True, slots=True)
class BooleanLiteral:
    """TRUE/FALSE: an operand of `=`/`<>`, or on its own a constant predicate."""

    value: bool


AnyLiteral: TypeAlias = StringLiteral | NumberLiteral | BooleanLiteral
Operand: TypeAlias = Property | AnyLiteral


@dataclass(frozen=True, slots=True)
class Comparison:
    op: CompareOp
    left: Operand
    right: Operand


@dataclass(frozen=True, slots=True)
class Between:
    """`subject [NOT] BETWEEN low AND high`, bounds inclusive."""

    subject: Operand
    low: Operand
    high: Operand
    negated: bool = False


@dataclass(frozen=True, slots=True)
class In:
    """`property [NOT] IN ('a', 'b')`: RocketMQ allows only a property and strings here."""

    subject: Property
    values: tuple[str, ...]
    negated: bool = False


@dataclass(frozen=True, slots=True)
class IsNull:
    """`subject IS [NOT] NULL`: the only test that is true for an absent property."""

    subject: Operand
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Match:
    """`subject [NOT] CONTAINS|STARTSWITH|ENDSWITH 'pattern'`."""

    op: MatchOp
    subject: Operand
    pattern: str
    negated: bool = False


@dataclass(frozen=True, slots=True)
class Not:
    operand: Predicate


@dataclass(frozen=True, slots=True)
class And:
    """N-ary so long `a AND b AND ...` chains stay shallow (no deep recursion)."""

    operands: tuple[Predicate, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """N-ary for the same reason as `And`."""

    operands: tuple[Predicate, ...]


Predicate: TypeAlias = Comparison | Between | In | IsNull | Match | BooleanLiteral | Not | And | Or
