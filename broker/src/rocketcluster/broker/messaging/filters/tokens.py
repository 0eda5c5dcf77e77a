"""Tokenizer for RocketMQ's SQL92 filter language.

Hand-written rather than regex-split so every token keeps its source position: the
error a subscriber sees must point at the offending character.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from rocketcluster.broker.messaging.filters.errors import FilterSyntaxError

KEYWORDS: Final = frozenset(
    {
        "AND",
        "OR",
        "NOT",
        "BETWEEN",
        "IN",
        "IS",
        "NULL",
        "TRUE",
        "FALSE",
        "CONTAINS",
        "STARTSWITH",
        "ENDSWITH",
    }
)
COMPARISON_OPERATORS: Final = frozenset({"=", "<>", "<", "<=", ">", ">="})

_WHITESPACE: Final = " \t\r\n\f"
_IDENTIFIER: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
# A number literal, then any identifier-ish tail that would make it malformed ("1.", "2x").
_NUMBER: Final = re.compile(r"-?[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_TAIL: Final = re.compile(r"[A-Za-z0-9_.]+")
# Wrong spellings users bring from other languages, and what to write instead.
_HINTS: Final = {
    "==": "'==' is not an operator; use '='",
    "!=": "'!=' is not an operator; use '<>'",
    '"': "strings are written in single quotes, e.g. 'red'",
}


class TokenKind(StrEnum):
    """What the parser dispatches on; keywords keep their upper-cased text in `value`."""

    IDENTIFIER = "identifier"
    KEYWORD = "keyword"
    STRING = "string"
    NUMBER = "number"
    OPERATOR = "operator"
    LPAREN = "("
    RPAREN = ")"
    COMMA = ","
    END = "end of expression"


@dataclass(frozen=True, slots=True)
class Token:
    """`text` is the source spelling; `value` the decoded string or upper-cased keyword."""

    kind: TokenKind
    text: str
    value: str
    position: int

    def describe(self) -> str:
        """How error messages name this token."""
        match self.kind:
            case TokenKind.END:
                return "end of expression"
            case TokenKind.KEYWORD:
                return f"keyword {self.value}"
            case TokenKind.IDENTIFIER:
                return f"property {self.text}"
            case TokenKind.STRING | TokenKind.NUMBER:
                return f"{self.kind.value} {self.text}"
            case _:
                return f"'{self.text}'"


def tokenize(expression: str) -> list[Token]:
    """Split `expression` into tokens, ending with an END token at its length."""
    tokens: list[Token] = []
    pos = 0
    length = len(expression)
    while pos < length:
        char = expression[pos]
        if char in _WHITESPACE:
            pos += 1
        elif char == "'":
            token = _string(expression, pos)
            tokens.append(token)
            pos += len(token.text)
        elif char.isascii() and (
            char.isdigit() or (char == "-" and _digit_at(expression, pos + 1))
        ):
            token = _number(expression, pos)
            tokens.append(token)
            pos += len(token.text)
        elif match := _IDENTIFIER.match(expression, pos):
            text = match.group()
            upper = text.upper()
            kind = TokenKind.KEYWORD if upper in KEYWORDS else TokenKind.IDENTIFIER
            tokens.append(Token(kind, text, upper if kind is TokenKind.KEYWORD else text, pos))
            pos = match.end()
        elif (two := expression[pos : pos + 2]) in COMPARISON_OPERATORS:
            tokens.append(Token(TokenKind.OPERATOR, two, two, pos))
            pos += 2
        elif char in COMPARISON_OPERATORS and two not in _HINTS:
            tokens.append(Token(TokenKind.OPERATOR, char, char, pos))
            pos += 1
        elif char in "(),":
            kind = {"(": TokenKind.LPAREN, ")": TokenKind.RPAREN, ",": TokenKind.COMMA}[char]
            tokens.append(Token(kind, char, char, pos))
            pos += 1
        else:
            hint = _HINTS.get(two) or _HINTS.get(char)
            if hint is None and char == "-":
                hint = "'-' must be followed directly by a number, e.g. -5"
            raise FilterSyntaxError(expression, pos, hint or f"unexpected character {char!r}")
    tokens.append(Token(TokenKind.END, "", "", length))
    return tokens


def _digit_at(expression: str, pos: int) -> bool:
    return pos < len(expression) and expression[pos] in "0123456789"


def _string(expression: str, start: int) -> Token:
    """A single-quoted literal; a doubled quote ('') stands for one quote."""
    pos = start + 1
    parts: list[str] = []
    while True:
        end = expression.find("'", pos)
        if end < 0:
            raise FilterSyntaxError(expression, start, "unterminated string literal")
        parts.append(expression[pos:end])
        if expression.startswith("''", end):
            parts.append("'")
            pos = end + 2
            continue
        return Token(TokenKind.STRING, expression[start : end + 1], "".join(parts), start)


def _number(expression: str, start: int) -> Token:
    """An integer or decimal literal, optionally negative, optionally with an exponent."""
    match = _NUMBER.match(expression, start)
    assert match is not None  # the caller saw a digit (after an optional '-')
    text = match.group()
    tail = _NUMBER_TAIL.match(expression, match.end())
    if tail is not None:
        bad = text + tail.group()
        raise FilterSyntaxError(
            expression,
            start,
            f"malformed number {bad!r}; numbers look like 42, -7, 3.14 or 1.5E3",
        )
    return Token(TokenKind.NUMBER, text, text, start)
