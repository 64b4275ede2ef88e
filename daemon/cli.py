"""The `lmd` command. Core commands live here; plugins add theirs via register_commands.

Plugins are loaded only when a command that is not a core one is asked for (or for --help),
so `lmd say` starts as fast as Python does.
"""

from __future__ import annotations

import os
import sys
import time

# json and textwrap are imported where they are used: both compile regular expressions on
# import, a cost `lmd --help` and `lmd say` would pay for nothing.
from pathlib import Path
from typing import Any, cast

import click

from daemon import __version__
from daemon.core.errors import LmdError
from daemon.lazy import lazy_command, resolve


def terminal_columns() -> int:
    """`shutil.get_terminal_size().columns`, without importing shutil.

    shutil brings bz2, lzma and fnmatch: a few milliseconds of every `lmd --help`, where click
    asks only for the width. The same rule: COLUMNS when it is a positive number, else the
    terminal's width, else 80.
    """
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class LmdContext(click.Context):
    """The `lmd` group's context: its help is laid out as click's own, at the same width."""

    def make_formatter(self) -> click.HelpFormatter:
        width = self.terminal_width
        if width is None and click.formatting.FORCED_WIDTH is None:
            # click's rule (HelpFormatter.__init__), with the width read without shutil
            width = max(min(terminal_columns(), self.max_content_width or 80) - 2, 50)
        return self.formatter_class(width=width, max_width=self.max_content_width)


class LmdGroup(click.Group):
    """A group that loads plugin commands on first need, and says an LmdError once for all.

    A command (core or plugin) raises LmdError with its sentence; here it becomes that
    sentence on stderr and exit status 1, so no command repeats the try/except.
    """

    context_class = LmdContext
    _plugins_loaded = False
    # The command this process ran (None: only the group's own help, version or usage error).
    ran: str | None = None

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        self.ran = name
        return name, command, rest

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except LmdError as e:
            click.echo(e.message, err=True)
            ctx.exit(1)

    def _load_plugins(self) -> None:
        if not self._plugins_loaded:
            self._plugins_loaded = True
            from daemon.plugins import get_plugin_manager

            get_plugin_manager().hook.register_commands(cli=self)

    # While --help lists the commands, a plugin's LazyCommand answers for itself (its line of
    # help) instead of importing the plugin's code.
    _listing = False

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands:
            self._load_plugins()
        if self._listing:
            return self.commands.get(name)
        return resolve(self, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_plugins()
        return super().list_commands(ctx)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False


def fail(message: str, code: int = 1) -> None:
    """Print `message` on stderr and exit with `code` (a command's one-sentence failure)."""
    click.echo(message, err=True)
    sys.exit(code)


# One parameter type for every --home: click.Path looks up its translated name when made.
_HOME_PATH = click.Path(file_okay=False, path_type=Path)


def home_option(f):
    """The --home option (LMD_HOME) every command that opens the database takes."""
    return click.option(
        "--home",
        type=_HOME_PATH,
        envvar="LMD_HOME",
        help="Directory of the database (default ~/.local/share/lmd).",
    )(f)


@click.group(cls=LmdGroup)
@click.version_option(__version__, prog_name="lmd")
def cli() -> None:
    """lmd: a language-model daemon. Speak; a mode answers.

    Start it with `lmd serve`, talk to it with `lmd say ...`.
    """


TOKEN_ON_COMMAND_LINE = (
    "--token is refused: a command line is visible to every user of this machine in `ps`. "
    "Put the token in a file only you can read and pass --token-file FILE, or set LMD_TOKEN; "
    "without either, lmd keeps one in LMD_HOME/token."
)


@cli.command()
@click.option(
    "--bind",
    envvar="LMD_BIND",
    default="127.0.0.1:8420",
    show_default=True,
    help="Address to listen on (host:port or a port).",
)
@click.option(
    "--token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    envvar="LMD_TOKEN_FILE",
    help="File holding the token (0600). Default: LMD_TOKEN, else LMD_HOME/token.",
)
@click.option(
    "--peer-auth/--no-peer-auth",
    envvar="LMD_PEER_AUTH",
    default=True,
    show_default=True,
    help="On Linux loopback, let your own processes in without the token.",
)
@click.option("--token", hidden=True, help="Refused: use --token-file or LMD_TOKEN.")
@home_option
def serve(
    bind: str,
    token_file: Path | None,
    peer_auth: bool,
    token: str | None,
    home: Path | None,
) -> None:
    """Run the daemon. Only its owner may use it: the token in LMD_HOME/token, or on Linux
    loopback the kernel's word that the client runs as the same user."""
    import logging

    from daemon.http.server import serve as run

    if token is not None:
        fail(TOKEN_ON_COMMAND_LINE, 2)
    logging.basicConfig(
        level=os.environ.get("LMD_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # One line per backend call is noise.
    for noisy in ("httpx", "httpx2", "httpcore", "httpcore2", "openai"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        sys.exit(run(bind, home, token_file, peer_auth))
    except LmdError as e:
        fail(e.message, 2)


@cli.command()
@click.argument("text", nargs=-1)
@click.option("--url", envvar="LMD_URL", help="Daemon URL (default http://127.0.0.1:8420).")
@click.option("--session", "-s", envvar="LMD_SESSION", help="Session name (default 'default').")
@click.option("--cwd", help="Working directory for modes that run commands (absolute path).")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON reply.")
@click.option("--speak", is_flag=True, help="Strip markdown from the reply for text-to-speech.")
@click.option(
    "--raw", is_flag=True, help="Print control characters and escape sequences as they came."
)
def say(
    text: tuple[str, ...],
    url: str | None,
    session: str | None,
    cwd: str | None,
    as_json: bool,
    speak: bool,
    raw: bool,
) -> None:
    """Send TEXT (or stdin) to the daemon and print the reply.

    On a terminal, control characters and escape sequences in the reply (window titles,
    clipboard writes) are removed unless --raw is given."""
    from daemon.client import ClientError
    from daemon.client import say as send

    if not text and sys.stdin.isatty():
        fail("Say something: lmd say WORDS, or pipe the words in (echo hi | lmd say).")
    utterance = " ".join(text) if text else sys.stdin.read()
    if not utterance.strip():
        fail("Nothing to say: give some words or pipe them on stdin.")
    try:
        reply = send(utterance, session=session, url=url, as_json=as_json, cwd=cwd, speak=speak)
    except ClientError as e:
        fail(for_terminal(e.message, raw, sys.stderr))
    except KeyboardInterrupt:
        # the connection is closed by now: the daemon stops the answer (what was said so far
        # is kept in the history, marked as cut)
        fail("Stopped: lmd stops that answer too.", 130)
    if as_json:
        import json  # here: the plain reply, the usual case, needs no JSON encoder

        out = json.dumps(reply, indent=2, ensure_ascii=False)
        if not raw and sys.stdout.isatty():
            from daemon.core.terminal import clean_json_text

            out = clean_json_text(out)
        click.echo(out)
    else:
        click.echo(for_terminal(reply.rstrip("\n"), raw))


def for_terminal(text: str, raw: bool = False, stream=None) -> str:
    """The text, without control sequences when it goes to a terminal (unless raw)."""
    if raw or not (stream or sys.stdout).isatty():
        return text
    from daemon.core.terminal import clean

    return clean(text)


def open_daemon_state(home: Path | None):
    """The registry and store, for commands that work on the database directly."""
    from daemon.backends import tokens
    from daemon.core.home import default_home
    from daemon.core.registry import collect
    from daemon.core.settings import Settings
    from daemon.core.store import Store
    from daemon.plugins import get_plugin_manager

    registry = collect(get_plugin_manager(), routes=False)
    tokens.remember_warnings_in(home or default_home())
    store = Store((home or default_home()) / "lmd.db")
    store.migrate(registry.migrations, registry.specs)
    settings = Settings(registry.specs, store.stored_settings())
    # A bad LMD_<NAME> in the environment is one sentence and a failure wherever settings
    # are read, never a silent fall back to the stored value.
    bad_env = [p for p in settings.problems() if p.startswith("The environment variable")]
    if bad_env:
        store.close()
        raise LmdError(bad_env[0])
    return registry, store, settings


@cli.group()
def settings() -> None:
    """List, read and change settings (stored in the database)."""


_SOURCE_WORDS = {"env": "environment", "set": "set", "default": "default"}


def _print_rows(rows: list[dict], as_json: bool, sources: bool = False) -> None:
    import json

    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False, default=str))
        return
    width = max((len(r["name"]) for r in rows), default=10)
    for r in rows:
        value = json.dumps(r["value"]) if r["type"] == "json" else r["value"]
        if sources:
            source = _SOURCE_WORDS.get(r["source"], r["source"])
            click.echo(f"{r['name']:<{width}}  {source:<11}  {value}")
            continue
        mark = "" if r["source"] in ("set", "default") else f"  [{r['source']}]"
        click.echo(f"{r['name']:<{width}}  {value}{mark}")


@settings.command("list")
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--sources",
    is_flag=True,
    help="Also say where each value comes from: default, set (you chose it) or environment.",
)
@home_option
def settings_list(as_json: bool, sources: bool, home: Path | None) -> None:
    """Every setting with its value."""
    _, _, s = open_daemon_state(home)
    _print_rows(s.describe(), as_json, sources)


@settings.command("get")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@home_option
def settings_get(name: str, as_json: bool, home: Path | None) -> None:
    """One setting's value (with its type, default and help under --json)."""
    import json

    _, _, s = open_daemon_state(home)
    try:
        row = s.describe([name])[0]
    except LmdError as e:
        fail(e.message)
    if as_json:
        click.echo(json.dumps(row, indent=2, ensure_ascii=False, default=str))
    else:
        click.echo(json.dumps(row["value"]) if row["type"] == "json" else row["value"])


@settings.command("set", context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("value")
@click.option("--json", "as_json", is_flag=True)
@home_option
def settings_set(name: str, value: str, as_json: bool, home: Path | None) -> None:
    """Change a setting; a bad value is refused with what is allowed."""
    _change_setting(home, name, value, as_json)


def _change_setting(home: Path | None, name: str, value: str | None, as_json: bool) -> None:
    """Store a new value (None: the default) and show the result."""
    from daemon.core.registry import parse_setting

    registry, store, s = open_daemon_state(home)
    try:
        spec = s.spec(name)
        if value is None:
            store.reset_setting(name, spec.dump(spec.default))
        else:
            store.set_setting(name, spec.dump(parse_setting(registry, name, value)))
    except LmdError as e:
        fail(e.message)
    _, _, s = open_daemon_state(home)
    _print_rows(s.describe([name]), as_json)


@settings.command("reset")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True)
@home_option
def settings_reset(name: str, as_json: bool, home: Path | None) -> None:
    """Put a setting back to its default."""
    _change_setting(home, name, None, as_json)


cli.add_command(lazy_command("words", "daemon.spoken.commands:words"))


@cli.group()
def rules() -> None:
    """Approval rules: commands that run without asking, are always asked about, or never run."""


@rules.command("list")
@click.option("--session", "-s", help="Kept rules and this session's (default: every session's).")
@click.option("--json", "as_json", is_flag=True)
@home_option
def rules_list(session: str | None, as_json: bool, home: Path | None) -> None:
    """Every rule, the built-in defaults among them, with its id."""
    import json

    from daemon.agent import rules as r

    READ_ONLY_NOTE = r.READ_ONLY_NOTE  # noqa: N806
    _, store, _ = open_daemon_state(home)
    found = r.all_rules(store, session)
    if as_json:
        rows = [x.to_json() for x in found]
        click.echo(json.dumps({"rules": rows, "note": READ_ONLY_NOTE}, indent=2))
        return
    for x in found:
        origin = "built-in" if x.origin == "built-in" else x.origin
        life = f"session {x.session}" if x.session else "kept"
        said = for_terminal(x.sentence())
        click.echo(f"{x.id:>4}  {x.decision:<6} {origin:<8} {life:<12} {said}")
    click.echo(READ_ONLY_NOTE)


@rules.command("add")
@click.argument("decision", type=click.Choice(["allow", "ask", "forbid"]))
@click.argument("pattern")
@click.option(
    "--dir",
    "directory",
    help="The directory tree it holds in (default: the current directory).",
)
@click.option("--everywhere", is_flag=True, help="Hold in every directory.")
@click.option("--session", "-s", help="Hold only in this session, while it is in use.")
@click.option(
    "--sandbox",
    type=click.Choice(["read-only", "workspace-write", "none"]),
    help="allow: how it runs (default workspace-write in the rule's directory; none: outside "
    "the sandbox).",
)
@home_option
def rules_add(
    decision: str,
    pattern: str,
    directory: str | None,
    everywhere: bool,
    session: str | None,
    sandbox: str | None,
    home: Path | None,
) -> None:
    """Make a rule: PATTERN is a program and its first words (git commit) or mcp:SERVER:TOOL."""
    from daemon.agent import rules as r
    from daemon.core.home import default_home

    if everywhere and directory:
        fail("Give --dir or --everywhere, not both.")
    _, store, _ = open_daemon_state(home)
    try:
        rule, made = r.add_rule(
            store,
            decision,
            pattern,
            directory=None if everywhere else (directory or os.getcwd()),
            session=session,
            sandbox=sandbox,
            origin="cli",
            lmd_home=str(home or default_home()),
        )
    except r.RuleError as e:
        fail(str(e))
    lead = "" if made else "You had that rule already. "
    click.echo(f"{lead}Rule {rule.id}: {r.said_back([rule])}")


@rules.command("remove")
@click.argument("rule_id", type=int)
@home_option
def rules_remove(rule_id: int, home: Path | None) -> None:
    """Remove a rule by its id (lmd rules list shows them)."""
    from daemon.agent import rules as r

    _, store, _ = open_daemon_state(home)
    try:
        gone = r.remove_rule(store, rule_id)
    except r.RuleError as e:
        fail(str(e))
    click.echo(f"Removed rule {gone.id}: {gone.sentence()}")


class HistoryGroup(click.Group):
    """`lmd history`, to which plugins add listings of their own (see add_history_listing)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.listings: dict[str, str] = {}  # option destination -> subcommand name

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # A plugin's --NAME flag must exist before the arguments are parsed.
        root = ctx.find_root().command
        if isinstance(root, LmdGroup):
            root._load_plugins()
        return super().parse_args(ctx, args)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        return resolve(self, name)


def add_history_listing(cli: click.Group, command: click.Command, help: str) -> None:
    """Add `command` as `lmd history NAME`, also reached as `lmd history --NAME`.

    The command takes the history options: session, limit, as_json and home.
    """
    history = cli.commands.get("history")
    name = command.name
    if not isinstance(history, HistoryGroup) or not name or name in history.commands:
        return  # another group (or a second registration): nothing to extend
    history.add_command(command)
    dest = "listing_" + name.replace("-", "_")
    history.listings[dest] = name
    # Before --home, so `--help` shows the listing flags beside the other options.
    history.params.insert(
        len(history.params) - 1, click.Option([f"--{name}", dest], is_flag=True, help=help)
    )


HISTORY_LEGEND = (
    "kind: oper(ative) > instr(uctive) > ctx (contextual) > dflt (default) > deco(rative); "
    "karma: the points of its kind; score: karma after the age, length and distance "
    "discounts (the higher, the likelier it goes to the model). --wide: every column; "
    "--json: all of it."
)
_ROLES = {"user": "you", "assistant": "lmd", "error": "err"}
_KINDS = {"operative": "oper", "instructive": "instr", "contextual": "ctx", "default": "dflt",
          "decorative": "deco", "none": "none"}  # fmt: skip


def readable(x: float) -> str:
    """A number as a person reads it at a glance: 25k, 1.2k, 980, 4.5, 0.37, 2e-05."""
    if x == 0:
        return "0"
    size = abs(x)
    if size >= 1e6:
        return f"{x / 1e6:.1f}M"
    if size >= 1e4:
        return f"{x / 1e3:.0f}k"
    if size >= 1e3:
        return f"{x / 1e3:.1f}".removesuffix(".0") + "k"
    if size >= 10:
        return f"{x:.0f}"
    if size >= 0.01:
        return f"{x:.2f}".rstrip("0").rstrip(".")
    return f"{x:.0e}"


@cli.group(cls=HistoryGroup, invoke_without_command=True)
@click.option("--session", "-s", help="Only this session.")
@click.option("--limit", "-n", default=20, show_default=True, type=click.IntRange(1, 100000))
@click.option("--json", "as_json", is_flag=True)
@click.option("--wide", is_flag=True, help="Every column in full (over 100 columns).")
@home_option
@click.pass_context
def history(
    ctx: click.Context,
    session: str | None,
    limit: int,
    as_json: bool,
    wide: bool,
    home: Path | None,
    **listings: bool,
) -> None:
    """Stored prompts with their karma and the score each would get now (100 columns, with a
    legend; --wide for every column, --json for all of it)."""
    if ctx.invoked_subcommand is not None:
        return
    import json
    import textwrap

    group = cast(HistoryGroup, history)  # the decorator made this function that group
    chosen = [group.listings[dest] for dest, on in listings.items() if on]
    if len(chosen) > 1:
        fail(f"Give only one of {', '.join('--' + c for c in chosen)}.")
    listing = resolve(group, chosen[0]) if chosen else None
    if listing is not None:
        ctx.invoke(listing, session=session, limit=limit, as_json=as_json, home=home)
        return
    from daemon.core.karma import prompt_rows

    _, store, s = open_daemon_state(home)
    rows = prompt_rows(store.history(session, limit), s, time.time())
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if wide:
        for r in rows:
            stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(r["created_at"]))
            text = for_terminal(r["content"].replace("\n", " "))
            text = text if len(text) <= 70 else text[:67] + "..."
            click.echo(
                f"{r['id']:>6} {stamp} {r['session']:<10} {r['role']:<9} {r['mode'] or '-':<7} "
                f"{r['kind']:<11} karma {r['karma']:>7g} score {r['score']:>10.4g}  {text}"
            )
        return
    if not rows:
        click.echo("No prompts stored yet.")
        return
    click.echo(f"{'id':>6} {'when':<11} {'session':<8} {'who':<3} {'mode':<6} {'kind':<5} "
               f"{'karma':>5} {'score':>6}  text")  # fmt: skip
    for r in rows:
        stamp = time.strftime("%m-%d %H:%M", time.localtime(r["created_at"]))
        text = for_terminal(r["content"].replace("\n", " "))
        text = text if len(text) <= 41 else text[:40] + "…"
        who = _ROLES.get(r["role"], r["role"][:3])
        kind = _KINDS.get(r["kind"], r["kind"][:5])
        click.echo(
            f"{r['id']:>6} {stamp} {r['session'][:8]:<8} {who:<3} {(r['mode'] or '-')[:6]:<6} "
            f"{kind:<5} {readable(r['karma']):>5} {readable(r['score']):>6}  {text}"
        )
    click.echo(textwrap.fill(HISTORY_LEGEND, 100))


@history.command("promote")
@click.argument("prompt_id", type=int)
@home_option
def history_promote(prompt_id: int, home: Path | None) -> None:
    """Make a prompt operative: it gets operative_karma and stays in context longer."""
    from daemon.core import karma

    _, store, s = open_daemon_state(home)
    if store.prompt(prompt_id) is None:
        fail(f"There is no prompt {prompt_id}; `lmd history` lists them.")
    points = karma.karma_for("operative", s)
    store.set_karma([prompt_id], "operative", points)
    click.echo(f"Prompt {prompt_id} is now operative (karma {points}).")


@cli.command()
@click.option("--probe", is_flag=True, help="Probe the backend again instead of the cached result.")
@click.option("--url", envvar="LMD_URL", help="Daemon URL (default http://127.0.0.1:8420).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option(
    "--which",
    is_flag=True,
    help="Only print which backend lmd serve would use here (embedded or endpoint), and why "
    "on stderr; needs no running daemon.",
)
@home_option
def backend(probe: bool, url: str | None, as_json: bool, which: bool, home: Path | None) -> None:
    """Show the backend the daemon talks to and what it can do (tools, JSON schemas,
    logprobs, n, tokenize, prefill), as probed once per endpoint and model."""
    import json

    from daemon.client import ClientError, request

    if which:
        from daemon.backends.choice import choose_backend

        choice = choose_backend(open_daemon_state(home)[2])
        click.echo("embedded" if choice.embedded else "endpoint")
        click.echo(f"lmd backend: {choice.why}", err=True)
        return

    try:
        status, _, body = request(
            "POST" if probe else "GET", "/backend/probe" if probe else "/backend", url=url
        )
    except ClientError as e:
        fail(e.message)
    data = json.loads(body)
    if status != 200:
        fail(data.get("error") or f"The daemon answered HTTP {status}.")
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    caps = data["capabilities"]
    click.echo(f"backend   {data['endpoint']}")
    click.echo(f"model     {data['model']}")
    click.echo(f"source    {data['source']}")
    for name, value in caps.items():
        shown = (
            value
            if isinstance(value, int) and not isinstance(value, bool)
            else ("yes" if value else "no")
        )
        if name == "json_schema" and value and data.get("schema_format"):
            shown = f"yes (response_format {data['schema_format']})"
        if name == "tokenize" and value and data.get("tokenize_path"):
            shown = f"yes ({data['tokenize_path']})"
        click.echo(f"  {name:<12} {shown}")
    for note in data.get("notes") or ():
        click.echo(f"  note: {note}")


@cli.command()
@click.option("--json", "as_json", is_flag=True)
def plugins(as_json: bool) -> None:
    """Plugins, their hooks, modes and directives."""
    import json

    from daemon.backends import tokens
    from daemon.core.registry import collect
    from daemon.plugins import describe, get_plugin_manager

    pm = get_plugin_manager()
    registry = collect(pm, routes=False)
    rows = describe(pm)
    for row in rows:
        row["modes"] = sorted(m.name for m in registry.modes.values() if m.plugin == row["name"])
    aliases = registry.specs["directive_aliases"].default
    directives = {m: [m, *registry.modes[m].aliases, *aliases.get(m, [])] for m in registry.modes}
    model = registry.specs["openai_model"].default
    info = {"plugins": rows, "directives": directives, "tokenizer": tokens.tokenizer_name(model)}
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    for row in rows:
        modes = f"  modes: {', '.join(row['modes'])}" if row["modes"] else ""
        click.echo(f"{row['name']}: {', '.join(row['hooks'])}{modes}")
    click.echo("directives: " + "; ".join(f"{m}: {', '.join(d)}" for m, d in directives.items()))
    click.echo(f"tokenizer: {info['tokenizer']}")


# Commands that leave nothing for Python's exit to finalize but lmd's own modules (None: the
# group's help). Those objects are frozen (gc.freeze) after the command: the collections of
# the interpreter's exit then skip them, some 15 ms of `lmd --help` and `lmd say`. Exit
# handlers, thread joins and the flushing of stdout and stderr still run as always.
LIGHT_COMMANDS = {None, "say"}


def main() -> None:
    """The `lmd` console script."""
    try:
        cli()
    finally:
        if cli.ran in LIGHT_COMMANDS:
            import gc

            gc.freeze()


if __name__ == "__main__":
    # `python -m daemon.cli`: run the imported module's CLI, not this __main__ copy, so what
    # plugins add through daemon.api (history listings, commands) lands on the one that runs
    from daemon.cli import main as _main

    _main()
