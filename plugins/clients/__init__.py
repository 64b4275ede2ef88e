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


# name -> (where the command lives, the first paragraph of its help). `lmd --help` shortens
# each line to fit, as it would the real command's (a test holds the two equal).
COMMANDS = {
    "shell-init": (
        "plugins.clients.commands:shell_init",
        'Print shell functions for every mode: eval "$(lmd shell-init bash)".',
    ),
    "propose": (
        "plugins.clients.commands:propose",
        "Print one proposed bash command for LINE; nothing is run (control characters and "
        "escape sequences are removed: the line goes into your command line).",
    ),
    "service": (
        "plugins.clients.commands:service",
        "Run `lmd serve` as a user service (systemd on Linux, launchd on macOS).",
    ),
    "doctor": (
        "plugins.clients.commands:doctor",
        "Check the database, settings, backend, tokenizer, bind policy and plugins.",
    ),
}


@hookimpl
def register_commands(cli):
    for name, (target, help) in COMMANDS.items():
        cli.add_command(lazy_command(name, target, help=help))
