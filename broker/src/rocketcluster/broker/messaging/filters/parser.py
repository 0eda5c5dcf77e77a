"""Recursive-descent parser from SQL92 filter text to a `syntax` tree.

Grammar (keywords case-insensitive; precedence NOT > AND > OR, comparisons bind tighter):

    filter     := or EOF
    or         := and ("OR" and)*
    and        := not ("AND" not)*
    not        := "NOT" not | primary
    primary    := "(" or ")" | operand condition | TRUE | FALSE
    condition  := op operand                         op in = <> < <= > >=
                | "IS" ["NOT"] "NULL"
                | ["NOT"] "BETWEEN" operand "AND" operand
                | ["NOT"] "IN" "(" string ("," string)* ")"
                | ["NOT"] ("CONTAINS" | "STARTSWITH" | "ENDSWITH") string
    operand    := property | string | number | TRUE | FALSE

Unlike the JMS grammar RocketMQ inherited, NOT applies to a whole condition
(`NOT a = 1` is `NOT (a = 1)`), as in SQL. The operand checks RocketMQ makes while
building its tree (ordering compares numbers only, IN takes a property and strings,
BETWEEN bounds in order) are made here too, so a bad filter fails at subscribe time
instead of silently matching nothing.
"""

from __future__ import annotations

from decimal import Decimal

from rocketcluster.broker.messaging.filters.errors import FilterSyntaxError
from rocketcluster.broker.messaging.filters.limits import DEFAULT_LIMITS, FilterLimits
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
from rocketcluster.broker.messaging.filters.tokens import Token, TokenKind, tokenize

_NEGATABLE = frozenset({"BETWEEN", "IN", *MatchOp})
_OPERATORS_HELP = "= <> < <= > >= IS BETWEEN IN CONTAINS STARTSWITH ENDSWITH"


def parse(expression: str, limits: FilterLimits = DEFAULT_LIMITS) -> Predicate:
    """Parse a SQL92 filter; raises FilterSyntaxError naming the position and problem."""
    if len(expression) > limits.max_length:
        raise FilterSyntaxError(
            expression,
            limits.max_length,
            f"expression is {len(expression)} characters long; the limit is {limits.max_length}",
        )
    tokens = tokenize(expression)
    if tokens[0].kind is TokenKind.END:
        raise FilterSyntaxError(
            expression, 0, "SQL filter expression is empty; use TRUE to receive every message"
        )
    return _Parser(expression, tokens, limits.max_depth).filter()


class _Parser:
    """One parse: a cursor over the tokens plus the current nesting depth."""

    def __init__(self, expression: str, tokens: list[Token], max_depth: int) -> None:
        self._expression = expression
        self._tokens = tokens
        self._index = 0
        self._depth = 0
        self._max_depth = max_depth

    def filter(self) -> Predicate:
        result = self._or()
        token = self._peek()
        if token.kind is TokenKind.RPAREN:
            raise self._error(token, "unbalanced ')': there is no '(' for it to close")
        if token.kind is not TokenKind.END:
            raise self._error(
                token, f"expected AND, OR or end of expression, found {token.describe()}"
            )
        return result

    # -- logical structure --------------------------------------------------------

    def _or(self) -> Predicate:
        operands = [self._and()]
        while self._at_keyword("OR"):
            self._advance()
            operands.append(self._and())
        return operands[0] if len(operands) == 1 else Or(tuple(operands))

    def _and(self) -> Predicate:
        operands = [self._not()]
        while self._at_keyword("AND"):
            self._advance()
            operands.append(self._not())
        return operands[0] if len(operands) == 1 else And(tuple(operands))

    def _not(self) -> Predicate:
        token = self._peek()
        if not self._at_keyword("NOT"):
            return self._primary()
        self._advance()
        self._enter(token)
        result = Not(self._not())
        self._depth -= 1
        return result

    def _primary(self) -> Predicate:
        token = self._peek()
        if token.kind is TokenKind.LPAREN:
            self._advance()
            self._enter(token)
            inner = self._or()
            close = self._peek()
            if close.kind is not TokenKind.RPAREN:
                raise self._error(
                    close,
                    f"expected ')' to close the '(' at position {token.position}, "
                    f"found {close.describe()}",
                )
            self._advance()
            self._depth -= 1
            return inner
        starts_operand = token.kind in (TokenKind.IDENTIFIER, TokenKind.STRING, TokenKind.NUMBER)
        if not (starts_operand or self._at_keyword("TRUE", "FALSE", "NULL")):
            reason = f"expected a condition, found {token.describe()}"
            raise self._error(token, reason + _reserved_word_hint(token, self._peek(1)))
        subject = self._operand("")
        return self._condition(subject, token)

    def _enter(self, token: Token) -> None:
        self._depth += 1
        if self._depth > self._max_depth:
            raise self._error(
                token,
                f"expression is nested more than {self._max_depth} levels deep "
                "(parentheses and NOTs); simplify it",
            )

    # -- conditions ---------------------------------------------------------------

    def _condition(self, subject: Operand, subject_token: Token) -> Predicate:
        token = self._peek()
        if token.kind is TokenKind.OPERATOR:
            return self._comparison(subject, subject_token)
        if self._at_keyword("IS"):
            self._advance()
            negated = self._at_keyword("NOT")
            if negated:
                self._advance()
            null = self._advance()
            if not (null.kind is TokenKind.KEYWORD and null.value == "NULL"):
                spelled = "IS NOT" if negated else "IS"
                raise self._error(null, f"expected NULL after {spelled}, found {null.describe()}")
            return IsNull(subject, negated)
        negated = self._at_keyword("NOT")
        if negated:
            following = self._peek(1)
            if not (following.kind is TokenKind.KEYWORD and following.value in _NEGATABLE):
                raise self._error(
                    following,
                    "expected BETWEEN, IN, CONTAINS, STARTSWITH or ENDSWITH after NOT, "
                    f"found {following.describe()}",
                )
            self._advance()
        if self._at_keyword("BETWEEN"):
            return self._between(subject, subject_token, negated)
        if self._at_keyword("IN"):
            return self._in(subject, subject_token, negated)
        if self._at_keyword(*MatchOp):
            return self._match(subject, subject_token, negated)
        if isinstance(subject, BooleanLiteral):
            return subject
        if token.kind is TokenKind.IDENTIFIER:
            raise self._error(
                token, f"unknown operator {token.text!r}; expected one of {_OPERATORS_HELP}"
            )
        raise self._error(
            token,
            f"expected an operator ({_OPERATORS_HELP}) after {subject_token.describe()}, "
            f"found {token.describe()}",
        )

    def _comparison(self, subject: Operand, subject_token: Token) -> Comparison:
        op_token = self._advance()
        op = CompareOp(op_token.value)
        right_token = self._peek()
        right = self._operand(f"after '{op}'")
        if op.is_ordering:
            self._require_number(subject, subject_token, f"'{op}'")
            self._require_number(right, right_token, f"'{op}'")
        elif _is_literal(subject) and _is_literal(right) and type(subject) is not type(right):
            raise self._error(
                right_token,
                f"cannot compare {subject_token.describe()} with {right_token.describe()}",
            )
        return Comparison(op, subject, right)

    def _between(self, subject: Operand, subject_token: Token, negated: bool) -> Between:
        name = "NOT BETWEEN" if negated else "BETWEEN"
        self._advance()
        self._require_number(subject, subject_token, name)
        low_token = self._peek()
        low = self._operand(f"after {name}")
        self._require_number(low, low_token, name)
        and_token = self._advance()
        if not (and_token.kind is TokenKind.KEYWORD and and_token.value == "AND"):
            raise self._error(
                and_token,
                f"expected AND between the bounds of {name}, found {and_token.describe()}",
            )
        high_token = self._peek()
        high = self._operand(f"after {name} ... AND")
        self._require_number(high, high_token, name)
        if (
            isinstance(low, NumberLiteral)
            and isinstance(high, NumberLiteral)
            and low.value > high.value
        ):
            raise self._error(
                low_token,
                f"{name} bounds are reversed: {low_token.text} is greater than {high_token.text}",
            )
        return Between(subject, low, high, negated)

    def _in(self, subject: Operand, subject_token: Token, negated: bool) -> In:
        name = "NOT IN" if negated else "IN"
        self._advance()
        if not isinstance(subject, Property):
            raise self._error(
                subject_token,
                f"{name} needs a property on its left, found {subject_token.describe()}",
            )
        opening = self._advance()
        if opening.kind is not TokenKind.LPAREN:
            raise self._error(opening, f"expected '(' after {name}, found {opening.describe()}")
        values: list[str] = []
        while True:
            item = self._advance()
            if item.kind is TokenKind.RPAREN and not values:
                raise self._error(item, f"empty {name} list; give at least one string")
            if item.kind is not TokenKind.STRING:
                raise self._error(
                    item,
                    f"{name} lists string literals only, e.g. {name} ('a', 'b'); "
                    f"found {item.describe()}",
                )
            values.append(item.value)
            separator = self._advance()
            if separator.kind is TokenKind.RPAREN:
                return In(subject, tuple(values), negated)
            if separator.kind is not TokenKind.COMMA:
                raise self._error(
                    separator,
                    f"expected ',' or ')' in the {name} list, found {separator.describe()}",
                )

    def _match(self, subject: Operand, subject_token: Token, negated: bool) -> Match:
        op = MatchOp(self._advance().value)
        name = f"NOT {op}" if negated else str(op)
        if isinstance(subject, (NumberLiteral, BooleanLiteral)):
            raise self._error(
                subject_token, f"{name} tests text, but {subject_token.describe()} is not text"
            )
        pattern = self._advance()
        if pattern.kind is not TokenKind.STRING:
            raise self._error(
                pattern,
                f"{name} needs a string literal, e.g. {op} 'abc'; found {pattern.describe()}",
            )
        return Match(op, subject, pattern.value, negated)

    # -- operands -----------------------------------------------------------------

    def _operand(self, where: str) -> Operand:
        token = self._advance()
        if token.kind is TokenKind.IDENTIFIER:
            return Property(token.text)
        if token.kind is TokenKind.STRING:
            return StringLiteral(token.value)
        if token.kind is TokenKind.NUMBER:
            return NumberLiteral(Decimal(token.text))
        if token.kind is TokenKind.KEYWORD and token.value in ("TRUE", "FALSE"):
            return BooleanLiteral(token.value == "TRUE")
        if token.kind is TokenKind.KEYWORD and token.value == "NULL":
            raise self._error(token, "NULL can only be tested with IS NULL or IS NOT NULL")
        reason = f"expected a property or a literal {where}".rstrip()
        reason += f", found {token.describe()}"
        raise self._error(token, reason + _reserved_word_hint(token, self._peek()))

    def _require_number(self, operand: Operand, token: Token, name: str) -> None:
        """RocketMQ's checkLessThanOperand: ordering on a literal needs a number."""
        if isinstance(operand, (StringLiteral, BooleanLiteral)):
            raise self._error(
                token, f"{name} compares numbers, but {token.describe()} is not a number"
            )

    # -- cursor -------------------------------------------------------------------

    def _peek(self, ahead: int = 0) -> Token:
        return self._tokens[min(self._index + ahead, len(self._tokens) - 1)]

    def _advance(self) -> Token:
        token = self._peek()
        if token.kind is not TokenKind.END:
            self._index += 1
        return token

    def _at_keyword(self, *words: str) -> bool:
        token = self._peek()
        return token.kind is TokenKind.KEYWORD and token.value in words

    def _error(self, token: Token, reason: str) -> FilterSyntaxError:
        return FilterSyntaxError(self._expression, token.position, reason)


def _is_literal(operand: Operand) -> bool:
    return not isinstance(operand, Property)


def _reserved_word_hint(token: Token, following: Token) -> str:
    """`in = 1` reads as a property to its author; say why it is not one."""
    if token.kind is TokenKind.KEYWORD and following.kind is TokenKind.OPERATOR:
        return f"; {token.value} is a reserved word and cannot name a property"
    return ""
