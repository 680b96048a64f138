"""Where the summary is shown as text or JSON (headless mode, `sessions show`, `str(Tracker)`)."""

from __future__ import annotations

import time
from typing import Any

from gputop_tracker.core.gpu import vendor_label
from gputop_tracker.core.model.models import BlockSummary, Event, GpuSummary, ResourceUsage
from gputop_tracker.core.model.text import command_line, escape_controls, json_text
from gputop_tracker.core.model.units import RAM_UNITS, TIME_UNITS, Units, human_bytes, human_seconds
from gputop_tracker.core.report.gpuoom_text import gpu_oom_lines
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

    def ram(self, size: float | None) -> str:
        return self._in(size, self.ram_unit, human_bytes(size))

    def gpu(self, size: float | None) -> str:
        return self._in(size, self.gpu_ram_unit, human_bytes(size))

    def time(self, seconds: float) -> str:
        if self.time_unit is None:
            return human_seconds(seconds)
        return f"{seconds / TIME_UNITS[self.time_unit]:.4f} {self.time_unit}"


def table(rows: list[list[str]], align: str) -> list[str]:
    """Aligned lines of a table (for other reports: `sessions compare`)."""
    return _table(rows, align)


def _pct(percent: float | None) -> str:
    return "-" if percent is None else f"{percent:.1f}%"


GAP = "  "  # between two columns of a table, whatever the widths of their figures


def _widths(rows: list[list[str]]) -> list[int]:
    return [max(len(row[i]) for row in rows if i < len(row)) for i in range(max(len(row) for row in rows))]


def _table(rows: list[list[str]], align: str, widths: list[int] | None = None) -> list[str]:
    """Rows of cells as aligned lines: each column as wide as its widest cell (header included), columns
    separated by GAP, so no figure can run into the next one in any unit. `align` has one '<' or '>' per
    column; a row may have fewer cells than the table (its line ends there)."""
    widths = widths or _widths(rows)
    out = []
    for row in rows:
        cells = [
            cell.rjust(width) if side == ">" else cell.ljust(width)
            for cell, width, side in zip(row, widths, align, strict=False)
        ]
        out.append(GAP.join(cells).rstrip())
    return out


def to_text(usage: ResourceUsage, units: Units = DEFAULT_UNITS, *, max_processes: int = 10) -> str:
    """An aligned, human report with the same figures as the JSON (human units unless a unit is given)."""
    fmt = _Fmt(units.ram, units.gpu_ram, units.time)
    lines = [
        *_head_lines(usage, fmt),
        "",
        *_ram_lines(usage, fmt),
        *probe_line(usage),
        "",
        *_cpu_lines(usage, fmt),
        "",
        *_gpu_lines(usage, fmt),
    ]
    lines += _process_lines(usage, fmt, max_processes)
    lines += job_lines(usage)
    lines += block_lines(usage.blocks, fmt, n_gpus=len(usage.gpus))
    lines += gpu_oom_lines(usage.gpu_ooms, fmt.gpu)
    alerts = [event for event in usage.events if event.type in ALERT_TYPES]
    if alerts:
        lines += ["", f"Alerts ({len(alerts)}; every event: `gputop-track sessions events ID`)"]
        lines += events_lines(alerts, limit=20)
    if usage.notes:
        lines += ["", "Notes", *(f"  - {escape_controls(note)}" for note in usage.notes)]
    if usage.session_path:
        lines += ["", f"Session saved: {escape_controls(usage.session_path)}"]
    return "\n".join(lines) + "\n"


def _status(usage: ResourceUsage) -> str:
    if usage.mode == "attach":
        return {"exited": "target exited", "stopped": "tracking stopped; target still running"}.get(
            usage.status, usage.status
        )
    if usage.exit_signal:
        return f"killed by signal {usage.exit_signal} (exit code {usage.exit_code})"
    if usage.exit_code is not None:
        return f"exited with code {usage.exit_code}"
    return usage.status


def _head_lines(usage: ResourceUsage, fmt: _Fmt) -> list[str]:
    """The title, the command (one printable line), how it ended and how it was sampled."""
    title = "gputop-track report"
    if usage.session_id:
        title += f" — session {usage.session_id}"
    cmd = command_line(usage.command) or "-"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(usage.start_time)) if usage.start_time else "-"
    return [
        title,
        "=" * len(title),
        f"{'command':<14}{cmd}",
        f"{'status':<14}{_status(usage)}   (pid {usage.pid}, {usage.mode}, host {usage.host})",
        f"{'wall time':<14}{fmt.time(usage.compute_time.time)}   started {started}, "
        f"{_count(usage.n_samples, 'sample')} every {usage.interval:g} s, "
        f"{_count(usage.n_processes, 'process', 'processes')} seen",
    ]


def short_label(label: str) -> str:
    """The kind of a figure in a few words ("exact (cgroup)", "lower bound"); the full reason is in `sources`."""
    head, _, rest = label.partition(" (")
    if head != "exact" or not rest:
        return head
    first = rest.split()[0].rstrip(",;)")
    return f"exact ({first if first not in ('the', 'one', 'two') else 'single process'})"


def _ram_lines(usage: ResourceUsage, fmt: _Fmt) -> list[str]:
    """The RAM peaks table, then single figures with a description in its name and total columns."""
    ram = usage.max_ram
    src = usage.sources
    ram_rows = [["RAM (peaks)", "total", "private", "shared", "how measured"]]
    reasons: list[str] = []
    for name, peaks, how in (
        ("main", ram.main, src.get("max_ram.main.total_rss", "")),
        ("descendants", ram.descendants, src.get("max_ram.descendants.total_rss", "")),
        ("combined", ram.combined, src.get("max_ram.combined.total_rss", "")),
    ):
        short = short_label(how)
        if not how.startswith("exact") and peaks.upper is not None and peaks.upper > peaks.total_rss:
            short += f", at most {fmt.ram(peaks.upper)}"  # the interval the evidence gives
        if short != how:
            reasons.append(f"  [{len(reasons) + 1}] {name}: {how}")
            short += f" [{len(reasons)}]"
        if not peaks.total_rss and (usage.n_processes == 0 or "not seen" in how):  # never read: no figure, not 0 B
            ram_rows.append([f"  {name}", "-", "-", "-", short])
        else:
            ram_rows.append(
                [f"  {name}", fmt.ram(peaks.total_rss), fmt.ram(peaks.private_rss), fmt.ram(peaks.shared_rss), short]
            )
    extra: list[list[str]] = []
    if ram.peak_source not in ("cgroup", "upper_bound") and ram.combined_upper_bound is not None:
        extra.append(
            [
                "  combined ≤",
                fmt.ram(ram.combined_upper_bound),
                "upper bound: Σ of the peaks of processes alive together",
            ]
        )
    else:
        sampled = fmt.ram(ram.combined_sampled) if usage.n_processes else "-"
        extra.append(["  combined (Σ)", sampled, "largest Σ PSS seen in one sample"])
    if ram.cgroup_peak is not None and ram.peak_source != "cgroup":
        extra.append(
            ["  job cgroup", fmt.ram(ram.cgroup_peak), "peak of the job's memory cgroup (page cache included)"]
        )
    extra.append(["  system", fmt.ram(ram.system), f"of {fmt.ram(ram.system_capacity)} (whole machine, sampled)"])
    widths = _widths(ram_rows + [row[:2] for row in extra])
    lines = _table(ram_rows, "<>>><", widths) + _table(extra, "<><", [*widths[:2], 0])
    if usage.smaps_max_age is not None:
        lines.append(
            f"  private/shared from smaps_rollup, refreshed at least every {max(usage.smaps_max_age, 1.0):.0f} s"
        )
    if reasons:
        lines += ["  how measured:", *(escape_controls(reason) for reason in reasons)]
    return lines


def _cpu_lines(usage: ResourceUsage, fmt: _Fmt) -> list[str]:
    cpu = usage.cpu_utilization
    ct = usage.cpu_time

    def secs(value: float) -> str:  # in the unit asked for (--tu), as the wall time; else seconds
        return f"{value:.2f} s" if fmt.time_unit is None else fmt.time(value)

    lines = [
        "CPU",
        f"  {'CPU time':<16}user {secs(ct.user)} + system {secs(ct.system)} = {secs(ct.total)} "
        f"({ct.mean_percent:.0f}% of one core on average; {ct.source})",
    ]
    cpu_rows = [["  utilization", "max", "mean", f"(100% = one core; {cpu.n_expected_cores} cores expected)"]]
    for name, percents in (
        ("main", cpu.main),
        ("descendants", cpu.descendants),
        ("combined", cpu.combined),
        ("system", cpu.system),
    ):
        cpu_rows.append([f"    {name}", _pct(percents.max_sum_percent), _pct(percents.mean_sum_percent)])
    lines += _table(cpu_rows, "<>><")
    lines.append(
        f"  {'threads (peak)':<16}main {cpu.main_n_threads}, descendants {cpu.descendants_n_threads}, "
        f"combined {cpu.combined_n_threads}"
    )
    return lines


def _gpu_lines(usage: ResourceUsage, fmt: _Fmt) -> list[str]:
    lines = ["GPU"]
    if usage.gpu_note:
        lines.append(f"  {escape_controls(usage.gpu_note)}")
    if not usage.gpus:
        if not usage.gpu_note:
            lines.append("  no GPU found")
        return lines + _allocator_lines(usage, fmt)
    gpu_ram = usage.max_gpu_ram
    lines.append(
        f"  {'GPU memory':<16}main {fmt.gpu(gpu_ram.main)}, descendants {fmt.gpu(gpu_ram.descendants)}, "
        f"combined {fmt.gpu(gpu_ram.combined)} (peaks{_gpu_peak_labels(usage)})"
    )
    if gpu_ram.accounting is not None:
        state = "on: exact per-process peaks" if gpu_ram.accounting else "off (see the notes)"
        lines.append(f"  {'NVML accounting':<16}{state}")
    gu = usage.gpu_utilization.gpu_percentages
    lines.append(
        f"  {'utilization':<16}max {_pct(gu.max_sum_percent)}, mean {_pct(gu.mean_sum_percent)} "
        f"(sum over {usage.gpu_utilization.n_expected_gpus} counted of {usage.gpu_utilization.system_gpu_count} GPUs)"
    )
    if usage.gpu_energy_j is not None:
        missing = [str(g.index) for g in usage.gpus if g.counted and g.energy_j is None]
        what = f"lower bound: no reading of GPU {', '.join(missing)}" if missing else "counted GPUs"
        lines.append(
            f"  {'energy':<16}{usage.gpu_energy_j:.1f} J = {usage.gpu_energy_wh or 0:.4f} Wh "
            f"({what}, first to last reading)"
        )
    lines += _allocator_lines(usage, fmt)
    for gs in usage.gpus:
        lines += _gpu_device_lines(gs, fmt)
    return lines


def _allocator_lines(usage: ResourceUsage, fmt: _Fmt) -> list[str]:
    """The GPU allocators' own peaks (probe): main's per device, the descendants' summed per device."""
    al = usage.max_gpu_ram.allocator
    if al is None:
        return []
    lines = []
    for who, entries in (("main", al.main), ("descendants", al.descendants)):
        for alloc in entries:
            count = f", {alloc.processes} processes" if alloc.processes and alloc.processes > 1 else ""
            kind = "at exit" if alloc.at_exit else "peak"
            how = (
                "lower bound" if alloc.at_exit else "exact" if who == "main" or alloc.processes == 1 else "upper bound"
            )
            lines.append(
                f"  {'allocator':<16}{who} {escape_controls(alloc.framework)} {escape_controls(alloc.device)}: "
                f"{kind} allocated {fmt.gpu(alloc.peak_allocated)}, reserved {fmt.gpu(alloc.peak_reserved)} "
                f"({how}{count})"
            )
    return lines


def probe_line(usage: ResourceUsage) -> list[str]:
    """Whether the in-process probe was on and who reported."""
    pr = usage.probe
    if pr is None:
        return []
    if not pr.enabled:
        return [f"  probe           off{': ' + escape_controls(pr.note) if pr.note else ''}"]
    pids = ", ".join(str(pid) for pid in pr.reported[:8]) + (" …" if len(pr.reported) > 8 else "")
    who = _count(len(pr.reported), "Python process", "Python processes")
    line = f"  probe           on: {who} reported {'its peak' if len(pr.reported) == 1 else 'their peaks'} at exit"
    line += f" (PIDs {pids})" if pids else ""
    out = [line]
    for without in pr.without_probe[:5]:
        out.append(f"                  PID {without.pid} ({escape_controls(without.name)}): {without.reason}, no probe")
    names = {p.pid: p.name for p in usage.processes}
    for pid in pr.python_unreported[:5]:  # the JSON's `python_unreported`: each named here too
        name = escape_controls(names.get(pid, "python"))
        out.append(
            f"                  PID {pid} ({name}): Python that sent no report (its environment lost PYTHONPATH, "
            "a signal killed it, or it exec'd): its peak keeps its label"
        )
    if len(pr.python_unreported) > 5:
        out.append(f"                  and {len(pr.python_unreported) - 5} more Python processes that sent no report")
    return out


def _gpu_peak_labels(usage: ResourceUsage) -> str:
    """ ", sampled" when every GPU peak is sampled; else what main, descendants and combined each are."""
    labels = {key: usage.sources.get(f"max_gpu_ram.{key}", "sampled") for key in ("main", "descendants", "combined")}
    if all(label.startswith("sampled") and "elimination" not in label for label in labels.values()):
        # where the GPU memory watcher read them: its rate ("sampled at 50 Hz", and where it slowed down)
        head, _, rest = labels["main"].partition(" (")
        rate = head + rest.partition(")")[2]
        return (
            f", {escape_controls(rate)}"
            if len(set(labels.values())) == 1 and head.startswith("sampled at ")
            else ", sampled"
        )
    return "".join(f"; {key}: {escape_controls(label)}" for key, label in labels.items())


def _gpu_device_lines(gs: GpuSummary, fmt: _Fmt) -> list[str]:
    """One GPU (or MIG instance): its peaks and utilization, details, GPM metrics, unattributed memory."""
    flags = [
        flag for flag, on in (("simulated", gs.simulated), ("LOST", gs.lost), ("not counted", not gs.counted)) if on
    ]
    label = gs.name if gs.mig_parent is None else f"MIG on GPU {gs.mig_parent}"
    lines = [
        f"    [{gs.index}] {label:<20} tree peak {fmt.gpu(gs.tree_peak_memory):>11}  "
        f"device peak {fmt.gpu(gs.peak_memory_used):>11} of {fmt.gpu(gs.memory_total)}  "
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
        lines.append(f"        unattributed (PIDs not mappable here) peak {fmt.gpu(gs.peak_unattributed_memory)}")
    return lines


def _process_lines(usage: ResourceUsage, fmt: _Fmt, max_processes: int) -> list[str]:
    """The largest processes by peak RSS, as a table sized from its content (names escaped)."""
    if not usage.processes:
        return []
    shown = sorted(usage.processes, key=lambda proc: proc.peak_rss, reverse=True)[:max_processes]
    more = len(usage.processes) - len(shown)
    proc_rows = [["pid", "name", "peak RSS", "source", "CPU s", "threads", "GPU", "exit"]]
    for proc in shown:
        proc_rows.append(
            [
                str(proc.pid),
                escape_controls(proc.name[:15]),
                fmt.ram(proc.peak_rss),
                short_label(proc.peak_rss_source),
                f"{proc.cpu_seconds:.2f}",
                str(proc.peak_threads),
                fmt.gpu(proc.peak_gpu_memory),
                "" if proc.exit_code is None else str(proc.exit_code),
            ]
        )
    lines = ["", f"Processes (largest {len(shown)} of {len(usage.processes)} by peak RSS)"]
    lines += ["  " + line for line in _table(proc_rows, "><><>>>>")]
    if more > 0:
        lines.append(f"  … and {more} more (see the JSON report or `gputop-track sessions show`)")
    return lines


def _sampled(block: BlockSummary, figure: str) -> str:
    return "*" if getattr(block, figure) is not None and block.sources.get(figure, "").startswith("sampled") else ""


def _short_time(fmt: _Fmt, seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if fmt.time_unit is None and seconds < 1 else fmt.time(seconds)


def block_lines(blocks: list[BlockSummary], fmt: _Fmt, limit: int = 50, n_gpus: int = 0) -> list[str]:
    """The code blocks (`with block()`, `@tracked`) as a table: exact figures plain, sampled ones starred. The GPU
    utilization per GPU, ×N for N GPUs (`n_gpus`): the figure kept sums the GPUs (2 GPUs read 99.7%)."""
    if not blocks:
        return []
    util = "GPU util"
    rows = [
        ["block", "calls", "total", "mean", "max", "peak RAM", "private", "tree RAM", "GPU RAM", "CPU s", "CPU", util]
    ]
    for block in blocks[:limit]:
        duration = block.duration
        rows.append(
            [
                escape_controls(block.name[:40]),
                str(block.calls),
                _short_time(fmt, duration.total),
                _short_time(fmt, duration.mean),
                _short_time(fmt, duration.max),
                fmt.ram(block.peak_ram) + _sampled(block, "peak_ram"),
                fmt.ram(block.peak_private) + _sampled(block, "peak_private"),
                fmt.ram(block.tree_peak_ram) + _sampled(block, "tree_peak_ram"),
                fmt.gpu(block.peak_gpu_ram) + _sampled(block, "peak_gpu_ram"),
                f"{block.cpu_seconds:.2f}",
                _pct(block.mean_cpu_percent),
                _per_gpu(block.mean_gpu_utilization, n_gpus) + _sampled(block, "mean_gpu_utilization"),
            ]
        )
    lines = [
        "",
        f"Blocks ({len(blocks)}; peak RAM: of the process that ran the block, exact; tree RAM: the tree's; * sampled)",
    ]
    lines += ["  " + line for line in _table(rows, "<>>>>>>>>>>>")]
    if len(blocks) > limit:
        lines.append(f"  … and {len(blocks) - limit} more (see the JSON report)")
    return lines + _block_allocator_lines(blocks[:limit], fmt)


def _block_allocator_lines(blocks: list[BlockSummary], fmt: _Fmt) -> list[str]:
    """The GPU allocators' peak allocated per block: exact, or a bracket (at least … at most)."""
    out = []
    for block in blocks:
        for alloc in block.gpu_allocator:
            figure = (
                fmt.gpu(alloc.peak_allocated)
                if alloc.exact
                else f"{fmt.gpu(alloc.peak_allocated)} to {fmt.gpu(alloc.peak_allocated_max)} (bracket)"
            )
            where = escape_controls(f"{alloc.framework} {alloc.device}")
            out.append(f"    {escape_controls(block.name[:40])}: {where} {figure}")
    return ["  GPU allocator, peak allocated during the block (never reset):", *out] if out else []


def _per_gpu(total: float | None, n_gpus: int) -> str:
    """A utilization summed over `n_gpus` GPUs as the mean per GPU, ×N: 50%×2 (a sum of two read 99.7%)."""
    if total is None or n_gpus <= 1:
        return _pct(total)
    return f"{_pct(total / n_gpus)}×{n_gpus}"


def blocks_text(blocks: list[BlockSummary], n_gpus: int = 0) -> list[str]:
    """The Blocks table in human units, then where each figure comes from (the history's Blocks tab)."""
    lines = block_lines(blocks, _Fmt(None, None, None), n_gpus=n_gpus)[1:]
    lines += ["", "Sources (duration, CPU time: exact)"]
    for block in blocks:
        name = escape_controls(block.name[:40])
        peak, others = block.sources.get("peak_ram", "?"), block.sources.get("peak_private", "?")
        tree = block.sources.get("tree_peak_ram", "?")
        lines.append(f"  {name}: peak RAM {peak}; tree RAM {tree}; others {others}")
    return lines


# events.ALERT_TYPES (no import of the sampler side)
ALERT_TYPES = ("warning", "critical", "oom", "gpu_oom", "gpu_lost")


def events_lines(events: list[Event], limit: int = 1000) -> list[str]:
    """One line per event: time since the start, type, message (and an OOM dump's directory)."""
    out = []
    for event in events[:limit]:
        text = escape_controls(" ".join(event.message.split()))
        if event.dump:
            text += f"  [dump: {event.dump}]"
        out.append(f"  {'+' + human_seconds(event.elapsed):>11}  {event.type:<15} {text}")
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


def _count(count: int, one: str, many: str = "") -> str:
    """'1 sample', '3 samples'."""
    return f"{count} {one if count == 1 else many or one + 's'}"
