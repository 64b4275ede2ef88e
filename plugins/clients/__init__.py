"""Client integrations: an OpenAI-compatible endpoint, shell functions, a key binding that
proposes commands, a user service, and `lmd doctor`.

Only the standard library and click are imported here; each route and command imports the
rest when it runs, so `lmd say` stays fast.
"""

from __future__ import annotations

from daemon.api import hookimpl, lazy_command


@hookimpl
def register_routes(register):
    from .openai_api import chat_completions, model, models
    from .propose import propose

    register("/v1/chat/completions", chat_completions, methods=["POST"])
    register("/v1/models", models, methods=["GET"])
    register("/v1/models/{model}", model, methods=["GET"])
    register("/v1/propose", propose, methods=["POST"])


# name -> where the command lives; `lmd --help` reads its line from the command's docstring.
COMMANDS = {
    "shell-init": "plugins.clients.commands:shell_init",
    "propose": "plugins.clients.commands:propose",
    "service": "plugins.clients.commands:service",
    "doctor": "plugins.clients.commands:doctor",
}


@hookimpl
def register_commands(cli):
    for name, target in COMMANDS.items():
        cli.add_command(lazy_command(name, target))
