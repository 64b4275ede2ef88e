"""Who may answer a question that waits for a yes (standard library only).

lmd's own clients carry the user's words, so their "yes" is the user's. A client that relays a
*model's* words (`lmd mcp serve` for an MCP client) marks its requests `X-Lmd-Agent: 1`: such a
request never presents the token's rights (protected settings stay shut), and its "yes"
approves nothing, unless it also carries `X-Lmd-Approve: <fingerprint>` of exactly the question
waiting, which `lmd mcp serve` sends only after the client's user said yes to that question
through MCP elicitation. Modes call `approval_allowed(pending)` before acting on a yes.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json

# None: not an agent's request. "": an agent's request without an approval. Else the
# fingerprint it carries.
REQUEST_AGENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lmd_request_agent", default=None
)

NEEDS_USER = (
    "That question waits for the user's own yes: say yes to lmd itself (lmd say yes, or by "
    "voice); a client's model cannot approve it."
)


def approval_fingerprint(pending: dict) -> str:
    """What an approval is bound to: the waiting question, every field, as stored."""
    text = json.dumps(pending, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def approval_allowed(pending: dict | None) -> bool:
    """May the request being answered say yes to `pending`? Always for the user's own
    clients; for an agent's request only with the fingerprint of exactly this question."""
    carried = REQUEST_AGENT.get()
    if carried is None:
        return True
    if not carried or not pending:
        return False
    return hmac.compare_digest(carried, approval_fingerprint(pending))
