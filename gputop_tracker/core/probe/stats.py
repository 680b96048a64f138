"""The sampler's side of the in-process probe (`gputop_tracker/_probe/sitecustomize.py`).

Launched commands get the probe's directory first on PYTHONPATH (`probe_environment`); each Python process of
the tree then sends, as it exits, its VmHWM (its exact peak RSS), the children it reaped with their ru_maxrss,
and the peaks of the GPU allocators it had imported. `ProbeStats` keeps those messages; `apply` folds them into
the summary: exact per-process peaks, rows for processes no sample saw, and what the tree's upper bound needs
to know — whether every child a process reaped is known (its kernel child-fault counter equals the sum of the
faults of the reaps the probe saw).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

PROBE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "_probe")
SITE_FILE = os.path.join(PROBE_DIR, "sitecustomize.py")
MAX_EXITS = 100_000  # processes whose exit reports are kept
LABEL = "exact (VmHWM at exit, in-process)"


def probe_environment(env: dict[str, str]) -> str | None:
    """Put the probe first on PYTHONPATH in `env` (the user's entries kept after it, ours once); the reason
    when it cannot be (None when done)."""
    if not os.path.isfile(SITE_FILE):
        return f"the probe's file is missing ({PROBE_DIR})"
    if ":" in PROBE_DIR:
        return f"the probe's directory has a ':' in its name ({PROBE_DIR}), which PYTHONPATH cannot hold"
    old = env.get("PYTHONPATH", "")
    rest = [p for p in old.split(os.pathsep) if p and os.path.abspath(p) != PROBE_DIR] if old else []
    env["PYTHONPATH"] = os.pathsep.join([PROBE_DIR, *rest])
    return None


def remove_probe_path(env: dict[str, str]) -> None:
    """Our entry off PYTHONPATH again (the variable as it was when it held only ours: unset)."""
    old = env.get("PYTHONPATH")
    if old is None:
        return
    rest = [p for p in old.split(os.pathsep) if p and os.path.abspath(p) != PROBE_DIR]
    if rest:
        env["PYTHONPATH"] = os.pathsep.join(rest)
    else:
        env.pop("PYTHONPATH", None)


@dataclass
class Exit:
    """One process's exit report."""

    pid: int
    ppid: int
    name: str
    t: float
    how: str  # exit | _exit
    hwm: int
    child_faults: int
    reap_faults: int  # -1: more reaps than the probe lists
    child_faults0: int
    allocators: list[dict[str, Any]] = field(default_factory=list)

    def reaps_known(self) -> bool:
        """Every child this process reaped is in its reap list (the kernel's child faults equal theirs)."""
        return self.reap_faults >= 0 and self.child_faults0 == 0 and self.child_faults == self.reap_faults


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 62 else None


def _allocators(raw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, list) or len(entry) != 5:
            continue
        fw, dev, alloc, reserved, kind = entry
        if not isinstance(fw, str) or not isinstance(dev, str) or kind not in ("peak", "at_exit"):
            continue
        out.append(
            {
                "framework": fw[:32],
                "device": dev[:32],
                "peak_allocated": _int(alloc),
                "peak_reserved": _int(reserved),
                "at_exit": kind == "at_exit",
            }
        )
    return out


class ProbeStats:
    """The exit reports of the session (fed by the relay; read by the summary)."""

    def __init__(self, enabled: bool, note: str | None = None) -> None:
        self.enabled = enabled
        self.note = note  # why it is off, when it was asked for and could not be
        self.exits: dict[int, Exit] = {}
        self.reaped_by: dict[int, tuple[int, int]] = {}  # child pid -> (reaper pid, its ru_maxrss)
        self.bad = 0

    def feed(self, msgs: list[dict[str, Any]]) -> None:
        for m in msgs:
            if m.get("k") == "r":
                self._reaps(m)
            else:
                self._exit(m)

    def _reaps(self, m: dict[str, Any]) -> None:
        reaps = m.get("reaps")
        for entry in reaps if isinstance(reaps, list) else []:
            if isinstance(entry, list) and len(entry) == 2 and _int(entry[0]) and _int(entry[1]) is not None:
                self.reaped_by[entry[0]] = (m["pid"], entry[1])
            else:
                self.bad += 1

    def _exit(self, m: dict[str, Any]) -> None:
        values = [_int(m.get(k)) for k in ("ppid", "hwm", "cf", "cf0")]
        rf = m.get("rf")
        if any(v is None for v in values) or not isinstance(rf, int) or len(self.exits) >= MAX_EXITS:
            self.bad += 1
            return
        ppid, hwm, cf, cf0 = (v or 0 for v in values)
        how = m.get("how") if m.get("how") in ("exit", "_exit") else "exit"
        self.exits[m["pid"]] = Exit(
            m["pid"], ppid, str(m["name"])[:64], float(m["t"]), str(how), hwm, cf, rf, cf0, _allocators(m.get("ga"))
        )


# interpreter options that keep the probe out: -I (isolated), -E (PYTHON* variables ignored), -S (no site)
NO_PROBE_FLAGS = {"I": "isolated mode (-I)", "E": "-E (PYTHONPATH ignored)", "S": "-S (no site import)"}


def python_without_probe(name: str, cmdline: list[str]) -> str | None:
    """Why a Python process cannot have run the probe (its interpreter options), or None."""
    if not name.startswith("python"):
        return None
    args = iter(cmdline[1:])
    for arg in args:
        if not arg.startswith("-") or arg == "-" or arg.startswith("--"):
            return None  # the script, stdin, or a long option: the interpreter's short options end here
        for i, letter in enumerate(arg[1:]):
            if letter in NO_PROBE_FLAGS:
                return NO_PROBE_FLAGS[letter]
            if letter in "cm":
                return None  # what follows is the program's
            if letter in "XW":  # an option with a value: the rest of this word, or the next one
                if i == len(arg) - 2:
                    next(args, None)
                break
    return None


class InProcess:
    """A `Tracker` of its own process: the probe's exit hooks here (so the children it forks report) and the
    probe on PYTHONPATH for the Python processes it starts, while it tracks; `off()` puts both back."""

    def __init__(self, fifo: str) -> None:
        import importlib.util

        self.old_path = os.environ.get("PYTHONPATH")
        self.hooks: Any = None
        spec = importlib.util.spec_from_file_location("gputop_tracker._probe_hooks", SITE_FILE)
        if spec is None or spec.loader is None or probe_environment(os.environ) is not None:  # type: ignore[arg-type]
            return
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        module.install(fifo)
        self.hooks = module

    def off(self) -> None:
        if self.hooks is not None:
            self.hooks.uninstall()
            self.hooks = None
        if self.old_path is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = self.old_path
