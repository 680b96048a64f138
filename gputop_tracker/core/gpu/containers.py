"""GPU memory of a tree inside a container: pairing NVML's unmappable host PIDs with the tracked processes.

NVML reports host PIDs. In a PID namespace whose /proc does not show them (a container without the host's PID
namespace), they cannot be mapped through NSpid. What can be seen here is which tracked processes hold a
character device of the NVIDIA driver open (judged by device number through /proc/PID/fd, never by path: a
container may name its nodes anything), and on which GPUs NVML lists each unmapped PID. Where the two sides pair
up one to one, the pairing is the attribution; where they do not, the memory stays unattributed, with the reason.

A process with a CUDA context on a GPU holds that GPU's node (/dev/nvidiaN, major 195, minor N =
nvmlDeviceGetMinorNumber) open; the control node (/dev/nvidiactl, minor 255) and nvidia-uvm name no GPU.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass

#: the table of registered device majors; a test may point the lookup at its own (same format)
DEVICES_TABLE = "/proc/devices"
DEVICES_TABLE_ENV = "GPUTOP_TRACKER_DEVICES_TABLE"
#: driver names whose minors are GPUs (/dev/nvidiaN); the other nvidia-* majors (uvm, caps, ...) name none
GPU_NODE_DRIVERS = ("nvidia-frontend", "nvidia")
CONTROL_MINORS = frozenset({254, 255})  # nvidia-modeset and nvidiactl share the frontend's major
LABEL = "attributed by elimination (container)"
NO_MAJORS = (
    "the NVIDIA driver's device numbers are not in /proc/devices, so the tracked processes using a GPU cannot be "
    "told by their open files"
)


@dataclass(frozen=True)
class NvidiaMajors:
    """Character-device majors of the NVIDIA driver: `gpu` for the per-GPU nodes, `other` for the rest."""

    gpu: frozenset[int] = frozenset()
    other: frozenset[int] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.gpu or self.other)


def parse_devices_table(text: str) -> NvidiaMajors:
    """The NVIDIA majors in a /proc/devices text (character devices only)."""
    gpu: set[int] = set()
    other: set[int] = set()
    in_char = False
    for line in text.splitlines():
        head = line.strip()
        if head.endswith(":"):
            in_char = head == "Character devices:"
            continue
        parts = head.split(None, 1)
        if not in_char or len(parts) != 2 or not parts[0].isdigit():
            continue
        major, name = int(parts[0]), parts[1].strip()
        if name in GPU_NODE_DRIVERS:
            gpu.add(major)
        elif name.startswith("nvidia"):
            other.add(major)
    return NvidiaMajors(frozenset(gpu), frozenset(other))


def nvidia_majors(path: str | None = None) -> NvidiaMajors:
    """The NVIDIA driver's majors as this kernel registered them (empty when the table cannot be read)."""
    path = path or os.environ.get(DEVICES_TABLE_ENV) or DEVICES_TABLE
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return parse_devices_table(f.read())
    except OSError:
        return NvidiaMajors()


def held_nvidia_nodes(pid: int, majors: NvidiaMajors) -> frozenset[int] | None:
    """Minors of the per-GPU NVIDIA nodes the process holds open; None when it holds no NVIDIA device at all.

    An empty set: it holds only nodes that name no GPU (nvidiactl, nvidia-uvm). Each /proc/PID/fd link is
    stat'ed (it resolves to the open file itself, even where its path does not exist in this mount namespace).
    """
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return None
    held: set[int] = set()
    any_nvidia = False
    for fd in fds:
        try:
            st = os.stat(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if not stat.S_ISCHR(st.st_mode):
            continue
        major, minor = os.major(st.st_rdev), os.minor(st.st_rdev)
        if major in majors.gpu:
            any_nvidia = True
            if minor not in CONTROL_MINORS:
                held.add(minor)
        elif major in majors.other:
            any_nvidia = True
    return frozenset(held) if any_nvidia else None


def fds_readable(pid: int) -> bool:
    """Whether the process's open files can be listed (a process gone meanwhile holds nothing: True)."""
    try:
        os.listdir(f"/proc/{pid}/fd")
        return True
    except FileNotFoundError:
        return True
    except OSError:
        return False


@dataclass
class Pairing:
    """The outcome: host PID -> tracked PID, and for what stays unattributed, why."""

    pairs: dict[int, int]
    reason: str = ""


def pair_by_elimination(
    unmapped: Mapping[int, frozenset[int]],
    holders: Mapping[int, frozenset[int]],
    gpu_minors: Mapping[int, int | None],
    all_read: bool = True,
) -> Pairing:
    """Pair NVML's unmapped host PIDs with the tracked processes that hold an NVIDIA GPU node open.

    `unmapped`: host PID -> the GPU indices NVML lists it on. `holders`: tracked PID (not mapped otherwise) ->
    minors of the GPU nodes it holds. `gpu_minors`: GPU index -> its node's minor (None: unknown, any node fits).
    A host PID can be a holder's only where the holder holds the node of every GPU that PID is on. A process
    holding a GPU's node has a context there, so it is one of the PIDs NVML lists: a holder that only one of them
    fits is that one (unless another holder has the same only candidate: then one holds a node without a context,
    and neither is paired). A host PID that fits no holder, or is left when every holder is paired, is someone
    else's. Made pairs leave the others fewer candidates, so the rule is applied again until nothing changes.
    `all_read`: every tracked process's open files could be read (else no PID can be ruled out as the tree's).
    """
    left_x = dict(unmapped)
    left_h = {pid: minors for pid, minors in holders.items() if minors}
    pairs: dict[int, int] = {}
    while True:
        found = _one_unique_pair(left_x, left_h, gpu_minors)
        if found is None:
            break
        host, pid = found
        pairs[host] = pid
        del left_x[host], left_h[pid]
    return Pairing(pairs, _why_unpaired(len(left_x), len(left_h), bool(pairs), all_read) if left_x else "")


def _fits(gpus: frozenset[int], minors: frozenset[int], gpu_minors: Mapping[int, int | None]) -> bool:
    return all(gpu_minors.get(g) is None or gpu_minors.get(g) in minors for g in gpus)


def _one_unique_pair(
    left_x: Mapping[int, frozenset[int]], left_h: Mapping[int, frozenset[int]], gpu_minors: Mapping[int, int | None]
) -> tuple[int, int] | None:
    only: dict[int, list[int]] = {}  # host PID -> the holders for which it is the only candidate
    for h, minors in sorted(left_h.items()):
        fits = [x for x, gpus in left_x.items() if _fits(gpus, minors, gpu_minors)]
        if len(fits) == 1:
            only.setdefault(fits[0], []).append(h)
    for x, hs in sorted(only.items()):
        if len(hs) == 1:  # two holders with the same only candidate: one holds a node without a context
            return x, hs[0]
    return None


def _why_unpaired(n: int, m: int, paired: bool, all_read: bool) -> str:
    procs = f"{n} process{'es' if n > 1 else ''} NVML lists with host PIDs not visible here"
    if m:
        return (
            f"{procs} and {m} tracked process{'es' if m > 1 else ''} holding an NVIDIA GPU device open "
            "do not pair one to one (which is which is ambiguous, or they are someone else's)"
        )
    if not all_read:
        return f"{procs}: the open files of some tracked processes could not be read, so none can be ruled out"
    if paired:
        return f"{procs}: every tracked process holding an NVIDIA GPU device open is paired, so they are not the tree's"
    return f"{procs}: no tracked process holds an NVIDIA GPU device (/dev/nvidiaN) open, so they are not the tree's"
