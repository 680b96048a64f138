"""Where the summary is shown as text or JSON (headless mode, `sessions show`, `str(Tracker)`)."""

from __future__ import annotations

import time
from typing import Any

from gputop_tracker.core.gpu.backend import vendor_label
from gputop_tracker.core.model.models import BlockSummary, Event, GpuSummary, ResourceUsage
from gputop_tracker.core.model.text import command_line, escape_controls, json_text
from gputop_tracker.core.model.units import RAM_UNITS, TIME_UNITS, Units, human_bytes, human_seconds
from gputop_tracker.core.report.job_section import job_lines

# gpu-tracker's defaults, so JSON read by its users' scripts keeps its meaning
DEFAULT_RAM_UNIT = "gigabytes"
DEFAULT_TIME_UNIT = "hours"
DEFAULT_UNITS = Units()


def to_json_dict(usage: ResourceUsage, units: Units = DEFAULT_UNITS) -> dict[str, Any]:
    converted = usage.in_units(
        units.ram or DEFAULT_RAM_UNIT, units.gpu_ram or DEFAULT_RAM_UNIT, units.time or DEFAULT_TIME_UNIT
    )
    return converted.model_dump(mode="json")


def to_json(usage: ResourceUsage, units: Units = DEFAULT_UNITS) -> str:
    return json_text(to_json_dict(usage, units))


class _Fmt:
    def __init__(self, ram_unit: str | None, gpu_ram_unit: str | None, time_unit: str | None) -> None:
        self.ram_unit = ram_unit
        self.gpu_ram_unit = gpu_ram_unit
        self.time_unit = time_unit

    @staticmethod
    def _in(value: float | None, unit: str | None, human: str) -> str:
        if value is None:
            return "-"
        if unit is None:
            return human
        return f"{value / RAM_UNITS[unit]:.3f} {unit}"

    def ram(self, v: float | None) -> str:
        return self._in(v, self.ram_unit, human_bytes(v))

    def gpu(self, v: float | None) -> str:
        return self._in(v, self.gpu_ram_unit, human_bytes(v))

    def time(self, s: float) -> str:
        if self.time_unit is None:
            return human_seconds(s)
        return f"{s / TIME_UNITS[self.time_unit]:.4f} {self.time_unit}"


def table(rows: list[list[str]], align: str) -> list[str]:
    """Aligned lines of a table (for other reports: `sessions compare`)."""
    return _table(rows, align)


def _pct(p: float | None) -> str:
    return "-" if p is None else f"{p:.1f}%"


GAP = "  "  # between two columns of a table, whatever the widths of their figures


def _widths(rows: list[list[str]]) -> list[int]:
    return [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(len(r) for r in rows))]


def _table(rows: list[list[str]], align: str, widths: list[int] | None = None) -> list[str]:
    """Rows of cells as aligned lines: each column as wide as its widest cell (header included), columns
    separated by GAP, so no figure can run into the next one in any unit. `align` has one '<' or '>' per
    column; a row may have fewer cells than the table (its line ends there)."""
    widths = widths or _widths(rows)
    out = []
    for row in rows:
        cells = [c.rjust(w) if a == ">" else c.ljust(w) for c, w, a in zip(row, widths, align, strict=False)]
        out.append(GAP.join(cells).rstrip())
    return out


def to_text(usage: ResourceUsage, units: Units = DEFAULT_UNITS, *, max_processes: int = 10) -> str:
    """An aligned, human report with the same figures as the JSON (human units unless a unit is given)."""
    f = _Fmt(units.ram, units.gpu_ram, units.time)
    u = usage
    lines = [*_head_lines(u, f), "", *_ram_lines(u, f), *probe_line(u), "", *_cpu_lines(u), "", *_gpu_lines(u, f)]
    lines += _process_lines(u, f, max_processes)
    lines += job_lines(u)
    lines += block_lines(u.blocks, f)
    alerts = [e for e in u.events if e.type in ALERT_TYPES]
    if alerts:
        lines += ["", f"Alerts ({len(alerts)}; every event: `gputop-track sessions events ID`)"]
        lines += events_lines(alerts, limit=20)
    if u.notes:
        lines += ["", "Notes", *(f"  - {escape_controls(n)}" for n in u.notes)]
    if u.session_path:
        lines += ["", f"Session saved: {escape_controls(u.session_path)}"]
    return "\n".join(lines) + "\n"


def _status(u: ResourceUsage) -> str:
    if u.mode == "attach":
        return {"exited": "target exited", "stopped": "tracking stopped; target still running"}.get(u.status, u.status)
    if u.exit_signal:
        return f"killed by signal {u.exit_signal} (exit code {u.exit_code})"
    if u.exit_code is not None:
        return f"exited with code {u.exit_code}"
    return u.status


def _head_lines(u: ResourceUsage, f: _Fmt) -> list[str]:
    """The title, the command (one printable line), how it ended and how it was sampled."""
    title = "gputop-track report"
    if u.session_id:
        title += f" — session {u.session_id}"
    cmd = command_line(u.command) or "-"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(u.start_time)) if u.start_time else "-"
    return [
        title,
        "=" * len(title),
        f"{'command':<14}{cmd}",
        f"{'status':<14}{_status(u)}   (pid {u.pid}, {u.mode}, host {u.host})",
        f"{'wall time':<14}{f.time(u.compute_time.time)}   started {started}, "
        f"{_count(u.n_samples, 'sample')} every {u.interval:g} s, {_count(u.n_processes, 'process', 'processes')} seen",
    ]


def short_label(label: str) -> str:
    """The kind of a figure in a few words ("exact (cgroup)", "lower bound"); the full reason is in `sources`."""
    head, _, rest = label.partition(" (")
    if head != "exact" or not rest:
        return head
    first = rest.split()[0].rstrip(",;)")
    return f"exact ({first if first not in ('the', 'one', 'two') else 'single process'})"


def _ram_lines(u: ResourceUsage, f: _Fmt) -> list[str]:
    """The RAM peaks table, then single figures with a description in its name and total columns."""
    ram = u.max_ram
    src = u.sources
    ram_rows = [["RAM (peaks)", "total", "private", "shared", "how measured"]]
    reasons: list[str] = []
    for name, v, how in (
        ("main", ram.main, src.get("max_ram.main.total_rss", "")),
        ("descendants", ram.descendants, src.get("max_ram.descendants.total_rss", "")),
        ("combined", ram.combined, src.get("max_ram.combined.total_rss", "")),
    ):
        short = short_label(how)
        if short != how:
            reasons.append(f"  [{len(reasons) + 1}] {name}: {how}")
            short += f" [{len(reasons)}]"
        if not v.total_rss and (u.n_processes == 0 or "not seen" in how):  # never read: no figure, not 0 B
            ram_rows.append([f"  {name}", "-", "-", "-", short])
        else:
            ram_rows.append([f"  {name}", f.ram(v.total_rss), f.ram(v.private_rss), f.ram(v.shared_rss), short])
    extra: list[list[str]] = []
    if ram.peak_source not in ("cgroup", "upper_bound") and ram.combined_upper_bound is not None:
        extra.append(["  combined ≤", f.ram(ram.combined_upper_bound), "upper bound: Σ of per-process peaks"])
    else:
        sampled = f.ram(ram.combined_sampled) if u.n_processes else "-"
        extra.append(["  combined (Σ)", sampled, "largest Σ PSS seen in one sample"])
    if ram.cgroup_peak is not None and ram.peak_source != "cgroup":
        extra.append(["  job cgroup", f.ram(ram.cgroup_peak), "peak of the job's memory cgroup (page cache included)"])
    extra.append(["  system", f.ram(ram.system), f"of {f.ram(ram.system_capacity)} (whole machine, sampled)"])
    widths = _widths(ram_rows + [row[:2] for row in extra])
    lines = _table(ram_rows, "<>>><", widths) + _table(extra, "<><", [*widths[:2], 0])
    if u.smaps_max_age is not None:
        lines.append(f"  private/shared from smaps_rollup, refreshed at least every {max(u.smaps_max_age, 1.0):.0f} s")
    if reasons:
        lines += ["  how measured:", *(escape_controls(r) for r in reasons)]
    return lines


def _cpu_lines(u: ResourceUsage) -> list[str]:
    cpu = u.cpu_utilization
    ct = u.cpu_time
    lines = [
        "CPU",
        f"  {'CPU time':<16}user {ct.user:.2f} s + system {ct.system:.2f} s = {ct.total:.2f} s "
        f"({ct.mean_percent:.0f}% of one core on average; {ct.source})",
    ]
    cpu_rows = [["  utilization", "max", "mean", f"(100% = one core; {cpu.n_expected_cores} cores expected)"]]
    for name, p in (
        ("main", cpu.main),
        ("descendants", cpu.descendants),
        ("combined", cpu.combined),
        ("system", cpu.system),
    ):
        cpu_rows.append([f"    {name}", _pct(p.max_sum_percent), _pct(p.mean_sum_percent)])
    lines += _table(cpu_rows, "<>><")
    lines.append(
        f"  {'threads (peak)':<16}main {cpu.main_n_threads}, descendants {cpu.descendants_n_threads}, "
        f"combined {cpu.combined_n_threads}"
    )
    return lines


def _gpu_lines(u: ResourceUsage, f: _Fmt) -> list[str]:
    lines = ["GPU"]
    if u.gpu_note:
        lines.append(f"  {escape_controls(u.gpu_note)}")
    if not u.gpus:
        if not u.gpu_note:
            lines.append("  no GPU found")
        return lines + _allocator_lines(u, f)
    g = u.max_gpu_ram
    lines.append(
        f"  {'GPU memory':<16}main {f.gpu(g.main)}, descendants {f.gpu(g.descendants)}, "
        f"combined {f.gpu(g.combined)} (peaks{_gpu_peak_labels(u)})"
    )
    if g.accounting is not None:
        state = "on: exact per-process peaks" if g.accounting else "off (see the notes)"
        lines.append(f"  {'NVML accounting':<16}{state}")
    gu = u.gpu_utilization.gpu_percentages
    lines.append(
        f"  {'utilization':<16}max {_pct(gu.max_sum_percent)}, mean {_pct(gu.mean_sum_percent)} "
        f"(sum over {u.gpu_utilization.n_expected_gpus} counted of {u.gpu_utilization.system_gpu_count} GPUs)"
    )
    if u.gpu_energy_j is not None:
        lines.append(
            f"  {'energy':<16}{u.gpu_energy_j:.1f} J = {u.gpu_energy_wh or 0:.4f} Wh "
            "(counted GPUs, first to last reading)"
        )
    lines += _allocator_lines(u, f)
    for gs in u.gpus:
        lines += _gpu_device_lines(gs, f)
    return lines


def _allocator_lines(u: ResourceUsage, f: _Fmt) -> list[str]:
    """The GPU allocators' own peaks (probe): main's per device, the descendants' summed per device."""
    al = u.max_gpu_ram.allocator
    if al is None:
        return []
    lines = []
    for who, entries in (("main", al.main), ("descendants", al.descendants)):
        for a in entries:
            n = f", {a.processes} processes" if a.processes and a.processes > 1 else ""
            kind = "at exit" if a.at_exit else "peak"
            how = "lower bound" if a.at_exit else "exact" if who == "main" or a.processes == 1 else "upper bound"
            lines.append(
                f"  {'allocator':<16}{who} {escape_controls(a.framework)} {escape_controls(a.device)}: "
                f"{kind} allocated {f.gpu(a.peak_allocated)}, reserved {f.gpu(a.peak_reserved)} ({how}{n})"
            )
    return lines


def probe_line(u: ResourceUsage) -> list[str]:
    """Whether the in-process probe was on and who reported."""
    pr = u.probe
    if pr is None:
        return []
    if not pr.enabled:
        return [f"  probe           off{': ' + escape_controls(pr.note) if pr.note else ''}"]
    pids = ", ".join(str(p) for p in pr.reported[:8]) + (" …" if len(pr.reported) > 8 else "")
    line = f"  probe           on: {len(pr.reported)} Python processes reported their peaks at exit"
    line += f" (PIDs {pids})" if pids else ""
    out = [line]
    for w in pr.without_probe[:5]:
        out.append(f"                  PID {w.pid} ({escape_controls(w.name)}): {w.reason}, no probe")
    return out


def _gpu_peak_labels(u: ResourceUsage) -> str:
    """ ", sampled" when every GPU peak is sampled; else what main, descendants and combined each are."""
    labels = {k: u.sources.get(f"max_gpu_ram.{k}", "sampled") for k in ("main", "descendants", "combined")}
    if all(v.startswith("sampled") and "elimination" not in v for v in labels.values()):
        # where the GPU memory watcher read them: its rate ("sampled at 50 Hz", and where it slowed down)
        head, _, rest = labels["main"].partition(" (")
        rate = head + rest.partition(")")[2]
        return (
            f", {escape_controls(rate)}"
            if len(set(labels.values())) == 1 and head.startswith("sampled at ")
            else ", sampled"
        )
    return "".join(f"; {k}: {escape_controls(v)}" for k, v in labels.items())


def _gpu_device_lines(gs: GpuSummary, f: _Fmt) -> list[str]:
    """One GPU (or MIG instance): its peaks and utilization, details, GPM metrics, unattributed memory."""
    flags = [x for x, on in (("simulated", gs.simulated), ("LOST", gs.lost), ("not counted", not gs.counted)) if on]
    label = gs.name if gs.mig_parent is None else f"MIG on GPU {gs.mig_parent}"
    lines = [
        f"    [{gs.index}] {label:<20} tree peak {f.gpu(gs.tree_peak_memory):>11}  "
        f"device peak {f.gpu(gs.peak_memory_used):>11} of {f.gpu(gs.memory_total)}  "
        f"util mean {_pct(gs.mean_utilization)} max {_pct(gs.max_utilization)}"
        + (f"  ({', '.join(flags)})" if flags else ""),
        "        " + _gpu_details(gs),
    ]
    gpm = [
        f"{name} mean {_pct(mean)} max {_pct(mx)}"
        for name, mean, mx in (
            ("SM activity", gs.mean_sm_activity, gs.max_sm_activity),
            ("SM occupancy", gs.mean_sm_occupancy, gs.max_sm_occupancy),
            ("tensor", gs.mean_tensor_activity, gs.max_tensor_activity),
            ("DRAM bw", gs.mean_dram_bandwidth, gs.max_dram_bandwidth),
        )
        if mean is not None
    ]
    if gpm:
        lines.append("        GPM: " + "; ".join(gpm))
    if gs.peak_unattributed_memory:
        lines.append(f"        unattributed (PIDs not mappable here) peak {f.gpu(gs.peak_unattributed_memory)}")
    return lines


def _process_lines(u: ResourceUsage, f: _Fmt, max_processes: int) -> list[str]:
    """The largest processes by peak RSS, as a table sized from its content (names escaped)."""
    if not u.processes:
        return []
    shown = sorted(u.processes, key=lambda p: p.peak_rss, reverse=True)[:max_processes]
    more = len(u.processes) - len(shown)
    proc_rows = [["pid", "name", "peak RSS", "source", "CPU s", "threads", "GPU", "exit"]]
    for proc in shown:
        proc_rows.append(
            [
                str(proc.pid),
                escape_controls(proc.name[:15]),
                f.ram(proc.peak_rss),
                short_label(proc.peak_rss_source),
                f"{proc.cpu_seconds:.2f}",
                str(proc.peak_threads),
                f.gpu(proc.peak_gpu_memory),
                "" if proc.exit_code is None else str(proc.exit_code),
            ]
        )
    lines = ["", f"Processes (largest {len(shown)} of {len(u.processes)} by peak RSS)"]
    lines += ["  " + line for line in _table(proc_rows, "><><>>>>")]
    if more > 0:
        lines.append(f"  … and {more} more (see the JSON report or `gputop-track sessions show`)")
    return lines


def _sampled(b: BlockSummary, figure: str) -> str:
    return "*" if getattr(b, figure) is not None and b.sources.get(figure, "").startswith("sampled") else ""


def _short_time(f: _Fmt, s: float) -> str:
    return f"{s * 1000:.1f} ms" if f.time_unit is None and s < 1 else f.time(s)


def block_lines(blocks: list[BlockSummary], f: _Fmt, limit: int = 50) -> list[str]:
    """The code blocks (`with block()`, `@tracked`) as a table: exact figures plain, sampled ones starred."""
    if not blocks:
        return []
    rows = [
        ["block", "calls", "total", "mean", "max", "peak RAM", "private", "tree RAM", "GPU RAM", "CPU s", "CPU", "GPU"]
    ]
    for b in blocks[:limit]:
        d = b.duration
        rows.append(
            [
                escape_controls(b.name[:40]),
                str(b.calls),
                _short_time(f, d.total),
                _short_time(f, d.mean),
                _short_time(f, d.max),
                f.ram(b.peak_ram) + _sampled(b, "peak_ram"),
                f.ram(b.peak_private) + _sampled(b, "peak_private"),
                f.ram(b.tree_peak_ram) + _sampled(b, "tree_peak_ram"),
                f.gpu(b.peak_gpu_ram) + _sampled(b, "peak_gpu_ram"),
                f"{b.cpu_seconds:.2f}",
                _pct(b.mean_cpu_percent),
                _pct(b.mean_gpu_utilization) + _sampled(b, "mean_gpu_utilization"),
            ]
        )
    lines = [
        "",
        f"Blocks ({len(blocks)}; peak RAM: of the process that ran the block, exact; tree RAM: the tree's; * sampled)",
    ]
    lines += ["  " + line for line in _table(rows, "<>>>>>>>>>>>")]
    if len(blocks) > limit:
        lines.append(f"  … and {len(blocks) - limit} more (see the JSON report)")
    return lines + _block_allocator_lines(blocks[:limit], f)


def _block_allocator_lines(blocks: list[BlockSummary], f: _Fmt) -> list[str]:
    """The GPU allocators' peak allocated per block: exact, or a bracket (at least … at most)."""
    out = []
    for b in blocks:
        for a in b.gpu_allocator:
            figure = (
                f.gpu(a.peak_allocated)
                if a.exact
                else f"{f.gpu(a.peak_allocated)} to {f.gpu(a.peak_allocated_max)} (bracket)"
            )
            where = escape_controls(f"{a.framework} {a.device}")
            out.append(f"    {escape_controls(b.name[:40])}: {where} {figure}")
    return ["  GPU allocator, peak allocated during the block (never reset):", *out] if out else []


def blocks_text(blocks: list[BlockSummary]) -> list[str]:
    """The Blocks table in human units, then where each figure comes from (the history's Blocks tab)."""
    lines = block_lines(blocks, _Fmt(None, None, None))[1:]
    lines += ["", "Sources (duration, CPU time: exact)"]
    for b in blocks:
        name = escape_controls(b.name[:40])
        peak, others = b.sources.get("peak_ram", "?"), b.sources.get("peak_private", "?")
        tree = b.sources.get("tree_peak_ram", "?")
        lines.append(f"  {name}: peak RAM {peak}; tree RAM {tree}; others {others}")
    return lines


ALERT_TYPES = ("warning", "critical", "oom", "gpu_lost")  # events.ALERT_TYPES (no import of the sampler side)


def events_lines(events: list[Event], limit: int = 1000) -> list[str]:
    """One line per event: time since the start, type, message (and an OOM dump's directory)."""
    out = []
    for e in events[:limit]:
        text = escape_controls(" ".join(e.message.split()))
        if e.dump:
            text += f"  [dump: {e.dump}]"
        out.append(f"  {'+' + human_seconds(e.elapsed):>11}  {e.type:<15} {text}")
    if len(events) > limit:
        out.append(f"  … and {len(events) - limit} more")
    return out


def _gpu_details(gs: GpuSummary) -> str:
    parts = [gs.uuid]
    if gs.vendor:
        parts.insert(0, f"vendor {vendor_label(gs.vendor)}")
    if gs.pci_bus_id:
        parts.append(f"bus {gs.pci_bus_id}")
    if gs.gpu_instance_id is not None:
        parts.append(f"GI {gs.gpu_instance_id} / CI {gs.compute_instance_id}")
    if gs.mean_power_w is not None:
        parts.append(f"power mean {gs.mean_power_w:.0f} W max {gs.max_power_w or 0:.0f} W")
    if gs.energy_j is not None:
        parts.append(f"energy {gs.energy_j:.1f} J")
    if gs.max_temperature_c is not None:
        parts.append(f"max {gs.max_temperature_c:.0f} °C")
    if gs.tree_peak_sm_utilization is not None:
        parts.append(f"tree's peak per-process SM {gs.tree_peak_sm_utilization:.0f}%")
    return ", ".join(parts)


def _count(n: int, one: str, many: str = "") -> str:
    """'1 sample', '3 samples'."""
    return f"{n} {one if n == 1 else many or one + 's'}"
