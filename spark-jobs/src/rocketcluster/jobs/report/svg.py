"""matplotlib figures as SVG text that can sit inline in one HTML page.

Several SVGs in one document share one id space, and matplotlib names its clip paths
and glyphs the same in every figure: each SVG's ids get the plot's own prefix. The XML
prologue, metadata and namespace declarations go (the HTML parser puts ``<svg>`` in
the SVG namespace by itself), so the page holds no URL at all. Text is drawn as glyph
paths: the plot looks the same on a machine without the font.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

import matplotlib

matplotlib.use("Agg")  # files only: no display where the jobs run
from matplotlib.figure import Figure

_NO_METADATA: Final = {"Creator": None, "Date": None, "Format": None, "Type": None}

_PROLOGUE = re.compile(r"^.*?(?=<svg\b)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_XMLNS = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')
_STYLE = re.compile(r"<style[^>]*>.*?</style>\s*", re.S)
_SIZE = re.compile(r'<svg([^>]*?) width="([\d.]+)pt" height="([\d.]+)pt"')
_ID = re.compile(r'\bid="([^"]+)"')
_REF = re.compile(r'(href="#|url\(#)([^")]+)')
_SAFE = re.compile(r"[^A-Za-z0-9_-]")


@contextmanager
def plotting() -> Iterator[None]:
    """The rc settings every report figure is drawn under (only these: everything
    else visual is set per artist)."""
    with matplotlib.rc_context(
        {
            "svg.fonttype": "path",
            "svg.hashsalt": "rocketcluster-report",  # stable ids: the same data, the same file
            "timezone": "UTC",
            "font.size": 9.0,
            "axes.titlesize": 10.0,
            "axes.labelsize": 9.0,
            "legend.fontsize": 8.0,
        }
    ):
        yield


def new_figure(width_in: float, height_in: float) -> Figure:
    """A figure not registered with pyplot: nothing global to leak or close."""
    return Figure(figsize=(width_in, height_in), layout="constrained")


def to_svg(fig: Figure, prefix: str) -> str:
    """The figure as an ``<svg>`` element, ids prefixed with ``prefix``."""
    buf = io.StringIO()
    with plotting():
        fig.savefig(buf, format="svg", metadata=_NO_METADATA)
    return inline_svg(buf.getvalue(), prefix)


def inline_svg(svg: str, prefix: str) -> str:
    """Make matplotlib's standalone SVG document embeddable (see module docstring)."""
    tag = _SAFE.sub("-", prefix)
    text = _PROLOGUE.sub("", svg, count=1)
    text = _METADATA.sub("", text)
    text = _XMLNS.sub("", text)
    # The one stylesheet matplotlib writes would apply to the whole page once inline;
    # the page's own CSS carries the same rule scoped to the plots.
    text = _STYLE.sub("", text)
    text = _SIZE.sub(
        lambda m: f'<svg{m.group(1)} width="{float(m.group(2)):g}" height="{float(m.group(3)):g}"',
        text,
        count=1,
    )
    text = _ID.sub(lambda m: f'id="{tag}-{m.group(1)}"', text)
    text = _REF.sub(lambda m: f"{m.group(1)}{tag}-{m.group(2)}", text)
    return text.strip()
