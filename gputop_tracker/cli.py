"""`gputop-track`: launch or attach, live TUI on a terminal, headless report otherwise; `sessions` commands.

Start-up stays light: the TUI (textual) is imported only when a screen will be drawn, and pydantic
only after the sampler has been forked, so it loads while the command already runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from gputop_tracker import __version__
from gputop_tracker.core import paths, validate
from gputop_tracker.core.config import MIN_INTERVAL, EngineConfig
from gputop_tracker.core.units import UnitError, Units, parse_size

if TYPE_CHECKING:
    from gputop_tracker.core.channel import SamplerHandle

PROG = "gputop-track"
DEFAULT_INTERVAL = 0.5
SI_KERNEL = 0x80  # siginfo si_code of a signal the kernel sent itself, e.g. Ctrl-C on the terminal
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class UsageError(Exception):
    """Bad input: one line on stderr, exit 2."""


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Epilogs as written (examples keep their layout); options wrapped to the terminal, at most 100 columns."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        if width is None:
            import shutil

            width = min(shutil.get_terminal_size().columns, 100) - 2
        super().__init__(prog, indent_increment, max_help_position, width)


class Parser(argparse.ArgumentParser):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


USAGE = f"""\
{PROG} [OPTIONS] -- CMD [ARGS...]
       {PROG} [OPTIONS] --attach PID
       {PROG} --history
       {PROG} sessions {{list,show,export,events,delete}} ... (see `sessions --help`)"""

EPILOG = f"""\
examples:
  {PROG} -- python train.py --lr 0.1     live view on a terminal, else a report
  {PROG} --headless -f json -o out.json -- bash run.sh
  {PROG} --mem-limit 16G --watch-output -- python train.py
  {PROG} --attach 12345                  a running process and its descendants
  {PROG} sessions list                   saved sessions, newest first

where things go:
  The live view opens only when stdin and stdout are both terminals; otherwise (a batch job,
  a pipe, a redirect) the run is headless by itself, as with --headless. Headless, the text
  report goes to stderr and a JSON report (-f json) to stdout (the command's own stdout then
  goes to stderr); -o FILE writes either to FILE instead. Alerts and errors go to stderr.
  Every run is saved as a session in the store unless --no-save.

exit codes:
  the command's own exit code; 128+N if signal N killed it
  127  the command was not found          126  the command could not be run
  2    bad input (one line on stderr starting `{PROG}: error:`)
  1    tracking failed (the sampler stopped unexpectedly)
  130  --attach stopped with Ctrl-C

environment:
  GPUTOP_TRACKER_STORE         the session store (default: $XDG_DATA_HOME/gputop-tracker/sessions)
  GPUTOP_TRACKER_SIMULATE_GPUS N simulated GPUs, as --simulate-gpus
  GPUTOP_TRACKER_NO_CGROUP=1   never create a memory cgroup for the command
  CUDA_VISIBLE_DEVICES         the GPUs counted for utilization unless --gpus is given
"""


def build_parser() -> Parser:
    p = Parser(
        prog=PROG,
        usage=USAGE,
        description="Track what a command's whole process tree uses: RAM, CPU, threads, GPU memory and utilization.",
        epilog=EPILOG,
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to launch, after --")
    p.add_argument("--attach", metavar="PID", type=int, help="track a running process and its descendants")
    p.add_argument("--history", action="store_true", help="open the TUI on the saved sessions")
    p.add_argument("--headless", action="store_true", help="no TUI: print or write a report at the end")
    p.add_argument("-f", "--format", choices=("text", "json"), default="text", help="report format (headless)")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of the terminal")
    p.add_argument(
        "--interval",
        "--st",
        dest="interval",
        type=float,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"seconds between samples (default {DEFAULT_INTERVAL}, at least {MIN_INTERVAL})",
    )
    p.add_argument(
        "--ru",
        "--ram-unit",
        dest="ram_unit",
        metavar="UNIT",
        help="bytes, kilobytes, megabytes, gigabytes, terabytes",
    )
    p.add_argument("--gru", "--gpu-ram-unit", dest="gpu_ram_unit", metavar="UNIT", help="unit of GPU memory figures")
    p.add_argument("--tu", "--time-unit", dest="time_unit", metavar="UNIT", help="seconds, minutes, hours, days")
    p.add_argument(
        "--nec",
        "--n-expected-cores",
        dest="n_expected_cores",
        type=int,
        metavar="N",
        help="cores the job may use (default: the CPUs this process may run on)",
    )
    p.add_argument(
        "--gpus",
        "--guuids",
        dest="gpus",
        metavar="LIST",
        help="GPUs counted for utilization: indices, full or short UUIDs, MIG UUIDs (as CUDA_VISIBLE_DEVICES)",
    )
    p.add_argument("--simulate-gpus", type=int, default=0, metavar="N", help="N simulated GPUs (demos; labelled)")
    p.add_argument("--store", metavar="DIR", help=f"session store (default: ${paths.STORE_ENV} or the user data dir)")
    p.add_argument("--no-save", action="store_true", help="do not save this run as a session")
    a = p.add_argument_group("alerts and OOM dumps")
    a.add_argument(
        "--mem-limit",
        metavar="SIZE",
        help="RAM limit for alerts, e.g. 4G, 500M (default: the job's cgroup limit, else the system's RAM)",
    )
    a.add_argument(
        "--enforce-mem-limit",
        action="store_true",
        help="also make --mem-limit the hard limit of the command's own cgroup (the kernel OOM-kills past it)",
    )
    a.add_argument("--warn-at", type=float, default=80.0, metavar="PCT", help="warning level, %% of the limit (80)")
    a.add_argument("--critical-at", type=float, default=95.0, metavar="PCT", help="critical level, %% (95)")
    a.add_argument(
        "--watch-output",
        action="store_true",
        help="headless: pass the command's output through a pipe to spot CUDA/PyTorch out-of-memory errors",
    )
    a.add_argument(
        "--oom-window", type=float, default=60.0, metavar="SECONDS", help="seconds of samples kept for a dump (60)"
    )
    a.add_argument(
        "--oom-dumps", type=int, default=5, metavar="K", help="OOM dump bundles kept in the store (5; 0 = none)"
    )
    a.add_argument("--oom-dump-mb", type=float, default=200.0, metavar="M", help="at most M MB of dump bundles (200)")
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return p


SESSIONS_EPILOG = f"""\
examples:
  {PROG} sessions list                newest first (the command is cut only on a terminal)
  {PROG} sessions list -f json | jq '.[].id'
  {PROG} sessions show 20250102-0930 --ru gigabytes
  {PROG} sessions export ID -f csv -o timeline.csv
  {PROG} sessions events ID -t warning -t critical

An ID may be given by its start (any prefix that matches one session). Reports, listings and
exports go to stdout unless -o FILE; errors go to stderr (one line starting `{PROG}: error:`).

exit codes:
  0  done
  1  a file or stdout could not be written
  2  bad input (an unknown session, a bad option, an -o FILE that cannot be written)
"""


def build_sessions_parser() -> Parser:
    p = Parser(
        prog=f"{PROG} sessions",
        description="The saved sessions (one JSON file each in the store), without the TUI.",
        epilog=SESSIONS_EPILOG,
    )
    store_help = f"session store (default: ${paths.STORE_ENV} or the user data dir)"
    p.add_argument("--store", metavar="DIR", help=store_help)
    # --store also after the action (`sessions list --store DIR`); SUPPRESS: not given there, the one
    # given before the action (or None) stays
    common = Parser(add_help=False)
    common.add_argument("--store", metavar="DIR", default=argparse.SUPPRESS, help=store_help)
    sub = p.add_subparsers(
        dest="action", required=True, parser_class=Parser, metavar="ACTION", help="one of (`ACTION --help` for more):"
    )
    id_help = "the session's id, or its start if only one session matches (as `sessions list` shows)"
    ls = sub.add_parser(
        "list",
        help="every saved session, newest first",
        description="Every saved session, newest first; unreadable files are listed with the reason.",
        parents=[common],
    )
    ls.add_argument(
        "-f",
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: one line per session; json: an array of objects (metadata, peaks, or the error)",
    )
    ls.add_argument("--no-trunc", action="store_true", help="never shorten the command (it is cut only on a terminal)")
    show = sub.add_parser(
        "show",
        help="the report of one session",
        description="The report of one session, as the run printed it (text) or as JSON.",
        parents=[common],
    )
    show.add_argument("id", metavar="ID", help=id_help)
    show.add_argument("-f", "--format", choices=("text", "json"), default="text", help="report format (default: text)")
    show.add_argument(
        "--ru", "--ram-unit", dest="ram_unit", metavar="UNIT", help="RAM unit: bytes, kilobytes, … terabytes"
    )
    show.add_argument("--gru", "--gpu-ram-unit", dest="gpu_ram_unit", metavar="UNIT", help="GPU memory unit")
    show.add_argument(
        "--tu", "--time-unit", dest="time_unit", metavar="UNIT", help="time unit: seconds, minutes, hours, days"
    )
    export = sub.add_parser(
        "export",
        help="a session as JSON (everything) or CSV (the timeline)",
        description="A session as JSON (everything saved) or CSV (the sampled timeline, one row per sample).",
        parents=[common],
    )
    export.add_argument("id", metavar="ID", help=id_help)
    export.add_argument(
        "-f", "--format", choices=("json", "csv"), default="json", help="json (default) or csv (the timeline)"
    )
    export.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    events = sub.add_parser(
        "events",
        help="the event timeline of a session (alerts, peaks, processes, OOM)",
        description="The event timeline of a session: alerts, new peaks, processes started and ended, OOM.",
        parents=[common],
    )
    events.add_argument("id", metavar="ID", help=id_help)
    events.add_argument(
        "-f", "--format", choices=("text", "json", "csv"), default="text", help="text (default), json or csv"
    )
    events.add_argument(
        "-t", "--type", action="append", metavar="TYPE", help="only events of TYPE, e.g. warning (repeatable)"
    )
    events.add_argument("-o", "--output", metavar="FILE", help="write to FILE (default: stdout)")
    delete = sub.add_parser(
        "delete",
        help="delete a session",
        description="Delete a session's file, its saved output and its OOM dumps (cannot be undone).",
        parents=[common],
    )
    delete.add_argument("id", metavar="ID", help=id_help)
    return p


def die(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "sessions":
            from gputop_tracker import sessions_cli

            return sessions_cli.run(build_sessions_parser().parse_args(argv[1:]))
        return track(build_parser().parse_args(argv))
    except UsageError as e:
        return die(str(e))
    except UnitError as e:
        return die(str(e))
    except KeyboardInterrupt:
        return 130


def _units(args: argparse.Namespace) -> Units:
    return Units.parse(args.ram_unit, args.gpu_ram_unit, args.time_unit)


def _check_attach(pid: int) -> None:
    if pid <= 0:
        raise UsageError(f"--attach needs a positive PID, not {pid}")
    if pid == os.getpid():
        raise UsageError("cannot attach to gputop-track itself")
    try:
        validate.check_pid(pid)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _check_numbers(args: argparse.Namespace) -> None:
    """Every numeric flag finite and in range: NaN and inf pass a plain `<` test."""
    try:
        validate.number("--interval", args.interval, MIN_INTERVAL, validate.MAX_INTERVAL)
        if args.n_expected_cores is not None:
            validate.integer("--n-expected-cores", args.n_expected_cores, 1)
        validate.integer("--simulate-gpus", args.simulate_gpus, 0, validate.MAX_SIMULATED_GPUS)
        validate.number("--warn-at", args.warn_at, 0, 100, above=True)
        validate.number("--critical-at", args.critical_at, 0, 100, above=True)
        validate.number("--oom-window", args.oom_window, 0, validate.MAX_WINDOW)
        validate.integer("--oom-dumps", args.oom_dumps, 0)
        validate.number("--oom-dump-mb", args.oom_dump_mb, 0, 1e9, above=True)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _check_output(name: str) -> None:
    """-o FILE can be written: the rule every `-o` shares (`store.check_output`)."""
    from gputop_tracker.core.store import OutputError, check_output

    try:
        check_output(name)
    except OutputError as e:
        raise UsageError(str(e)) from None


def track(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    units = _units(args)
    if args.history:
        if command or args.attach:
            raise UsageError("--history takes no command and no --attach")
        from gputop_tracker.tui.app import run_history

        return run_history(paths.store_dir(args.store))
    if args.attach is not None and command:
        raise UsageError("give either --attach PID or a command after --, not both")
    if args.attach is None and not command:
        raise UsageError("nothing to track: give a command after -- or --attach PID (see --help)")
    _check_numbers(args)
    if args.attach is not None:
        _check_attach(args.attach)
    mem_limit = parse_size(args.mem_limit) if args.mem_limit else None
    from gputop_tracker.core.events import check_levels

    try:
        check_levels(args.warn_at, args.critical_at)
    except ValueError as e:
        raise UsageError(str(e).replace("warn_at", "--warn-at").replace("critical_at", "--critical-at")) from None
    if args.enforce_mem_limit and not mem_limit:
        raise UsageError("--enforce-mem-limit needs --mem-limit SIZE")
    if args.enforce_mem_limit and args.attach is not None:
        raise UsageError("--enforce-mem-limit applies to a launched command, not --attach")
    if args.watch_output and args.attach is not None:
        raise UsageError("--watch-output applies to a launched command, not --attach")
    if args.output is not None:
        _check_output(args.output)
    if command and not command[0]:
        # as a shell says of `""`: exec would search PATH for an empty name and fail with EACCES on a directory
        return die("'': command not found", 127)
    cfg = EngineConfig(
        mode="attach" if args.attach is not None else "launch",
        argv=command,
        pid=args.attach or 0,
        interval=args.interval,
        n_expected_cores=args.n_expected_cores,
        gpus=args.gpus,
        simulate_gpus=args.simulate_gpus,
        store=str(paths.store_dir(args.store)),
        save=not args.no_save,
        mem_limit=mem_limit,
        enforce_mem_limit=args.enforce_mem_limit,
        warn_at=args.warn_at,
        critical_at=args.critical_at,
        flight_seconds=args.oom_window,
        oom_dumps=args.oom_dumps,
        oom_dump_mb=args.oom_dump_mb,
        # never our own front end (nor what it starts): attached to an ancestor, e.g. the shell we run
        # in, it would count as one of the tracked process's descendants
        exclude=[os.getpid()],
    )
    interactive = not args.headless and sys.stdin.isatty() and sys.stdout.isatty()
    if interactive:
        try:
            from gputop_tracker.tui.live import run_live
        except ImportError as e:  # the TUI is optional at run time: never lose the run over it
            print(f"{PROG}: live view unavailable ({e}); running headless", file=sys.stderr)
        else:
            return run_live(cfg, args, units)
    return run_headless(cfg, args, units)


def run_headless(cfg: EngineConfig, args: argparse.Namespace, units: Units) -> int:
    from gputop_tracker.core.channel import EventMessage, Failed, Started, Summary, start_forked

    cfg.watch_output = args.watch_output
    shares_terminal_job = False
    if cfg.mode == "launch":
        if in_terminal_foreground():
            # The command stays in the terminal's job: it may read the tty, and Ctrl-C reaches it directly.
            cfg.process_group = os.getpgrp()
            shares_terminal_job = True
        else:
            # Batch, pipe or background: its own process group, so a signal sent to our whole group
            # (timeout, kill -TERM -PGID) reaches it once — forwarded by us — not twice.
            cfg.process_group = 0
        if args.format == "json" and not args.output:
            cfg.stdout = 2  # stdout carries only the JSON report; the command's stdout goes to stderr
    # Signals are taken synchronously by one thread (sigwaitinfo) so we can tell Ctrl-C on the terminal,
    # which the command receives itself, from a kill aimed at us, which we must pass on.
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    handle = start_forked(cfg)
    # pydantic and the models load now, on this core, while the sampler starts the command on the other
    import gputop_tracker.core.models  # noqa: F401

    relay = SignalRelay(handle, attach=cfg.mode == "attach", shares_terminal_job=shares_terminal_job)
    interrupted = relay.interrupted
    threading.Thread(target=relay.run, name="signal-relay", daemon=True).start()
    usage = None
    failure = None
    started = None
    alerts = AlertPrinter()
    try:
        for msg in handle.messages():
            if isinstance(msg, EventMessage):
                alerts.show(msg.event)
            elif isinstance(msg, Summary):
                usage = msg.usage
            elif isinstance(msg, Failed):
                failure = msg
            elif isinstance(msg, Started):
                started = msg
    finally:
        handle.close()
        handle.wait()
        relay.reaped.set()
    alerts.finish()
    if failure is not None:
        print(f"{PROG}: {failure.message}", file=sys.stderr)
        return failure.exit_code
    if usage is None:
        where = f"; partial session {started.session_id} in {started.store}" if started else ""
        return die(f"the sampler stopped unexpectedly (status {handle.exit_status}){where}", 1)
    write_report(usage, args, units)
    if cfg.save and not usage.session_path:
        not_saved(usage)
    if cfg.mode == "attach":
        return 128 + interrupted[0] if interrupted else 0
    if usage.exit_code is None:  # detached
        return 0
    return usage.exit_code


def in_terminal_foreground() -> bool:
    """Whether we run in the foreground job of a controlling terminal (an interactive shell's command)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class SignalRelay:
    """Passes SIGINT, SIGTERM and SIGHUP aimed at us on to the sampler (which passes them to the command),
    but not Ctrl-C / hang-up from the terminal in launch mode: the command, in the terminal's job, got it.
    Once the sampler has been reaped (`reaped` set) nothing is forwarded: its PID may belong to another
    process by then (a tiny window remains between the reaping and the flag)."""

    def __init__(self, handle: SamplerHandle, *, attach: bool, shares_terminal_job: bool = True) -> None:
        self.handle = handle
        self.attach = attach
        self.shares_terminal_job = shares_terminal_job
        self.interrupted: list[int] = []
        self.reaped = threading.Event()

    def forward(self, sig: int, si_code: int) -> None:
        self.interrupted.append(sig)
        from_terminal = self.shares_terminal_job and si_code == SI_KERNEL and sig in (signal.SIGINT, signal.SIGHUP)
        if (self.attach or not from_terminal) and not self.reaped.is_set():
            self.handle.signal(sig)

    def run(self) -> None:
        while True:
            info = signal.sigwaitinfo(FORWARDED)
            self.forward(info.si_signo, info.si_code)


def write_report(usage: object, args: argparse.Namespace, units: Units) -> None:
    """Write the report where asked; if that fails, the terminal gets it — a measured run is never lost.
    A failing stdout (closed pipe, full disk) costs one line on stderr, never the exit code."""
    from gputop_tracker.core import report
    from gputop_tracker.core.models import ResourceUsage
    from gputop_tracker.core.store import write_output

    assert isinstance(usage, ResourceUsage)
    text = report.to_json(usage, units) + "\n" if args.format == "json" else report.to_text(usage, units)
    if args.output:
        try:
            write_output(Path(args.output), text.encode())
        except OSError as e:
            _stderr(f"{PROG}: error: cannot write {args.output}: {e.strerror}; report follows\n{text}")
        else:
            if usage.session_path:
                _stderr(f"{PROG}: report written to {args.output}; session {usage.session_id}\n")
        return
    if args.format == "text":
        _stderr(text)
        return
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except OSError as e:
        stdout_failed()
        where = f"; session {usage.session_id} saved: {usage.session_path}" if usage.session_path else ""
        _stderr(f"{PROG}: error: cannot write the report to stdout: {e.strerror}{where}\n")


def not_saved(usage: object) -> None:
    """One line on stderr when the session could not be saved (the reason is among the summary's notes)."""
    from gputop_tracker.core.models import ResourceUsage

    assert isinstance(usage, ResourceUsage)
    reason = next((n for n in usage.notes if n.startswith("session NOT saved")), "session NOT saved")
    _stderr(f"{PROG}: {reason}\n")


def _stderr(text: str) -> None:
    """Write to stderr; if stderr itself is gone there is no one left to tell."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
    except OSError:
        pass


def stdout_failed() -> None:
    """After stdout failed (EPIPE, ENOSPC): point it at /dev/null, so the flush at exit neither fails nor
    prints a traceback, and nothing later writes into a dead pipe."""
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        os.dup2(fd, sys.stdout.fileno())
        os.close(fd)
    except (OSError, ValueError, AttributeError):
        pass


class AlertPrinter:
    """Headless: one line on stderr per alert (warning, critical, oom, gpu_lost), at most BURST a minute."""

    BURST = 10

    def __init__(self) -> None:
        self.times: list[float] = []
        self.suppressed = 0

    def show(self, event: object) -> None:
        from gputop_tracker.core.events import ALERT_TYPES
        from gputop_tracker.core.models import Event

        assert isinstance(event, Event)
        if event.type not in ALERT_TYPES:
            return
        now = time.monotonic()
        self.times = [t for t in self.times if now - t < 60.0]
        if len(self.times) >= self.BURST:
            self.suppressed += 1
            return
        self.times.append(now)
        extra = f"; dump: {event.dump}" if event.dump else ""
        print(f"{PROG}: {event.type.upper()} at +{event.elapsed:.1f}s: {event.message}{extra}", file=sys.stderr)
        sys.stderr.flush()

    def finish(self) -> None:
        if self.suppressed:
            print(f"{PROG}: {self.suppressed} more alerts not printed; see `sessions events`", file=sys.stderr)
