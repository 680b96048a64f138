"""The tracked run's lifecycle in the live view: whether it still runs, its exit code, and the keys that act
on processes — quit (stop, detach), signal processes. A part the live view owns (`LiveApp.control`): it holds the
quit choice; the view keeps the run's figures (the final summary, a failure, whether the source ended) and draws,
and this part sees it through `view.LiveView` only."""

from __future__ import annotations

import os
import signal

from gputop_tracker.core.model import ProcessSample, escape_controls
from gputop_tracker.tui.live.screens.kill_dialog import KillScreen
from gputop_tracker.tui.live.screens.quit_dialog import KILL_GRACE, QuitScreen
from gputop_tracker.tui.live.screens.signal_dialog import SignalScreen
from gputop_tracker.tui.live.view import LiveView

KILL_AFTER = KILL_GRACE  # seconds of grace after SIGTERM to the tree before asking whether to SIGKILL what is left


class RunControl:
    """Quit, stop, detach and signal the tracked run; reads the run's state from the view it belongs to."""

    def __init__(self, app: LiveView) -> None:
        self.app = app
        self.quit_choice: str | None = None  # "stop" / "detach" once the user asked to leave

    @property
    def running(self) -> bool:
        return self.app.final is None and self.app.failure is None and not self.app.ended

    @property
    def exit_code(self) -> int:
        """The command's exit code (128+N after signal N); 0 when detached or attached; 1 if tracking broke."""
        if self.app.failure is not None:
            return self.app.failure.exit_code
        if self.app.final is not None:
            if self.app.mode == "attach" or self.app.final.exit_code is None:
                return 0
            return self.app.final.exit_code
        return 0 if self.quit_choice == "detach" else 1

    async def quit(self) -> None:
        if not self.running:
            self.app.source.close()
            self.app.exit(self.exit_code, return_code=self.exit_code)
            return
        if isinstance(self.app.screen, QuitScreen | KillScreen):
            return  # ctrl+c pressed again while the dialog is open
        what = self.target_text()

        def chosen(choice: str | None) -> None:
            if choice in ("stop", "detach") and not self.running:  # it ended as the key was pressed: just leave
                self.app.exit(self.exit_code, return_code=self.exit_code)
                return
            if choice == "stop":
                self.quit_choice = "stop"
                self.stop_tree(signal.SIGTERM)
                self.app.set_timer(KILL_AFTER, self.ask_kill)
            elif choice == "detach":
                self.quit_choice = "detach"
                self.app.source.stop()
            else:
                return
            self.app.draw_header()
            self.app.notify("waiting for the sampler to save the session…", timeout=3, markup=False)

        self.app.push_screen(QuitScreen(what, self.app.mode == "attach"), chosen)

    def run_ended(self) -> None:
        """The run ended while a dialog about it was open (quit, SIGKILL, signal one process): its question is
        moot and its text wrong ("is still running"); it closes, as if cancelled. A key pressed in it a moment
        later would act on processes that are gone, or on another process that has one of their PIDs now."""
        screen = self.app.screen
        if isinstance(screen, QuitScreen | KillScreen | SignalScreen):
            screen.dismiss(None)

    def target_text(self) -> str:
        """The tree's main process as the dialogs name it: PID and its whole command line (the dialog wraps it)."""
        command = escape_controls(" ".join(self.app.shown_command()))
        pid = f"PID {self.app.main_pid}" if self.app.main_pid else ""
        return f"{pid} ({command})" if pid and command else pid or command or "the command"

    def stop_tree(self, sig: int) -> None:
        """The sampler signals the whole tree (it knows every pid, also those that left the process group);
        an older or unreachable sampler: the main process only."""
        if not self.app.source.stop_tree(sig):
            self._kill(self.app.main_pid, sig)

    def tree_pids(self) -> list[int]:
        return [p.pid for p in self.app.latest.processes] if self.app.latest is not None else []

    def ask_kill(self) -> None:
        """The grace period is over and the tree still runs: SIGKILL only if the user says so."""
        if not self.running or isinstance(self.app.screen, KillScreen):
            return

        def chosen(choice: str | None) -> None:
            if choice == "kill":
                self.stop_tree(signal.SIGKILL)
                self.app.notify("SIGKILL sent to the tree", severity="warning", markup=False)
            elif choice == "detach":
                self.quit_choice = "detach"
                self.app.source.stop()
            else:  # wait: ask again after another grace period
                self.app.set_timer(KILL_AFTER, self.ask_kill)
            self.app.draw_header()

        self.app.push_screen(KillScreen(len(self.tree_pids()), KILL_AFTER, self.target_text()), chosen)

    def _kill(self, pid: int | None, sig: int) -> bool:
        if not pid:
            return False
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            self.app.notify(f"process {pid} has already exited", severity="warning", markup=False)
            return False
        except PermissionError:
            self.app.notify(f"not allowed to signal process {pid}", severity="error", markup=False)
            return False
        return True

    def signal_selected(self) -> None:
        """k: a signal to the processes tagged with Space (htop's way), else to the selected one."""
        s = self.app.latest
        procs = {p.pid: p for p in s.processes} if s is not None else {}
        tagged = [pid for pid in self.app.tagged_pids() if pid in procs]
        pids = tagged or [pid for pid in [self.app.selected_pid()] if pid in procs]
        if not pids or not self.running:
            self.app.notify("select a running process of the tracked tree first", severity="warning", markup=False)
            return
        below = {d for pid in pids for d in subtree_pids(list(procs.values()), pid)} - set(pids)
        targets = [(pid, procs[pid].name, escape_controls(" ".join(procs[pid].cmdline))) for pid in pids]
        first, *more = targets
        screen = SignalScreen(*first[:2], len(below), first[2], more=more)
        self.app.push_screen(screen, lambda answer: self._send(answer, pids, below, procs[pids[0]].name))

    def _send(self, answer: tuple[int, bool] | None, pids: list[int], below: set[int], name: str) -> None:
        """The signal chosen in the dialog, to those of its targets still in the tree."""
        if answer is None:
            return
        if not self.running:  # the tree ended meanwhile: its PIDs may be another process's now
            self.app.notify("the tracked tree has ended: nothing sent", severity="warning", markup=False)
            return
        sig, whole = answer
        # re-check: rows may have left the tree while the dialog was open
        alive = set(self.tree_pids())
        gone = [pid for pid in pids if pid not in alive]
        if len(gone) == len(pids):
            what = f"process {pids[0]} is" if len(pids) == 1 else "those processes are"
            self.app.notify(f"{what} no longer in the tracked tree", severity="warning", markup=False)
            return
        targets = [pid for pid in [*pids, *(sorted(below) if whole else [])] if pid in alive]
        sent = [pid for pid in targets if self._kill(pid, sig)]
        mine = [pid for pid in sent if pid in pids]
        what = f"{mine[0]} ({name})" if len(pids) == 1 and mine else f"{len(mine)} tagged processes"
        if whole:
            what += f" and {len(sent) - len(mine)} descendants"
        if sent:
            self.app.notify(f"sent {signal.Signals(sig).name} to {what}", markup=False)
            self.app.untag()


def subtree_pids(procs: list[ProcessSample], root: int) -> list[int]:
    """`root` and every process below it in the tree, parents first."""
    children: dict[int, list[int]] = {}
    for p in procs:
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(c for c in children.get(pid, []) if c not in out and c != pid)
    return out
