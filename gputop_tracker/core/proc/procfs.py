"""Where per-process figures are measured: cheap reads of /proc on the sampler's hot path.

Costs measured by bench/bench_core.py: psutil's objects cost ~10x more per sample than a
pread on a kept-open fd, so each tracked process keeps its stat, statm and status files open. New processes
are looked for only when the kernel handed out a PID since the last look: a small tree reads its threads'
`children` files, a big one lists /proc and reads the stat of each *new* pid once. smaps_rollup (USS/PSS)
grows with RSS (~8.7 ms per GiB), so it is read under a CPU budget and carried forward between reads.
"""

from __future__ import annotations

import os
import signal
import time

from gputop_tracker.core.proc.cpuwindow import CpuWindow, bounded, exec_signature

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

# smaps_rollup is read at most this often per process, and all reads share a token bucket that
# refills at SMAPS_BUDGET seconds of CPU per second of wall time (0.3% of a core).
SMAPS_MIN_PERIOD = 1.0
SMAPS_IDLE_PERIOD = 10.0  # a process whose statm did not move is re-read only this often
SMAPS_BUDGET = 0.002
SMAPS_BURST = 0.05
# A process never read (or forked since its last read) is read first, whatever the bucket holds — within
# SMAPS_FIRST_CAP seconds of reads per sample, and while the bucket's debt stays under SMAPS_DEBT — so every
# process of a small tree has its private/shared figures within about one interval of its start.
SMAPS_FIRST_CAP = 0.05
SHARE_STEP = 1 << 20  # file/shmem pages a process must newly map before its sharers are re-read
SHARE_NEW = 32 << 20  # ... or a newcomer must hold (libraries alone stay under it)
SMAPS_DEBT = 0.2
# VmHWM (in /proc/PID/status, the costliest read) can only have risen if the process faulted pages in
# since we last looked; otherwise it is re-read at most this often.
STATUS_PERIOD = 2.0
HWM_RESET_SLACK = 256 * 1024  # VmHWM down by more than this within one image: it was reset
TORN_SLACK = 1 << 20  # a walk's RSS this far from statm's on both sides of it: torn
# A small tree finds its new processes in its own threads' `children` files rather than by listing /proc: the
# listing, and a stat read of every process started anywhere since, cost ~0.3 ms a sample on a busy machine,
# whatever the tree's size. Up to this many threads (the tree's and ours, as subreaper) the files are cheaper.
CHILDREN_MAX_THREADS = 32


def _pread(fd: int, size: int = 4096) -> bytes:
    data = os.pread(fd, size, 0)
    if len(data) == size:  # rare: status of a process with a huge groups list
        chunks = [data]
        while len(data) == size:
            data = os.pread(fd, size, size * len(chunks))
            chunks.append(data)
        return b"".join(chunks)
    return data


def parse_stat(data: bytes) -> tuple[str, list[bytes]]:
    """(comm, fields after the comm). The comm may hold spaces and parentheses, so split at the last ')'."""
    lp = data.index(b"(")
    rp = data.rindex(b")")
    return data[lp + 1 : rp].decode(errors="replace"), data[rp + 2 :].split()


def read_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0")[:-1]] if raw else []


def read_environ(pid: int) -> dict[str, str]:
    """The environment `pid` was exec'd with, as a dict ({} when unreadable)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return {}
    env = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            env[k.decode(errors="replace")] = v.decode(errors="replace")
    return env


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


def _close(a: int, b: int) -> bool:
    """Two RSS figures of one process that describe the same pages (statm's per-CPU counters are approximate)."""
    return abs(a - b) <= max(TORN_SLACK, 0.02 * max(a, b))


def started_at(ticks: int) -> float:
    """The wall-clock time of a process start given in clock ticks since boot (/proc/PID/stat field 22)."""
    return time.time() - (time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / CLOCK_TICKS)


class ProcHandle:
    """A tracked process with its /proc files kept open. Reads fail with OSError once it is gone."""

    __slots__ = (
        "anon0",
        "autoreaps",
        "cmdline",
        "cpu",
        "exec_sig",
        "execs",
        "faults",
        "first_seen",
        "forked",
        "hwm",
        "hwm_reset",
        "image_hwm",
        "image_sig",
        "name",
        "pid",
        "ppid",
        "pss",
        "rss",
        "rss_pages",
        "shared_pages",
        "smaps_anon",
        "smaps_due",
        "smaps_rss",
        "smaps_settled",
        "smaps_shared",
        "smaps_stale",
        "smaps_time",
        "starttime",
        "stat_fd",
        "stat_rss",
        "statm_fd",
        "status_due",
        "status_fd",
        "threads",
        "uss",
        "zombie",
    )

    def __init__(self, pid: int, stat_fd: int, ppid: int, name: str, starttime: int) -> None:
        self.pid = pid
        self.stat_fd = stat_fd
        self.statm_fd = os.open(f"/proc/{pid}/statm", os.O_RDONLY)
        try:
            self.status_fd = os.open(f"/proc/{pid}/status", os.O_RDONLY)
        except OSError:
            os.close(self.statm_fd)
            raise
        self.ppid = ppid
        self.name = name
        self.starttime = starttime
        self.cmdline: list[str] = read_cmdline(pid)
        self.cpu: CpuWindow | None = None
        self.exec_sig: tuple[bytes, ...] = ()  # set at the first read; a change means it exec'd
        self.execs = 0  # image changes seen
        self.first_seen = time.time()
        self.hwm = 0
        self.image_hwm = 0  # the last VmHWM read, and the image it was read in
        self.image_sig: tuple[bytes, ...] = ()
        self.hwm_reset = False  # a VmHWM read went down within one image
        self.faults = -1
        self.status_due = 0.0
        self.rss = 0
        self.rss_pages = -1  # statm is re-read only when stat's rss or fault counts moved
        self.shared_pages = 0
        self.stat_rss = -1  # stat's own rss field (a slightly different approximation than statm's)
        self.threads = 0
        self.zombie = False
        self.autoreaps = False  # SIGCHLD ignored: the kernel reaps its children, their time reaches no cutime
        self.uss = -1  # -1 = smaps_rollup never read
        self.anon0 = -1  # RssAnon when first read: until smaps is read, only growth past it is surely private
        self.pss = 0
        self.smaps_anon = 0  # RssAnon (statm resident - shared) when smaps_rollup was read
        self.smaps_shared = 0  # statm shared (file + shmem pages) then
        self.smaps_rss = 0  # statm resident then
        self.smaps_time = 0.0
        self.smaps_settled = False  # statm did not move while smaps_rollup was walked: unchanged means exact
        self.smaps_due = 0.0
        self.smaps_stale = False  # a fork since the read: its PSS (and, if it forked, its USS) may have fallen
        self.forked = False  # it forked since the read: its private pages are now shared with the child

    def close(self) -> None:
        for fd in (self.stat_fd, self.statm_fd, self.status_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class Reading:
    """What one sample read of one process (plain slots: this runs for every process every sample)."""

    __slots__ = (
        "autoreaps",
        "bound",
        "child_faults",
        "cpu_percent",
        "exec_seen",
        "handle",
        "hwm",
        "hwm_reset",
        "private",
        "pss",
        "pss_shared",
        "rss",
        "shared",
        "system_total",
        "threads",
        "user_total",
        "utime_stime",
    )

    def __init__(self) -> None:
        self.handle: ProcHandle
        self.rss = 0
        self.private = 0  # USS, a lower bound between smaps reads
        self.pss = 0  # PSS, a lower bound between smaps reads
        self.shared = 0  # RSS - USS: pages shared with another process, a lower bound
        self.pss_shared = 0  # PSS - USS: this process's share of its shared pages, a lower bound
        self.hwm = 0
        self.hwm_reset = False  # its VmHWM was seen going down within one image (reset by the program)
        self.exec_seen = False  # it was seen replacing its image (exec): VmHWM covers the last one only
        self.threads = 0
        self.utime_stime = 0.0
        self.child_faults = 0
        self.autoreaps = False  # it ignores SIGCHLD (at its last status read): its children vanish unaccounted
        self.user_total = 0.0  # utime + cutime, seconds (reaped children's time is in cutime)
        self.system_total = 0.0  # stime + cstime
        self.cpu_percent = 0.0
        self.bound = False  # private, pss and shared are lower bounds: carried forward, or smaps never read


SIGCHLD_BIT = 1 << (signal.SIGCHLD - 1)


def _sigchld_ignored(status: bytes, start: int) -> bool:
    """SigIgn's hex mask (from `start`) has SIGCHLD: the kernel reaps the process's children itself, adding
    their CPU time and peak to no one's cutime / ru_maxrss."""
    try:
        return bool(int(status[start : status.index(b"\n", start)], 16) & SIGCHLD_BIT)
    except ValueError:
        return False


def _is_subreaper() -> bool:
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        flag = ctypes.c_int(0)
        if libc.prctl(37, ctypes.byref(flag), 0, 0, 0) != 0:  # PR_GET_CHILD_SUBREAPER
            return False
        return bool(flag.value)
    except (OSError, AttributeError):
        return False


def _open_stat(pid: int) -> tuple[int, bytes] | None:
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        return fd, os.pread(fd, 1024, 0)
    except OSError:
        os.close(fd)
        return None


def _read_all(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = [os.read(fd, 65536)]
        while chunks[-1]:  # one read holds ~8,000 children: more only in a huge fan-out
            chunks.append(os.read(fd, 65536))
    finally:
        os.close(fd)
    return b"".join(chunks)


def children_files_work() -> bool:
    """The kernel has /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN, Linux 3.5+)."""
    pid = os.getpid()
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def read_children(pid: int) -> tuple[list[int], bool] | None:
    """The children of every thread of `pid` (None when it is gone), and whether the list is sure: a thread that
    ended meanwhile hands its children to a sibling thread that may have been read already."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    kids: list[int] = []
    sure = True
    for tid in tids:
        try:
            kids.extend(int(k) for k in _read_all(f"/proc/{pid}/task/{tid}/children").split())
        except OSError:
            sure = False
    return kids, sure


def _read_statm(h: ProcHandle, keep: set[int]) -> bool:
    """Read statm. True when file/shmem pages were mapped since the last sample (or a newcomer holds many): this
    sample's readings, taken at other instants, may then count the same pages twice (a newcomer goes in `keep`)."""
    statm = os.pread(h.statm_fd, 256, 0).split()
    known, before = h.rss_pages >= 0, h.shared_pages
    h.rss_pages, h.shared_pages = int(statm[1]), int(statm[2])
    grown = (h.shared_pages - before) * PAGE_SIZE
    if known:
        return grown >= SHARE_STEP
    if grown >= SHARE_NEW:
        keep.add(h.pid)
        return True
    return False


def _private_and_shared(r: Reading, h: ProcHandle, rss: int, anon: int, file_shmem: int) -> None:
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
        _carry_forward(r, h, anon, file_shmem)
        if h.forked:
            r.private = max(0, min(rss, anon - h.smaps_anon))
        r.pss = r.private
        r.shared = r.pss_shared = 0
        r.bound = True
    elif h.smaps_settled and anon == h.smaps_anon and file_shmem == h.smaps_shared:  # unchanged: its figures
        r.pss, r.shared, r.pss_shared = h.pss, h.smaps_rss - h.uss, h.pss - h.uss
        r.private = h.uss if h.uss < h.pss else h.pss
    else:
        _carry_forward(r, h, anon, file_shmem)
        r.bound = True


def _carry_forward(r: Reading, h: ProcHandle, anon: int, file_shmem: int) -> None:
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


class ProcessTree:
    """The tracked tree: a root pid and every process descended from it since tracking began.

    A process stays in the tree once seen, even when reparented (to us as subreaper, or to init).
    """

    def __init__(self, root: int, exclude: set[int] | None = None, cpu_window: float = 0.0) -> None:
        self.root = root
        self.cpu_window = cpu_window  # CPU % is taken over at least this long (the sampling interval)
        self.exclude = set(exclude or ())
        # As a child subreaper we inherit the tree's orphans (double forks): our children are the tree's.
        self.reaper = os.getpid() if _is_subreaper() else None
        self.handles: dict[int, ProcHandle] = {}
        self._others: set[int] = set()  # pids seen and known not to be ours
        self._smaps_tokens = SMAPS_BURST
        self._smaps_refill = time.monotonic()
        self._first_reads_spent = 0.0
        self.torn = 0  # smaps walks set aside: they saw other pages than statm around them
        self.root_gone = False
        self._loadavg = os.open("/proc/loadavg", os.O_RDONLY)
        self._last_pid = b""
        self._last_pid_n = 0
        self._vanished: list[ProcHandle] = []
        self._children_files = children_files_work()

    def _adopt(self, pid: int, fd: int, data: bytes) -> ProcHandle | None:
        try:
            name, f = parse_stat(data)
            h = ProcHandle(pid, fd, int(f[1]), name, int(f[19]))
            h.exec_sig = exec_signature(f)
            return h
        except (OSError, ValueError, IndexError):
            os.close(fd)
            return None

    def discover(self) -> tuple[list[ProcHandle], list[ProcHandle]]:
        """Update membership. Returns (new handles, handles of processes that are gone).

        /proc/loadavg ends with the last PID the kernel handed out: while it stays the same, no process
        was created anywhere, so looking for new ones (the dominant fixed cost of a sample) is skipped.
        A new process is one whose parent is in the tree (or is us, as subreaper, for an orphan of it): a
        small tree reads its threads' `children` files, a big one lists /proc and reads each new PID's stat.
        """
        gone, self._vanished = self._vanished, []
        last_pid = os.pread(self._loadavg, 128, 0).rsplit(b" ", 1)[-1]
        # after a death too: a child reaped while its parent's `children` file was read may hide a sibling
        if last_pid == self._last_pid and (self.handles or self.root_gone) and not gone:
            return [], gone
        self._last_pid = last_pid
        last_n = int(last_pid)
        if last_n < self._last_pid_n:
            # PIDs wrapped around: a pid we judged not ours may have been handed to a new process
            self._others.clear()
        self._last_pid_n = last_n
        new: list[ProcHandle] = []
        if self._by_children():
            gone += self._drop_dead()
            self._adopt_root(new)
            self._adopt_children(new)
        else:
            present = {int(n) for n in os.listdir("/proc") if n.isdigit()}
            gone += self._drop_unlisted(present)
            self._adopt_root(new)
            self._adopt_listed(present, new)
        return new, gone

    def _by_children(self) -> bool:
        if not self._children_files:
            return False
        threads = sum(h.threads or 1 for h in self.handles.values())
        return threads + (4 if self.reaper is not None else 0) <= CHILDREN_MAX_THREADS

    def _drop(self, dead: list[ProcHandle]) -> list[ProcHandle]:
        for h in dead:  # (those in `gone` already were removed and closed by read())
            del self.handles[h.pid]
            h.close()
        return dead

    def _drop_unlisted(self, present: set[int]) -> list[ProcHandle]:
        return self._drop([h for pid, h in self.handles.items() if pid not in present])

    def _drop_dead(self) -> list[ProcHandle]:
        """The processes that were reaped: their kept stat answers ESRCH (a PID reused since answers so too)."""
        dead = []
        for h in self.handles.values():
            try:
                os.pread(h.stat_fd, 1, 0)
            except OSError:
                dead.append(h)
        return self._drop(dead)

    def _adopt_root(self, new: list[ProcHandle]) -> None:
        if self.handles or self.root_gone:
            return
        opened = _open_stat(self.root)
        root = None if opened is None else self._adopt(self.root, *opened)
        if root is None:
            self.root_gone = True
        else:
            self.handles[self.root] = root
            new.append(root)

    def _take(self, pid: int, ppid: int, fd: int, data: bytes, new: list[ProcHandle]) -> None:
        adopted = self._adopt(pid, fd, data)
        if adopted is not None:
            self.handles[pid] = adopted
            new.append(adopted)
            if ppid in self.handles:
                self._forked(self.handles[ppid])

    def _adopt_children(self, new: list[ProcHandle]) -> None:
        """Every child of a tracked process (and, but for the root, of us as subreaper) joins, then theirs."""
        parents = list(self.handles)
        if self.reaper is not None:
            parents.append(self.reaper)
        while parents:
            ppid = parents.pop()
            listed = read_children(ppid)
            if listed is None:
                continue
            kids, sure = listed
            if not sure:
                self._last_pid = b""  # look again next sample
            for pid in kids:
                if pid in self.handles or pid in self.exclude or (ppid == self.reaper and pid == self.root):
                    continue
                opened = _open_stat(pid)
                if opened is None:
                    self._last_pid = b""  # gone already, or not readable yet: look again next sample
                    continue
                self._take(pid, ppid, *opened, new)
                if pid in self.handles:
                    parents.append(pid)

    def _adopt_listed(self, present: set[int], new: list[ProcHandle]) -> None:
        """Every listed process whose parent is tracked (or is us, as subreaper) joins; the rest are not ours."""
        self._others &= present
        candidates: dict[int, tuple[int, int, bytes]] = {}
        for pid in present - self.handles.keys() - self._others - self.exclude:
            opened = _open_stat(pid)
            if opened is None:
                continue
            fd, data = opened
            try:
                ppid = int(parse_stat(data)[1][1])
            except (ValueError, IndexError):
                os.close(fd)
                continue
            candidates[pid] = (ppid, fd, data)
        changed = True
        while changed and candidates:
            changed = False
            for pid in list(candidates):
                ppid, fd, data = candidates[pid]
                if ppid in self.handles or (ppid == self.reaper and pid != self.root):
                    del candidates[pid]
                    self._take(pid, ppid, fd, data, new)
                    changed = True
        for pid, (_, fd, _) in candidates.items():
            os.close(fd)
            self._others.add(pid)

    def _forked(self, parent: ProcHandle) -> None:
        """After a fork parent and child share every page copy-on-write: the parent's USS/PSS must be re-read
        with the child's, or Σ PSS counts those pages twice. So must every process that already shared pages
        (with the parent, its earlier children, the same libraries): each now shares them with one more
        process, so its PSS fell without its statm moving. Pool(4) forks its workers one by one: a worker read
        while 3 existed kept a quarter of the parent's 300 MB where a fifth was its share once the fourth came,
        and Σ PSS exceeded the tree's true peak by 15 MB (a broken lower bound)."""
        parent.smaps_stale = parent.forked = True
        for h in self.handles.values():
            if h.uss >= 0 and h.pss > h.uss:
                h.smaps_stale = True

    def read(self, now_mono: float) -> list[Reading]:  # noqa: C901 — per process per sample: a call per figure costs more than the branches
        """Read every tracked process once. Vanished processes are skipped silently."""
        out: list[Reading] = []
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
        self._refill_smaps(now_mono)
        sharing_grew = False
        keep: set[int] = set()  # a newcomer's own first reading is consistent with itself
        for h in list(self.handles.values()):
            r = Reading()
            r.handle = h
            try:
                name, f = parse_stat(os.pread(h.stat_fd, 1024, 0))
                faults = int(f[7]) + int(f[9])
                stat_rss = int(f[21])
                status = None
                # Without a page fault RSS cannot have grown, so VmHWM and statm's split are unchanged:
                # an idle process costs one read of stat.
                if faults != h.faults or stat_rss != h.stat_rss or now_mono >= h.status_due:
                    if _read_statm(h, keep):
                        sharing_grew = True
                    h.stat_rss = stat_rss
                    if faults != h.faults or now_mono >= h.status_due:
                        status = _pread(h.status_fd)
                        h.faults = faults
                        h.status_due = now_mono + STATUS_PERIOD
                rss_pages = h.rss_pages
            except (OSError, ValueError):
                del self.handles[h.pid]  # reaped: its files now answer ESRCH
                h.close()
                self._vanished.append(h)
                continue
            ticks = int(f[11]) + int(f[12])
            r.user_total = (int(f[11]) + int(f[13])) / CLOCK_TICKS
            r.system_total = (int(f[12]) + int(f[14])) / CLOCK_TICKS
            r.utime_stime = ticks / CLOCK_TICKS
            r.threads = int(f[17])
            r.child_faults = int(f[8]) + int(f[10])  # cminflt + cmajflt: > 0 once it has reaped a child
            h.ppid = int(f[1])
            h.zombie = f[0] == b"Z"
            self._exec_check(h, name, f)
            if h.cpu is None:
                lived = boot_now - h.starttime / CLOCK_TICKS
                r.cpu_percent = bounded(100.0 * r.utime_stime / lived, r.threads) if lived > 0.01 else 0.0
                h.cpu = CpuWindow(now_mono, ticks, r.threads)
            else:
                r.cpu_percent = h.cpu.percent(now_mono, ticks, r.threads, self.cpu_window, CLOCK_TICKS)
            rss = rss_pages * PAGE_SIZE
            shared_resident = h.shared_pages * PAGE_SIZE
            if status is not None and (i := status.find(b"VmHWM:")) >= 0:
                hwm = int(status[i + 6 : status.index(b"kB", i)]) * 1024
                if hwm > h.hwm:
                    h.hwm = hwm
                if hwm + HWM_RESET_SLACK < h.image_hwm and h.image_sig == h.exec_sig:
                    h.hwm_reset = True  # down within one image: the program reset it (clear_refs), or a code block
                h.image_hwm, h.image_sig = hwm, h.exec_sig
            if status is not None and (i := status.find(b"SigIgn:")) >= 0:
                h.autoreaps = _sigchld_ignored(status, i + 7)
            r.autoreaps = h.autoreaps
            r.hwm_reset = h.hwm_reset
            r.exec_seen = h.execs > 0
            r.hwm = h.hwm if h.hwm > rss else rss
            h.rss = rss
            h.threads = r.threads
            anon = rss - shared_resident
            # cheap tests first (an idle process fails the first two): the full rule is in _smaps_due
            if (
                (h.smaps_stale or h.uss < 0 or (now_mono >= h.smaps_due and self._smaps_tokens > SMAPS_BURST / 2))
                and not h.zombie
                and self._smaps_due(h, now_mono, anon, shared_resident)
            ):
                self._read_smaps(h, now_mono, anon, shared_resident)
            _private_and_shared(r, h, rss, anon, shared_resident)
            r.rss = rss
            if h.uss >= 0 and shared_resident > h.smaps_shared + SHARE_STEP:
                sharing_grew = True  # it mapped file/shmem pages: maybe ones another tracked process holds
                h.smaps_stale = True
            out.append(r)
        if sharing_grew:
            self._sharing_changed(out, keep)
        return out

    @staticmethod
    def _exec_check(h: ProcHandle, name: str, f: list[bytes]) -> None:
        """An exec (a shell or a pyenv shim becoming python, python execv-ing python) replaced name and argv.
        Its comm or the new image's addresses in stat tell it: the cmdline is read again only then."""
        sig = exec_signature(f)
        if name != h.name or (sig != h.exec_sig and h.exec_sig):
            if not h.zombie:
                h.cmdline = read_cmdline(h.pid) or h.cmdline
            h.name = name
            h.execs += 1
        h.exec_sig = sig

    def _sharing_changed(self, readings: list[Reading], keep: set[int]) -> None:
        """A tracked process mapped more file or shmem pages. If another one of the tree holds them, that one's
        USS and PSS fell without its statm moving (its private pages became shared): every process holding file
        or shmem pages is re-read first (next sample), and until then counts only its anonymous private pages,
        so Σ PSS stays a lower bound. Reads taken at different instants of one sample while pages become shared
        would count them twice: in such a sample only a newcomer's own first reading is kept."""
        for r in readings:
            h = r.handle
            if h.uss >= 0 and h.smaps_shared > 0 and h.pid not in keep:
                h.smaps_stale = True
                r.private = max(0, r.private - h.smaps_shared)
                r.pss = r.private
                r.pss_shared = 0
                r.bound = True

    def _smaps_due(self, h: ProcHandle, now: float, anon: int, file_shmem: int) -> bool:
        """Is it time to read this process's smaps_rollup? First reads come first, at a cost bounded per sample."""
        if h.smaps_stale or h.uss < 0:
            return self._first_reads_spent < SMAPS_FIRST_CAP and self._smaps_tokens > -SMAPS_DEBT
        # routine re-reads keep half the burst for processes never read yet
        return (
            self._smaps_tokens > SMAPS_BURST / 2
            and now >= h.smaps_due
            and (
                anon != h.smaps_anon
                or file_shmem != h.smaps_shared
                or not h.smaps_settled
                or now - h.smaps_time >= SMAPS_IDLE_PERIOD
            )
        )

    def _refill_smaps(self, now: float) -> None:
        self._smaps_tokens = min(SMAPS_BURST, self._smaps_tokens + (now - self._smaps_refill) * SMAPS_BUDGET)
        self._smaps_refill = now
        self._first_reads_spent = 0.0

    def _read_smaps(self, h: ProcHandle, now: float, anon: int, shared: int) -> None:
        t0 = time.thread_time()  # the budget is CPU: time spent waiting for a busy CPU costs nothing
        got = read_smaps_rollup(h.pid)
        cost = time.thread_time() - t0
        self._smaps_tokens -= cost
        if h.smaps_stale or h.uss < 0:
            self._first_reads_spent += cost
        h.smaps_stale = h.forked = False
        h.smaps_due = now + max(SMAPS_MIN_PERIOD, cost / SMAPS_BUDGET / 4)
        if got is None:
            return
        # statm was read before the walk; the process may have mapped or freed pages in between. Read it again
        # after: the figures the walk saw lie between the two, so the baseline the next readings grow from is
        # taken on the side that keeps them lower bounds (the most anonymous and file pages, the least RSS).
        try:
            after = os.pread(h.statm_fd, 256, 0).split()
            rss_after, shared_after = int(after[1]) * PAGE_SIZE, int(after[2]) * PAGE_SIZE
        except (OSError, ValueError, IndexError):
            rss_after, shared_after = anon + shared, shared
        if not (_close(got[2], anon + shared) or _close(got[2], rss_after)):
            # torn: the walk saw other pages than statm did on either side of it (a process freeing and faulting
            # pages while a slow walk passed, under load): USS from it against statm's RSS would call pages
            # shared that are not. Nothing of it is used; it is walked again next sample
            h.smaps_stale = True
            self.torn += 1
            return
        h.uss, h.pss = got[0], got[1]
        anon_after = rss_after - shared_after
        h.smaps_settled = anon_after == anon and shared_after == shared
        h.smaps_anon = max(anon, anon_after)
        h.smaps_shared = max(shared, shared_after)
        h.smaps_rss = min(anon + shared, rss_after)
        h.smaps_time = now

    def oldest_smaps_age(self, now: float) -> float | None:
        ages = [now - h.smaps_time for h in self.handles.values() if h.uss >= 0]
        return max(ages) if ages else None

    def close(self) -> None:
        for h in self.handles.values():
            h.close()
        self.handles.clear()
        os.close(self._loadavg)


def _meminfo_kb(mem: bytes, key: bytes) -> int:
    """One `Key:   N kB` line of /proc/meminfo (among its first nine lines, as the kernel orders them), or 0."""
    i = mem.find(key, 0, 1024)
    if i < 0 or (i > 0 and mem[i - 1] != 0x0A):
        return 0
    i += len(key)
    return int(mem[i : mem.index(b"k", i)])


class HostReader:
    """Whole-machine RAM (MemTotal - MemAvailable) and CPU busy %, from kept-open /proc files."""

    def __init__(self) -> None:
        self._meminfo = os.open("/proc/meminfo", os.O_RDONLY)
        self._stat = os.open("/proc/stat", os.O_RDONLY)
        self.cpu_count = os.cpu_count() or 1
        self._last: tuple[int, int] | None = None
        self._cpu_due = 0.0
        self._cpu_pct = 0.0

    def read(self) -> tuple[int, int, float]:
        """(memory_total, memory_used, cpu_percent with 100 = every core busy)."""
        mem = os.pread(self._meminfo, 4096, 0)
        total, avail = _meminfo_kb(mem, b"MemTotal:") * 1024, _meminfo_kb(mem, b"MemAvailable:") * 1024
        now = time.monotonic()
        if now >= self._cpu_due:  # /proc/stat grows with the core count: once a second is plenty
            self._cpu_due = now + 1.0
            first = os.pread(self._stat, 256, 0).split(b"\n", 1)[0].split()[1:]
            ticks = [int(x) for x in first]
            idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
            busy = sum(ticks[:8]) - idle
            if self._last is not None:
                d_busy, d_idle = busy - self._last[0], idle - self._last[1]
                if d_busy + d_idle > 0:
                    self._cpu_pct = 100.0 * d_busy / (d_busy + d_idle)
            self._last = (busy, idle)
        return total, total - avail, self._cpu_pct

    def close(self) -> None:
        os.close(self._meminfo)
        os.close(self._stat)
