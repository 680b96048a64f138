"""core/ never imports textual; the headless CLI never imports the TUI (each checked in a fresh interpreter)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import pytest

import gputop_tracker.core

CORE_MODULES = sorted(f"gputop_tracker.core.{m.name}" for m in pkgutil.iter_modules(gputop_tracker.core.__path__))


def test_core_modules_found() -> None:
    assert {"gputop_tracker.core.sampler", "gputop_tracker.core.summary", "gputop_tracker.core.models"} <= set(
        CORE_MODULES
    )


@pytest.mark.parametrize("module", CORE_MODULES)
def test_core_module_does_not_import_textual(module: str) -> None:
    code = f"import sys, {module}; bad = [m for m in sys.modules if m == 'textual' or m.startswith('textual.')]; print(bad)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_headless_run_never_imports_textual() -> None:
    code = (
        "import sys, atexit\n"
        "atexit.register(lambda: sys.stderr.write('TEXTUAL=' + str('textual' in sys.modules) + '\\n'))\n"
        "from gputop_tracker.cli import main\n"
        "code = main(['--headless', '--no-save', '--', 'true'])\n"
        "sys.exit(code)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "TEXTUAL=False" in proc.stderr
