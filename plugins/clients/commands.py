"""The CLI commands of the clients plugin: shell-init, propose, service, doctor.

The plugin registers each as a lazy command (see __init__.py): this module is imported only
when one of them runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from daemon.api import (
    ClientError,
    LmdError,
    check_policy,
    clean,
    collect,
    default_home,
    get_plugin_manager,
    is_loopback,
    parse_bind,
    request,
)

from .doctor import FAIL, report, run_checks
from .service import (
    ServiceSpec,
    control_commands,
    default_platform,
    run_commands,
    this_lmd,
    unit_dir,
    unit_file_name,
)
from .service import (
    render as render_unit,
)
from .shell_init import render as render_shell_init


def _fail(message: str, code: int = 1) -> None:
    click.echo(message, err=True)
    sys.exit(code)


def _mode_names() -> list[str]:
    return list(collect(get_plugin_manager()).modes)


@click.command("shell-init")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.option("--no-bind", is_flag=True, help="Leave out the Alt-m key binding.")
def shell_init(shell: str, no_bind: bool) -> None:
    """Print shell functions for every mode: eval "$(lmd shell-init bash)"."""
    click.echo(render_shell_init(shell, _mode_names(), bind=not no_bind), nl=False)


@click.command()
@click.argument("line", nargs=-1, required=True)
@click.option("--url", envvar="LMD_URL", help="Daemon URL (default http://127.0.0.1:8420).")
@click.option("--session", "-s", envvar="LMD_SESSION", help="Session name.")
@click.option("--cwd", help="Working directory the command is for (absolute path).")
def propose(line: tuple[str, ...], url: str | None, session: str | None, cwd: str | None):
    """Print one proposed bash command for LINE; nothing is run (control characters and
    escape sequences are removed: the line goes into your command line)."""
    headers = {"Accept": "text/plain"}
    if session:
        headers["X-Session"] = session
    if cwd:
        headers["X-Cwd"] = cwd
    try:
        _, _, raw = request("POST", "/v1/propose", " ".join(line), url=url, headers=headers)
    except ClientError as e:
        _fail(e.message)

    # The line goes into the shell's command line: no escape sequence may hide or
    # rewrite any part of it, terminal or not.
    click.echo(clean(raw.decode("utf-8")).strip())


@click.group()
def service() -> None:
    """Run `lmd serve` as a user service (systemd on Linux, launchd on macOS)."""


def _service_options(f):
    f = click.option(
        "--platform", type=click.Choice(["linux", "macos"]), help="Default: this system."
    )(f)
    f = click.option(
        "--dir",
        "target_dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Where the unit goes (default ~/.config/systemd/user or ~/Library/LaunchAgents).",
    )(f)
    return f


def _spec_from(bind: str, home: Path | None):
    return ServiceSpec(this_lmd(), bind, str((home or default_home()).resolve()))


@service.command("show")
@_service_options
@click.option("--bind", default="127.0.0.1:8420", show_default=True)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), envvar="LMD_HOME")
def service_show(platform, target_dir, bind, home) -> None:
    """Print the unit that `install` would write."""
    click.echo(render_unit(_spec_from(bind, home), platform or default_platform()), nl=False)


@service.command("install")
@_service_options
@click.option("--bind", default="127.0.0.1:8420", show_default=True)
@click.option("--home", type=click.Path(file_okay=False, path_type=Path), envvar="LMD_HOME")
@click.option("--no-start", is_flag=True, help="Write the unit only; do not enable it.")
def service_install(platform, target_dir, bind, home, no_start) -> None:
    """Write the unit and start it now and at every login."""
    platform = platform or default_platform()
    try:
        host, _ = parse_bind(bind)
        if not is_loopback(host):
            check_policy(host, None)
    except LmdError as e:
        _fail(
            e.message + " A service binding beyond loopback needs LMD_TOKEN in ~/.config/lmd/env."
            if "token" in e.message
            else e.message
        )
    folder = target_dir or unit_dir(platform)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / unit_file_name(platform)
    path.write_text(render_unit(_spec_from(bind, home), platform))
    click.echo(f"Wrote {path}.")
    if no_start:
        return
    problems = run_commands(control_commands(platform, path, "install"))
    if problems:
        _fail(" ".join(problems) + " The unit file is written; start it by hand.")
    click.echo("lmd runs as a user service now; `lmd doctor` checks it.")


@service.command("uninstall")
@_service_options
@click.option("--no-stop", is_flag=True, help="Remove the unit only; do not stop it.")
def service_uninstall(platform, target_dir, no_stop) -> None:
    """Stop the service and remove its unit."""
    platform = platform or default_platform()
    path = (target_dir or unit_dir(platform)) / unit_file_name(platform)
    if not path.exists():
        _fail(f"There is no lmd service at {path}; nothing to remove.")
    problems = [] if no_stop else run_commands(control_commands(platform, path, "uninstall"))
    path.unlink()
    click.echo(f"Removed {path}.")
    if problems:
        # the unit is gone, which is what was asked; what could not be told to the
        # service manager (no user bus: then nothing ran under it) is said, not failed
        click.echo("lmd: " + " ".join(problems) + " If lmd still runs, stop it by hand.", err=True)


@click.command()
@click.option("--offline", is_flag=True, help="Skip the backend and running-daemon checks.")
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--home",
    type=click.Path(file_okay=False, path_type=Path),
    envvar="LMD_HOME",
    help="Directory of the database (default ~/.local/share/lmd).",
)
def doctor(offline: bool, as_json: bool, home: Path | None) -> None:
    """Check the database, settings, backend, tokenizer, bind policy and plugins."""
    findings = run_checks(home or default_home(), offline=offline)
    click.echo(report(findings, as_json))
    failed = [f for f in findings if f.status == FAIL]
    if failed:
        if not as_json:
            click.echo(f"{len(failed)} problem(s) found.", err=True)
        sys.exit(1)
