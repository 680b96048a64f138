"""Prometheus export: the endpoint and the textfile of the real CLI and the API, read with
prometheus-client's own parser; bad addresses refused before the command starts; GPU series through the
fake NVML. The test against a real Prometheus server is in test_prometheus_server.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import python_c
from prometheus_client import CollectorRegistry, generate_latest
from promutil import (
    HOLDER,
    MB,
    PORT_RETRIES,
    Families,
    Holder,
    cli,
    free_port,
    on_free_port,
    parse,
    scrape,
    values,
    wait_until,
)

from gputop_tracker.core.integrations.exporters import ExportError, ExportOptions, SessionInfo
from gputop_tracker.core.integrations.exporters.base import every_interface, parse_address
from gputop_tracker.core.integrations.exporters.latest import LatestFigures
from gputop_tracker.core.integrations.exporters.prometheus import TreeCollector
from gputop_tracker.core.model.models import Event, ResourceUsage, Sample
from gputop_tracker.core.model.text import command_line
from gputop_tracker.core.sampling.channel import EventMessage, Progress, SampleMessage, Started


def make_sample(n_procs: int = 30, gpus: list[dict[str, Any]] | None = None) -> Sample:
    procs = [
        {"pid": 1000 + i, "ppid": 999, "name": f"w{i}", "role": "descendant", "rss": (i + 1) * MB, "private": MB,
         "shared": 0, "pss": MB, "peak_rss": (i + 1) * MB, "cpu_seconds": 1.0, "cpu_percent": 5.0, "threads": 2}
        for i in range(n_procs)
    ]  # fmt: skip
    tree = {"main_rss": 0, "main_private": 0, "main_shared": 0, "descendants_total": 0, "descendants_private": 0,
            "combined_total": 300 * MB, "combined_private": 250 * MB, "combined_shared": 50 * MB, "cpu_percent": 150.0,
            "main_cpu_percent": 50.0, "cpu_seconds": 12.5, "threads": 60, "gpu_memory": 0, "n_processes": n_procs}  # fmt: skip
    host = {"memory_total": 8000 * MB, "memory_used": 2000 * MB, "cpu_percent": 20.0, "cpu_count": 2}
    return Sample.model_validate(
        {"time": 1.7e9, "elapsed": 3.0, "processes": procs, "gpus": gpus or [], "host": host, "tree": tree}
    )


def progress(peak: float, user: float, system: float) -> Progress:
    usage = ResourceUsage.model_validate(
        {"max_ram": {"combined": {"total_rss": peak}}, "cpu_time": {"user": user, "system": system}, "n_samples": 7}
    )
    return Progress(usage)


def collect(latest: LatestFigures, top: int = 20) -> Families:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TreeCollector(latest, top))
    return parse(generate_latest(registry).decode())


def test_collector_serves_the_latest_sample_and_summary() -> None:
    latest = LatestFigures(SessionInfo(command=["python", "train.py"], host="node7", slurm_job_id="4242"))
    fams = collect(latest)
    assert set(fams) == {"gputop_session_info", "gputop_alerts", "gputop_oom_events", "gputop_gpu_lost_events"}
    latest.observe(Started(pid=1, session_id="S1", store="/x"))
    latest.observe(progress(320 * MB, 4.0, 1.5))
    latest.observe(SampleMessage(make_sample()))
    fams = collect(latest)
    info = fams["gputop_session_info"].samples[0]
    assert info.name == "gputop_session_info" and info.value == 1
    assert info.labels["session"] == "S1" and info.labels["host"] == "node7"
    assert info.labels["slurm_job_id"] == "4242" and info.labels["command"] == "python train.py"
    assert fams["gputop_tree_memory_bytes"].type == "gauge"
    assert values(fams, "gputop_tree_memory_bytes") == {
        (("kind", "total"),): 300 * MB,
        (("kind", "private"),): 250 * MB,
        (("kind", "shared"),): 50 * MB,
    }
    assert values(fams, "gputop_tree_memory_peak_bytes") == {(): 320 * MB}
    assert fams["gputop_tree_cpu_seconds"].type == "counter"
    cpu = values(fams, "gputop_tree_cpu_seconds", "gputop_tree_cpu_seconds_total")
    assert cpu == {(("mode", "user"),): 4.0, (("mode", "system"),): 1.5}
    assert values(fams, "gputop_tree_processes") == {(): 30}
    assert values(fams, "gputop_tree_threads") == {(): 60}
    # every series of every family carries the session
    assert all(s.labels.get("session") == "S1" for f in fams.values() for s in f.samples)


def test_command_lines_that_are_not_utf8_are_served_escaped() -> None:
    """sys.argv holds a byte that is not UTF-8 as a lone surrogate: the exposition (UTF-8) must not fail on it
    (it answered 500 with a traceback per scrape, and the textfile thread died)."""
    info = SessionInfo(command=["bash", "-c", "sleep 3", "a\udcff\udcfe"], slurm_job_id="42\udce9")
    latest = LatestFigures(info)
    latest.observe(SampleMessage(make_sample(n_procs=2)))
    labels = collect(latest)["gputop_session_info"].samples[0].labels
    assert labels["command"] == "bash -c 'sleep 3' $'a\\xff\\xfe'"
    assert labels["slurm_job_id"] == "42\\xe9"


def test_top_processes_bounded_largest_first() -> None:
    latest = LatestFigures(SessionInfo())
    latest.observe(SampleMessage(make_sample(n_procs=30)))
    procs = values(collect(latest, top=5), "gputop_process_memory_bytes")
    assert len(procs) == 5
    assert sorted(procs.values()) == [26 * MB, 27 * MB, 28 * MB, 29 * MB, 30 * MB]
    assert (("name", "w29"), ("pid", "1029")) in procs
    assert len(values(collect(latest), "gputop_process_memory_bytes")) == 20  # the default bound
    assert "gputop_process_memory_bytes" not in collect(latest, top=0) or not values(
        collect(latest, top=0), "gputop_process_memory_bytes"
    )


def test_cpu_counter_never_runs_backwards_and_peak_never_below_now() -> None:
    latest = LatestFigures(SessionInfo())
    latest.observe(progress(100 * MB, 5.0, 2.0))
    latest.observe(progress(100 * MB, 4.9, 2.1))  # a reaped child's time moving between ledgers
    latest.observe(SampleMessage(make_sample()))  # 300 MB now, the once-a-second peak not yet updated
    fams = collect(latest)
    cpu = values(fams, "gputop_tree_cpu_seconds", "gputop_tree_cpu_seconds_total")
    assert cpu == {(("mode", "user"),): 5.0, (("mode", "system"),): 2.1}
    assert values(fams, "gputop_tree_memory_peak_bytes") == {(): 300 * MB}


def test_alerts_and_ooms_are_counters() -> None:
    latest = LatestFigures(SessionInfo())
    for kind, resource in [
        ("warning", "ram"),
        ("critical", "ram"),
        ("warning", "gpu1"),
        ("oom", None),
        ("peak", "ram"),
    ]:
        latest.observe(EventMessage(Event(time=1.0, type=kind, resource=resource)))
    latest.observe(EventMessage(Event(time=2.0, type="oom")))
    fams = collect(latest)
    assert fams["gputop_alerts"].type == "counter"
    assert values(fams, "gputop_alerts", "gputop_alerts_total") == {
        (("level", "critical"), ("resource", "ram")): 1,
        (("level", "warning"), ("resource", "gpu1")): 1,
        (("level", "warning"), ("resource", "ram")): 1,
    }
    assert values(fams, "gputop_oom_events", "gputop_oom_events_total") == {(): 2}
    assert values(fams, "gputop_gpu_lost_events", "gputop_gpu_lost_events_total") == {(): 0}


def test_gpu_series_in_base_units() -> None:
    gpu = {"index": 1, "uuid": "GPU-abc", "name": "H100", "memory_total": 80 * 1024**3, "memory_used": 2 * 1024**3,
           "utilization_gpu": 45.0, "power_w": 250.0, "temperature_c": 60.0, "tree_memory": 1024**3, "energy_j": 123.0}  # fmt: skip
    latest = LatestFigures(SessionInfo())
    latest.observe(SampleMessage(make_sample(gpus=[gpu, {"index": 2, "uuid": "GPU-def", "name": "x"}])))
    fams = collect(latest)
    key = (("gpu", "1"), ("uuid", "GPU-abc"))
    assert values(fams, "gputop_tree_gpu_memory_bytes") == {key: 1024**3, (("gpu", "2"), ("uuid", "GPU-def")): 0}
    assert values(fams, "gputop_gpu_memory_used_bytes") == {key: 2 * 1024**3}  # GPU 2 reported nothing: absent
    assert values(fams, "gputop_gpu_memory_total_bytes") == {key: 80 * 1024**3}
    assert values(fams, "gputop_gpu_utilization_ratio") == {key: pytest.approx(0.45)}
    assert values(fams, "gputop_gpu_power_watts") == {key: 250.0}
    assert values(fams, "gputop_gpu_temperature_celsius") == {key: 60.0}
    assert values(fams, "gputop_gpu_energy_joules", "gputop_gpu_energy_joules_total") == {key: 123.0}


def test_simulated_gpus_are_labelled_so() -> None:
    """--simulate-gpus fed made-up GPU series to Prometheus with the labels of real ones."""
    gpu = {"index": 0, "uuid": "GPU-sim", "name": "Simulated GPU", "memory_used": 5, "utilization_gpu": 50.0,
           "energy_j": 1.0, "simulated": True}  # fmt: skip
    latest = LatestFigures(SessionInfo())
    latest.observe(SampleMessage(make_sample(gpus=[gpu])))
    fams = collect(latest)
    key = (("gpu", "0"), ("simulated", "true"), ("uuid", "GPU-sim"))
    assert values(fams, "gputop_gpu_utilization_ratio") == {key: pytest.approx(0.5)}
    assert values(fams, "gputop_gpu_energy_joules", "gputop_gpu_energy_joules_total") == {key: 1.0}


ANY = every_interface(9464).host  # `:PORT`: every interface, dual-stack where the kernel has IPv6


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [(":9464", ANY, 9464), ("127.0.0.1:9464", "127.0.0.1", 9464), ("[::1]:9464", "::1", 9464), ("9464", ANY, 9464)],
)  # fmt: skip
def test_address_forms(text: str, host: str, port: int) -> None:
    if host == "::1" and not socket.has_ipv6:
        pytest.skip("no IPv6 on this machine")
    addr = parse_address(text)
    assert (addr.host, addr.port) == (host, port)
    assert str(addr) == (f":{port}" if host == ANY else text)


def test_every_interface_serves_ipv4_and_ipv6_clients() -> None:
    """`:PORT` as Prometheus' exporters mean it: a scrape over IPv4 and one over IPv6 both reach /metrics."""
    from gputop_tracker.core.integrations.exporters.prometheus import bind

    registry = CollectorRegistry(auto_describe=False)
    server, _ = on_free_port(lambda port: bind(parse_address(f":{port}"), "--prometheus", registry))
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
    try:
        assert server.address_family == every_interface(port).family  # where IPv6 exists, it was used
        hosts = ["127.0.0.1"] + (["[::1]"] if server.address_family == socket.AF_INET6 and _loopback6() else [])
        for host in hosts:
            with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as r:
                assert r.status == 200
    finally:
        server.shutdown()
        server.server_close()


def _loopback6() -> bool:
    """::1 is configured (a container may have IPv6 in the kernel but none on its loopback)."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_every_interface_falls_back_to_ipv4_only_where_ipv6_cannot_bind(monkeypatch: pytest.MonkeyPatch) -> None:
    """IPv6 in the kernel but not bindable: IPv4 alone. A port in use is an error, never a quiet fallback."""
    import errno

    from gputop_tracker.core.integrations.exporters import prometheus

    real = prometheus._bind
    calls = []

    def v6_missing(address, flag, registry):  # type: ignore[no-untyped-def]
        calls.append(address.family)
        if address.family == socket.AF_INET6:
            err = ExportError("no IPv6")
            err.errno = errno.EADDRNOTAVAIL
            raise err
        return real(address, flag, registry)

    monkeypatch.setattr(prometheus, "_bind", v6_missing)
    server, _ = on_free_port(lambda port: prometheus.bind(prometheus.Address("::", port, socket.AF_INET6, every=True),
                                                          "--prometheus", CollectorRegistry(auto_describe=False)))  # fmt: skip
    assert server.address_family == socket.AF_INET and calls == [socket.AF_INET6, socket.AF_INET]
    server.server_close()
    with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as busy:
        if not _loopback6():
            pytest.skip("no IPv6 loopback here")
        busy.bind(("::", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setattr(prometheus, "_bind", real)
        with pytest.raises(ExportError, match="already in use"):
            prometheus.bind(prometheus.Address("::", port, socket.AF_INET6, every=True), "--prometheus",
                            CollectorRegistry(auto_describe=False))  # fmt: skip


@pytest.mark.parametrize(
    "text", ["", "nonsense", ":0", ":70000", "127.0.0.1:", "::1:9464", "[::1]9464", ":94x", "[]:9464"]
)
def test_bad_addresses(text: str) -> None:
    with pytest.raises(ExportError, match=r"^--prometheus"):
        parse_address(text)


def test_options_check_textfile_and_top(tmp_path: Path) -> None:
    ExportOptions(textfile=str(tmp_path / "x.prom")).check()
    with pytest.raises(ExportError, match="no such directory"):
        ExportOptions(textfile=str(tmp_path / "missing" / "x.prom")).check()
    with pytest.raises(ExportError, match="is a directory"):
        ExportOptions(textfile=str(tmp_path)).check()
    with pytest.raises(ExportError, match="top processes"):
        ExportOptions(prometheus=":9464", top_processes=-1).check()


def test_a_forked_child_does_not_keep_the_listening_socket() -> None:
    """The CLI forks the sampler after binding: the child must not hold the endpoint's socket."""
    from gputop_tracker.core.integrations.exporters import open_exporter

    exporter, _ = on_free_port(lambda port: open_exporter(ExportOptions(prometheus=f"127.0.0.1:{port}"), SessionInfo()))
    assert exporter is not None
    server = exporter.server  # type: ignore[attr-defined]
    try:
        pid = os.fork()
        if pid == 0:
            os._exit(0 if server.socket.fileno() == -1 else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert server.socket.fileno() != -1  # ours is still open
    finally:
        exporter.close()


def test_exporter_modules_never_import_textual() -> None:
    code = (
        "import sys, gputop_tracker.core.integrations.exporters.prometheus, gputop_tracker.core.integrations.exporters.latest\n"
        "print([m for m in sys.modules if m == 'textual' or m.startswith('textual.')])"
    )
    proc = python_c(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


# --------------------------------------------------------------------------- the real CLI


@pytest.fixture
def holders() -> Iterator[list[Holder]]:
    made: list[Holder] = []
    yield made
    for h in made:
        h.kill()


def tree_total_near(fams: Families, expect: float) -> bool:
    total = values(fams, "gputop_tree_memory_bytes")[(("kind", "total"),)]
    return abs(total - expect) <= 0.10 * expect


def cpu_seconds(fams: Families) -> dict[str, float]:
    return {
        dict(k)["mode"]: v for k, v in values(fams, "gputop_tree_cpu_seconds", "gputop_tree_cpu_seconds_total").items()
    }


def test_endpoint_serves_the_tree_memory_of_a_real_job(tmp_path: Path, holders: list[Holder]) -> None:
    h = Holder(tmp_path, 300, "--prometheus", "127.0.0.1:{port}")
    holders.append(h)
    port = h.port
    own = h.figures()
    assert abs(own["pss"] - 300 * MB) < 0.1 * 300 * MB  # the workload really holds ~300 MB
    own_cpu = own["cpu_user"] + own["cpu_system"]
    fams = wait_until(
        # a sample taken while the workload was still touching its pages can be within 10 % of one and not the
        # other: wait for one that has it all (a loaded machine samples it late)
        lambda: (
            (f := parse(scrape(port))) and tree_total_near(f, own["pss"]) and tree_total_near(f, own["vmrss"]) and f
        ),
        30,
        f"gputop_tree_memory_bytes{{kind=total}} within 10 % of the workload's own Pss {own['pss']} and VmRSS",
    )
    total = values(fams, "gputop_tree_memory_bytes")[(("kind", "total"),)]
    assert abs(total - own["vmrss"]) <= 0.10 * own["vmrss"]
    assert values(fams, "gputop_tree_processes") == {(): 1}
    # the CPU counter (sent once a second) catches up with what the workload's own times() said
    fams = wait_until(
        lambda: (f := parse(scrape(port))) and sum(cpu_seconds(f).values()) >= own_cpu - 0.02 and f,
        30,
        f"gputop_tree_cpu_seconds_total reaching the workload's own {own_cpu} s",
    )
    cpu = cpu_seconds(fams)
    assert set(cpu) == {"user", "system"}
    assert cpu["user"] >= own["cpu_user"] - 0.02 and cpu["system"] >= own["cpu_system"] - 0.02
    assert sum(cpu.values()) < own_cpu + 5  # a job that sleeps burns no more
    procs = values(fams, "gputop_process_memory_bytes")
    assert [v for k, v in procs.items() if dict(k)["name"].startswith("python")]
    info = fams["gputop_session_info"].samples[0].labels
    assert info["session"]
    # the command line, shortened to 120 characters: where the checkout's path is long, before the script's name
    label, full = info["command"], command_line(h.argv)
    assert len(label) <= 120 and (label == full or (label.endswith("…") and full.startswith(label[:-1]))), label
    code, err = h.release()
    assert code == 0, err
    assert "Traceback" not in err
    with pytest.raises(urllib.error.URLError):  # tracking is over: the endpoint is gone
        scrape(port)
    assert info["session"] in err  # the report names the session the endpoint carried


def test_textfile_is_written_atomically_and_removed_at_the_end(tmp_path: Path, holders: list[Holder]) -> None:
    prom = tmp_path / "textfile" / "gputop.prom"
    prom.parent.mkdir()
    h = Holder(tmp_path, 300, "--prometheus-textfile", str(prom))
    holders.append(h)
    own = h.figures()
    fams = wait_until(
        lambda: (f := parse(prom.read_text())) and tree_total_near(f, own["pss"]) and f,
        30,
        "the textfile with the tree's memory",
    )
    assert "gputop_tree_cpu_seconds" in fams and "gputop_session_info" in fams
    # only whole files ever appear under the name (temporary files are renamed over it)
    for _ in range(20):
        text = prom.read_text()
        assert text.endswith("\n") and parse(text)
        assert text.startswith("# HELP gputop_")  # what a later run recognises as a textfile of this tool
        time.sleep(0.05)
    code, err = h.release()
    assert code == 0, err
    assert not prom.exists(), "a finished run's textfile would be served as if it still ran"
    assert list(prom.parent.iterdir()) == []  # no temporary file left either


def marker_job(tmp_path: Path) -> tuple[list[str], Path]:
    marker = tmp_path / "started"
    return ["--", sys.executable, "-c", f"open({str(marker)!r}, 'w')"], marker


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("gputop-track: error: "), err
    return lines[0]


def exit_2_before_the_command(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[str, Path]:
    """The CLI, headless with `args` (and `env` added to ours), in front of a job that would create a marker file:
    asserts it exits 2 with one error line; returns that line, and the marker (the caller checks it was never
    made)."""
    job, marker = marker_job(tmp_path)
    proc = cli("--headless", *args, *job, env=env)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    return one_error_line(err), marker


# 192.0.2.1 (TEST-NET-1) is numeric, so no DNS is asked, and no address of this machine
@pytest.mark.parametrize(
    "addr", ["nonsense", ":0", ":70000", "::1:9464", "[::1]9464", "192.0.2.1:9464", "", "http://127.0.0.1:9464"]
)
def test_bad_address_exits_2_before_the_command_starts(tmp_path: Path, addr: str) -> None:
    line, marker = exit_2_before_the_command(tmp_path, "--prometheus", addr)
    assert "--prometheus" in line
    assert not marker.exists()


def test_port_in_use_exits_2_before_the_command_starts(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        line, marker = exit_2_before_the_command(tmp_path, "--prometheus", f"127.0.0.1:{port}")
    assert f"port {port} is already in use" in line
    assert not marker.exists()


def test_textfile_in_a_missing_directory_exits_2(tmp_path: Path) -> None:
    line, marker = exit_2_before_the_command(tmp_path, "--prometheus-textfile", str(tmp_path / "nope" / "x.prom"))
    assert "no such directory" in line
    assert not marker.exists()


@pytest.mark.parametrize("where", ["", "/proc/x.prom"])
def test_textfile_that_cannot_be_written_exits_2(tmp_path: Path, where: str) -> None:
    """An empty name was ignored (no exporter at all); /proc passes access() yet refuses files (and root
    passes access() everywhere): the run went on with one runtime line and exit 0."""
    line, marker = exit_2_before_the_command(tmp_path, "--prometheus-textfile", where)
    assert "--prometheus-textfile" in line
    assert not marker.exists()


def _user_paths(tmp_path: Path) -> dict[str, Path]:
    """What a user may name by mistake: a file of theirs, a FIFO, a device node, a link to a file of theirs."""
    own = tmp_path / "notes.txt"
    own.write_text("my notes\n")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.prom"
    link.symlink_to(own)
    return {"file": own, "fifo": fifo, "device": Path("/dev/null"), "link": link}


@pytest.mark.parametrize("kind", ["file", "fifo", "device", "link"])
def test_textfile_naming_what_is_not_ours_exits_2_and_leaves_it(tmp_path: Path, kind: str) -> None:
    """The textfile is replaced during the run and removed at its end: naming a user's file, a FIFO or a device
    node deleted it (as root, /dev/full) with exit 0. Now: refused before the command starts, left as it was."""
    target = _user_paths(tmp_path)[kind]
    before = os.lstat(target)
    line, marker = exit_2_before_the_command(tmp_path, "--prometheus-textfile", str(target))
    assert "not a textfile written by gputop-track" in line
    assert not marker.exists()
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode, after.st_size) == (before.st_ino, before.st_mode, before.st_size)
    if kind == "file":
        assert target.read_text() == "my notes\n"


def test_a_stale_textfile_of_an_earlier_run_is_replaced_then_removed(tmp_path: Path) -> None:
    """A run killed before its end leaves its textfile: the next run with the same flag must not refuse it."""
    prom = tmp_path / "gputop.prom"
    prom.write_text('# HELP gputop_session_info old\ngputop_session_info{session="old"} 1.0\n')
    proc = cli("--headless", "--prometheus-textfile", str(prom), "--", sys.executable, "-c", "pass")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert not prom.exists()


def test_only_the_file_this_run_wrote_is_removed(tmp_path: Path) -> None:
    """Removal checks the inode: a file put under the name after the run's last write is someone else's."""
    from prometheus_client import CollectorRegistry

    from gputop_tracker.core.integrations.exporters.prometheus import TextfileWriter

    prom = tmp_path / "x.prom"
    never = TextfileWriter(str(prom), CollectorRegistry(), period=60)
    prom.write_text("someone else's\n")
    never.close()  # wrote nothing this run: removes nothing
    assert prom.read_text() == "someone else's\n"
    prom.unlink()
    writer = TextfileWriter(str(prom), CollectorRegistry(), period=60)
    writer.write()
    assert prom.exists()
    prom.unlink()
    prom.write_text("replaced by the user\n")
    writer.close()
    assert prom.read_text() == "replaced by the user\n"
    prom.unlink()
    writer = TextfileWriter(str(prom), CollectorRegistry(), period=60)
    writer.write()
    writer.close()
    assert not prom.exists()


def test_the_textfile_is_first_written_at_the_first_sample_with_the_session_and_its_figures(tmp_path: Path) -> None:
    """The first write came at start, before the sampler said anything: `session=""` and only
    gputop_session_info (and the next one a period later). Now nothing is written until the first sample, which
    is written at once: the first file a collector can read names the session and holds the tree's figures."""
    from prometheus_client import CollectorRegistry

    from gputop_tracker.core.integrations.exporters.prometheus import TextfileWriter

    prom = tmp_path / "early.prom"
    writer = TextfileWriter(str(prom), CollectorRegistry(), period=60)
    writer.start()
    try:
        time.sleep(0.3)
        assert not prom.exists()  # nothing to say yet
        writer.poke()  # the first sample
        wait_until(prom.exists, 10, "the first write")
    finally:
        writer.close()
    # the real CLI: the first content the file ever holds
    prom = tmp_path / "job" / "job.prom"
    prom.parent.mkdir()
    proc = cli("--headless", "--no-save", "--interval", "0.2", "--prometheus-textfile", str(prom), "--", "sleep", "2")
    try:
        first = wait_until(lambda: prom.exists() and prom.read_text(), 30, "the textfile")
    finally:
        proc.communicate(timeout=60)
    fams = parse(first)
    assert fams["gputop_session_info"].samples[0].labels["session"], first
    assert "gputop_tree_memory_bytes" in fams, first


def test_missing_prometheus_client_names_the_extra(tmp_path: Path) -> None:
    shadow = tmp_path / "shadow" / "prometheus_client"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named prometheus_client')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(shadow.parent), os.environ.get("PYTHONPATH", "")])}
    line, marker = exit_2_before_the_command(tmp_path, "--prometheus", ":9464", env=env)
    assert "pip install 'prometheus-client>=0.17'" in line and "'.[prometheus]' in a checkout" in line
    assert not marker.exists()


def test_prometheus_top_without_an_exporter_is_a_usage_error(tmp_path: Path) -> None:
    _, marker = exit_2_before_the_command(tmp_path, "--prometheus-top", "5")
    assert not marker.exists()


def test_the_cli_default_of_prometheus_top_is_the_exporters() -> None:
    """The CLI keeps its own copy of the default (no exporter module loaded without an exporter)."""
    from gputop_tracker.cli.entry import PROMETHEUS_TOP, build_parser
    from gputop_tracker.core.integrations.exporters.base import DEFAULT_TOP_PROCESSES

    assert PROMETHEUS_TOP == DEFAULT_TOP_PROCESSES == build_parser().parse_args(["--", "true"]).prometheus_top


# --------------------------------------------------------------------------- the API


def test_api_tracker_serves_metrics_while_tracking(tmp_path: Path) -> None:
    from gputop_tracker import Tracker

    prom = tmp_path / "api.prom"
    tracker, port = on_free_port(
        lambda port: Tracker(
            sleep_time=0.2, prometheus=f"127.0.0.1:{port}", prometheus_textfile=prom, save=False
        ).start()
    )
    try:
        held = bytearray(200 * MB)
        held[::4096] = b"1" * len(held[::4096])
        fams = wait_until(
            lambda: (
                (f := parse(scrape(port)))
                and values(f, "gputop_tree_memory_bytes")[(("kind", "total"),)] >= 200 * MB
                and f
            ),
            30,
            "the API's endpoint with this process's memory",
        )
        assert fams["gputop_session_info"].samples[0].labels["session"] == tracker.session_id
        wait_until(prom.exists, 30, "the API's textfile")
        del held
    finally:
        tracker.stop()
    with pytest.raises(urllib.error.URLError):
        scrape(port)
    assert not prom.exists()


def test_api_rejects_a_bad_address_at_once() -> None:
    from gputop_tracker import Tracker

    with pytest.raises(ValueError, match="prometheus="):
        Tracker(prometheus="nonsense")


# --------------------------------------------------------------------------- the live view


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="needs tmux (the live view needs a terminal)")
def test_live_view_serves_metrics_too(tmp_path: Path) -> None:
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    figures, done, rc_file = tmp_path / "figures.json", tmp_path / "done", tmp_path / "rc"
    textfile = tmp_path / "prom" / "job.prom"
    textfile.parent.mkdir()
    env = {**os.environ, "TERM": "xterm-256color"}
    # a tmux server of our own: one already running (another test's, another job's) would give the view its
    # own environment (another store) and may keep its own window size (the toast then wraps elsewhere)
    tmux = ["tmux", "-L", f"gputop-prom-{os.getpid()}-{tmp_path.name[-12:]}"]
    for attempt in range(PORT_RETRIES):
        port = free_port()
        track = [sys.executable, "-m", "gputop_tracker", "--interval", "0.2", "--prometheus", f"127.0.0.1:{port}",
                 "--prometheus-textfile", str(textfile),
                 "--", sys.executable, str(script), str(figures), str(done), "300"]  # fmt: skip
        shell = f"{shlex.join(track)}; echo $? > {shlex.quote(str(rc_file))}"
        session = f"gputop-prom-{tmp_path.name[-12:]}-{attempt}"
        subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "160", "-y", "50", shell], check=True, env=env)
        # the port is bound before the command starts: its figures mean we listen; exit 2 before it, that the
        # port was taken meanwhile (the pane is gone with the message): again, on another port
        wait_until(lambda: figures.exists() or rc_file.exists(), 120, "the workload's start or gputop-track's exit")
        if figures.exists() or attempt == PORT_RETRIES - 1 or wait_until(rc_file.read_text, 10, "the rc") != "2\n":
            break
        rc_file.unlink()
    try:
        own = wait_until(lambda: figures.exists() and json.loads(figures.read_text()), 60, "the workload's figures")
        fams = wait_until(
            lambda: (f := parse(scrape(port))) and tree_total_near(f, own["pss"]) and f,
            60,
            "the live view's endpoint with the tree's memory",
        )
        assert "gputop_tree_cpu_seconds" in fams
        # the textfile's directory goes away: the view owns the terminal, so it says so there (stderr is hidden)
        wait_until(textfile.exists, 30, "the textfile")
        shutil.rmtree(textfile.parent)
        screen = wait_until(lambda: "cannot write" in (t := tmux_screen(tmux, session)) and t, 30, "the notice")
        # the notice's words, wherever its toast wrapped them: the toast's own columns (from where its first line
        # starts) of its rows, whatever the rest of those rows hold (the output pane's title, a long path)
        rows = screen.splitlines()
        first = next(n for n, row in enumerate(rows) if "cannot write" in row)
        left = rows[first].index("cannot write")
        toast = "".join(row[left:] for row in rows[first : first + 8])
        squashed = "".join(ch for ch in toast if ch.isalnum())
        assert "Nosuchfileordirectorytrackinggoesonretriedevery2s" in squashed, screen
        done.write_text("")
        wait_until(lambda: "exited with code 0" in tmux_screen(tmux, session), 30, "the live view saying the job ended")
        subprocess.run([*tmux, "send-keys", "-t", session, "q"], check=True)
        wait_until(lambda: rc_file.exists() and rc_file.read_text().strip(), 30, "gputop-track's exit")
        assert rc_file.read_text().strip() == "0"
        with pytest.raises(urllib.error.URLError):
            scrape(port)
    finally:
        done.write_text("")
        subprocess.run([*tmux, "kill-server"], capture_output=True)


def tmux_screen(tmux: list[str], session: str) -> str:
    return subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
