"""Small builders over Grafana's foundation SDK (a development dependency: only the
generator imports this) so each dashboard reads as a list of panels and queries.

Every panel queries the ``$datasource`` variable, sets a unit and thresholds (the
base colour alone where no level means anything), and is placed by :class:`Grid`,
which hands out ids and positions row by row in Grafana's 24 columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as db
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm

from rocketcluster.operator.monitoring.conventions import DASHBOARD_TAG, series

COLUMNS: Final = 24
DATASOURCE: Final = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
REF_IDS: Final = "ABCDEFGHIJ"

Panel = timeseries.Panel | stat.Panel | db.Row
Step = tuple[float, str]


@dataclass(frozen=True)
class Q:
    """One query of a panel and its legend."""

    expr: str
    legend: str = ""


def v(metric: str, *variables: str, extra: str = "") -> str:
    """``metric`` selected by dashboard variables (``=~``: they may be multi-valued or
    All) and an extra fixed matcher."""
    return series(metric, *(f'{name}=~"${name}"' for name in variables), extra)


def _thresholds(base: str, steps: tuple[Step, ...]) -> db.ThresholdsConfig:
    return (
        db.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps(
            [dm.Threshold(value=None, color=base)]
            + [dm.Threshold(value=value, color=color) for value, color in steps]
        )
    )


def _targets(queries: tuple[Q, ...]) -> list[Builder[Any]]:
    if not queries or len(queries) > len(REF_IDS):
        raise ValueError(f"a panel takes 1 to {len(REF_IDS)} queries, not {len(queries)}")
    return [
        prometheus.Dataquery()
        .expr(q.expr)
        .legend_format(q.legend or "__auto")
        .ref_id(REF_IDS[i])
        .datasource(DATASOURCE)
        for i, q in enumerate(queries)
    ]


def graph(
    title: str,
    description: str,
    unit: str,
    *queries: Q,
    steps: tuple[Step, ...] = (),
    base: str = "green",
    min_value: float | None = None,
    max_value: float | None = None,
) -> timeseries.Panel:
    """A time series; with threshold steps, drawn as dashed lines."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries))
        .unit(unit)
        .thresholds(_thresholds(base, steps))
        .line_width(1)
        .fill_opacity(10)
        .show_points(cm.VisibilityMode.NEVER)
        .legend(
            common_builders.VizLegendOptions()
            .show_legend(True)
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .calcs(["lastNotNull", "max"])
        )
        .tooltip(
            common_builders.VizTooltipOptions()
            .mode(cm.TooltipDisplayMode.MULTI)
            .sort(cm.SortOrder.DESCENDING)
        )
        .thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(
                cm.GraphTresholdsStyleMode.DASHED if steps else cm.GraphTresholdsStyleMode.OFF
            )
        )
    )
    if min_value is not None:
        panel = panel.min(min_value)
    if max_value is not None:
        panel = panel.max(max_value)
    return panel


def single(
    title: str,
    description: str,
    unit: str,
    *queries: Q,
    steps: tuple[Step, ...] = (),
    base: str = "green",
    mappings: dict[str, tuple[str, str]] | None = None,
) -> stat.Panel:
    """A stat of each series' last value, coloured by threshold or by value mapping
    (``{"1": ("master", "green")}``)."""
    panel = (
        stat.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries))
        .unit(unit)
        .thresholds(_thresholds(base, steps))
        .color_mode(
            cm.BigValueColorMode.BACKGROUND if steps or mappings else cm.BigValueColorMode.NONE
        )
        .graph_mode(cm.BigValueGraphMode.NONE)
        .text_mode(cm.BigValueTextMode.AUTO)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    if mappings:
        panel = panel.mappings(
            [
                dm.ValueMap(
                    options={
                        value: dm.ValueMappingResult(text=text, color=color, index=i)
                        for i, (value, (text, color)) in enumerate(mappings.items())
                    }
                )
            ]
        )
    return panel


class Grid:
    """Places panels left to right, wrapping at 24 columns, and numbers them."""

    def __init__(self) -> None:
        self._x = 0
        self._y = 0
        self._row_height = 0
        self._next_id = 1
        self.panels: list[Panel] = []

    def add(self, panel: Panel, width: int, height: int = 8) -> Grid:
        if not 1 <= width <= COLUMNS:
            raise ValueError(f"a panel is 1 to {COLUMNS} columns wide, not {width}")
        if self._x + width > COLUMNS:
            self._x, self._y, self._row_height = 0, self._y + self._row_height, 0
        panel.id(self._next_id).grid_pos(dm.GridPos(h=height, w=width, x=self._x, y=self._y))
        self._next_id += 1
        self._x += width
        self._row_height = max(self._row_height, height)
        self.panels.append(panel)
        return self

    def row(self, title: str) -> Grid:
        """A row header across the whole width, on a line of its own: the panels
        added after it are its section."""
        if self._x:
            self._x, self._y, self._row_height = 0, self._y + self._row_height, 0
        return self.add(db.Row(title).collapsed(False), COLUMNS, 1)


def datasource_variable() -> db.DatasourceVariable:
    return db.DatasourceVariable("datasource").label("Data source").type("prometheus")


def query_variable(name: str, label: str, query: str, *, all_values: bool) -> db.QueryVariable:
    """A variable filled from Prometheus label values; with ``all_values``, several
    values or All (``.*``) may be chosen."""
    variable = (
        db.QueryVariable(name)
        .label(label)
        .query(query)
        .datasource(DATASOURCE)
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
    )
    if all_values:
        variable = variable.multi(True).include_all(True).all_value(".*")
    return variable


def board(
    uid: str,
    title: str,
    description: str,
    variables: list[db.QueryVariable],
    grid: Grid,
) -> dict[str, Any]:
    """A dashboard as plain JSON data, linked to the others by their common tag."""
    built = (
        db.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([DASHBOARD_TAG])
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .with_variable(datasource_variable())
        .link(
            db.DashboardLink("RocketCluster")
            .type(dm.DashboardLinkType.DASHBOARDS)
            .tags([DASHBOARD_TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
    )
    for variable in variables:
        built = built.with_variable(variable)
    for panel in grid.panels:
        built = built.with_row(panel) if isinstance(panel, db.Row) else built.with_panel(panel)
    data: dict[str, Any] = json.loads(json.dumps(built.build(), cls=JSONEncoder))
    return data
