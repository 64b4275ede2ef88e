"""What agent modes share: approval rules, reading commands, project memory, MCP tools.

marat and cobol (and a third-party agent mode) reach these through `daemon.api`; the core
knows none of them, except the rules' tables, which the store migrates.
"""
