"""The two path rules: outputs never clobber a file; HTTP-given paths stay inside LMD_HOME."""

from __future__ import annotations

import pytest

from daemon.core.errors import LmdError
from daemon.core.paths import allowed_http_path, refuse_overwrite


def test_refuse_overwrite_rules(tmp_path):
    f = tmp_path / "x.csv"
    refuse_overwrite(f, False)  # missing: fine
    f.write_text("")
    refuse_overwrite(f, False)  # empty: nothing to lose
    f.write_text("data")
    with pytest.raises(LmdError, match=r"x.csv already exists .* add --force"):
        refuse_overwrite(f, False)
    refuse_overwrite(f, True)
    refuse_overwrite("-", False)


def test_allowed_http_path_rules(tmp_path):
    home = tmp_path / "home"
    files = home / "files"
    files.mkdir(parents=True)
    (files / "rp.txt").write_text("x")
    (home / "token").write_text("the daemon's token")
    (home / "lmd.db").write_text("the database")
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")
    (files / "link.txt").symlink_to(outside)
    (files / "token-link").symlink_to(home / "token")
    assert allowed_http_path("rp.txt", home) == (files / "rp.txt").resolve()
    assert allowed_http_path(str(files / "rp.txt"), home) == (files / "rp.txt").resolve()
    from plugins.selectit.prompts import BUILTIN_FILE

    # A plugin's own file only when the plugin names it (the core knows no plugin's files).
    assert allowed_http_path(str(BUILTIN_FILE), home, also=[BUILTIN_FILE]) == BUILTIN_FILE.resolve()
    with pytest.raises(LmdError):
        allowed_http_path(str(BUILTIN_FILE), home)
    for bad in [
        "../secret.txt", str(outside), "link.txt", "/etc/passwd", "sub/../../secret.txt",
        "../token", str(home / "token"), "../lmd.db", "token-link", str(home),
    ]:  # fmt: skip
        with pytest.raises(LmdError) as e:
            allowed_http_path(bad, home, "rp_file")
        assert e.value.status == 403 and f"must be a file in {files}" in e.value.message
    with pytest.raises(LmdError) as e:
        allowed_http_path("a\x00b", home)
    assert e.value.status == 400
