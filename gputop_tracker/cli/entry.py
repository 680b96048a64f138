"""`gputop-track`: launch or attach, live TUI on a terminal, headless report otherwise; `sessions` commands.

Start-up stays light: the TUI (textual) is imported only when a screen will be drawn, and pydantic
only after the sampler has been forked, so it loads while the command already runs.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gputop_tracker import console
from gputop_tracker._version import __version__
from gputop_tracker.cli import formats
from gputop_tracker.cli.relay import FORWARDED, SignalRelay, in_terminal_foreground
from gputop_tracker.console import PROG, Parser, UsageError
from gputop_tracker.core.model import paths, validate
from gputop_tracker.core.model.config import MIN_INTERVAL, EngineConfig
from gputop_tracker.core.model.units import UnitError, Units, parse_byte_size
from gputop_tracker.core.sampling.jobctl import is_session_leader, not_ignored
from gputop_tracker.core.sampling.orphans import become_subreaper

if TYPE_CHECKING:
    from gputop_tracker.core.integrations.exporters import Exporter
    from gputop_tracker.core.model.messages import Failed, Started
    from gputop_tracker.core.model.models import ResourceUsage
    from gputop_tracker.core.sampling.channel import SamplerHandle

DEFAULT_INTERVAL = 0.5
PROMETHEUS_TOP = 20  # exporters.base.DEFAULT_TOP_PROCESSES, not imported without an exporter (a test keeps them equal)


USAGE = f"""\
{PROG} [OPTIONS] -- CMD [ARGS...]
       {PROG} [OPTIONS] --attach PID
       {PROG} --history
       {PROG} advise [ID ...] [--job JOBID] [--command TEXT] [--last N] (see `advise --help`)
       {PROG} sessions {{list,show,export,events,job,compare,plot,delete}} ... (see --help)"""

EPILOG = f"""\
examples:
  {PROG} -- python train.py --lr 0.1     live view on a terminal, else a report
  {PROG} --headless -f json -o out.json -- bash run.sh
  {PROG} --mem-limit 16G --watch-output -- python train.py
  {PROG} --attach 12345                  a running process and its descendants
  {PROG} --prometheus :9464 -- python train.py   live metrics at http://HOST:9464/metrics
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
  ROCR_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES  the same on AMD GPUs (ROCr's list, then HIP's)
  ROCM_PATH                    where amdsmi finds ROCm's lib/libamd_smi.so (AMD GPUs)
"""


STORE_HELP = f"session store (default: ${paths.STORE_ENV} or the user data dir)"
SIMULATE_HELP = "N simulated GPUs (demos; labelled)"


def build_parser() -> Parser:
    p = Parser(
        prog=PROG,
        usage=USAGE,
        description="Track what a command's whole process tree uses: RAM, CPU, threads, GPU memory and utilization.",
        epilog=EPILOG,
    )
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to launch, after --")
    p.add_argument("--attach", metavar="PID", type=console.whole, help="track a running process and its descendants")
    p.add_argument("--history", action="store_true", help="open the TUI on the saved sessions")
    p.add_argument("--headless", action="store_true", help="no TUI: print or write a report at the end")
    formats.REPORT.add_option(p, "report format (headless): text or json")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of the terminal")
    p.add_argument(
        "--interval",
        "--st",
        dest="interval",
        type=console.real,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"seconds between samples (default {DEFAULT_INTERVAL}, at least {MIN_INTERVAL})",
    )
    formats.add_unit_options(p)
    p.add_argument(
        "--nec",
        "--n-expected-cores",
        dest="n_expected_cores",
        type=console.whole,
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
    p.add_argument("--simulate-gpus", type=console.whole, default=0, metavar="N", help=SIMULATE_HELP)
    p.add_argument(
        "--gpu-backend",
        choices=validate.GPU_BACKENDS,
        default="auto",
        help="GPUs through NVML (nvidia), amdsmi (amd), or none; default auto: NVIDIA, then AMD",
    )
    p.add_argument(
        "--gpu-poll",
        type=console.real,
        default=50.0,
        metavar="HZ",
        help="GPU memory watcher rate: process lists and memory of the counted GPUs (default 50; 0 = off)",
    )
    p.add_argument("--store", metavar="DIR", type=console.name, help=STORE_HELP)
    p.add_argument("--no-save", action="store_true", help="do not save this run as a session")
    p.add_argument(
        "--no-probe",
        action="store_true",
        help="no in-process probe: launched Python processes do not report their exact peaks at exit",
    )
    p.add_argument(
        "--plot",
        metavar="FILE",
        help="after the run, draw the session to FILE (.png, .svg, .html; implies --headless; needs the plot extra)",
    )
    p.add_argument(
        "--wait-descendants",
        action="store_true",
        help="when the command exits, keep tracking until its descendants (daemons) are gone too",
    )
    p.add_argument(
        "--request",
        metavar="LIST",
        help="what the job asked for, e.g. mem=16G,cpus=4,gpus=1,time=2h (outside SLURM; overrides its values)",
    )
    _add_alert_options(p.add_argument_group("alerts and OOM dumps"))
    _add_export_options(p.add_argument_group("Prometheus (needs the `prometheus` extra)"))
    p.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return p


def _add_alert_options(alerts: argparse._ArgumentGroup) -> None:
    alerts.add_argument(
        "--gpu-history",
        type=int,
        default=0,
        metavar="N",
        help="record PyTorch's allocator history (N entries); a CUDA OOM keeps its snapshot (memory_viz)",
    )
    alerts.add_argument(
        "--mem-limit",
        metavar="SIZE",
        help="RAM limit for alerts, e.g. 4G, 500M (default: the job's cgroup limit, else the system's RAM)",
    )
    alerts.add_argument(
        "--enforce-mem-limit",
        action="store_true",
        help="also make --mem-limit the hard limit of the command's own cgroup (the kernel OOM-kills past it)",
    )
    alerts.add_argument(
        "--warn-at", type=console.real, default=80.0, metavar="PCT", help="warning level, %% of the limit (80)"
    )
    alerts.add_argument("--critical-at", type=console.real, default=95.0, metavar="PCT", help="critical level, %% (95)")
    alerts.add_argument(
        "--watch-output",
        action="store_true",
        help="headless: pass the command's output through a pipe to spot CUDA/PyTorch out-of-memory errors",
    )
    alerts.add_argument(
        "--oom-window",
        type=console.real,
        default=60.0,
        metavar="SECONDS",
        help="seconds of samples kept for a dump (60)",
    )
    alerts.add_argument(
        "--oom-dumps",
        type=console.whole,
        default=5,
        metavar="K",
        help="OOM dump bundles kept in the store (5; 0 = none)",
    )
    alerts.add_argument(
        "--oom-dump-mb", type=console.real, default=200.0, metavar="M", help="at most M MB of dump bundles (200)"
    )


def _add_export_options(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--prometheus",
        metavar="ADDR",
        help="serve /metrics at ADDR while the job is tracked: :9464, 127.0.0.1:9464, [::1]:9464",
    )
    group.add_argument(
        "--prometheus-textfile",
        metavar="FILE",
        help="rewrite FILE (*.prom, new or left by an earlier run) every 2 s for node_exporter's textfile"
        " collector; removed at the end",
    )
    group.add_argument(
        "--prometheus-top",
        type=console.whole,
        default=PROMETHEUS_TOP,
        metavar="N",
        help="processes with their own gputop_process_memory_bytes series, largest RSS first (20)",
    )


def _open_exporter(args: argparse.Namespace, cfg: EngineConfig) -> Exporter | None:
    """The Prometheus endpoint bound (or the textfile checked) before the command starts; exit 2 when not."""
    if args.prometheus is None and args.prometheus_textfile is None:  # "" is asked for, and refused by the check
        if args.prometheus_top != PROMETHEUS_TOP:
            raise UsageError("--prometheus-top needs --prometheus or --prometheus-textfile")
        return None
    from gputop_tracker.core.integrations.exporters import ExportError, ExportOptions, SessionInfo, open_exporter
    from gputop_tracker.core.integrations.exporters.base import MAX_TOP_PROCESSES, command_of

    try:
        validate.integer("--prometheus-top", args.prometheus_top, 0, MAX_TOP_PROCESSES)
    except ValueError as e:
        raise UsageError(str(e)) from None

    options = ExportOptions(args.prometheus, args.prometheus_textfile, args.prometheus_top)
    info = SessionInfo(command=cfg.argv or command_of(cfg.pid), slurm_job_id=(cfg.slurm or {}).get("job_id") or "")
    try:
        return open_exporter(options, info)
    except ExportError as e:
        raise UsageError(str(e)) from None


def _sessions(argv: list[str]) -> int:
    from gputop_tracker.cli import sessions

    return sessions.main(argv)


def _advise(argv: list[str]) -> int:
    from gputop_tracker.cli import jobs

    return jobs.advise_main(argv)


# The subcommands: `gputop-track WORD ...` runs COMMANDS[WORD] on the rest; anything else is a command to track.
# Adding one is one entry (its module is imported only when it runs).
COMMANDS: dict[str, Callable[[list[str]], int]] = {"sessions": _sessions, "advise": _advise}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in COMMANDS:
            return COMMANDS[argv[0]](argv[1:])
        return track(build_parser().parse_args(argv))
    except (UsageError, UnitError) as e:
        return console.error(str(e))
    except console.StdoutError as e:  # --help into a full disk, a listing into a closed pipe
        return console.write_error(e)
    except KeyboardInterrupt:
        return console.EXIT_INTERRUPTED


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
    """Every numeric flag finite and in range (NaN and inf pass a plain `<` test), warning below critical; each
    entry of --gpus an index or a UUID."""
    try:
        if args.gpus is not None:
            args.gpus = validate.gpu_list("--gpus", args.gpus)
        validate.tracking_options(
            validate.CLI_NAMES,
            interval=args.interval,
            n_expected_cores=args.n_expected_cores,
            simulate_gpus=args.simulate_gpus,
            warn_at=args.warn_at,
            critical_at=args.critical_at,
            flight_seconds=args.oom_window,
            oom_dumps=args.oom_dumps,
            oom_dump_mb=args.oom_dump_mb,
        )
        validate.number("--gpu-poll", args.gpu_poll, 0, validate.MAX_GPU_POLL)
        validate.gpu_history("--gpu-history", args.gpu_history, not args.no_probe and args.attach is None)
    except ValueError as e:
        raise UsageError(str(e)) from None


def _job_context(args: argparse.Namespace) -> dict[str, object] | None:
    """The SLURM job (our environment, or the target's when attaching) and --request."""
    from gputop_tracker.core.integrations import slurm

    try:
        request = slurm.parse_request(args.request) if args.request is not None else None
    except slurm.RequestError as e:
        raise UsageError(str(e)) from None
    return slurm.context_for("attach" if args.attach is not None else "launch", args.attach or 0, request)


def _check_output(name: str) -> None:
    """-o FILE can be written: the rule every `-o` shares (`store.check_output`)."""
    from gputop_tracker.core.store.sessions import OutputError, check_output

    try:
        check_output(name)
    except OutputError as e:
        raise UsageError(str(e)) from None


def _check_distinct_files(args: argparse.Namespace) -> None:
    """-o, --plot and --prometheus-textfile naming one file: each would overwrite (or remove) another's."""
    named = [(flag, value) for flag, value in (("-o", args.output), ("--plot", args.plot),
             ("--prometheus-textfile", args.prometheus_textfile)) if value]  # fmt: skip
    seen: dict[str, str] = {}
    for flag, value in named:
        real = os.path.realpath(value)
        if real in seen:
            raise UsageError(f"{seen[real]} and {flag} name the same file: {value}")
        seen[real] = flag


def _check_plot(args: argparse.Namespace) -> None:
    """--plot FILE: a name, size and matplotlib that will do, checked before the command starts."""
    from gputop_tracker.cli import plot as plot_cli
    from gputop_tracker.core.store import sessions as store

    if args.no_save:
        raise UsageError("--plot draws the saved session: drop --no-save")
    plot_cli.check(args.plot)
    try:  # found now, not after the run: the picture is drawn from the saved session
        store.check_store(paths.store_dir(args.store))
    except store.OutputError as e:
        raise UsageError(f"--plot: {e}") from None


def _history(args: argparse.Namespace, command: list[str]) -> int:
    """`--history`: the saved sessions in the TUI; no option of a tracked run applies."""
    if command or args.attach:
        raise UsageError("--history takes no command and no --attach")
    if args.prometheus is not None or args.prometheus_textfile is not None:
        raise UsageError("--prometheus and --prometheus-textfile apply to a tracked job, not --history")
    if args.plot is not None:
        raise UsageError("--plot draws a tracked run; for a saved session: gputop-track sessions plot ID")
    from gputop_tracker.tui.app import run_history

    return run_history(paths.store_dir(args.store))


def _check_what_to_track(args: argparse.Namespace, command: list[str]) -> None:
    if args.attach is not None and command:
        raise UsageError("give either --attach PID or a command after --, not both")
    if args.attach is None and not command:
        raise UsageError("nothing to track: give a command after -- or --attach PID (see --help)")
    _check_numbers(args)
    if args.attach is not None:
        _check_attach(args.attach)


def _report_to_stdout(args: argparse.Namespace) -> None:
    """`-o -`, or `-o` naming the very file our stdout is (`/dev/stdout`, `/proc/self/fd/1`, the file `>` opened):
    the report goes to stdout as without `-o`, the text report included. Written through its name, a JSON report
    on stdout would be mixed with the command's own output, and a regular file would be replaced by the report,
    losing what the command wrote there."""
    args.report_stdout = bool(args.output) and console.names_stdout(args.output)
    if args.report_stdout:
        args.output = None


def _check_options(args: argparse.Namespace) -> int | None:
    """Options that go together, and every file the run will write, checked before anything starts; the memory
    limit in bytes (None: none)."""
    try:
        mem_limit = parse_byte_size(args.mem_limit) if args.mem_limit is not None else None  # '' too: refused
    except UnitError as e:
        raise UsageError(f"--mem-limit: {e}") from None
    if args.enforce_mem_limit and not mem_limit:
        raise UsageError("--enforce-mem-limit needs --mem-limit SIZE")
    if args.enforce_mem_limit and args.attach is not None:
        raise UsageError("--enforce-mem-limit applies to a launched command, not --attach")
    if args.watch_output and args.attach is not None:
        raise UsageError("--watch-output applies to a launched command, not --attach")
    if args.output is not None:
        _check_output(args.output)
    if args.plot is not None:
        _check_plot(args)
    _check_distinct_files(args)
    return mem_limit


def track(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    units = formats.units_of(args)
    if args.history:
        return _history(args, command)
    _check_what_to_track(args, command)
    _report_to_stdout(args)
    mem_limit = _check_options(args)
    job = _job_context(args)
    if command and not command[0]:
        # as a shell says of `""`: exec would search PATH for an empty name and fail with EACCES on a directory
        return console.error("'': command not found", 127)
    cfg = EngineConfig(
        mode="attach" if args.attach is not None else "launch",
        argv=command,
        pid=args.attach or 0,
        interval=args.interval,
        n_expected_cores=args.n_expected_cores,
        gpus=args.gpus,
        simulate_gpus=args.simulate_gpus,
        gpu_backend=args.gpu_backend,
        gpu_poll=args.gpu_poll,
        store=str(paths.store_dir(args.store)),
        save=not args.no_save,
        mem_limit=mem_limit,
        enforce_mem_limit=args.enforce_mem_limit,
        warn_at=args.warn_at,
        critical_at=args.critical_at,
        flight_seconds=args.oom_window,
        oom_dumps=args.oom_dumps,
        oom_dump_mb=args.oom_dump_mb,
        wait_descendants=args.wait_descendants,
        probe=not args.no_probe,
        gpu_history=args.gpu_history,
        slurm=job,
        # never our own front end (nor what it starts): attached to an ancestor, e.g. the shell we run
        # in, it would count as one of the tracked process's descendants
        exclude=[os.getpid()],
    )
    exporter = _open_exporter(args, cfg)
    try:
        return _run(cfg, args, units, exporter)
    finally:
        if exporter is not None:
            exporter.close()


def _run(cfg: EngineConfig, args: argparse.Namespace, units: Units, exporter: Exporter | None) -> int:
    # TERM=dumb (Emacs' shell and compile buffers, some CI ptys): a terminal that cannot draw a screen, where the
    # live view is a stream of escape sequences; such a terminal gets the headless report
    can_draw = os.environ.get("TERM") != "dumb"
    interactive = not args.headless and args.plot is None and sys.stdin.isatty() and sys.stdout.isatty() and can_draw
    if interactive:
        try:
            from gputop_tracker.tui.live.run import run_live
        except ImportError as e:  # the TUI is optional at run time: never lose the run over it
            print(f"{PROG}: live view unavailable ({e}); running headless", file=sys.stderr)
        else:
            return run_live(cfg, args, units, exporter=exporter)
    return run_headless(cfg, args, units, exporter)


def run_headless(cfg: EngineConfig, args: argparse.Namespace, units: Units, exporter: Exporter | None = None) -> int:
    from gputop_tracker.core.sampling.channel import start_forked

    cfg.watch_output = args.watch_output
    cfg.stream_samples = exporter is not None  # an exporter serves the latest sample
    shares_terminal_job = _place_the_command(cfg, args)
    # Signals are taken synchronously by one thread (sigwaitinfo) so we can tell Ctrl-C on the terminal,
    # which the command receives itself, from a kill aimed at us, which we must pass on.
    forwarded = not_ignored(FORWARDED)  # one inherited as ignored stays so: never queued by blocking it
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    become_subreaper()  # should the sampler die, the command comes to us (`sampler_died`)
    handle = start_forked(cfg)
    if exporter is not None:
        exporter.start()  # its threads only now: a fork copies just the forking thread
    skip_pydantic_plugins()
    # pydantic and the models load now, on this core, while the sampler starts the command on the other
    import gputop_tracker.core.model.models  # noqa: F401

    relay = SignalRelay(
        handle, attach=cfg.mode == "attach", shares_terminal_job=shares_terminal_job, session_leader=is_session_leader()
    )
    interrupted = relay.interrupted
    if forwarded:
        threading.Thread(target=relay.run, args=(forwarded,), name="signal-relay", daemon=True).start()
    alerts = AlertPrinter()
    try:
        usage, failure, started = _read_messages(handle, exporter, alerts, relay, cfg.mirror_stops_to != 0)
    finally:
        if exporter is not None:
            exporter.close()  # tracking is over: nothing more to serve, the textfile goes
        handle.close()
        handle.wait()
        relay.reaped.set()
    alerts.finish()
    if failure is not None:
        print(f"{PROG}: {failure.message}", file=sys.stderr)
        return failure.exit_code
    if usage is None:
        return sampler_died(cfg, handle, started, relay)
    return _after_the_report(cfg, args, units, usage, interrupted, relay.interrupted_at)


def skip_pydantic_plugins() -> None:
    """No search for pydantic plugins in this process, which validates only the sampler's messages: pydantic
    reads every installed distribution's entry points (importlib.metadata: ~12 ms of CPU) at the first model it
    builds. Through its documented switch, unless the user set it; only once the sampler has been forked, so
    the command's environment never holds it."""
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


def _place_the_command(cfg: EngineConfig, args: argparse.Namespace) -> bool:
    """Which process group a launched command runs in, and where its stdout goes; True when it stays in the
    terminal's foreground job with us."""
    if cfg.mode != "launch":
        return False
    if args.format == "json" and not args.output:
        cfg.stdout = 2  # stdout carries only the JSON report; the command's stdout goes to stderr
    if in_terminal_foreground():
        # The command stays in the terminal's job: it may read the tty, and Ctrl-C reaches it directly.
        # Once it runs we leave that job (`leave_terminal_job`), the sampler mirroring its stops onto us.
        cfg.process_group = os.getpgrp()
        cfg.mirror_stops_to = 0 if is_session_leader() else os.getpid()
        return True
    # Batch, pipe or background: its own process group, so a signal sent to our whole group
    # (timeout, kill -TERM -PGID) reaches it once — forwarded by us — not twice.
    cfg.process_group = 0
    return False


def _read_messages(
    handle: SamplerHandle, exporter: Exporter | None, alerts: AlertPrinter, relay: SignalRelay, mirror_stops: bool
) -> tuple[ResourceUsage | None, Failed | None, Started | None]:
    """The sampler's messages until it closes its pipe: (the summary, a failure, the start), each or None."""
    from gputop_tracker.core.model.messages import EventMessage, Failed, Started, Summary

    usage = failure = started = None
    for msg in handle.messages():
        if exporter is not None:
            exporter.observe(msg)
        if isinstance(msg, EventMessage):
            alerts.show(msg.event)
        elif isinstance(msg, Summary):
            usage = msg.usage
        elif isinstance(msg, Failed):
            failure = msg
        elif isinstance(msg, Started):
            started = msg
            if mirror_stops:
                relay.leave_terminal_job()
    return usage, failure, started


def _after_the_report(
    cfg: EngineConfig,
    args: argparse.Namespace,
    units: Units,
    usage: ResourceUsage,
    interrupted: list[int],
    interrupted_at: list[float],
) -> int:
    """The report written (then a picture, if asked); the exit code: the command's, as a shell would give it.
    A Ctrl-C (or a kill) that came once the run was over gives up waiting for a reader of a FIFO, also one that came
    before this front end got here (a loaded machine: the session saved, the summary not read yet); one that came
    during the run was the command's."""
    ended = usage.end_time or time.time()
    write_report(usage, args, units, give_up=lambda: any(t >= ended for t in interrupted_at))
    if cfg.save and not usage.session_path:
        console.not_saved(usage.notes)
    if args.plot is not None:  # after the report is out: a failed picture costs one line, never the report
        from gputop_tracker.cli import plot as plot_cli

        plot_cli.plot_after_run(usage.session_path, args.plot)
    if cfg.mode == "attach":
        return console.signal_exit_code(interrupted[0]) if interrupted else 0
    if usage.exit_code is None:  # detached
        return 0
    return usage.exit_code


def sampler_died(cfg: EngineConfig, handle: SamplerHandle, started: Started | None, relay: SignalRelay) -> int:
    """The sampler died before the command: wait for the command ourselves (`orphans.outlive_sampler`)."""
    from gputop_tracker.core.sampling import orphans

    if started is None:
        how = orphans.describe_death(handle.exit_status)
        return console.error(f"the sampler stopped unexpectedly ({how})", console.EXIT_FAILURE)
    took_over = orphans.Takeover(cfg, handle.exit_status, started.pid, started.session_id, started.store)
    try:
        return took_over.run(console.say, relay.retarget)
    finally:
        relay.reaped.set()


def write_report(
    usage: object, args: argparse.Namespace, units: Units, give_up: Callable[[], bool] | None = None
) -> None:
    """Write the report where asked; if that fails, the terminal gets it — a measured run is never lost.
    A failing stdout (closed pipe, full disk) costs one line on stderr, never the exit code. `give_up`: a
    Ctrl-C or SIGTERM came while `-o FIFO` waited for a reader (stderr gets the report then)."""
    from gputop_tracker.core.model.models import ResourceUsage
    from gputop_tracker.core.store.sessions import write_output

    assert isinstance(usage, ResourceUsage)
    text = formats.REPORT.render(args.format, usage, units)
    if args.output:
        try:
            write_output(Path(args.output), text.encode(), give_up=give_up)
        except OSError as e:
            console.error(f"cannot write {args.output}: {e.strerror}; report follows", console.EXIT_FAILURE)
            console.write_stderr(text)
        else:
            if usage.session_path:
                console.say(f"report written to {args.output}; session {usage.session_id}")
        return
    if args.format == "text" and not args.report_stdout:
        console.write_stderr(text)
        return
    try:
        console.write_stdout(text)
    except OSError as e:
        console.stdout_failed()
        if e.errno == errno.EPIPE:  # the reader took what it wanted (`| head`): normal, nothing to say
            return
        where = f"; session {usage.session_id} saved: {usage.session_path}" if usage.session_path else ""
        console.error(f"cannot write the report to stdout: {e.strerror}{where}", console.EXIT_FAILURE)


class AlertPrinter:
    """Headless: one line on stderr per alert (warning, critical, oom, gpu_lost), at most BURST a minute."""

    BURST = 10

    def __init__(self) -> None:
        self.times: list[float] = []
        self.suppressed = 0

    def show(self, event: object) -> None:
        from gputop_tracker.core.model.models import Event
        from gputop_tracker.core.report.render import ALERT_TYPES  # loaded for the report anyway

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
