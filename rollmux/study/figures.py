"""What every study figure has: a number and a caption in the markdown, a CSV of the plotted numbers
beside its PNG, integer axes for integer quantities, and no series hidden under another."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.ticker import FixedLocator, MaxNLocator

NA = "n/a"  # a value the figure cannot show (undefined for that policy): marked, never a zero bar
STYLES = (("o", "-"), ("s", "--"), ("^", ":"), ("D", "-."), ("v", (0, (5, 1))), ("P", (0, (1, 3))))


def write_csv(png: Path, header: Sequence[str], rows: Sequence[Sequence[object]]) -> Path:
    """The plotted numbers beside `png` (same name, .csv): `header`, then `rows` (None as NA)."""
    path = Path(png).with_suffix(".csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows([NA if v is None else v for v in row] for row in rows)
    return path


def integer_axis(axis, values: Sequence[int] = ()) -> None:
    """Ticks on integers only: at `values` when given (the quantities plotted), else wherever fits."""
    if values:
        axis.set_major_locator(FixedLocator(sorted(set(values))))
    else:
        axis.set_major_locator(MaxNLocator(integer=True))


def identical_labels(series: dict[str, Sequence]) -> dict[str, str]:
    """Legend labels: a series equal to an earlier one says so (`b (identical to a)`), since its line
    lies under the other's."""
    out: dict[str, str] = {}
    seen: list[tuple[str, list]] = []
    for name, ys in series.items():
        twin = next((n for n, other in seen if other == list(ys)), None)
        out[name] = name if twin is None else f"{name} (identical to {twin})"
        seen.append((name, list(ys)))
    return out


def same_lines(series: dict[str, Sequence]) -> list[list[str]]:
    """The names whose series are equal, in groups of two or more (lines drawn over each other),
    each group in the order of `series`."""
    groups: dict[tuple, list[str]] = {}
    for name, ys in series.items():
        groups.setdefault(tuple(ys), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


@dataclass
class Figures:
    """The study's figures in the order the markdown shows them: each numbered, with its caption."""

    captions: list[str] = field(default_factory=list)

    def markdown(self, png: str, caption: str) -> list[str]:
        """The image and its numbered caption (and a link to its CSV), as markdown lines."""
        self.captions.append(caption)
        n = len(self.captions)
        csv_name = Path(png).with_suffix(".csv").name
        return [f"![Figure {n}]({png})", "", f"*Figure {n}. {caption}* Numbers: [{csv_name}]({csv_name}).", ""]

    def omitted(self, what: str, why: str) -> list[str]:
        """A figure left out of this run, saying why (a plot of one point would show nothing)."""
        return [f"*{what}: not drawn, {why}.*", ""]
