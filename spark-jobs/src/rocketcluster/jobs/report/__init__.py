"""The health report: result frames in, one self-contained HTML page out.

``render_report`` is pure (frames → HTML text); ``write_report`` puts it on disk;
``rocketcluster.jobs.report.browser`` opens it in a real headless Chromium to prove it
renders offline.
"""

from __future__ import annotations

from rocketcluster.jobs.report.render import render_report, write_report

__all__ = ["render_report", "write_report"]
