"""Containers: NVML's host PIDs paired with the tracked processes that hold an NVIDIA device open, by elimination.

The pairing rule on synthetic inputs; the device check on real open files (character nodes made with mknod,
named anything: the check goes by device number); the CLI end to end in a PID namespace of its own
(`unshare --pid --fork --mount-proc`), the fake library reporting the workload's real host PIDs.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fakenvml.fake import CONFIG_ENV, FakeNvml, MiB
from test_gpu_fakenvml import GPU0, GPU1, SETTLE, Run, _host_pid, _unshare_works, two_gpus

from gputop_tracker.core.gpu.containers import (
    DEVICES_TABLE_ENV,
    LABEL,
    NvidiaMajors,
    held_nvidia_nodes,
    nvidia_majors,
    pair_by_elimination,
    parse_devices_table,
)

F = frozenset

PROC_DEVICES = """Character devices:
  1 mem
  4 tty
195 nvidia-frontend
195 nvidia
226 drm
507 nvidia-caps-imex-channels
508 nvidia-nvswitch
510 nvidia-uvm
511 nvidia-caps

Block devices:
  7 loop
195 nvidia-not-a-char-device
259 blkext
"""


def test_majors_come_from_the_table_by_driver_name() -> None:
    m = parse_devices_table(PROC_DEVICES)
    assert m.gpu == {195}
    assert m.other == {507, 508, 510, 511}
    assert not parse_devices_table("Character devices:\n  1 mem\n")


def test_majors_table_can_be_pointed_elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "devices"
    table.write_text(PROC_DEVICES)
    monkeypatch.setenv(DEVICES_TABLE_ENV, str(table))
    assert nvidia_majors().gpu == {195}
    monkeypatch.delenv(DEVICES_TABLE_ENV)
    real = Path("/proc/devices").read_text()
    assert nvidia_majors() == parse_devices_table(real)  # production: this kernel's own table


# ------------------------------------------------------------------ the pairing rule


def test_one_unmapped_process_and_one_holder_pair() -> None:
    p = pair_by_elimination({9001: F({0})}, {12: F({0})}, {0: 0})
    assert p.pairs == {9001: 12} and p.reason == ""


def test_each_gpu_its_own_holder_pairs_every_process() -> None:
    """Main holds GPU 0's node, the child GPU 1's: each host PID has one candidate, each holder one PID."""
    p = pair_by_elimination({9001: F({0}), 9002: F({1})}, {12: F({0}), 13: F({1})}, {0: 0, 1: 1})
    assert p.pairs == {9001: 12, 9002: 13}


def test_two_processes_on_one_gpu_against_two_holders_is_ambiguous() -> None:
    p = pair_by_elimination({9001: F({0}), 9002: F({0})}, {12: F({0}), 13: F({0})}, {0: 0})
    assert p.pairs == {}
    assert "2 processes" in p.reason and "2 tracked processes" in p.reason and "ambiguous" in p.reason


def test_a_foreign_process_on_the_holders_gpu_makes_it_ambiguous_but_not_elsewhere() -> None:
    """GPU 1 lists the child and a stranger: which is the child's is unknown. GPU 0 still pairs with main."""
    p = pair_by_elimination({9001: F({0}), 9002: F({1}), 1: F({1})}, {12: F({0}), 13: F({1})}, {0: 0, 1: 1})
    assert p.pairs == {9001: 12}
    assert "2 processes" in p.reason and "1 tracked process " in p.reason


def test_elimination_repeats_once_a_pair_is_made() -> None:
    """Holder 13 holds both GPUs' nodes; 9002 (on GPU 1 only) fits only 13 once 9001 is known to be 12's."""
    unmapped = {9001: F({0}), 9002: F({1})}
    holders = {12: F({0}), 13: F({0, 1})}
    p = pair_by_elimination(unmapped, holders, {0: 0, 1: 1})
    assert p.pairs == {9001: 12, 9002: 13}


def test_a_process_on_two_gpus_needs_a_holder_of_both() -> None:
    p = pair_by_elimination({9001: F({0, 1})}, {12: F({0})}, {0: 0, 1: 1})
    assert p.pairs == {}
    p = pair_by_elimination({9001: F({0, 1})}, {12: F({0, 1})}, {0: 0, 1: 1})
    assert p.pairs == {9001: 12}


def test_holding_only_the_control_node_is_no_gpu_use() -> None:
    """nvidiactl / nvidia-uvm name no GPU (an NVML query tool holds them): never a candidate."""
    p = pair_by_elimination({9001: F({0})}, {12: F()}, {0: 0})
    assert p.pairs == {}
    assert "no tracked process holds an NVIDIA GPU device" in p.reason and "not the tree's" in p.reason


def test_unknown_minor_lets_any_gpu_node_fit() -> None:
    p = pair_by_elimination({9001: F({0})}, {12: F({3})}, {0: None})
    assert p.pairs == {9001: 12}


def test_nobody_holding_a_device_means_the_memory_is_someone_elses() -> None:
    p = pair_by_elimination({9001: F({0})}, {}, {0: 0})
    assert p.pairs == {} and "not the tree's" in p.reason
    unread = pair_by_elimination({9001: F({0})}, {}, {0: 0}, all_read=False)
    assert "could not be read" in unread.reason and "not the tree's" not in unread.reason


def test_leftovers_after_every_holder_is_paired_are_not_the_trees() -> None:
    p = pair_by_elimination({9001: F({0}), 1: F({1})}, {12: F({0})}, {0: 0, 1: 1})
    assert p.pairs == {9001: 12}
    assert "1 process " in p.reason and "every tracked process" in p.reason and "not the tree's" in p.reason


# ------------------------------------------------------------------ the device check on real open files


def _mknod(path: Path, major: int, minor: int) -> None:
    try:
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD)")


HOLD = "import sys, time\nfs = [open(p, 'rb') for p in sys.argv[1:]]\nprint('ready', flush=True)\ntime.sleep(30)"


def test_held_nodes_are_judged_by_device_number_not_path(tmp_path: Path) -> None:
    # stand-ins with a driver behind them (mem: /dev/zero is 1:5, /dev/full 1:7), named like no NVIDIA node
    zero, full = tmp_path / "card-a", tmp_path / "whatever"
    _mknod(zero, 1, 5)
    _mknod(full, 1, 7)
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(zero), str(full)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        assert held_nvidia_nodes(p.pid, NvidiaMajors(gpu=F({1}))) == {5, 7}
        assert held_nvidia_nodes(p.pid, NvidiaMajors(other=F({1}))) == set()  # holds the driver, names no GPU
        assert held_nvidia_nodes(p.pid, NvidiaMajors(gpu=F({195}), other=F({510}))) is None
    finally:
        p.kill()
        p.wait()


# ------------------------------------------------------------------ end to end in a PID namespace

# main holds "GPU 0"'s node (minor 5), its child "GPU 1"'s (minor 7), before the pids are written
WORKLOAD = r"""
import os, subprocess, sys, time
pidfile, done, node0, node1 = sys.argv[1:5]
held = open(node0, "rb")
child = subprocess.Popen([sys.executable, "-c",
    "import os, sys, time\nf = open(sys.argv[2], 'rb')\nwhile not os.path.exists(sys.argv[1]): time.sleep(0.02)",
    done, node1])
time.sleep(0.3)
with open(pidfile + ".tmp", "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
os.replace(pidfile + ".tmp", pidfile)
child.wait()
sys.exit(7)
"""


class ContainerRun(Run):
    """The real CLI in a PID namespace of its own, tracking WORKLOAD (which holds the stand-in GPU nodes)."""

    def __init__(self, tmp_path: Path, lib: Path, fake: FakeNvml, table: Path) -> None:
        self.tmp = tmp_path
        self.pidfile, self.done, self.out = tmp_path / "pids", tmp_path / "done", tmp_path / "report.json"
        node0, node1 = tmp_path / "gpu-a", tmp_path / "gpu-b"
        _mknod(node0, 1, 5)
        _mknod(node1, 1, 7)
        env = {
            **os.environ,
            "LD_LIBRARY_PATH": str(lib.parent),
            CONFIG_ENV: str(fake.path),
            DEVICES_TABLE_ENV: str(table),
        }
        self.proc = subprocess.Popen(
            [
                "unshare", "--pid", "--fork", "--mount-proc",
                sys.executable, "-m", "gputop_tracker", "--headless", "-f", "json", "-o", str(self.out),
                "--ru", "bytes", "--gru", "bytes", "--tu", "seconds", "--interval", "0.1",
                "--", sys.executable, "-c", WORKLOAD, str(self.pidfile), str(self.done), str(node0), str(node1),
            ],
            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip


@pytest.mark.parametrize("stranger", [False, True], ids=["one-to-one", "stranger-on-gpu1"])
def test_in_a_pid_namespace_gpu_memory_is_attributed_by_elimination(
    tmp_path: Path, fake_lib: Path, stranger: bool
) -> None:
    if not _unshare_works():
        pytest.skip("cannot create a PID namespace here (unshare needs root or user namespaces)")
    table = tmp_path / "devices"
    table.write_text("Character devices:\n  1 nvidia-frontend\n")  # the stand-in nodes' major counts as NVIDIA's
    fake = FakeNvml(tmp_path / "nvml.conf", two_gpus())
    fake.devices[0]["minor"], fake.devices[1]["minor"] = 5, 7
    fake.write()
    run = ContainerRun(tmp_path, fake_lib, fake, table)
    main, child = run.pids()
    host_main, host_child = _host_pid(main, str(run.pidfile)), _host_pid(child, str(run.done))
    assert (host_main, host_child) != (main, child)
    fake.processes = [
        {"dev": 0, "pid": host_main, "mem": 1000 * MiB},
        {"dev": 1, "pid": host_child, "mem": 3000 * MiB},
    ]
    if stranger:  # a process of another container on GPU 1: the child's could be either
        fake.processes.append({"dev": 1, "pid": 4_000_000, "mem": 777 * MiB})
    fake.write()
    time.sleep(SETTLE)
    code, err, rep = run.finish()
    assert code == 7, err
    gram = rep["max_gpu_ram"]
    gpus = {x["uuid"]: x for x in rep["gpus"]}
    procs = {p["pid"]: p for p in rep["processes"]}
    assert gram["main"] == 1000 * MiB
    assert procs[main]["peak_gpu_memory"] == 1000 * MiB
    assert LABEL in procs[main]["peak_gpu_memory_source"]
    assert LABEL in rep["sources"]["max_gpu_ram.main"]
    assert not gpus[GPU0]["peak_unattributed_memory"]
    if not stranger:
        assert gram["descendants"] == 3000 * MiB
        assert gram["combined"] == 4000 * MiB
        assert LABEL in procs[child]["peak_gpu_memory_source"]
        assert not gpus[GPU1]["peak_unattributed_memory"]
        assert not any("left unattributed" in n for n in rep["notes"])
    else:
        assert gram["descendants"] == 0
        assert procs[child]["peak_gpu_memory"] == 0
        assert gpus[GPU1]["peak_unattributed_memory"] == (3000 + 777) * MiB
        reason = next(n for n in rep["notes"] if "left unattributed" in n)
        assert "2 processes" in reason and "ambiguous" in reason
    assert any(LABEL in n and str(main) in n for n in rep["notes"])


def test_without_the_drivers_majors_nothing_is_paired_nor_ruled_out(
    fake_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fakenvml.fake import loaded_in_process

    from gputop_tracker.core.gpu.nvidia import NvmlBackend
    from gputop_tracker.core.gpu.pidns import PidMapper

    table = tmp_path / "devices"
    table.write_text("Character devices:\n  1 mem\n")
    monkeypatch.setenv(DEVICES_TABLE_ENV, str(table))
    cfg = FakeNvml(tmp_path / "nvml.conf", two_gpus())
    cfg.processes = [{"dev": 0, "pid": 9001, "mem": 700 * MiB}]
    cfg.write()
    me = os.getpid()
    with loaded_in_process(fake_lib, cfg.path):
        b = NvmlBackend(pid_mapper=PidMapper(namespaced=True, nspid=lambda pid: [pid]))
        try:
            r0 = b.read([me])[0]
        finally:
            b.close()
    assert r0.processes == {} and r0.unattributed_memory == 700 * MiB
    line = next(p for p in b.problems if "left unattributed" in p)
    assert "/proc/devices" in line and "not the tree's" not in line


def test_backend_pairs_in_the_same_read_and_reads_the_pairs_accounting_record(
    fake_lib: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tracked process holding GPU 0's node (minor 5), NVML listing one unmappable host PID there: paired at
    once (no sample in between shows it unattributed), and the driver's record under that host PID is its."""
    from fakenvml.fake import loaded_in_process

    from gputop_tracker.core.gpu.nvidia import NvmlBackend
    from gputop_tracker.core.gpu.pidns import PidMapper

    node = tmp_path / "gpu-a"
    _mknod(node, 1, 5)
    table = tmp_path / "devices"
    table.write_text("Character devices:\n  1 nvidia-frontend\n")
    monkeypatch.setenv(DEVICES_TABLE_ENV, str(table))
    cfg = FakeNvml(tmp_path / "nvml.conf", two_gpus())
    cfg.devices[0].update(minor=5, acct=1)
    cfg.devices[1].update(minor=7)
    cfg.processes = [{"dev": 0, "pid": 9001, "mem": 1000 * MiB}]
    cfg.accounting = [{"dev": 0, "pid": 9001, "maxmem": 4000 * MiB, "running": 1}]
    cfg.write()
    p = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(node)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        with loaded_in_process(fake_lib, cfg.path):
            b = NvmlBackend(pid_mapper=PidMapper(namespaced=True, nspid=lambda pid: [pid]))
            try:
                r0, r1 = b.read([p.pid])
            finally:
                b.close()
    finally:
        p.kill()
        p.wait()
    assert r0.processes == {p.pid: 1000 * MiB}
    assert r0.attributed_pids == {p.pid}
    assert not r0.unattributed_memory
    assert r0.accounting_peaks == {p.pid: 4000 * MiB}
    assert r1.processes == {}
    assert any(LABEL in x and str(p.pid) in x for x in b.problems)
