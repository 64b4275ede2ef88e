"""Who may answer a question that waits for a yes (standard library only).

A question (a command marat wants to run, a change cobol wants to make) is a pending
continuation of one session. Each has an identity (`id`, random) and remembers the clients
that heard it (`heard_by`); an answer (yes, no, or a rule answer such as "yes, always here")
answers it only when it comes from a client that heard exactly this question. A client names
itself with `X-Lmd-Client` (`lmd say` sends one per terminal); a client that sends none is one
plain client (curl, a voice tool's POST), which hears what it asked about. A client may also
echo the question's id (`X-Lmd-Question`, returned with every question): then its answer is
for that question alone.

Agents get sessions of their own. A client that relays a *model's* words (`lmd mcp serve` for
an MCP client) marks its requests `X-Lmd-Agent: 1`; such a request speaks in `agent:NAME`,
never in a session of the user's, so it cannot replace, drop or answer a question the user is
waiting on. It never presents the token's rights (protected settings stay shut), makes no
rule, and its "yes" approves nothing unless it also carries `X-Lmd-Approve: <fingerprint>` of
exactly the question waiting, which `lmd mcp serve` sends only after the client's user said
yes to that question through MCP elicitation. Modes call `approval_allowed(pending)` before
acting on an answer; the core re-asks a question its answerer has not heard (`run_turn`).
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass

from daemon.spoken import answers
from daemon.spoken.answers import hear_answer

# None: not an agent's request. "": an agent's request without an approval. Else the
# fingerprint it carries.
REQUEST_AGENT: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "lmd_request_agent", default=None
)


@dataclass(frozen=True)
class Listener:
    """The client a reply goes to: its own name (X-Lmd-Client, "" for a plain client) and the
    id of the question it says it answers (X-Lmd-Question, "" when it says none)."""

    client: str = ""
    question: str = ""


# None: not an HTTP request (a plain client, as far as questions go).
REQUEST_LISTENER: contextvars.ContextVar[Listener | None] = contextvars.ContextVar(
    "lmd_request_listener", default=None
)


def _listener() -> Listener:
    return REQUEST_LISTENER.get() or Listener()


AGENT_PREFIX = "agent:"
MAX_HEARD = 16  # clients remembered per question; the oldest is forgotten first
# Kept in the session's pending question, never shown: who heard it, and what they heard.
PRIVATE_KEYS = ("heard_by", "asked")

NOT_HEARD = (
    "I did nothing: the question waiting here was asked to another client, or changed since "
    "this one heard it. Here it is:"
)


def answer_word(text: str) -> str | None:
    """'yes', 'no', or None for anything else: a wait, an unclear answer, a request (the core's
    reading of spoken answers, daemon/spoken/answers.py, biased to refuse)."""
    heard = hear_answer(text)
    return heard.outcome if heard is not None and heard.outcome in ("yes", "no") else None


def is_answer(text: str) -> bool:
    """Does the utterance answer a waiting question (yes, no, wait, unclear, or a rule answer)
    rather than ask something new? The one place the core asks the spoken-answer classifier
    (daemon/spoken/answers.py)."""
    return answers.hear_answer(text) is not None or answers.is_bare_answer(text)


def relays_model() -> bool:
    """Is the request being answered an agent's (a client relaying a model's words)?"""
    return REQUEST_AGENT.get() is not None


def own_session(name: str) -> str:
    """The session a request speaks in: an agent's is always one of its own (agent:NAME)."""
    if not relays_model() or name.startswith(AGENT_PREFIX):
        return name
    return AGENT_PREFIX + name


def _hearer() -> str:
    """How the current request's client is written in a question's `heard_by`."""
    client = _listener().client
    return f"{AGENT_PREFIX}{client}" if relays_model() else client


def new_question(pending: dict, asked: str | None = None) -> dict:
    """`pending` as a question heard by the current client: a new one gets its id; one kept
    open (the same id) adds this client to those who heard it. `asked`: what was said."""
    heard = [h for h in pending.get("heard_by") or [] if h != _hearer()]
    out = {**pending, "id": pending.get("id") or secrets.token_hex(8)}
    out["heard_by"] = [*heard, _hearer()][-MAX_HEARD:]
    if asked is not None:
        out["asked"] = asked
    return out


def not_heard(pending: dict) -> dict:
    """`pending` as if the current client had not heard it (it went away before the answer
    reached it): its next yes is said the question first."""
    return {**pending, "heard_by": [h for h in pending.get("heard_by") or [] if h != _hearer()]}


def heard(pending: dict | None) -> bool:
    """Did the current request's client hear exactly this question? With an echoed id, that
    id decides; else the client's name must be among those who heard it."""
    if not pending:
        return False
    echoed = _listener().question
    if echoed:
        return hmac.compare_digest(echoed, str(pending.get("id") or ""))
    return _hearer() in (pending.get("heard_by") or [])


def public(pending: dict | None) -> dict | None:
    """The question as clients see it (JSON replies): without who heard it."""
    if pending is None:
        return None
    return {k: v for k, v in pending.items() if k not in PRIVATE_KEYS}


def approval_fingerprint(pending: dict) -> str:
    """What an approval is bound to: the waiting question, every field clients see."""
    text = json.dumps(public(pending), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def approval_allowed(pending: dict | None) -> bool:
    """May the request being answered answer `pending` (say yes, or make a rule)? For the
    user's own clients: when this client heard exactly this question. For an agent's request:
    only with the fingerprint of exactly this question (its user's yes, by elicitation)."""
    carried = REQUEST_AGENT.get()
    if carried is None:
        return heard(pending)
    if not carried or not pending:
        return False
    return hmac.compare_digest(carried, approval_fingerprint(pending))


def not_heard_reply(pending: dict) -> str:
    """The re-ask for a client that answered a question it had not heard: what was asked."""
    asked = pending.get("asked") or pending.get("question") or pending.get("command")
    if not asked:
        return NOT_HEARD.replace(" Here it is:", " Say the task again.")
    return f"{NOT_HEARD}\n{asked}"
