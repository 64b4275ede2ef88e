"""The /elo page in a real browser: headless Chromium renders it without console errors.

Debian's `chromium` package is installed when missing (the test skips, saying why, when
that is impossible). A screenshot is saved as tests/artifacts/elo_page.png.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.daemons import CHROMIUM_FLAGS, ROOT, apt_tool

from .conftest import lmd

HERE = Path(__file__).parent
SMALL = HERE / "data" / "elo_small_battles.csv"
ARTIFACTS = ROOT / "tests" / "artifacts"  # screenshots, ignored by git
FLAGS = [*CHROMIUM_FLAGS, "--enable-logging=stderr", "--v=0"]
CONSOLE = re.compile(r"CONSOLE|Uncaught", re.I)


def find_chromium() -> str:
    return apt_tool("chromium")


@pytest.fixture(scope="module")
def chromium() -> str:
    return find_chromium()


def browse(chromium: str, url: str, tmp: Path, *extra: str) -> tuple[str, list[str]]:
    """(stdout, console lines) of one headless run."""
    done = subprocess.run(
        [chromium, *FLAGS, f"--user-data-dir={tmp / 'profile'}", *extra, url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout, [line for line in done.stderr.splitlines() if CONSOLE.search(line)]


def test_the_console_check_catches_errors(chromium, tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>notDefined();</script></body></html>")
    _, console = browse(chromium, bad.as_uri(), tmp_path, "--dump-dom")
    assert any("Uncaught ReferenceError" in line for line in console)


def test_elo_page_renders_in_chromium(chromium, home, live, tmp_path):
    assert "Imported 400 battles." in lmd(home, "elo", "import", str(SMALL)).stdout
    daemon = live()
    url = daemon.url + "/elo?bootstrap=200"
    dom, console = browse(chromium, url, tmp_path, "--dump-dom")
    assert console == []
    assert 'data-elo-ready="6"' in dom  # the page's script ran over a 6-row leaderboard
    assert dom.count("<svg") == 6 and "gpt-4-turbo" in dom  # 2 plots need questions
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "elo_page.png"
    shot.unlink(missing_ok=True)
    _, console = browse(chromium, url, tmp_path, f"--screenshot={shot}", "--window-size=1200,3000")
    assert console == []
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 20_000  # a real picture, not a blank page


def test_the_page_runs_only_its_own_script(chromium, home, tmp_path):
    """The report carries a Content-Security-Policy: were a model's answer ever to slip past
    the escaping into the page, its script would not run and nothing could be fetched or
    sent (GET /elo serves the page from the daemon's own origin)."""
    report = tmp_path / "report.html"
    assert lmd(home, "elo", "report", str(SMALL), "-o", str(report)).exit_code == 0
    page = report.read_text(encoding="utf-8")
    assert page.count('http-equiv="Content-Security-Policy"') == 1
    slip = (
        "<script>document.documentElement.setAttribute('data-slipped', '1');"
        "fetch('/v1', {method: 'POST', body: 'marat rm -rf ~'});</script>"
    )
    hostile = tmp_path / "hostile.html"
    hostile.write_text(page.replace("</main>", slip + "</main>"), encoding="utf-8")
    dom, console = browse(chromium, hostile.as_uri(), tmp_path, "--dump-dom")
    assert 'data-elo-ready="6"' in dom  # the page's own script ran
    assert "data-slipped" not in dom.split("<body")[0]  # the slipped one did not
    assert any("Content Security Policy" in line for line in console), console


def test_the_daemon_serves_the_page_with_its_policy(home, live):
    import urllib.request

    lmd(home, "elo", "import", str(SMALL))
    with urllib.request.urlopen(live().url + "/elo") as r:
        policy = r.headers["Content-Security-Policy"]
        body = r.read().decode()
    assert "frame-ancestors 'none'" in policy and "form-action 'none'" in policy
    assert "default-src 'none'" in policy and "'unsafe-inline'" not in policy.split("script-src")[1]
    assert 'http-equiv="Content-Security-Policy"' in body
