"""The history plot's geometry, read back from the SVG the renderer writes."""
import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest

from jobs.report.svg import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, history_plot

START = datetime(2025, 1, 1)


def target_lines(targets: list[float | None]) -> list[list[tuple[float, float]]]:
    """The (x, y) vertices of each target line in the plot of one point per day, with these targets."""
    points = [SimpleNamespace(started_at=START + timedelta(days=i), value=100.0 + i, target=t, run_id=f"run-{i}")
              for i, t in enumerate(targets)]
    svg = ET.fromstring(history_plot("ROW", points, [], None, "tok/s", "a row"))
    return [[tuple(map(float, xy.split(","))) for xy in line.get("points").split()]
            for line in svg.iter("polyline") if line.get("class") == "target"]


@pytest.mark.parametrize("points", [1, 2, 40])
def test_the_target_spans_the_plot_whatever_the_number_of_points(points):
    (line,) = target_lines([120.0] * points)
    xs, ys = zip(*line)
    assert (min(xs), max(xs)) == (LEFT, WIDTH - RIGHT)   # one point used to draw a 4 px dash
    assert len(set(ys)) == 1 and TOP < ys[0] < HEIGHT - BOTTOM   # level, inside the frame


def test_a_target_undefined_on_some_runs_leaves_gaps_and_a_lone_one_still_shows():
    # A ratio row's target is undefined where its peer did not run: five days, one point a day.
    step = (WIDTH - RIGHT - LEFT) / 4
    lines = target_lines([110.0, None, 120.0, None, None])
    spans = [(min(x for x, _ in line), max(x for x, _ in line)) for line in lines]
    assert spans == [pytest.approx((LEFT, LEFT + step / 2), abs=0.1),   # the first point's, from the left edge
                     pytest.approx((LEFT + 1.5 * step, LEFT + 2.5 * step), abs=0.1)]   # halfway to each neighbour
    assert target_lines([None, None]) == []
