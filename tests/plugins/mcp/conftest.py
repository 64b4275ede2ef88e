"""The test MCP server and `lmd mcp serve`, forked warm for each start (see warm_server.py)."""

from __future__ import annotations

from importlib.util import find_spec

import pytest


@pytest.fixture(scope="session", autouse=True)
def _sdk_bound_to_the_real_stderr() -> None:
    """The SDK's stdio client takes sys.stderr as its default errlog when first imported:
    imported first inside a CliRunner run (`lmd mcp list` in-process), it kept click's
    capture, and every later stdio client in that worker failed (fileno). Import it here."""
    if find_spec("mcp") is not None:
        import mcp.client.stdio  # noqa: F401


@pytest.fixture(scope="session")
def mcp_server_command(tmp_path_factory) -> list[str]:
    """The command (and first arguments) that starts the test MCP server over stdio."""
    if find_spec("mcp") is None:
        pytest.skip("needs pip install 'lmd[mcp]'")
    from warm_server import WarmMcpServer  # this directory is on sys.path (no __init__.py)

    warm = WarmMcpServer(tmp_path_factory.mktemp("warm-mcp")).start()
    yield [str(warm.client)]
    warm.stop()


@pytest.fixture(scope="session")
def lmd_mcp_command(tmp_path_factory) -> str:
    """The `lmd` an MCP client starts for `lmd mcp serve` over stdio (forked warm)."""
    if find_spec("mcp") is None:
        pytest.skip("needs pip install 'lmd[mcp]'")
    from warm_server import WarmLmdMcpServe

    warm = WarmLmdMcpServe(tmp_path_factory.mktemp("warm-lmd-mcp")).start()
    yield str(warm.client)
    warm.stop()
