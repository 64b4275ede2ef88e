"""Web pages: only the daemon's own origin and those listed in allowed_origins may call it.
The real headless Chromium loads a page from another loopback port that fetches the daemon:
refused (the store gets nothing, the page sees nothing); listed in allowed_origins, the same
page works (so the refusal is the daemon's, not the browser's)."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from daemon.http.guard import FOREIGN_PAGE
from tests.daemons import CHROMIUM_FLAGS, apt_tool

TOKEN = "origin-test-token-0123456789"
LMD = str(Path(sys.executable).parent / "lmd")


# -- in-process ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "origin", ["http://127.0.0.1:8420", "http://localhost:8420", "http://[::1]:8420"]
)
def test_the_daemons_own_origins_are_served(client, backend, origin):
    backend.queue("fine")
    r = client.post("/v1", content="dali hi", headers={"Origin": origin})
    assert r.status_code == 200 and r.text == "fine\n"
    assert r.headers["access-control-allow-origin"] == origin


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://localhost:3000"},
        {"Origin": "http://127.0.0.1:8421"},
        {"Origin": "http://127.0.0.1"},
        {"Origin": "https://localhost:8420"},
        {"Origin": "http://localhost:8420.evil.example"},
        {"Origin": "null"},
        {"Origin": ""},
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
        {"Sec-Fetch-Site": "cross-site", "Origin": "http://localhost:3000"},
        # One good Origin does not cover a second, foreign one.
        [("Origin", "http://127.0.0.1:8420"), ("Origin", "http://evil.example")],
    ],
)
def test_other_pages_are_refused_on_every_route(client, backend, headers):
    for method, path in [("POST", "/v1"), ("GET", "/history"), ("PUT", "/settings/max_tokens")]:
        r = client.request(method, path, headers=headers, content="9")
        assert r.status_code == 403, (method, path)
        said = r.text.strip() if path == "/v1" else r.json()["error"]
        assert said == FOREIGN_PAGE
        assert "access-control-allow-origin" not in r.headers
    assert backend.requests == []
    assert client.get("/settings/max_tokens").json()["value"] == 3500
    assert client.app.daemon.store.history(None, 10) == []


def test_healthz_is_open_to_pages_too(client):
    r = client.get("/healthz", headers={"Origin": "http://evil.example"})
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_allowed_origins_lets_a_listed_page_in_with_cors(make_client, backend):
    client = make_client(token=TOKEN)
    page = "http://localhost:3000"
    assert client.get("/history", headers={"Origin": page}).status_code == 403
    # Protected: the owner's process alone cannot list an origin, the token can.
    r = client.put("/settings/allowed_origins", json={"value": [page]})
    assert r.status_code == 403 and "protected" in r.json()["error"]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = client.put("/settings/allowed_origins", json={"value": [page + "/"]}, headers=auth)
    assert r.status_code == 400 and "is not an origin" in r.json()["error"]
    r = client.put("/settings/allowed_origins", json={"value": [page]}, headers=auth)
    assert r.status_code == 200
    r = client.get("/history", headers={"Origin": page})
    assert r.status_code == 200
    assert r.headers["access-control-allow-origin"] == page and r.headers["vary"] == "Origin"
    # The browser's preflight for a JSON POST gets its answer.
    r = client.options(
        "/v1",
        headers={
            "Origin": page,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert r.status_code == 204
    assert r.headers["access-control-allow-origin"] == page
    assert r.headers["access-control-allow-methods"] == "POST"
    assert r.headers["access-control-allow-headers"] == "content-type"
    # A preflight from a page not listed gets no such answer.
    r = client.options(
        "/v1", headers={"Origin": "http://localhost:3001", "Access-Control-Request-Method": "POST"}
    )
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    # Other ports of the same host stay out.
    assert client.get("/history", headers={"Origin": "http://localhost:3001"}).status_code == 403


@pytest.mark.parametrize(
    "value",
    [
        '"http://localhost:3000"',
        '["localhost:3000"]',
        '["http://localhost:3000/app"]',
        '["ftp://x"]',
        '["http://"]',
        "[1]",
        '["http://a b"]',
    ],
)
def test_allowed_origins_values_are_checked(value):
    from daemon.core.core_settings import CORE_SETTINGS
    from daemon.core.settings import SettingError

    spec = {s.name: s for s in CORE_SETTINGS}["allowed_origins"]
    with pytest.raises(SettingError, match="allowed_origins cannot be"):
        spec.parse(value)
    assert spec.parse('["http://localhost:3000", "https://app.example:8443"]')


# -- the real browser --------------------------------------------------------------------------
PAGE = """<!doctype html>
<html><head><title>attack</title></head><body><pre id="out">pending</pre>
<script>
const daemon = "@DAEMON@";
const out = [];
async function attempt(name, url, options) {
  try {
    const r = await fetch(url, options);
    let body = "";
    try { body = await r.text(); } catch (e) { body = "unreadable"; }
    out.push(name + " status=" + r.status + " type=" + r.type + " body=" + JSON.stringify(body));
  } catch (e) {
    out.push(name + " error=" + e.name);
  }
}
(async () => {
  await attempt("post-cors", daemon + "/v1", {method: "POST", body: "dali page says cors"});
  await attempt("post-nocors", daemon + "/v1",
                {method: "POST", body: "dali page says nocors", mode: "no-cors"});
  await attempt("json-cors", daemon + "/v1", {method: "POST",
                headers: {"Content-Type": "application/json"},
                body: JSON.stringify({input: "dali page says json"})});
  await attempt("history-cors", daemon + "/history?limit=50", {});
  await attempt("history-nocors", daemon + "/history?limit=50", {mode: "no-cors"});
  await attempt("knob-nocors", daemon + "/v1",
                {method: "POST", body: "knob set max tokens to 7", mode: "no-cors"});
  document.getElementById("out").textContent = out.join("\\n");
  document.title = "done";
})();
</script></body></html>
"""
FLAGS = [*CHROMIUM_FLAGS, "--virtual-time-budget=15000"]


class PageServer:
    """The attacker's page, served by a plain HTTP server on another loopback port."""

    def __init__(self, html: str) -> None:
        body = html.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def load_in_chromium(url: str, profile: Path) -> str:
    done = subprocess.run(
        [apt_tool("chromium"), *FLAGS, f"--user-data-dir={profile}", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "<title>done</title>" in done.stdout, done.stderr[-2000:]
    return done.stdout.split('<pre id="out">', 1)[1].split("</pre>", 1)[0]


def stored(home: Path) -> list[str]:
    from daemon.core.store import Store

    store = Store(home / "lmd.db")
    try:
        return [p.content for p in store.history(None, 100)]
    finally:
        store.close()


def test_a_page_on_another_loopback_port_is_refused_in_chromium(live, backend, home, tmp_path):
    backend.handler = lambda body: "the model answered " + body["messages"][-1]["content"]
    d = live(env={"LMD_LOG_LEVEL": "DEBUG"})
    # The owner's history holds something worth stealing.
    import urllib.request

    urllib.request.urlopen(d.url + "/v1", data=b"dali the password is swordfish").read()
    before = stored(home)
    page = PageServer(PAGE.replace("@DAEMON@", d.url))
    try:
        seen = load_in_chromium(page.url, tmp_path / "profile")
    finally:
        page.close()
    lines = dict(line.split(" ", 1) for line in seen.strip().splitlines())
    assert set(lines) == {
        "post-cors",
        "post-nocors",
        "json-cors",
        "history-cors",
        "history-nocors",
        "knob-nocors",
    }, seen
    for name in ("post-cors", "json-cors", "history-cors"):
        assert lines[name] == "error=TypeError", seen  # the browser saw a refusal, no data
    for name in ("post-nocors", "history-nocors", "knob-nocors"):
        assert lines[name] == 'status=0 type=opaque body=""', seen
    assert "swordfish" not in seen
    # Nothing reached the store or the model, and no setting moved.
    assert stored(home) == before
    assert [r["messages"][-1]["content"] for r in backend.chat_requests] == [
        "the password is swordfish"
    ]
    check = subprocess.run(
        [LMD, "settings", "get", "max_tokens"],
        capture_output=True,
        text=True,
        env={**os.environ, "LMD_HOME": str(home)},
    )
    assert check.stdout == "3500\n"
    # The requests did arrive, and the daemon refused each one (its debug log says why).
    log = d.output()
    assert log.count("refused") >= 5, log[-3000:]
    assert f"(page {page.url})" in log


def test_the_same_page_works_once_its_origin_is_allowed(live, backend, home, tmp_path):
    """The control: once the page's origin is listed in allowed_origins (with the CLI), the
    same page reads and writes, so the refusal above is the daemon's, not the browser's."""
    backend.handler = lambda body: "the model answered " + body["messages"][-1]["content"]
    d = live()
    page = PageServer(PAGE.replace("@DAEMON@", d.url))
    try:
        done = subprocess.run(
            [LMD, "settings", "set", "allowed_origins", f'["{page.url}"]'],
            capture_output=True,
            text=True,
            env={**os.environ, "LMD_HOME": str(home)},
        )
        assert done.returncode == 0, done.stderr
        seen = load_in_chromium(page.url, tmp_path / "profile")
    finally:
        page.close()
    lines = dict(line.split(" ", 1) for line in seen.strip().splitlines())
    assert lines["post-cors"] == 'status=200 type=cors body="the model answered page says cors\\n"'
    assert lines["json-cors"].startswith("status=200 type=cors"), seen
    assert lines["history-cors"].startswith("status=200 type=cors"), seen
    assert "page says cors" in lines["history-cors"]
    assert "max tokens is now 7." in stored(home)  # the page acts as the owner: listed, it may
