"""PID namespaces (containers): the host PIDs a GPU driver reports, mapped to the PIDs the tracker sees."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

# The initial PID namespace has this fixed inode (PROC_PID_INIT_INO); any other means a container.
_INIT_PID_NS = "pid:[4026531836]"


def in_pid_namespace() -> bool:
    try:
        return os.readlink("/proc/self/ns/pid") != _INIT_PID_NS
    except OSError:
        return False


def read_nspid(pid: int) -> list[int]:
    """NSpid of /proc/PID/status: the PID in each namespace from /proc's own down to the process's."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"NSpid:"):
                    return [int(x) for x in line.split()[1:]]
    except (OSError, ValueError):
        pass
    return []


class PidMapper:
    """Maps the host PIDs NVML reports to the PIDs the tracker sees.

    Outside a PID namespace they are the same. Inside one (a container), /proc shows the host PID only
    where it is mounted from an outer namespace (NSpid has more than one level); PIDs that cannot be
    mapped are returned as unmapped, so their memory is reported as unattributed rather than dropped.
    """

    def __init__(self, namespaced: bool | None = None, nspid: Callable[[int], list[int]] = read_nspid) -> None:
        self.namespaced = in_pid_namespace() if namespaced is None else namespaced
        self._nspid = nspid
        self._map: dict[int, int] = {}
        self._known: set[int] = set()
        self._paired: dict[int, int] = {}  # host PID -> tracked PID, by elimination (containers.py)

    def update(self, pids: Sequence[int]) -> None:
        if not self.namespaced:
            return
        for pid in pids:
            if pid in self._known:
                continue
            self._known.add(pid)
            levels = self._nspid(pid)
            if len(levels) > 1:  # /proc shows outer levels: one of them is the host's PID
                for x in levels:
                    self._map[x] = pid

    def __call__(self, host_pid: int) -> int | None:
        if not self.namespaced:
            return host_pid
        pid = self._map.get(host_pid)
        return self._paired.get(host_pid) if pid is None else pid

    def mapped(self) -> set[int]:
        """The tracked PIDs whose host PID is known (through NSpid or a pairing)."""
        return set(self._map.values()) | set(self._paired.values())

    def pair(self, pairs: dict[int, int], alive: set[int]) -> bool:
        """Take pairings made by elimination (host PID -> tracked PID); drop those of processes gone (their host
        PID may be reused). True when the mapping changed."""
        kept = {h: p for h, p in self._paired.items() if p in alive}
        kept.update(pairs)
        changed = kept != self._paired
        self._paired = kept
        return changed

    def is_paired(self, host_pid: int) -> bool:
        return host_pid in self._paired and host_pid not in self._map
