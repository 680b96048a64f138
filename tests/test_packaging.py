"""What a package index and a user of the sdist see: license, metadata, README links, tests that run."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOME = "https://github.com/gputop-tracker/gputop-tracker"


def _pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_license_file_and_spdx_metadata() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 gputop-tracker developers" in text
    data = _pyproject()
    project = data["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert any(r.replace(" ", "").startswith("setuptools>=77") for r in data["build-system"]["requires"])
    assert project["authors"] and project["keywords"]
    assert "Operating System :: POSIX :: Linux" in project["classifiers"]
    assert not any(c.startswith("License ::") for c in project["classifiers"])  # SPDX replaces them
    assert project["urls"]["Homepage"] == HOME


def test_readme_images_show_in_a_checkout() -> None:
    """Pictures by relative path: shown in a checkout (an editor's preview, a browser on the file) and on the
    repository's page alike; absolute URLs showed nothing offline or before a push."""
    readme = (ROOT / "README.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", readme)
    assert images
    for url in images:
        assert not url.startswith(("http:", "https:", "/")), url
        assert (ROOT / url).is_file(), url


def test_readme_starts_with_install_and_tests_and_covers_newcomers() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, re.S)
    first = [line for line in blocks[0].splitlines() if line and not line.startswith("#")]
    assert first[0].startswith("python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/gputop-track")
    assert first[1] == 'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/python -m pytest'
    for needle in ("Linux only", "pipx install", "uv tool install", "#SBATCH", "--mem", "## Troubleshooting"):
        assert needle in readme, needle


def _build_installed() -> bool:
    """The `build` package itself, not the `build/` folder `pip install .` leaves in a checkout (which
    find_spec takes for a namespace package when the tests run from there: "No module named build.__main__")."""
    spec = importlib.util.find_spec("build")
    return spec is not None and spec.origin is not None


@pytest.mark.slow
@pytest.mark.skipif(not _build_installed(), reason="needs `pip install build`")
def test_sdist_ships_tests_that_collect(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "-o", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,  # never the checkout: its build/ folder would shadow the package
    )
    if proc.returncode != 0 and "Could not find a version" in proc.stdout + proc.stderr:
        pytest.skip("no package index to fetch the build backend from")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (sdist,) = out.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        tar.extractall(tmp_path / "src", filter="data")
    for needed in (
        "LICENSE",
        "tests/conftest.py",
        "tests/helpers.py",
        "tests/workloads.py",
        "tests/fakenvml/fakenvml.c",
        "tests/fakeamdsmi/fakeamdsmi.c",
        "tests/fakeamdsmi/gen.py",
        "tests/__snapshots__/test_history/test_snapshot_list[80x24].svg",
    ):
        assert needed in names, needed
    (src,) = (tmp_path / "src").iterdir()
    collect = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collect.returncode == 0, collect.stdout[-3000:] + collect.stderr[-3000:]
    assert re.search(r"\d+ tests? collected", collect.stdout), collect.stdout[-1000:]
