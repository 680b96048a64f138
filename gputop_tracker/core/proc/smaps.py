"""USS, PSS and shared pages: the smaps_rollup walk, and the figures carried forward between two walks.

A walk is costly (MEASURING.md: ~9 ms per GiB of 4 KiB pages), so the sampler walks seldom and carries each figure
forward from statm in between, always as a lower bound of the truth."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gputop_tracker.core.proc.procfs import ProcHandle, Reading

TORN_SLACK = 1 << 20  # a walk's RSS this far from statm's on both sides of it: torn


def read_smaps_rollup(pid: int) -> tuple[int, int, int] | None:
    """(USS, PSS, RSS) in bytes as one walk of the page tables saw them, or None when the process is gone or
    unreadable. The walk's own RSS tells whether statm, read around it, describes the same pages."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            data = f.read()
    except OSError:
        return None
    uss = pss = rss = 0
    for line in data.split(b"\n"):
        if line.startswith(b"Pss:"):
            pss = int(line.split()[1]) * 1024
        elif line.startswith(b"Rss:"):
            rss = int(line.split()[1]) * 1024
        elif line.startswith((b"Private_Clean:", b"Private_Dirty:", b"Private_Hugetlb:")):
            uss += int(line.split()[1]) * 1024
    if not data:
        return None
    return uss, pss, rss


def same_pages(a: int, b: int) -> bool:
    """Two RSS figures of one process that describe the same pages (statm's per-CPU counters are approximate)."""
    return abs(a - b) <= max(TORN_SLACK, 0.02 * max(a, b))


def private_and_shared(r: Reading, h: ProcHandle, rss: int, anon: int, file_shmem: int) -> None:
    """USS, PSS and the shared figures of this reading, from the last smaps_rollup read (or none yet)."""
    if h.uss < 0:
        # Not read yet (out of budget). A forked child shares all its pages copy-on-write and statm cannot
        # tell: count only what grew since we first saw it, a lower bound.
        if h.anon0 < 0:
            h.anon0 = anon
        r.private = r.pss = max(0, anon - h.anon0)
        r.bound = True
    elif h.smaps_stale:
        # a fork since the read, and no re-read yet (out of budget): the pages it shared may now be shared with
        # one more process, so its old PSS may be too high; its private pages are still its own, unless it is
        # the one that forked (then only anonymous growth since the read surely is)
        carry_forward(r, h, anon, file_shmem)
        if h.forked:
            r.private = max(0, min(rss, anon - h.smaps_anon))
        r.pss = r.private
        r.shared = r.pss_shared = 0
        r.bound = True
    elif h.smaps_settled and anon == h.smaps_anon and file_shmem == h.smaps_shared:  # unchanged: its figures
        r.pss, r.shared, r.pss_shared = h.pss, h.smaps_rss - h.uss, h.pss - h.uss
        r.private = h.uss if h.uss < h.pss else h.pss
    else:
        carry_forward(r, h, anon, file_shmem)
        r.bound = True


def carry_forward(r: Reading, h: ProcHandle, anon: int, file_shmem: int) -> None:
    """USS, PSS and the shared figures between two smaps_rollup reads, each a lower bound of the truth.

    statm splits RSS into anonymous pages and file/shmem pages, and says nothing of who shares them. New
    anonymous pages are private (a fork since the read makes us re-read), so their growth counts as private
    at once: a spike shows. New file or shmem pages may be private (a file mapped by this process alone) or
    shared: they count nowhere until the next read. Any decrease may have hit any figure: it is taken off
    every one of them.
    """
    d_anon = anon - h.smaps_anon
    d_file = file_shmem - h.smaps_shared
    loss = min(0, d_anon) + min(0, d_file)
    rss = anon + file_shmem
    private = max(0, min(rss, h.uss + d_anon + min(0, d_file)))
    pss = max(0, min(rss, h.pss + d_anon + min(0, d_file)))
    r.private = min(private, pss)
    r.pss = pss
    r.shared = max(0, min(rss - r.private, h.smaps_rss - h.uss + loss))
    r.pss_shared = max(0, min(pss - r.private, h.pss - h.uss + loss))
