"""Text from the outside world (a command line, a process name, a message) made safe to show on one line.

A command may hold a newline, a tab or an escape sequence: printed as is it splits a row of `sessions list`,
shifts a column, or recolours the terminal. Every place that shows such text goes through these helpers.
Light on purpose: no imports beyond the standard library.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable

# C0 controls, DEL, C1 controls, the Unicode line and paragraph separators (they end a line too), and lone
# surrogates: Python's stand-ins for the bytes of a command line that are not UTF-8 (surrogateescape); no
# UTF-8 writer (a terminal, prometheus-client's exposition) can encode them; and the bidirectional controls
# (U+202E and kin): they reorder what follows on the line, so a name could show as another ("Trojan source")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _escape_char(m: re.Match[str]) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # the byte surrogateescape stood for, as bash writes it in $'…'
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def has_controls(text: str) -> bool:
    return _CONTROL.search(text) is not None


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape (`\\n`, `\\t`, `\\x1b`, `\\u2028`)."""
    return _CONTROL.sub(_escape_char, text)


def quote_arg(arg: str) -> str:
    """One argument as a shell would need it: shlex-quoted, or bash's `$'…'` form when it holds control
    characters (so the line stays one line and can still be pasted into bash)."""
    if not has_controls(arg):
        return shlex.quote(arg)
    body = arg.replace("\\", "\\\\").replace("'", "\\'")
    return "$'" + escape_controls(body) + "'"


def command_line(argv: Iterable[str]) -> str:
    """A command (its argv) as one printable line, quoted as a shell would need it."""
    return " ".join(quote_arg(a) for a in argv)


# escape sequences but colours (SGR, CSI ... m) and control characters but tab, newline and carriage return:
# they would move the cursor or change the viewer's terminal (`ESC c` resets it, `ESC ( 0` and SO switch it to
# line drawing, C1 bytes are 8-bit escapes)
_CONTROLS = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-ln-~]"  # CSI but SGR
    r"|\x1b[\]PX^_][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC, DCS, SOS, PM, APC strings
    r"|\x1b[ -/]+[0-~]"  # nF: character set designations, DECALN
    r"|\x1b[0-Z\\-~]"  # two-character escapes: RIS, DECSC/DECRC, keypad modes, a string's bare start
    r"|\x1b(?![ -~]|$)"  # an escape that starts nothing (an escape cut at the end is left to the reader)
    r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f-\x9f]"  # C0 but tab, newline, CR and escape; DEL; C1
)


def clean_output(text: str) -> str:
    """A command's output as an output pane may show it: colours (SGR) and carriage returns (a progress bar
    rewrites its line, `tui.output_pane.OutputPane` does that) are kept; other terminal control sequences
    would draw over the view."""
    return _CONTROLS.sub("", text).replace("\r\n", "\n")


def _valid(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        try:
            raw = text.encode("utf-8", "surrogateescape")  # the bytes the command line really held
        except UnicodeEncodeError:
            raw = text.encode("utf-8", "replace")
        return raw.decode("utf-8", "replace")


def unicode_safe(obj: object) -> object:
    """`obj` (JSON-shaped) with every string valid Unicode, for a JSON document a user reads: an argument that
    was not UTF-8 becomes U+FFFD, as the processes' command lines read from /proc do. Python keeps such bytes
    as lone surrogates (surrogateescape), which json.dumps writes as `\\udcff`: strict readers (serde_json)
    reject that, and a Python script printing the string to a UTF-8 terminal fails."""
    if isinstance(obj, str):
        return _valid(obj)
    if isinstance(obj, dict):
        return {_valid(k) if isinstance(k, str) else k: unicode_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [unicode_safe(v) for v in obj]
    return obj


def json_text(obj: object, indent: int | None = 2) -> str:
    """A JSON document for the user (reports, exports, lists): valid Unicode throughout."""
    return json.dumps(unicode_safe(obj), indent=indent)
