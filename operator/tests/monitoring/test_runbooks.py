"""docs/runbooks.md: a section per alert (and none for an alert that does not exist),
each quoting the alert's rule as generated, saying what it means, what to check and
which rocketctl command helps — and every rocketctl command it shows parses with the
real command line."""

from __future__ import annotations

import re
import shlex

import pytest
from click.testing import CliRunner

from rocketcluster.ctl.cli import main as rocketctl
from rocketcluster.operator.monitoring import alerts
from rocketcluster.operator.monitoring.conventions import RUNBOOK_URL, runbook_anchor
from rocketcluster.operator.monitoring.generate import REPO_ROOT

RUNBOOKS = REPO_ROOT / "docs" / "runbooks.md"
ALERTS = {a.name: a for a in alerts.alerts()}


def _sections() -> dict[str, str]:
    text = RUNBOOKS.read_text()
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts), 2)}


def test_every_alert_has_a_section_and_every_alert_section_an_alert() -> None:
    sections = [s for s in _sections() if s.startswith(("RocketMQ", "RocketCluster"))]
    assert sections == list(ALERTS)


@pytest.mark.parametrize("name", list(ALERTS))
def test_the_section_quotes_the_rule_and_says_what_to_do(name: str) -> None:
    alert = ALERTS[name]
    body = _sections()[name]
    assert f"`{alert.expr}`" in body, "the quoted rule differs from alerts.py"
    for part in ("**What it means.**", "**What to check.**", "**rocketctl.**"):
        assert part in body
    assert f"**Severity:** {alert.severity}" in body
    after = f"after {alert.for_[:-1]} minute" if alert.for_ else "at once"
    assert after in body
    assert "`rocketctl " in body.split("**rocketctl.**")[1]
    assert alert.runbook_url == f"{RUNBOOK_URL}#{runbook_anchor(name)}"
    assert runbook_anchor(name) == re.sub(r"[^a-z0-9 -]", "", name.lower()).replace(" ", "-")


def _commands() -> list[str]:
    text = RUNBOOKS.read_text()
    inline = re.findall(r"`(rocketctl [^`]+)`", text.replace("\n  ", " "))
    blocks = re.findall(r"^(rocketctl .+)$", text, flags=re.MULTILINE)
    return sorted(set(inline) | set(blocks))


@pytest.mark.parametrize("command", _commands())
def test_every_rocketctl_command_shown_exists(command: str) -> None:
    """``--help`` at the end: click still refuses an unknown command or option, but
    runs nothing."""
    args = shlex.split(command)[1:]
    result = CliRunner().invoke(rocketctl, [*args, "--help"])
    assert result.exit_code == 0, f"{command}: {result.output}"
    assert result.output.startswith("Usage: ")


def test_the_command_check_would_catch_a_wrong_option() -> None:
    result = CliRunner().invoke(rocketctl, ["group", "offsets", "G", "--admin", "x", "--help"])
    assert result.exit_code != 0
