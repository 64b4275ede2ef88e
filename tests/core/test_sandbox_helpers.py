"""The sandbox's compiled helpers (landlock.c, stage.c): built at install time into the package,
else on first use into the user's cache directory, never into the package directory at run
time; each checked before use. Bad inputs: a read-only installation directory, no C compiler,
a helper others may change, a binary that was not built from lmd's source."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from daemon.execution.sandbox import helpers
from tests.daemons import ROOT, as_user_argv
from tests.worlds import second_user_or_skip

PACKAGE = Path(helpers.__file__).resolve().parent


def copy_of_lmd(where: Path) -> Path:
    """lmd's daemon package (sources only, no helper built) as plain files in `where`."""
    shutil.copytree(
        ROOT / "daemon",
        where / "daemon",
        ignore=shutil.ignore_patterns("__pycache__", "lmd-landlock-*", "lmd-stage-*", "*.so"),
    )
    return where / "daemon" / "execution" / "sandbox"


FIND = (
    "import os, sys; from daemon.execution.sandbox import helpers; "
    "print(repr([helpers.find_helper(k) for k in ('landlock', 'stage')]))"
)


def find_in_copy(copy: Path, env: dict, prefix: list[str] | None = None) -> list:
    python = prefix or [sys.executable]
    done = subprocess.run(
        [*python, "-c", FIND],
        cwd=copy,
        env={**os.environ, **env, "PYTHONPATH": f"{copy}{os.pathsep}{env.get('PYTHONPATH', '')}"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return eval(done.stdout)  # a repr of tuples of str/None: our own output


def test_a_read_only_installation_builds_into_the_cache_and_writes_nothing_there():
    """An ordinary user runs lmd installed by root (a read-only directory to them) with no
    helper built at install time: both helpers are built into that user's cache directory."""
    user = second_user_or_skip()
    place = Path(tempfile.mkdtemp(prefix="lmd-ro-install-"))
    try:
        place.chmod(0o755)
        package = copy_of_lmd(place)
        for p in [place, *place.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)  # root's: read-only to the user
        cache = place / "cache"
        cache.mkdir()
        shutil.chown(cache, user, user)
        before = sorted(os.listdir(package))
        prefix, env = as_user_argv(user)
        found = find_in_copy(place, {**env, "XDG_CACHE_HOME": str(cache)}, prefix)
        for (path, problem), kind in zip(found, ("landlock", "stage"), strict=True):
            assert problem == "" and path.startswith(f"{cache}/lmd/lmd-{kind}-"), (path, problem)
        assert sorted(os.listdir(package)) == before  # nothing written into the package
    finally:
        shutil.rmtree(place, ignore_errors=True)


def test_a_read_only_mount_of_the_package_as_root_builds_into_the_cache(tmp_path):
    """Root, whom file modes do not stop, with the package on a read-only mount."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a read-only bind mount needs root and unshare")
    package = copy_of_lmd(tmp_path)
    cache = tmp_path / "cache"
    script = (
        f"mount --bind {tmp_path / 'daemon'} {tmp_path / 'daemon'} && "
        f"mount -o remount,bind,ro {tmp_path / 'daemon'} && "
        f"touch {package}/probe 2>/dev/null && echo WRITABLE; "
        f'exec {sys.executable} -c "{FIND}"'
    )
    done = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        cwd=tmp_path,
        env={**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "WRITABLE" not in done.stdout, done.stdout + done.stderr
    found = eval(done.stdout)
    for (path, problem), kind in zip(found, ("landlock", "stage"), strict=True):
        assert problem == "" and path.startswith(f"{cache}/lmd/lmd-{kind}-"), (path, problem)
    assert not list(package.glob("lmd-*"))


def test_without_a_compiler_an_install_time_helper_is_used_and_none_is_said_plainly(
    tmp_path, monkeypatch
):
    package = copy_of_lmd(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-compiler-here"))
    source = package / "landlock.c"
    helper, problem = helpers.find_helper("landlock", source=source)
    assert helper is None
    assert problem == (
        "no C compiler (cc) to build lmd's Landlock applier, and none was built at install time"
    )
    # the install-time build (here: the one this checkout's install made) needs no compiler
    built = next(PACKAGE.glob("lmd-landlock-*"), None)
    if built is None:
        pytest.skip("this checkout's install built no helper (no compiler at install time)")
    shutil.copy2(built, package / built.name)
    helper, problem = helpers.find_helper("landlock", source=source)
    assert (helper, problem) == (str(package / built.name), "")
    assert not (tmp_path / "cache").exists()  # nothing built, nothing cached


def test_a_helper_is_checked_before_use(tmp_path, monkeypatch):
    """Others may change it, its folder, it is a link, it was not built from lmd's source:
    each is refused with a reason, and a good one is built into the cache instead."""
    package = copy_of_lmd(tmp_path)
    source = package / "landlock.c"
    cache = tmp_path / "cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    name = f"lmd-landlock-{helpers.digest(source.read_bytes())}"
    planted = package / name
    planted.write_text("#!/bin/sh\necho planted\n")  # the right name, not lmd's program
    planted.chmod(0o755)
    assert "was not built from lmd's source" in helpers.check(planted, name[-12:])
    planted.chmod(0o777)
    assert "other users may change" in helpers.check(planted, name[-12:])
    planted.unlink()
    planted.symlink_to("/bin/true")
    assert "is not a regular file" in helpers.check(planted, name[-12:])
    helper, problem = helpers.find_helper("landlock", source=source)
    assert problem == "" and helper == str(cache / "lmd" / name)
    assert (
        subprocess.run([helper, "--source"], capture_output=True, text=True).stdout.strip()
        == (name[-12:])
    )


def test_setup_builds_the_helpers_into_the_package_at_install_time(tmp_path):
    """`setup.py build_ext` (what pip runs for a wheel) puts both helpers, named by their
    source's digest, into the built package."""
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler here")
    done = subprocess.run(
        [
            sys.executable,
            "setup.py",
            "-q",
            "build_ext",
            "--build-lib",
            str(tmp_path / "lib"),
            "--build-temp",
            str(tmp_path / "tmp"),
        ],  # fmt: skip
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    built = tmp_path / "lib" / "daemon" / "execution" / "sandbox"
    for kind, file in helpers.SOURCES.items():
        tag = helpers.digest((PACKAGE / file).read_bytes())
        helper = built / f"lmd-{kind}-{tag}"
        assert helper.is_file() and os.access(helper, os.X_OK), sorted(os.listdir(built))
        assert helpers.check(helper, tag) == ""


def test_without_a_stager_no_command_writes_and_rules_say_so_when_made(tmp_path, monkeypatch):
    """No stager (no compiler, none built at install time): the sandbox still runs read-only
    commands, says that writes cannot be staged, and a workspace-write rule is refused when
    it is made (never a promise lmd cannot keep when the command comes)."""
    from daemon.execution import sandbox
    from daemon.execution.sandbox import detection

    if sandbox.detect().kind != "bwrap":
        pytest.skip(sandbox.detect().sentence())
    real = detection.find_helper
    missing = "no C compiler (cc) to build lmd's write stager, and none was built at install time"
    monkeypatch.setattr(
        detection,
        "find_helper",
        lambda kind, **kw: (None, missing) if kind == "stage" else real(kind, **kw),
    )
    try:
        found = sandbox.detect(refresh=True)
        assert found.available and found.stage is None and found.stage_problem == missing
        assert "cannot be staged here, so no command writes anything without your yes" in (
            found.sentence()
        )
        tmp_path.chmod(0o755)
        problem = sandbox.rule_problem(str(tmp_path), "workspace-write", "/nonexistent-home", None)
        assert problem == (
            f"I make no rule that lets commands write there: this machine cannot stage a "
            f"command's writes: {missing}. Make it in a project directory, or ask for the "
            "read-only sandbox."
        )
        assert sandbox.rule_problem(None, "workspace-write", "/nonexistent-home", None)
        assert sandbox.rule_problem(str(tmp_path), "read-only", "/nonexistent-home", None) is None
    finally:
        monkeypatch.undo()
        sandbox.detect(refresh=True)
