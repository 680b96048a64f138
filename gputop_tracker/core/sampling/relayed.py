"""Which signals the sampler passed on to the command: counted per signal in memory that the front end and the
forked sampler share (mapped before the fork).

A signal sent to a sampler that is dying (SIGKILLed, not yet a zombie) is accepted by the kernel and lost: no
liveness check can tell. The front end keeps the list of signals it sent the sampler; the sampler counts each one
once it went to the command. Should the sampler die, the difference is what the command never got, and the
front end sends it itself. At worst a signal the sampler sent just before its death goes twice; none is lost.
Standard library only: both sides import it before anything heavy.
"""

from __future__ import annotations

import mmap
import signal
import struct
import threading

_SLOT = struct.Struct("=Q")
_NSIG = signal.NSIG


class RelayLedger:
    def __init__(self) -> None:
        self._shared = mmap.mmap(-1, _SLOT.size * _NSIG)  # anonymous and MAP_SHARED: one page for both sides
        self.sent: list[int] = []  # front end: every signal sent to the sampler, in order
        self._lock = threading.Lock()

    # the sampler's side
    def relayed(self, sig: int) -> None:
        """`sig` was passed on to the command (or found it gone). Called from one thread only."""
        if 0 < sig < _NSIG:
            offset = sig * _SLOT.size
            _SLOT.pack_into(self._shared, offset, _SLOT.unpack_from(self._shared, offset)[0] + 1)

    # the front end's side
    def sending(self, sig: int) -> None:
        with self._lock:
            self.sent.append(sig)

    def unrelayed(self, relayable: tuple[int, ...] | frozenset[int]) -> list[int]:
        """The signals among `relayable` sent to the sampler that it never passed on, oldest first; each then
        counts as passed on (a second call returns only what was sent since)."""
        with self._lock:
            left = {sig: _SLOT.unpack_from(self._shared, sig * _SLOT.size)[0] for sig in set(self.sent)}
            lost: list[int] = []
            for sig in self.sent:
                if left[sig] > 0:
                    left[sig] -= 1
                elif sig in relayable:
                    lost.append(sig)
            self.sent.clear()
            for sig, n in left.items():  # what stays counted is what the sampler relayed beyond our sending
                _SLOT.pack_into(self._shared, sig * _SLOT.size, n)
            return lost
