"""SelectIT: score instruction-tuning data by the model's own rating uncertainty.

Hooks only; the work lives in the small modules beside this one, imported when used.
"""

from __future__ import annotations

from daemon.api import hookimpl, lazy_command


@hookimpl
def register_settings(register):
    from .config import SETTINGS

    for setting in SETTINGS:
        register(setting)


@hookimpl
def register_routes(register):
    from .route import selectit_route

    register("/selectit", selectit_route, methods=["POST"])


@hookimpl
def register_commands(cli):
    cli.add_command(lazy_command("selectit", "plugins.selectit.command:selectit_group"))
