"""The send path's fast control-character check answers exactly as the regex."""

from __future__ import annotations

from rocketcluster.api.names import CONTROL_CHARACTERS
from rocketcluster.broker.messaging.send import _has_control


def test_has_control_agrees_with_the_regex_on_every_code_point() -> None:
    for code in range(0x110000):
        char = chr(code)
        expected = CONTROL_CHARACTERS.search(char) is not None
        assert _has_control(char) is expected, hex(code)
        assert _has_control(f"id-{char}-1") is expected, hex(code)


def test_has_control_finds_one_control_character_among_printable_ones() -> None:
    assert not _has_control("01ABCDEF-ünïcødé-メッセージ")
    assert _has_control("01ABC\x7fDEF")
    assert _has_control("\x00")
    assert not _has_control("tab-free\u2028")  # not printable, yet no control char
