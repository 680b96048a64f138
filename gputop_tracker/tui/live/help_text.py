"""The live view's `?` help: its keys and what its figures mean."""

from __future__ import annotations

HELP = """\
[b]gputop-track live view[/b]

The sampler runs in its own process: pausing or closing this view never costs a sample,
and the session is saved by the sampler whatever happens here.

[b]q[/b] [b]ctrl+c[/b] [b]f10[/b]  quit; while the command runs: [b]s[/b] stop its whole tree (SIGTERM, then
         SIGKILL only if you confirm), [b]d[/b] detach (leave it running), [b]esc[/b] cancel;
         enter chooses nothing there
[b]p[/b]        pause the display (sampling, the charts and the summary go on)
[b]s[/b] [b]f6[/b]     next sort column; [b]r[/b] reverse (or click a column label, twice to reverse)
[b]P[/b] [b]M[/b] [b]T[/b]    sort by CPU %, memory, CPU time (htop's keys; again: the other way)
[b]t[/b] [b]f5[/b]     tree or flat view
[b]/[/b] [b]f4[/b]     filter the processes by PID or command (enter keeps it, esc clears it)
[b]space[/b]    tag the selected process (again: untag) and go to the next row
[b]k[/b] [b]f9[/b]     signal the tagged processes, else the selected one, or ([b]a[/b]) them and their
         descendants; the dialog names each with its whole command line; enter sends nothing
[b]enter[/b]    the selected process in full: command line, state, peaks, GPUs
[b]o[/b]        enlarge the output pane (again: back); [b]f[/b] [b]f3[/b] find in the output,
         then [b]n[/b] / [b]N[/b] the next match below / above (scrolled back, the text stays put)
[b]tab[/b]      move between the process table (or the blocks) and the output pane
[b]end[/b]      in the output pane: back to its end, which it follows again (scrolled back, its
         title says so, with the count of new lines)
[b]↑ ↓[/b]      move in the focused pane; so do [b]pgup pgdn home end[/b]
[b]h[/b]        saved sessions (history; running ones with their figures as they stand)
[b]a[/b]        every alert of the run (RAM or GPU memory past --warn-at / --critical-at, an OOM,
         a GPU lost), newest first; the header names the latest until this list is read
[b]b[/b]        the code blocks table (`with block()`, `@tracked`, `mark()`): calls, open now, time,
         peaks, CPU-seconds, marks; under the process table on a large terminal (again: hidden)
[b]ctrl+z[/b]   suspend the view, back to the shell ([b]fg[/b] returns); the command runs on, still sampled
[b]?[/b] [b]f1[/b]     this help; [b]esc[/b] closes dialogs, the filter and the search

[b]Columns[/b]: command = the command line, long paths shortened (the selected row's whole line is
under the table); state = run, zombie (exited, its parent has not reaped it), exit N / sig N
(just ended); MEM % = RSS over the host's memory; TIME+ = CPU time (minutes:seconds.hundredths);
RSS = resident set; private = USS (only this process holds it);
shared = RSS - private; ≥ = a lower bound (its memory changed since its smaps_rollup was
last read, or none was read yet); GPU mem = memory this process holds on all GPUs;
SM % = its share of a GPU's streaming multiprocessors, per GPU (×N: the mean over N GPUs).
[b]Charts[/b]: the whole run, kept while paused; ▲ marks the peak.
[b]Run so far[/b]: the figures the final report prints — peak RAM of the tree
(Σ PSS, or the largest exact single-process peak), exact CPU-seconds, mean utilization.
The command's stdin is /dev/null; its stdout and stderr go to the output pane and to
<session>.output.log next to the saved session.

Press escape or ? to close."""
