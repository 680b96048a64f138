"""The live view's process rows: which columns fit, the order of the rows (tree or flat, by a sort column)
and the cells of each row. Plain functions of the samples; the live app hands the result to ProcessTable."""

from __future__ import annotations

import functools
import math

from gputop_tracker.core.model import ProcessSample, ResourceUsage, escape_controls
from gputop_tracker.tui.widgets.panels import short_bytes
from gputop_tracker.tui.widgets.proctable import Cell, Column

# column key, label, width (cells; 0: the command column, which takes what is left), right-aligned.
# As in htop the command comes last and takes the width the figures leave: a long one never pushes them out.
COLUMNS: list[Column] = [
    ("pid", "PID", 7, True),
    ("state", "state", 6, False),
    ("cpu", "CPU %", 6, True),
    ("mem", "MEM %", 5, True),
    ("time", "TIME+", 8, True),
    ("threads", "thr", 4, True),
    ("rss", "RSS", 7, True),
    ("private", "private", 7, True),
    ("shared", "shared", 7, True),
    ("gpu", "GPU mem", 7, True),
    ("sm", "SM %", 5, True),
    ("name", "command", 0, False),
]
GPU_COLUMNS = ("gpu", "sm")  # left out while no GPU is seen: their room goes to the command
# least useful first, when the command lacks room (MEM % and TIME+ are htop's; RSS and CPU-seconds say as much)
DROP_ORDER = ["threads", "time", "mem", "shared", "sm", "private", "state"]
MIN_NAME = 26  # `└ worker.py --role evaluator`: workers that differ in trailing arguments stay apart

SORTS = ["pid", "cpu", "rss", "private", "gpu", "threads", "time", "name"]  # what `s` cycles through
SORT_LABEL = {
    "pid": "PID",
    "cpu": "CPU %",
    "mem": "MEM %",
    "time": "TIME+",
    "rss": "RSS",
    "private": "private",
    "gpu": "GPU mem",
    "threads": "threads",
    "name": "command",
}
ASCENDING_SORTS = ("pid", "name")  # the others put the largest first


def name_width(table_width: int, cols: list[Column]) -> int:
    fixed = sum(w + 2 for key, _, w, _ in cols if key != "name")  # + cell padding
    return table_width - fixed - 2 - 2 - 2  # its own padding, the table border, the scrollbar


def fit_columns(table_width: int, gpus: bool = True) -> tuple[list[Column], int]:
    """The columns that fit a table `table_width` cells wide, and the width of the command column (the last).
    `gpus`: a GPU is seen, so GPU memory and SM % have a column."""
    cols = [c for c in COLUMNS if gpus or c[0] not in GPU_COLUMNS]
    for drop in DROP_ORDER:  # columns leave, least useful first, until the names have room
        if name_width(table_width, cols) >= MIN_NAME:
            break
        cols = [c for c in cols if c[0] != drop]
    return cols, max(MIN_NAME // 2, name_width(table_width, cols))


def _python_c(prog: str, args: list[str]) -> tuple[list[str], list[str]] | None:
    """`python -c CODE ARGS`: (the line with the code as …, ARGS) — ARGS are what tell such processes apart."""
    if not prog.rstrip("0123456789.").startswith(INTERPRETERS) or "-c" not in args:
        return None
    i = args.index("-c")
    if any(not a.startswith("-") for a in args[:i]) or i + 2 >= len(args):
        return None  # -c belongs to the script, or no ARGS follow the code: then the code tells it
    return [prog, *args[:i], "-c", "…", *args[i + 2 :]], args[i + 2 :]


def sort_value(p: ProcessSample, key: str) -> float | str:
    """What a row is ordered by: ascending for pid and name, largest first for the figures."""
    if key == "pid":
        return p.pid
    if key == "name":
        return p.name.lower()
    if key == "cpu":
        return -p.cpu_percent
    if key in ("rss", "mem"):  # MEM % is RSS over the host's memory
        return -p.rss
    if key == "time":
        return -p.cpu_seconds
    if key == "private":
        return -p.private
    if key == "gpu":
        return -sum(p.gpu_memory.values())
    return -p.threads


def final_processes(u: ResourceUsage) -> list[ProcessSample]:
    """The final report's processes as table rows: each figure is that process's peak (pss=-1 marks them)."""
    return [
        ProcessSample(
            pid=p.pid,
            ppid=p.ppid,
            name=p.name,
            cmdline=p.cmdline,
            role=p.role,
            rss=p.peak_rss,
            private=p.peak_private,
            shared=0,
            pss=-1,
            peak_rss=p.peak_rss,
            cpu_seconds=p.cpu_seconds,
            cpu_percent=p.max_cpu_percent,
            threads=p.peak_threads,
            gpu_memory={"peak": p.peak_gpu_memory} if p.peak_gpu_memory else {},
        )
        for p in u.processes
    ]


def ordered_processes(
    procs: list[ProcessSample], key: str, tree: bool, *, reverse: bool = False
) -> list[tuple[ProcessSample, int]]:
    """Each process with its depth in the tree (0 in the flat list), in display order: siblings by `key`
    (`reverse`: the other way), the main process's tree first."""
    if not tree:
        return [(p, 0) for p in sorted(procs, key=lambda p: (sort_value(p, key), p.pid), reverse=reverse)]
    by_pid = {p.pid: p for p in procs}
    children: dict[int, list[ProcessSample]] = {}
    roots = []
    for p in procs:
        if p.ppid in by_pid and p.ppid != p.pid:
            children.setdefault(p.ppid, []).append(p)
        else:
            roots.append(p)
    out: list[tuple[ProcessSample, int]] = []
    # depth first with a stack, not a nested recursive function: that one is a reference cycle (it refers to
    # itself), which kept each sample's tree for the cycle collector instead of freeing it at once
    stack = [(r, 0) for r in sorted(roots, key=lambda r: (r.role != "main", sort_value(r, key), r.pid))][::-1]
    while stack:
        p, depth = stack.pop()
        out.append((p, depth))
        kids = sorted(children.get(p.pid, []), key=lambda c: (sort_value(c, key), c.pid), reverse=reverse)
        stack += [(c, depth + 1) for c in reversed(kids)]
    return out


LONG_ARG = 24  # a path argument longer than this shows as …/its-last-part


def short_arg(arg: str) -> str:
    """A long path (or --opt=path) keeps its last part: the script or file that tells processes apart."""
    if len(arg) <= LONG_ARG or "/" not in arg:
        return arg
    head, sep, value = arg.partition("=") if arg.startswith("-") else ("", "", arg)
    base = value.rstrip("/").rsplit("/", 1)[-1]
    return f"{head}{sep}…/{base}" if base else arg


INTERPRETERS = ("python", "pypy", "node", "bash", "sh", "dash", "zsh", "perl", "ruby", "Rscript", "julia")


def short_command(p: ProcessSample, room: int = 0) -> str:
    """`command_text` of the process: the same name and command line give the same text (kept, not worked out
    again for each process of each sample)."""
    return command_text(p.name, tuple(p.cmdline), room)


@functools.lru_cache(maxsize=512)
def command_text(name: str, cmdline: tuple[str, ...], room: int = 0) -> str:
    """The command line, shortened to what tells processes apart: the program's base name, long paths as
    …/last-part, every flag kept, `python -c CODE ARGS` as `python -c … ARGS`. A process that renamed itself
    (its comm is not the program's name) shows that name first. With `room` (cells) and a line still too long:
    paths lose their directory, then an interpreter gives way to its script (or `-c` to its ARGS), then the
    line keeps its end — the trailing arguments, where workers differ. The whole line is in the details."""
    name = escape_controls(name)  # a newline or an escape (in a `python -c` script) must not leave the row
    if not cmdline:
        return name  # unreadable (another user's, or gone): the kernel's name
    prog = escape_controls(cmdline[0].rsplit("/", 1)[-1])
    args = [escape_controls(short_arg(a)) for a in cmdline[1:]]
    renamed = name and not prog.startswith(name[:15]) and not name.startswith(prog[:15])
    code = _python_c(prog, args)
    text = " ".join(code[0] if code else [prog, *args])
    if room and len(text) > room and not renamed:
        text = _shorter(prog, args, code, room)
    return f"{name}: {text}" if renamed else text


def _shorter(prog: str, args: list[str], code: tuple[list[str], list[str]] | None, room: int) -> str:
    """The line in `room` cells, giving up first what tells least: directories, the interpreter, the start. A
    `python -c CODE` with no ARGS keeps the start of its code (its end is the middle of a statement)."""
    interpreter = prog.rstrip("0123456789.").startswith(INTERPRETERS)
    if code is None and interpreter and "-c" in args:
        text = " ".join([prog, *args])
        return text[: room - 1] + "…" if len(text) > room > 1 else text
    if code is not None:
        text = " ".join(code[1]) if code[1] else " ".join(code[0])
    else:
        args = [a.replace("…/", "") if a.startswith("…/") else a for a in args]
        text = " ".join([prog, *args])
        script = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
        if len(text) > room and script is not None and interpreter:
            text = " ".join(args[script:])
    if len(text) > room > 1:
        text = "…" + text[len(text) - room + 1 :]
    return text


def process_state(p: ProcessSample) -> str:
    """running, or zombie: a process that holds no memory any more has exited and waits for its parent."""
    if p.pss < 0:
        return ""  # a final report's row: peaks over the run, no state
    return "zombie" if p.rss == 0 else "run"


def time_plus(seconds: float) -> str:
    """CPU time as htop's TIME+ writes it: 1:23.45 (minutes, seconds, hundredths), 2h05:09 past an hour."""
    if seconds < 3600:
        m, s = divmod(seconds, 60)
        return f"{int(m)}:{s:05.2f}"
    h, rest = divmod(int(seconds), 3600)
    return f"{h}h{rest // 60:02d}:{rest % 60:02d}"


TAGGED = "bold yellow"  # a row tagged with Space (htop's colour): `k` signals the tagged rows


def process_cells(
    p: ProcessSample,
    depth: int,
    columns: list[str],
    state: str | None = None,
    name_width: int = 0,
    *,
    mem_total: int = 0,
    tagged: bool = False,
) -> tuple[Cell, ...]:
    """The row of one process: the cells of `columns`, the command indented by its depth in the tree.
    `state`: how it ended (exit 3, signal 9) for a process that left the tree moments ago; `name_width`: the
    command column's width (a long command is shortened to what tells it apart); `mem_total`: the host's
    memory (MEM %); `tagged`: tagged with Space."""
    style = "bold" if p.role == "main" else ""
    if state is not None:
        style = "dim"
    else:
        state = process_state(p)
    if tagged:
        style = TAGGED
    indent = ("  " * (depth - 1) + "└ ") if depth else ""
    gpu = sum(p.gpu_memory.values())
    state_style = "dim" if state in ("", "run") else "bold yellow" if state == "zombie" else "bold red"
    values: dict[str, Cell] = {
        "pid": (str(p.pid), style),
        "name": (indent + short_command(p, max(name_width - len(indent), 0)), style),
        "state": (state, state_style if state != "run" or style != "dim" else "dim"),
        "cpu": (f"{p.cpu_percent:.1f}", ""),
        "mem": (f"{100 * p.rss / mem_total:.1f}" if mem_total else "-", ""),
        "time": (time_plus(p.cpu_seconds), ""),
        "threads": (str(p.threads), ""),
        "rss": (short_bytes(p.rss), ""),
        "private": (memory_cell(p, p.private), ""),
        "shared": (memory_cell(p, p.shared) if p.pss >= 0 else "-", ""),
        "gpu": (short_bytes(gpu) if gpu else "-", ""),
        "sm": (sm_text(p), ""),
    }
    return tuple(values[k] for k in columns)


class RowCells:
    """`process_cells` kept per process between samples: a row none of whose inputs changed (most of a tree
    idles) is not formatted again."""

    def __init__(self) -> None:
        self._rows: dict[int, tuple[tuple[object, ...], tuple[Cell, ...]]] = {}

    def rows(
        self,
        ordered: list[tuple[ProcessSample, int]],
        columns: list[str],
        states: dict[int, str],
        width: int,
        *,
        mem_total: int = 0,
        tagged: frozenset[int] | set[int] = frozenset(),
    ) -> list[tuple[int, tuple[Cell, ...]]]:
        """The rows of `ordered` (process, depth) in order; the cache keeps only these processes."""
        cols = tuple(columns)
        kept: dict[int, tuple[tuple[object, ...], tuple[Cell, ...]]] = {}
        out = []
        for p, depth in ordered:
            state = states.get(p.pid)
            key = (
                *(p.cpu_percent, p.rss, p.private, p.shared, p.pss, p.threads, p.mem_bound, p.gpu_sm_percent),
                *(p.role, p.name, p.cmdline, p.gpu_memory, depth, state, width, cols),
                *(p.cpu_seconds, mem_total, p.pid in tagged),
            )
            old = self._rows.get(p.pid)
            cells = (
                old[1]
                if old is not None and old[0] == key
                else process_cells(p, depth, columns, state, width, mem_total=mem_total, tagged=p.pid in tagged)
            )
            kept[p.pid] = (key, cells)
            out.append((p.pid, cells))
        self._rows = kept
        return out


BOUND_MARK = "≥"
BOUND_LEGEND = "≥ lower bound (smaps_rollup read pending)"


def memory_cell(p: ProcessSample, n: int) -> str:
    """Private or shared memory: a lower bound (≥) while its smaps_rollup read is pending; a bound of 0 says
    nothing (`≥0 B`): a zombie holds none (0 B), a live process's is not known yet (-)."""
    if not p.mem_bound:
        return short_bytes(n)
    if not n:
        return "0 B" if not p.rss else "-"
    return bound_bytes(n)


def bound_bytes(n: int) -> str:
    """A lower bound in at most 7 cells: ≥ and two or three figures, rounded down (never above the bound)."""
    for unit, factor in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= factor:
            v = n / factor
            text = f"{math.floor(v)}" if v >= 10 else f"{math.floor(v * 10) / 10:.1f}"
            return f"{BOUND_MARK}{text} {unit}"
    return f"{BOUND_MARK}{n} B"


def sort_mark(column: str, sort_key: str, reverse: bool = False) -> str:
    """The header's arrow on the sort column: ▲ ascending (pid, name), ▼ largest first; flipped when reversed."""
    if column != sort_key:
        return ""
    return " ▲" if (column in ASCENDING_SORTS) != reverse else " ▼"


def fit_label(label: str, mark: str, width: int) -> str:
    """A column label with its sort arrow in `width` cells: the label gives way, never the arrow."""
    if len(label) + len(mark) <= width:
        return label + mark
    return label[: max(width - len(mark), 1)].rstrip() + mark


def sm_text(p: ProcessSample) -> str:
    """SM % of one process: NVML sums it over GPUs; shown per GPU (the mean over the GPUs it holds memory on),
    so a figure never reads above 100."""
    if p.gpu_sm_percent is None:
        return "-"
    n = max(1, len(p.gpu_memory))
    return f"{p.gpu_sm_percent / n:.0f}" + (f"×{n}" if n > 1 else "")
