"""Labels of a session picture that never overlap: block names staggered on up to three rows at the bottom of
the panel, mark and alert names at its top; a label that fits nowhere is hidden, and a block name left with no
label at all goes to the panel's legend. Placed from the labels' real extents, measured once the figure's
layout is done (matplotlib; imported only when a figure is drawn)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROWS = 3  # rows of block names at the bottom of a panel
ROW_Y = 0.02  # the first row's height, in the panel's height
ROW_STEP = 0.08
PAD = 2.0  # pixels kept between two labels


@dataclass
class PanelLabels:
    """The labels drawn on one panel, to be arranged once the layout is known."""

    blocks: list[tuple[Any, str, str]] = field(default_factory=list)  # (Text, block name, colour)
    tops: list[Any] = field(default_factory=list)  # marks, alerts, OOM kills (Text)

    def block(self, text: Any, name: str, hue: str) -> None:
        self.blocks.append((text, name, hue))

    def top(self, text: Any) -> None:
        self.tops.append(text)


def arrange(fig: Any, ax: Any, labels: PanelLabels, add_to_legend: Callable[[list[tuple[str, str]]], None]) -> None:
    """Show each label where it overlaps no other and stays inside the panel, hide the rest; block names with
    no label left go to the legend (then placed again: the legend may have narrowed the panel)."""
    if not labels.blocks and not labels.tops:
        return
    unlabelled = _place(fig, ax, labels)
    if unlabelled:
        add_to_legend(unlabelled)
        _place(fig, ax, labels)


def _place(fig: Any, ax: Any, labels: PanelLabels) -> list[tuple[str, str]]:
    with warnings.catch_warnings():  # a small figure with long legends is drawn without the layout (as render)
        warnings.filterwarnings("ignore", message="constrained_layout not applied", category=UserWarning)
        fig.draw_without_rendering()  # the constrained layout: the panels' final place and size
    renderer = fig.canvas.get_renderer()
    panel = ax.get_window_extent(renderer)
    placed: list[Any] = []

    def fits(text: Any) -> bool:
        box = text.get_window_extent(renderer)
        if box.x0 < panel.x0 - PAD or box.x1 > panel.x1 + PAD:  # past the panel: over the legend or the axis
            return False
        grown = box.padded(PAD / 2)
        if any(grown.overlaps(box) for box in placed):
            return False
        placed.append(grown)
        return True

    for text in sorted(labels.tops, key=lambda label: label.get_position()[0]):
        text.set_visible(True)
        text.set_visible(fits(text))
    shown: dict[str, str] = {}
    for text, name, hue in sorted(labels.blocks, key=lambda block_label: block_label[0].get_position()[0]):
        text.set_visible(True)
        for row in range(ROWS):
            text.set_y(ROW_Y + row * ROW_STEP)
            if fits(text):
                shown[name] = hue
                break
        else:
            text.set_visible(False)
    missing: dict[str, str] = {}
    for _text, name, hue in labels.blocks:
        if name not in shown:
            missing.setdefault(name, hue)
    return list(missing.items())
