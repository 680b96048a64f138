"""The live view's panels and dialogs. Each panel is redrawn from a sample by the app, on the UI thread."""

from __future__ import annotations

import textwrap
import weakref

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import RenderResult
from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import RenderOptions, Visual, VisualType, visualize
from textual.widget import Widget
from textual.widgets import Static

from gputop_tracker.core.gpu import vendor_label
from gputop_tracker.core.model import GpuSample, HostSample, ResourceUsage, human_bytes, human_seconds
from gputop_tracker.core.summary import GpuHistory

SIDE_WIDTH = 54  # columns of the side panels in the wide layout (live.tcss #side)


def side_width(width: int) -> int:
    """Columns of the side panels at this terminal width (wide layout)."""
    return SIDE_WIDTH if width >= 150 else SIDE_WIDTH - 10


def short_bytes(n: float | None) -> str:
    """Three significant figures in at most 7 cells: table cells stay narrow."""
    if n is None:
        return "-"
    for unit, factor in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= factor:
            v = n / factor
            if v >= 100:
                return f"{v:.0f} {unit}"
            if v >= 10:
                return f"{v:.1f} {unit}"
            return f"{v:.2f} {unit}"
    return f"{n:.0f} B"


def clock(seconds: float) -> str:
    s = int(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}"


def bar(fraction: float | None, width: int) -> Text:
    """A text bar: one cell per 1/width, coloured by how full it is."""
    width = max(width, 1)
    if fraction is None:
        return Text("·" * width, style="dim")
    f = min(max(fraction, 0.0), 1.0)
    full = round(f * width)
    style = "green" if f < 0.6 else "yellow" if f < 0.85 else "red"
    return Text.assemble(("█" * full, style), ("░" * (width - full), "bright_black"))


def pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}%"


def plain(text: str | None) -> Content | None:
    """A border title as written: a str would be read as Textual markup (a command line's `[0m", end="")`,
    a job's or a GPU's name, a filter typed: a MarkupError that ends the view)."""
    return None if text is None else Content(text)


def set_border(widget: Widget, title: str | None, subtitle: str | None) -> None:
    """Border texts (plain text, not markup), set only when they change: setting one repaints the whole widget,
    even unchanged."""
    set_border_text(widget, "border_title", title)
    set_border_text(widget, "border_subtitle", subtitle)


def set_border_text(widget: Widget, which: str, text: str | None) -> None:
    """`widget.border_title` or `.border_subtitle` (`which`) to plain `text`, unless that is what was set last. What
    was set is compared as given: Textual's getter writes the text back as markup, which cost a panel redrawn
    each second more than the rest of its drawing."""
    shown = _BORDERS.setdefault(widget, {})
    if which in shown and shown[which] == text:
        return
    shown[which] = text
    setattr(widget, which, plain(text))


_BORDERS: weakref.WeakKeyDictionary[Widget, dict[str, str | None]] = weakref.WeakKeyDictionary()


class Panel(Static):
    """A Static that skips updates with the same content and repaints only the lines whose text changed.

    Every sample redraws each panel, and mostly one or two of its lines change (a clock, a figure): a Static
    renders all its lines again, borders included, on any change. Here each line of the text is rendered once
    (Textual's own Visual path, so it looks the same) and kept until that line changes; the screen is laid out
    again only when the number of lines changed.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._text = False  # shown: a text (Text or str) by lines, not another visual
        self._shown: Text | str | None = None  # that text (joined from _lines when given as lines)
        self._lines: list[Text | str] = []  # the lines of the text
        self._rendered: list[list[Strip]] = []  # each line's strips at _width (a long line may wrap)
        self._strips: list[Strip] = []  # all of them, in order
        self._width = -1
        self._fast_styles: dict[object, Style] = {}  # (Rich style, x, y) -> that style on the panel's, offset

    @property
    def shown(self) -> Text | str | None:
        """The text shown (None: another visual, or nothing yet)."""
        if self._text and self._shown is None:
            self._shown = Text("\n").join(Text(x) if isinstance(x, str) else x for x in self._lines)
        return self._shown if self._text else None

    @property
    def content(self) -> VisualType:
        shown = self.shown
        return shown if shown is not None else super().content

    @content.setter
    def content(self, content: VisualType) -> None:
        self.update(content)

    def render(self) -> RenderResult:
        shown = self.shown
        return shown if shown is not None else super().render()

    def update(self, content: object = "", *, layout: bool | None = None) -> None:  # type: ignore[override]
        if not isinstance(content, Text | str):
            self._text = False
            self._shown = None
            self._rendered = []
            super().update(content, layout=True if layout is None else layout)  # type: ignore[arg-type]
            return
        if self._text and content == self._shown:
            return
        self._show(_split_lines(content), layout)
        self._shown = content

    def show_lines(self, lines: list[Text | str]) -> None:
        """The text given as its lines (each without a newline): as `update` with them joined, without joining
        them here and splitting them again there."""
        if not self._text or lines != self._lines:
            self._show(list(lines), None)

    def _show(self, lines: list[Text | str], layout: bool | None) -> None:
        self._text = True
        self._shown = None
        old, self._lines = self._lines, lines
        width = self._width
        if layout or width != self.size.width or len(old) != len(self._lines) or not self._rendered:
            self._rendered = []  # rendered again at the next paint
            self.refresh(layout=True)
            return
        regions = []
        y = 0
        for i, line in enumerate(self._lines):
            strips = self._rendered[i]
            if line != old[i]:
                new = self._render_text(line, width, i)
                if len(new) != len(strips):  # it wraps differently: the height may change
                    self._rendered = []
                    self.refresh(layout=True)
                    return
                self._rendered[i] = strips = new
                regions.append(Region(0, y, width, len(strips)))
            y += len(strips)
        self._strips = [strip for strips in self._rendered for strip in strips]
        if regions:
            self.refresh(*regions)

    def _render_text(self, line: Text | str, width: int, index: int = 0) -> list[Strip]:
        """One line of the text as strips at `width`. `index`: which line of the text it is: text selection
        reads (character, line) offsets from the segments, as Textual's Content path writes them."""
        fast = self._fast_strip(line, width, index)
        if fast is not None:
            return [fast]
        visual = visualize(self, line, markup=self._render_markup)
        if self.styles.content_align != ("left", "top"):
            strips = Visual.to_strips(self, visual, width, None, self.visual_style)
        else:
            # Visual.to_strips less its steps for a selection (drawn by Static meanwhile, see render_line) and
            # for links (panels have none): a third of its cost, for each line of each panel every sample
            options = RenderOptions(self._get_style, self.styles)  # type: ignore[arg-type]  # as Visual.to_strips
            strips = visual.render_strips(width, None, self.visual_style, options)
        if not strips:
            return [Strip.blank(0)]
        return [strip.apply_offsets(_first_offset(strip), index) for strip in strips]  # rendered alone: line 0

    def _fast_strip(self, line: Text | str, width: int, index: int) -> Strip | None:
        """A line that fits, left aligned, drawn straight from its Rich segments on the panel's style: what
        Textual's Content path draws (the offsets that text selection reads included) at a quarter of its
        cost; None for a line that wraps, is aligned, has a style of its own or may hold markup (Textual's
        path draws those)."""
        if isinstance(line, str):
            if "[" in line and self._render_markup:
                return None
            line = Text(line)
        if line.style or line.cell_len > width or self.styles.content_align != ("left", "top"):
            return None
        base = self.visual_style.rich_style
        styles = self._fast_styles
        if styles.get(None) is not base or len(styles) > 4096:
            styles.clear()
            styles[None] = base
        segments = []
        x = 0
        cells = 0
        for text, style, _ in line.render(self.app.console):
            key = (style, x, index)
            final = styles.get(key)
            if final is None:
                final = styles[key] = (base + style if style else base) + Style.from_meta({"offset": (x, index)})
            segments.append(Segment(text, final))
            x += len(text)  # offsets count characters, as Textual's selection does
            cells += cell_len(text)
        return Strip(segments, cells)

    def render_line(self, y: int) -> Strip:
        if not self._text or self.text_selection is not None:
            return super().render_line(y)
        width = self.size.width
        if width != self._width or not self._rendered:
            self._width = width
            self._rendered = [self._render_text(line, width, i) for i, line in enumerate(self._lines)]
            self._strips = [strip for strips in self._rendered for strip in strips]
        if y < len(self._strips):
            return self._strips[y]
        return Strip.blank(width, self.visual_style.rich_style)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._rendered = []


def _first_offset(strip: Strip) -> int:
    """The character offset Textual gave the strip's first segment (a wrapped line's later rows start past 0)."""
    for segment in strip:
        meta = segment.style.meta if segment.style is not None else {}
        if "offset" in meta:
            return int(meta["offset"][0])
    return 0


def _split_lines(t: Text | str) -> list[Text | str]:
    if isinstance(t, Text):
        if "\n" not in t.plain:
            return [t]  # one line: itself (Text.split copies it)
        return list(t.split("\n", allow_blank=True))
    return list(t.split("\n"))


class GpuPanel(Panel):
    """One GPU: utilization and memory bars, temperature and power (its history is in the live charts).
    One widget, its border included: the screen composes it each sample."""

    def __init__(self, index: int, **kwargs: object) -> None:
        super().__init__(id=f"gpu-{index}", classes="gpu panel", **kwargs)
        self.index = index

    def show(self, g: GpuSample, hist: GpuHistory | None, mean: float | None, compact: bool, width: int) -> None:
        """`mean`: this GPU's mean utilization over the run, from the sampler's running summary."""
        label = " SIMULATED" if g.simulated else ""
        lost = " LOST" if g.lost else ""
        vendor = vendor_label(g.vendor)
        frac_mem = g.memory_used / g.memory_total if g.memory_used is not None and g.memory_total else None
        util = g.utilization_gpu
        temp = "-" if g.temperature_c is None else f"{g.temperature_c:.0f}°C"
        power = "-" if g.power_w is None else f"{g.power_w:.0f} W"
        mem = f"{short_bytes(g.memory_used)}/{short_bytes(g.memory_total)}"
        if compact:
            bw = max(4, (width - 62 - len(vendor)) // 2)
            t = Text.assemble(
                (f"GPU{g.index}", "bold"),
                f" {vendor}" if vendor else "",
                (label, "bold magenta"),
                (lost, "bold red"),
                " util ",
                bar(None if util is None else util / 100, bw),
                f" {pct(util):>4}  mem ",
                bar(frac_mem, bw),
                f" {mem}  {temp} {power}",
            )
        else:
            named = g.name.upper().startswith(vendor.upper()) if vendor else True  # "AMD Instinct MI300X"
            set_border(
                self, f"GPU {g.index} · {g.name if named else f'{vendor} {g.name}'}", (label + lost).strip() or None
            )
            bw = max(6, width - 26)
            limit = f" / {g.power_limit_w:.0f} W" if g.power_limit_w else ""
            self.show_lines(
                [
                    Text.assemble(
                        ("util ", "bold"),
                        bar(None if util is None else util / 100, bw),
                        f" {pct(util):>5} (mean {pct(mean)})",
                    ),
                    Text.assemble(("mem  ", "bold"), bar(frac_mem, bw), f" {mem}"),
                    Text(f"tree {short_bytes(g.tree_memory)}   {temp}   {power}{limit}"),
                ]
            )
            return
        self.update(t)


class HostPanel(Panel):
    def show(self, h: HostSample, width: int) -> None:
        frac = h.memory_used / h.memory_total if h.memory_total else None
        figures = (
            f" {short_bytes(h.memory_used)}/{short_bytes(h.memory_total)}  CPU {h.cpu_percent:.0f}% of {h.cpu_count}"
        )
        room = width - len("host RAM ") - len(figures)
        if room < 4:  # never wrap: the bar gives way first, then the word "host"
            self.update(Text.assemble(("RAM ", "bold"), bar(frac, max(3, room + 5)), figures))
            return
        self.update(Text.assemble(("host ", "bold"), "RAM ", bar(frac, min(30, room)), figures))


class SummaryPanel(Panel):
    """The run so far (or the final report): the figures the report prints."""

    def show_final(
        self, u: ResourceUsage, compact: bool, note: str = "", *, live: bool = False, width: int = 48
    ) -> None:
        """The final report, or (`live`) the sampler's running summary (`channel.Progress`): the figures the
        report prints. `width`: the panel's content width (the saved path is shortened to it)."""
        ram = u.max_ram
        ct = u.cpu_time
        saved = f"saved: {u.session_path}" if u.session_path else "session not saved"
        if len(saved) > width:  # the file's name matters more than its directory
            saved = "saved: …" + saved[len(saved) - width + 8 :]
        gpu_util = gpu_util_text(u)
        if compact:
            gpu = f"  GPU {short_bytes(u.max_gpu_ram.combined)} {gpu_util_text(u, short=True)}" if u.gpus else ""
            parts: list[str | tuple[str, str]] = [
                ("peak " if live else "final peak ", "bold" if live else "bold green"),
                f"RAM {short_bytes(ram.combined.total_rss)}  CPU {human_seconds(ct.total)} "
                f"({u.cpu_utilization.combined.mean_sum_percent:.0f}%)  thr {u.peak_threads}{gpu}",
            ]
            if not live:
                parts += ["\n", (saved, "italic")]
            self.update(Text.assemble(*parts))
            return
        set_border(self, "run so far" if live else "final summary", None)
        peak = human_bytes(ram.combined.total_rss) + " (tree)"
        if not ram.combined.total_rss:  # it ended before the first sample read it: nothing was measured
            peak = "- (ended before a sample)" if not live else "none yet"
        lines = [
            f"peak RAM    {peak}",
            f"  private   {human_bytes(ram.combined.private_rss)}",
            f"CPU time    {human_seconds(ct.total)}, {ct.mean_percent:.0f}% of a core",
            f"CPU util    mean {u.cpu_utilization.combined.mean_sum_percent:.0f}%"
            f"  max {u.cpu_utilization.combined.max_sum_percent:.0f}%",
            f"threads     {u.peak_threads} peak, {u.n_processes} processes",
        ]
        if u.gpus:
            lines.append(f"GPU memory  {human_bytes(u.max_gpu_ram.combined)} peak")
            lines.append(f"GPU util    {gpu_util}")
        # inside the border: a figure's line is cut to the width, the saved path and a note wrap onto more lines
        lines = [line if len(line) <= width else line[: width - 1] + "…" for line in lines]
        if not live:
            lines.append(saved)
        if note:
            lines += textwrap.wrap(note, max(width, 10), break_on_hyphens=False) or [note]
        self.update("\n".join(lines))


def gpu_util_text(u: ResourceUsage, *, short: bool = False) -> str:
    """Per GPU, never summed: one GPU's mean and max, or the mean over GPUs with their count."""
    if not u.gpus:
        return "-"
    mean = sum(g.mean_utilization or 0.0 for g in u.gpus) / len(u.gpus)
    peak = max(g.max_utilization or 0.0 for g in u.gpus)
    if short:
        return pct(mean) + (f"×{len(u.gpus)}" if len(u.gpus) > 1 else "")
    if len(u.gpus) == 1:
        return f"mean {pct(mean)}  max {pct(peak)}"
    return f"mean {pct(mean)}  max {pct(peak)} per GPU ×{len(u.gpus)}"
