"""Exact figures: peaks no sample sees, children that come and go, orphans, shared memory.

Every figure is compared against the kernel's own number for the same workload (getrusage written by
the workload itself), run through the real CLI with a deliberately slow 1 s interval.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from helpers import WORKLOADS, can_create_cgroup, kernel_figures, track, track_json, track_workload

PY = sys.executable
MB = 1000 * 1000


@pytest.mark.parametrize("run", range(3))
def test_short_spike_in_main_caught_at_1s_interval(tmp_path: Path, run: int) -> None:
    proc, r, k = track_workload(tmp_path, "1", "spike", "1000", "50", "0.2")
    assert proc.returncode == 0, proc.stderr
    kernel = kernel_figures(k)["self_maxrss"]
    assert r["max_ram"]["main"]["total_rss"] == pytest.approx(kernel, rel=0.02)
    assert r["max_ram"]["combined"]["total_rss"] == pytest.approx(kernel, rel=0.02)
    assert r["sources"]["max_ram.main.total_rss"].startswith("exact")


def test_short_spike_in_child_caught_without_cgroup(tmp_path: Path) -> None:
    """No cgroup: the child dies unseen; its parent's wait4 ru_maxrss still brings the peak to us."""
    proc, r, k = track_workload(tmp_path, "1", "spike_child", "1000", "50", env={"GPUTOP_TRACKER_NO_CGROUP": "1"})
    assert proc.returncode == 0, proc.stderr
    child_peak = kernel_figures(k)["children_maxrss"]
    assert r["max_ram"]["peak_source"] != "cgroup"
    assert r["max_ram"]["combined"]["total_rss"] == pytest.approx(child_peak, rel=0.02)
    # the parent held its own pages (an interpreter, ~10 MB) while the child peaked: the child's peak is no exact
    # figure of the tree, though the two differ by under 2 %
    assert not r["sources"]["max_ram.combined.total_rss"].startswith("exact"), r["sources"]


def _can_create_cgroup() -> bool:
    return can_create_cgroup(f"probe-{os.getpid()}")


@pytest.mark.skipif(not _can_create_cgroup(), reason="this machine cannot create a memory cgroup")
def test_tree_peak_from_cgroup_is_exact(tmp_path: Path) -> None:
    proc, r, k = track_workload(tmp_path, "1", "spike_child", "1000", "50")
    assert proc.returncode == 0
    label = r["sources"]["max_ram.combined.total_rss"]
    combined = r["max_ram"]["combined"]
    cgroup = r["max_ram"]["cgroup_peak"]
    child_peak = kernel_figures(k)["children_maxrss"]
    assert "cgroup" in label and cgroup is not None
    # the parent held its own pages beside the child's peak: the child's peak is the known lower bound, and the
    # job cgroup (page cache and kernel memory too) the ceiling; exact only if the two meet, to a few pages
    assert combined["lower"] == pytest.approx(child_peak, rel=0.02)
    if combined["upper"] is not None:  # the cgroup's peak with the file pages it may leave out
        assert combined["upper"] >= cgroup and ("job cgroup" in label or label.startswith("exact")), label
    else:  # below the child's own peak even so (library pages charged elsewhere): set aside, and said
        assert "set aside" in label, label
    assert label.startswith("exact") == (
        combined["upper"] is not None and combined["upper"] - combined["lower"] <= 65536
    )


def test_thirty_short_children_cpu_and_peak(tmp_path: Path) -> None:
    proc, r, k = track_workload(tmp_path, "1", "children", "30", "200", "80")
    assert proc.returncode == 0, proc.stderr
    kf = kernel_figures(k)
    kernel_cpu = kf["cpu_self"] + kf["cpu_children"]
    # the workload wrote its rusage just before exiting; interpreter shutdown after that costs a few ms
    assert r["cpu_time"]["total"] == pytest.approx(kernel_cpu, rel=0.02, abs=0.03)
    assert r["cpu_time"]["total"] >= 30 * 0.08
    assert r["max_ram"]["combined"]["total_rss"] >= 200 * MB
    assert r["max_ram"]["combined"]["total_rss"] == pytest.approx(kf["children_maxrss"], rel=0.05)


def test_double_forked_grandchild_counted(tmp_path: Path) -> None:
    proc, r, k = track_workload(tmp_path, "1", "double_fork", "200", "0.5", env={"GPUTOP_TRACKER_NO_CGROUP": "1"})
    assert proc.returncode == 0, proc.stderr
    kf = kernel_figures(k)
    # without the subreaper the grandchild's CPU would go to init and be lost
    assert r["cpu_time"]["total"] >= kf["grandchild_cpu"] + kf["cpu_self"] - 0.02
    assert r["max_ram"]["combined"]["total_rss"] == pytest.approx(kf["grandchild_maxrss"], rel=0.02)


def test_shared_memory_counted_once(tmp_path: Path) -> None:
    proc, r, _ = track_workload(tmp_path, "0.5", "shared", "400", "3")
    assert proc.returncode == 0, proc.stderr
    ram = r["max_ram"]
    # Σ PSS of the two processes: 400 MB shared once plus two small interpreters
    assert ram["combined_sampled"] == pytest.approx(400 * MB, rel=0.05)
    assert ram["combined"]["total_rss"] == pytest.approx(400 * MB, rel=0.05)
    assert ram["combined"]["shared_rss"] == pytest.approx(400 * MB, rel=0.05)
    assert ram["combined"]["private_rss"] < 40 * MB
    assert sum(p["peak_rss"] for p in r["processes"]) >= 790 * MB  # summing RSS would have said 800


def test_report_says_which_peak_is_exact(tmp_path: Path) -> None:
    proc = track("--headless", "--", PY, "-c", "import os; os.fork() or os._exit(0); os.wait()")
    assert proc.returncode == 0
    text = proc.stderr
    assert "exact" in text  # CPU time always; a peak where a kernel counter backs it
    assert "bound" in text or "sampled" in text
    _, r = track_json(tmp_path, "--", "true")
    for key in ("max_ram.main.total_rss", "max_ram.combined.total_rss", "cpu_time"):
        assert r["sources"][key]


def test_peak_threads(tmp_path: Path) -> None:
    code = (
        "import threading, time\nev = threading.Event()\n"
        "[threading.Thread(target=ev.wait).start() for _ in range(7)]\ntime.sleep(1.2)\nev.set()"
    )
    proc, r = track_json(tmp_path, "--interval", "0.2", "--", PY, "-c", code)
    assert proc.returncode == 0
    assert r["cpu_utilization"]["main_n_threads"] == 8
    assert r["peak_threads"] == 8
    (main,) = [p for p in r["processes"] if p["role"] == "main"]
    assert main["peak_threads"] == 8


def test_many_short_lived_children_of_a_shell_loop(tmp_path: Path) -> None:
    """Children that come and go between and during samples: nothing crashes, CPU stays exact."""
    script = "i=0; while [ $i -lt 60 ]; do sleep 0.01; i=$((i+1)); done; exit 4"
    proc, r = track_json(tmp_path, "--interval", "0.05", "--", "sh", "-c", script)
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    assert r["exit_code"] == 4
    assert r["n_processes"] >= 2
    assert r["cpu_time"]["source"] == "exact"


def test_fork_shares_pages_and_sum_of_pss_counts_them_once(tmp_path: Path) -> None:
    """300 MB written, then fork: parent and child share it copy-on-write; the tree holds ~300 MB."""
    code = (
        "import os, time\nb = bytearray(300_000_000)\nb[::4096] = b'1' * len(b[::4096])\ntime.sleep(1.2)\n"
        "pid = os.fork()\ntime.sleep(2.5)\npid and os.waitpid(pid, 0)"
    )
    proc, r = track_json(tmp_path, "--interval", "0.2", "--", PY, "-c", code)
    assert proc.returncode == 0, proc.stderr
    assert r["max_ram"]["combined_sampled"] == pytest.approx(310 * MB, rel=0.05)
    assert sum(p["peak_rss"] for p in r["processes"]) >= 600 * MB  # what summing RSS would say


def test_tiny_command_is_not_given_the_samplers_memory(tmp_path: Path) -> None:
    """exec() leaves the replaced image's peak in ru_maxrss; `true` must not be reported at the sampler's size."""
    _, r = track_json(tmp_path, "--", "true")
    assert r["max_ram"]["main"]["total_rss"] < 4 * MB
    assert r["max_ram"]["combined"]["total_rss"] < 4 * MB


def test_forked_children_sharing_pages_are_not_counted_many_times(tmp_path: Path) -> None:
    """30 children forked from a 200 MB parent share its pages: the tree holds ~200 MB, not 30 x 200."""
    code = (
        "import os, time\nb = bytearray(200_000_000)\nb[::4096] = b'1' * len(b[::4096])\n"
        "kids = [os.fork() or (time.sleep(3), os._exit(0)) for _ in range(30)]\n"
        "[os.waitpid(k, 0) for k in kids]"
    )
    proc, r = track_json(tmp_path, "--interval", "0.2", "--mem-limit", "4G", "--", PY, "-c", code)
    assert proc.returncode == 0, proc.stderr
    ram = r["max_ram"]
    assert ram["combined_sampled"] < 400 * MB
    assert ram["combined"]["total_rss"] < 400 * MB
    assert ram["combined"]["private_rss"] <= ram["combined"]["total_rss"]
    assert "CRITICAL" not in proc.stderr and "WARNING" not in proc.stderr.upper().replace("WARN-AT", "")


def test_page_cache_is_not_reported_as_process_memory(tmp_path: Path) -> None:
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.write(os.urandom(1 << 20) * 300)  # 314 MB, now in the page cache of *this* cgroup
    os.posix_fadvise(os.open(big, os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)
    proc, r = track_json(tmp_path, "--", "sh", "-c", f"cat {big} > /dev/null; sleep 0.6")
    assert proc.returncode == 0, proc.stderr
    ram = r["max_ram"]
    assert ram["combined"]["total_rss"] < 50 * MB
    if ram["cgroup_peak"] is not None and ram["cgroup_peak"] > 100 * MB:
        assert ram["peak_source"] != "cgroup"
        assert "page cache" in r["sources"]["max_ram.combined.total_rss"]


def test_orphan_never_seen_in_the_tree_is_adopted_by_the_subreaper(tmp_path: Path) -> None:
    """A daemonized grandchild whose parent exits at once is reparented to us: it is tracked."""
    k = tmp_path / "k.json"
    script = f"sh -c '{PY} {WORKLOADS} hold {k} 150 2.5 &' ; sleep 3"
    proc, r = track_json(tmp_path, "--interval", "0.3", "--", "sh", "-c", script, env={"GPUTOP_TRACKER_NO_CGROUP": "1"})
    assert proc.returncode == 0, proc.stderr
    pythons = [p for p in r["processes"] if p["name"].startswith("python")]
    assert pythons and max(p["peak_rss"] for p in pythons) >= 150 * MB
    assert r["max_ram"]["descendants"]["total_rss"] >= 150 * MB


def test_child_peak_is_not_credited_to_main(tmp_path: Path) -> None:
    proc, r, _ = track_workload(tmp_path, "1", "spike_child", "500", "50", env={"GPUTOP_TRACKER_NO_CGROUP": "1"})
    assert proc.returncode == 0
    assert r["max_ram"]["main"]["total_rss"] < 100 * MB
    assert r["max_ram"]["combined"]["total_rss"] >= 500 * MB


def test_children_reaped_by_the_kernel_make_cpu_time_a_lower_bound(tmp_path: Path) -> None:
    """SIGCHLD ignored: the kernel reaps the children itself and their CPU time reaches no one's cutime (nor
    getrusage's). The tree's CPU time cannot then be called exact; what the samples saw of them is kept."""
    proc, r, k = track_workload(tmp_path, "0.2", "autoreap", "6", "150", "250")
    assert proc.returncode == 0, proc.stderr
    kf = kernel_figures(k)
    truth = kf["cpu_self"] + kf["autoreaped_cpu"]
    assert kf["autoreaped_cpu"] >= 6 * 0.15 - 0.01
    assert r["cpu_time"]["source"] == "lower bound"
    assert "SIGCHLD" in r["sources"]["cpu_time"]
    assert r["cpu_time"]["total"] <= truth + 0.03
    # children seen by a sample keep their last reading: more than the parent's own time alone
    assert r["cpu_time"]["total"] > kf["cpu_self"] + 0.1


def test_upper_bound_is_withheld_when_a_live_process_reaped_an_unseen_child(tmp_path: Path) -> None:
    """A worker alive at the end (exact VmHWM) forked and reaped a child between two samples: no sample saw
    it, yet it held memory beside main's. Σ of the seen peaks is then no upper bound of the tree."""
    proc, r, k = track_workload(tmp_path, "1", "hidden_grandchild", "60", "100", env={"GPUTOP_TRACKER_NO_CGROUP": "1"})
    assert proc.returncode == 0, proc.stderr
    kf = kernel_figures(k)
    assert kf["child_maxrss"] >= 100 * MB
    upper = r["max_ram"]["combined_upper_bound"]
    # main's 60 MB and the child's 100 MB of its own were held at once
    assert upper is None or upper >= kf["self_maxrss"] + 100 * MB, r["sources"]["max_ram.combined.total_rss"]
    assert not r["sources"]["max_ram.combined.total_rss"].startswith("exact")


@pytest.mark.skipif(not _can_create_cgroup(), reason="this machine cannot create a memory cgroup")
def test_cgroup_peak_is_not_exact_when_an_unseen_child_mapped_cached_file_pages(tmp_path: Path) -> None:
    """The run's cgroup is not charged for file pages another cgroup cached first. A child no sample saw mapped
    such a file, reaped by a worker that outlived tracking: no counter we read has its peak, so the cgroup's
    figure (far below that child's own VmHWM) must not be called the tree's exact peak."""
    data = tmp_path / "cached.bin"
    with open(data, "wb") as f:
        for _ in range(150):
            f.write(os.urandom(1 << 20))
    data.read_bytes()  # into the page cache, charged to the test's cgroup, not the run's
    proc, r, k = track_workload(tmp_path, "1", "hidden_file_child", "60", str(data))
    assert proc.returncode == 0, proc.stderr
    kf = kernel_figures(k)
    assert kf["child_hwm"] >= 150 * (1 << 20)
    combined = r["max_ram"]["combined"]["total_rss"]
    label = r["sources"]["max_ram.combined.total_rss"]
    assert combined >= kf["child_hwm"] or not label.startswith("exact"), label
    assert r["max_ram"]["peak_source"] != "cgroup"
