"""Errors meant for people: each carries one plain sentence and an HTTP status."""

from __future__ import annotations


class LmdError(Exception):
    """An error whose message is a sentence a voice user can hear and act on."""

    status: int = 400
    kind: str = "error"

    def __init__(self, message: str, status: int | None = None, detail: object = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.detail = detail

    def to_json(self) -> dict:
        body: dict = {"error": self.message, "kind": self.kind, "status": self.status}
        if self.detail is not None:
            body["detail"] = self.detail
        return body


class BackendError(LmdError):
    """The language model backend failed; the daemon keeps serving."""

    status = 502
    kind = "backend"


class AnswerCut(BackendError):
    """The backend stopped an answer after it began (the deadline, a lost connection, the
    server's crash): `said` is the text it gave before, which the caller has already received
    as chunks and keeps, marked as cut; the message says what happened."""

    def __init__(self, message: str, said: str = "", **kwargs: object) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.said = said
