"""`lmd serve`: hypercorn on loopback, the bind/token policy, graceful shutdown on signals."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import signal
import socket
import sys
from pathlib import Path

from hypercorn.asyncio import serve as hypercorn_serve
from hypercorn.config import Config

from daemon.backends import embedded, tokens
from daemon.backends.choice import choose_backend, embedded_model
from daemon.backends.llm import endpoint_from, shown_url
from daemon.core.errors import LmdError
from daemon.core.home import default_home
from daemon.core.private import register_home, secure_home, server_token
from daemon.execution import sandbox
from daemon.http.app import create_app
from daemon.http.peer import supported

DEFAULT_PORT = 8420


def parse_bind(bind: str) -> tuple[str, int]:
    """'127.0.0.1:8420', 'localhost:9000', '[::1]:8420', '0.0.0.0:80' or a bare port."""
    text = bind.strip()
    if text.isdigit():
        host, port = "127.0.0.1", text
    elif text.startswith("["):
        host, _, port = text[1:].partition("]:")
    elif ":" in text:
        host, _, port = text.rpartition(":")
    else:
        host, port = text, str(DEFAULT_PORT)
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise LmdError(f"The bind address {bind!r} has no valid port; use e.g. 127.0.0.1:8420.")
    return host or "127.0.0.1", int(port)


def is_loopback(host: str) -> bool:
    """Whether a bind host is this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_policy(host: str, token: str | None) -> None:
    """Binding beyond loopback needs a token chosen on purpose (LMD_TOKEN or --token-file):
    remote clients must be given it, and the kernel cannot vouch for them."""
    if not is_loopback(host) and not token:
        raise LmdError(
            f"Refusing to listen on {host} without a token: anyone on the network could run "
            "commands. Set LMD_TOKEN or pass --token-file FILE, or bind to 127.0.0.1."
        )


def check_port_free(host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            raise LmdError(
                f"Cannot listen on {host}:{port} ({e.strerror}); is another lmd running? "
                f"Pick another port with --bind {host}:{port + 1}."
            ) from None


def sandbox_state(level: str) -> str:
    """One line on how commands are sandboxed (for the start-up message and `lmd doctor`)."""
    if level == sandbox.OFF:
        return (
            "off (sandbox_level is off): commands that look read-only run unsandboxed; "
            "set it to read-only to sandbox them."
        )
    found = sandbox.detect()
    if not found.available:
        return (
            f"{found.sentence()} Until then, every command that would run sandboxed waits for "
            "a spoken yes."
        )
    return f"sandbox_level {level}: {found.sentence()}"


def backend_state(settings) -> str:
    """One line on which backend answers and how to switch (start-up and `lmd doctor`)."""
    choice = choose_backend(settings)
    if not choice.embedded:
        return (
            f"{shown_url(endpoint_from(settings))}, model {settings['openai_model']} "
            f"({choice.why})."
        )
    try:
        path, alias = embedded_model(settings)
    except LmdError as e:
        return f"the embedded model ({choice.why}), but: {e.message}"
    missing = embedded.engine_missing()
    if missing:
        return f"the embedded model ({choice.why}), but: {missing}"
    return (
        f"the embedded model {alias} ({path.name}, on {embedded.engine_version()}; "
        f"{choice.why}). It is "
        "small: for better answers set embedded_model_path to a bigger GGUF file, or point "
        "openai_chat_endpoint (or OPENAI_BASE_URL) at any OpenAI-compatible server."
    )


def serve(
    bind: str, home: Path | None, token_file: Path | None = None, peer_auth: bool = True
) -> int:
    """Run until SIGTERM/SIGINT; in-flight requests get shutdown_grace_secs to finish.

    Only the owner gets in (daemon.http.guard): the token, always set (LMD_HOME/token is created
    on first start), or on Linux loopback the kernel's word that the client is the same user.
    """
    host, port = parse_bind(bind)
    check_policy(host, str(token_file) if token_file else os.environ.get("LMD_TOKEN"))
    check_port_free(host, port)
    home = Path(home) if home else default_home()
    secure_home(home)
    token, token_source = server_token(home, token_file)
    # the sandbox hides every lmd home and token file this user's daemons have used
    register_home(home, *([token_file] if token_file else []))
    loopback = is_loopback(host)
    peer = peer_auth and loopback and supported()
    app = create_app(
        home=home, token=token, loopback_only=loopback, peer_check="kernel" if peer else None
    )
    daemon = app.daemon
    settings = daemon.settings()
    problems = settings.problems()
    if problems:
        raise LmdError("Some settings are invalid: " + " ".join(problems))
    if settings["default_prompt"] not in daemon.modes:
        logging.getLogger("lmd.server").warning(
            "default_prompt is %r, which no loaded plugin provides; utterances without a "
            "directive will be refused until it names one of: %s",
            settings["default_prompt"],
            ", ".join(sorted(daemon.modes)),
        )
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.graceful_timeout = settings["shutdown_grace_secs"]
    config.accesslog = None
    config.errorlog = logging.getLogger("hypercorn.error")
    config.keep_alive_timeout = 30

    who = "your own processes, or requests with" if peer else "requests with"
    print(
        f"lmd listening on http://{config.bind[0]} (database {daemon.store.path}, "
        f"modes {', '.join(sorted(daemon.modes))}, "
        f"tokens {tokens.tokenizer_name(settings['openai_model'])}); "
        f"it answers only {who} the token from {token_source}",
        file=sys.stderr,
        flush=True,
    )
    print(f"lmd backend: {backend_state(settings)}", file=sys.stderr, flush=True)
    print(f"lmd sandbox: {sandbox_state(settings['sandbox_level'])}", file=sys.stderr, flush=True)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

        async def shutdown_trigger() -> None:
            await stop.wait()
            daemon.stopping = True
            # Cut what still runs a little before hypercorn's own hard cut, which would send
            # an empty 500: this way each client hears a sentence.
            grace = config.graceful_timeout
            loop.call_later(max(0.0, grace - min(1.0, grace / 4)), daemon.stop_inflight)

        await hypercorn_serve(app, config, shutdown_trigger=shutdown_trigger)

    asyncio.run(main())
    print("lmd stopped.", file=sys.stderr, flush=True)
    return 0
