"""`lmd service install|uninstall|show`: a systemd user unit (Linux) or a launchd agent (macOS).

Secrets (LMD_TOKEN, OPENAI_API_KEY) never go into the unit: systemd reads them from
`~/.config/lmd/env` (create it with mode 0600), launchd from the environment you give it.
"""

from __future__ import annotations

import os
import plistlib
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .shell_init import lmd_command

UNIT_NAME = "lmd.service"
LAUNCHD_LABEL = "dev.lmd.daemon"


@dataclass
class ServiceSpec:
    """What the service runs."""

    command: list[str]  # e.g. ["/home/me/.local/bin/lmd"] or [python, "-m", "daemon.cli"]
    bind: str = "127.0.0.1:8420"
    home: str | None = None  # LMD_HOME; None means the default
    grace_secs: float = 10.0

    @property
    def argv(self) -> list[str]:
        return [*self.command, "serve", "--bind", self.bind]


def this_lmd() -> list[str]:
    """The command that starts this installation of lmd, with absolute paths."""
    found = lmd_command()
    if os.path.isabs(found):
        return [found]
    return [sys.executable, "-m", "daemon.cli"]


def default_platform() -> str:
    return "macos" if sys.platform == "darwin" else "linux"


def config_home() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")


def unit_dir(platform: str) -> Path:
    if platform == "macos":
        return Path.home() / "Library" / "LaunchAgents"
    return config_home() / "systemd" / "user"


def unit_file_name(platform: str) -> str:
    return f"{LAUNCHD_LABEL}.plist" if platform == "macos" else UNIT_NAME


def _systemd_quote(arg: str) -> str:
    # systemd splits ExecStart like a shell but expands % specifiers: double them.
    return shlex.quote(arg).replace("%", "%%")


def render_systemd(spec: ServiceSpec) -> str:
    """A systemd user unit for `lmd serve`."""
    env = ["PYTHONUNBUFFERED=1"]
    if spec.home:
        env.append(f"LMD_HOME={spec.home}")
    env_lines = "\n".join(f"Environment={_systemd_quote(e)}" for e in env)
    return f"""[Unit]
Description=lmd language-model daemon

[Service]
Type=simple
ExecStart={" ".join(_systemd_quote(a) for a in spec.argv)}
{env_lines}
# LMD_TOKEN, OPENAI_API_KEY and other secrets: one NAME=value per line, file mode 0600.
EnvironmentFile=-%h/.config/lmd/env
Restart=on-failure
RestartSec=2
TimeoutStopSec={int(spec.grace_secs) + 5}
KillSignal=SIGTERM

[Install]
WantedBy=default.target
"""


def render_launchd(spec: ServiceSpec) -> str:
    """A launchd agent plist for `lmd serve`."""
    logs = Path.home() / "Library" / "Logs"
    env = {"PYTHONUNBUFFERED": "1"}
    if spec.home:
        env["LMD_HOME"] = spec.home
    data = {
        "Label": LAUNCHD_LABEL,
        "ProgramArguments": spec.argv,
        "EnvironmentVariables": env,
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ExitTimeOut": int(spec.grace_secs) + 5,
        "StandardOutPath": str(logs / "lmd.log"),
        "StandardErrorPath": str(logs / "lmd.log"),
    }
    return plistlib.dumps(data).decode()


def render(spec: ServiceSpec, platform: str) -> str:
    return render_launchd(spec) if platform == "macos" else render_systemd(spec)


def control_commands(platform: str, path: Path, action: str) -> list[list[str]]:
    """The systemctl/launchctl calls that (un)load the service."""
    if platform == "macos":
        verb = "load" if action == "install" else "unload"
        return [["launchctl", verb, "-w", str(path)]]
    if action == "install":
        return [
            ["systemctl", "--user", "daemon-reload"],
            ["systemctl", "--user", "enable", "--now", UNIT_NAME],
        ]
    return [
        ["systemctl", "--user", "disable", "--now", UNIT_NAME],
        ["systemctl", "--user", "daemon-reload"],
    ]


def run_commands(commands: list[list[str]]) -> list[str]:
    """Run them; return a sentence for each that failed (the file is still in place)."""
    problems = []
    for cmd in commands:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            problems.append(f"`{shlex.join(cmd)}` could not run ({type(e).__name__}).")
            continue
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()
            problems.append(
                f"`{shlex.join(cmd)}` failed: {why[-1] if why else f'exit {done.returncode}'}."
            )
    return problems
