"""A throwaway third-party plugin: a mode, a route and a setting (used by the plugin tests)."""

from starlette.responses import JSONResponse

from daemon.hookspecs import hookimpl
from daemon.modes import Mode
from daemon.settings import Setting


async def respond(ctx):
    yield f"{ctx.settings['echo_prefix']}: {ctx.text}"


async def echo_route(request):
    daemon = request.app.state.daemon
    return JSONResponse({"prefix": daemon.settings()["echo_prefix"], "modes": sorted(daemon.modes)})


@hookimpl
def register_modes(register):
    register(Mode("echo", respond, description="Says your words back.", aliases=("eko",)))


@hookimpl
def register_settings(register):
    register(Setting("echo_prefix", "echo", "str", "What the echo mode puts before your words."))


@hookimpl
def register_routes(register):
    register("/echo", echo_route, methods=["GET"])
