"""The winner labels of a battle (model_a, model_b, tie, tie (bothbad)), read as people and
other tools write them, and the score each gives model A."""

from __future__ import annotations

from daemon.api import LmdError

WINNERS = ("model_a", "model_b", "tie", "tie (bothbad)")
SCORE_OF_A = {"model_a": 1.0, "model_b": 0.0, "tie": 0.5, "tie (bothbad)": 0.5}


def normalise_winner(label: str) -> str | None:
    """The canonical winner label, or None when the label is not one we know."""
    text = label.strip().lower()
    if text in SCORE_OF_A:
        return text
    squashed = text.replace(" ", "").replace("_", "").replace("-", "")
    if squashed in ("tie(bothbad)", "tie(allbad)", "tiebothbad", "tieallbad", "bothbad"):
        return "tie (bothbad)"
    if squashed in ("modela", "a"):
        return "model_a"
    if squashed in ("modelb", "b"):
        return "model_b"
    return None


def score_of(winner: str) -> float:
    canonical = normalise_winner(winner)
    if canonical is None:
        raise LmdError(f"Unknown winner {winner!r}; use model_a, model_b, tie or tie (bothbad).")
    return SCORE_OF_A[canonical]
