"""A spoken answer to a question: yes, no or wait, read as people say it and speech engines
write it ("Um, yes.", "Go for it.", "Sounds good.", "Hold on, what does it do?").

Biased to refuse. A yes is an answer made of nothing but words of assent, fillers and
politeness; an answer that also holds a no, a doubt, a condition, a question or a new task
("yeah, no", "yes if it's safe", "sure, but use sudo", "yes, and then list the logs") is
`unclear`, never a yes: the caller says what it heard and asks again, keeping the question.
An utterance with no answer word in it at all is no answer (None): a new request.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from daemon.core.words import plural

YES, NO, WAIT, UNCLEAR = "yes", "no", "wait", "unclear"

# Past this many words an utterance is a request, or a speech engine's run-on, not an answer.
MOST_WORDS = 40
# What is said back of an unclear answer ("I heard ..."): enough to recognise it.
SAID_CHARS = 80


@dataclass(frozen=True)
class Heard:
    """How a spoken answer was understood."""

    outcome: str  # yes | no | wait | unclear
    said: str  # what was heard, shortened, to say back
    question: str = ""  # wait: a question about what was asked ("what does it do?")
    why: str = ""  # unclear: what made it so, in words a listener follows

    def say_again(self) -> str:
        """The sentence for an unclear answer: what was heard, and why it is no yes."""
        if not self.said:
            return "I heard nothing, so nothing ran."
        return f'I heard "{self.said}": {self.why}, so nothing ran.'


def _lexicon(kind: str, text: str) -> dict[tuple[str, ...], str]:
    return {tuple(p.split()): kind for p in text.split("|") if p.strip()}


# Phrases with contractions written out ("that's" -> "that is", "don't" -> "do not").
_PHRASES: dict[tuple[str, ...], str] = {}
_PHRASES.update(
    _lexicon(
        "filler",
        "um|umm|uh|uhh|er|erm|ah|eh|hmm|hm|mm|mmm|oh|well|so|like|actually|please|kindly|"
        "thanks|thank you|thank you very much|thanks a lot|cheers|then|now|right now|just|and|"
        "again|really|it|that|this|one|the command|command|that one|this one|sir|madam|"
        "ma am|mate|buddy|dude|friend|lmd|computer|marat|cobol|dali|knob|right|good|great|"
        "perfect|cool|nice|excellent|awesome|fantastic|wonderful|lovely|brilliant|ok so|"
        "for me|to me|very much|i said|i say|uh huh|mm hmm|mhm",
    )
)
_PHRASES.update(
    _lexicon(
        "yes",
        "yes|yeah|yea|yep|yup|yah|aye|yes please|sure|sure thing|surely|ok|okay|okey|okey dokey|"
        "okie dokie|alright|all right|fine|that is fine|that is ok|that is okay|that is good|"
        "that is great|that is correct|that is right|that is perfect|that works|works for me|"
        "fine by me|fine with me|ok by me|okay by me|good with me|i am fine with that|"
        "i am ok with that|i am okay with that|sounds good|sounds great|sounds fine|"
        "sounds right|sounds ok|sounds okay|sounds perfect|looks good|looks fine|looks great|"
        "looks right|looks ok|looks okay|all good|good to go|go|go ahead|go on|go for it|do it|"
        "do that|just do it|do so|run it|run that|run this|run|execute|execute it|proceed|"
        "continue|carry on|approved|approve|approve it|i approve|confirm|confirmed|i confirm|"
        "affirmative|absolutely|definitely|certainly|of course|indeed|correct|exactly|please do|"
        "make it so|let us do it|let us do this|let us go|let us go ahead|no problem|no worries|"
        "not a problem|you bet|by all means|i agree|agreed|i am sure|for sure|totally|roger|"
        "roger that|right away|i do|yes i do|that is what i want|do it now|go right ahead|apply|"
        "apply it|apply that|apply the change|apply the diff|you can|yes you can|you may|"
        "yes you may|you can do it|you can go ahead|you can run it",
    )
)
_PHRASES.update(
    _lexicon(
        "no",
        "no|nope|nah|naw|no no|no way|no thanks|no thank you|not that|not that one|not this|"
        "do not|do not run it|do not run that|do not run this|do not do it|do not do that|"
        "wrong|that is wrong|incorrect|that is incorrect|that is not right|not right|"
        "please do not|please do not run it|please do not run that|please do not run this|"
        "please do not do it|please do not do that|cancel|cancel it|cancel that|stop|stop it|"
        "abort|abort it|skip|skip it|"
        "skip that|never|never ever|never mind|nevermind|forget it|forget that|forget about it|"
        "negative|decline|declined|deny|denied|reject|rejected|refuse|i refuse|"
        "i do not think so|i would rather not|rather not|better not|definitely not|"
        "absolutely not|certainly not|of course not|not really|hell no|leave it|leave it alone|"
        "drop it|do not bother|i changed my mind|changed my mind|not a chance|no chance|"
        "i do not want that|i do not want to|do not want that",
    )
)
_PHRASES.update(
    _lexicon(
        "wait",
        "wait|wait a moment|wait a second|wait a sec|wait a minute|wait a bit|wait up|hold on|"
        "hold on a second|hold on a sec|hold on a moment|hold on a minute|hang on|"
        "hang on a second|hang on a sec|hang on a moment|hang on a minute|hold it|hold up|"
        "not yet|not now|not just yet|one moment|one second|one sec|one minute|just a moment|"
        "just a second|just a sec|just a minute|a moment|a second|a sec|a minute|moment|"
        "give me a moment|give me a second|give me a sec|give me a minute|let me think|"
        "let me think about it|let me check|let me see|let me look|i need to think|pause|"
        "not so fast|slow down|stand by",
    )
)
_PHRASES.update(
    _lexicon(
        "unsure",
        "maybe|perhaps|probably|possibly|i guess|i guess so|i suppose|i suppose so|i think|"
        "i think so|not sure|i am not sure|dunno|i do not know|uh uh|kind of|"
        "sort of|whatever|if you want|if you like|up to you|your call|i do not care|why not|"
        "could be|might as well|i would say so",
    )
)
_LONGEST = max(len(p) for p in _PHRASES)

# The words of an answer that makes an approval rule ("yes, always here", "no, never run
# that"): a mode reads them; the core only needs to know such an answer when it hears one.
_RULE_WORDS = {
    ("always",), ("forever",), ("from", "now", "on"), ("every", "time"), ("each", "time"),
    ("permanently",), ("without", "asking"), ("for", "this", "session"), ("this", "session"),
    ("for", "the", "session"), ("for", "the", "rest"), ("in", "this", "session"),
    ("for", "now"), ("here",), ("in", "here"), ("everywhere",), ("anywhere",), ("globally",),
    ("in", "this"), ("without", "the", "sandbox"), ("outside", "the", "sandbox"),
    ("unsandboxed",), ("read", "only"), ("never",), ("do", "not", "ask"),
}  # fmt: skip

_CONTRACTIONS = {
    "don't": "do not", "dont": "do not", "doesn't": "does not", "doesnt": "does not",
    "didn't": "did not", "didnt": "did not", "won't": "will not", "wont": "will not",
    "can't": "can not", "cant": "can not", "cannot": "can not", "isn't": "is not",
    "isnt": "is not", "aren't": "are not", "shouldn't": "should not", "wouldn't": "would not",
    "that's": "that is", "thats": "that is", "it's": "it is", "what's": "what is",
    "whats": "what is", "let's": "let us", "lets": "let us", "i'm": "i am", "im": "i am",
    "i'd": "i would", "i'll": "i will", "you're": "you are", "youre": "you are",
    "there's": "there is", "here's": "here is", "ok'd": "approved", "o.k.": "ok",
}  # fmt: skip
_QUESTION_WORDS = {"what", "why", "how", "which", "where", "who", "is", "does", "do", "will",
                   "would", "can", "could", "should", "are", "did", "was", "whats"}  # fmt: skip
_POINTING = {"it", "that", "this", "command", "these", "those", "them", "thing"}
# What a question about a command asks it to do ("what does it do", "is that safe").
_DOING = {"do", "does", "did", "delete", "deletes", "change", "changes", "remove", "removes",
          "touch", "safe", "need", "needed", "run", "runs", "work", "mean", "means", "affect",
          "modify", "write", "writes", "break", "overwrite", "install", "cost", "take"}  # fmt: skip
_TOKEN = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)*")
_SYMBOL = re.compile(r"[^\w\s.,!?;:'\"()\[\]\-\u2019\u2018\u201c\u201d\u2026]")


@dataclass(frozen=True)
class _Word:
    text: str  # folded, contractions written out
    start: int  # where it begins in the utterance


def fold(text: str) -> str:
    """Lower case, accents off, compatibility forms unified (full-width letters...)."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def _words(text: str) -> tuple[list[_Word], int]:
    """The utterance's words (ASCII letters only; contractions written out, a stutter's
    first letters dropped) and the count of other tokens (digits, other scripts, emoji)."""
    words: list[_Word] = []
    others = len(_SYMBOL.findall(text))
    for m in _TOKEN.finditer(text):
        token = fold(m.group()).replace("\u2019", "'")
        if not token.isascii() or not token.replace("'", "").isalpha():
            others += 1
            continue
        for part in _CONTRACTIONS.get(token, token).split():
            if part.endswith("'s"):
                part = part[:-2]
            words.append(_Word(part, m.start()))
    kept = [
        w
        for i, w in enumerate(words)
        # "y-yes", "n-no": a stutter's first letters before the word itself
        if not (
            len(w.text) <= 2
            and i + 1 < len(words)
            and words[i + 1].text != w.text
            and words[i + 1].text.startswith(w.text)
            and w.text not in ("i", "a", "no", "ok", "go")
        )
    ]
    return kept, others


def _phrases(words: list[_Word]) -> list[tuple[str, int, int]]:
    """(kind, first word index, end index) for each phrase, longest first; `other` for a
    word no phrase knows."""
    out = []
    i = 0
    texts = [w.text for w in words]
    while i < len(texts):
        for n in range(min(_LONGEST, len(texts) - i), 0, -1):
            kind = _PHRASES.get(tuple(texts[i : i + n]))
            if kind:
                out.append((kind, i, i + n))
                i += n
                break
        else:
            out.append(("other", i, i + 1))
            i += 1
    return out


def shortened(text: str, most: int = SAID_CHARS) -> str:
    """The utterance on one line, cut at a word to `most` characters (for saying back)."""
    flat = " ".join(text.split())
    if len(flat) <= most:
        return flat
    return flat[:most].rsplit(" ", 1)[0].rstrip(",;:") + "..."


def hear_answer(text: str) -> Heard | None:
    """Yes, no, wait or unclear; None when the utterance is no answer at all (a request)."""
    said = shortened(text)
    words, others = _words(text)
    if not words and not others:
        return Heard(UNCLEAR, "", why="that is not a yes or a no")
    if len(words) > MOST_WORDS:
        if {kind for kind, _, _ in _phrases(words)} & {YES, NO, WAIT, "unsure"}:
            return Heard(UNCLEAR, said, why="that is too long for a yes or a no")
        return None
    found = _phrases(words)
    kinds = [kind for kind, _, _ in found]
    meaningful = [(k, a, b) for k, a, b in found if k != "filler"]
    asks = text.rstrip().endswith("?")
    if meaningful and meaningful[0][0] == WAIT:
        return _wait(text, words, meaningful, said)
    marks = set(kinds) & {YES, NO, WAIT, "unsure"}
    if YES in marks and NO in marks:
        return Heard(UNCLEAR, said, why="that is both a yes and a no")
    if "unsure" in marks:
        return Heard(UNCLEAR, said, why="that is not a sure yes")
    if WAIT in marks:
        return Heard(UNCLEAR, said, why="that is an answer and a wait together")
    if "other" in kinds or others:
        if marks:
            why = (
                "that is more than a yes, and a yes runs exactly what I asked about"
                if YES in marks
                else "that is more than a no"
            )
            return Heard(UNCLEAR, said, why=why)
        if _is_question(words, asks):
            return Heard(WAIT, said, question=" ".join(text.split()))
        if len(words) <= 1 or not words:
            return Heard(UNCLEAR, said, why="that is not a yes or a no")
        return None
    if not marks:
        return Heard(UNCLEAR, said, why="that is not a yes or a no")
    if asks:
        return Heard(UNCLEAR, said, why="that is a question, not an answer")
    return Heard(YES if YES in marks else NO, said)


def _wait(text: str, words: list[_Word], meaningful: list, said: str) -> Heard:
    """ "Hold on" keeps the question; "wait, what does it do?" keeps it and asks about it."""
    rest = [(k, a, b) for k, a, b in meaningful if k != WAIT]
    if not rest:
        return Heard(WAIT, said)
    if all(k in (YES, NO, "unsure") for k, _, _ in rest):
        return Heard(UNCLEAR, said, why="that is a wait and an answer together")
    first = rest[0][1]
    question = text[words[first].start :].strip()
    return Heard(WAIT, said, question=" ".join(question.split()))


def _is_question(words: list[_Word], asks: bool) -> bool:
    """A question about what was asked: "what does it do", "is that safe?", "why?"."""
    texts = [w.text for w in words]
    if not texts or texts[0] not in _QUESTION_WORDS:
        return False
    return asks or bool(_POINTING & set(texts) and _DOING & set(texts))


# Said to a question they answer it; said with nothing asked they are requests ("go on"
# after an answer that was cut, "go", "refuse" to a mode of one's own): no bare answer.
_GO_ON = {("go", "on"), ("continue",), ("carry", "on"), ("keep", "going"), ("go",), ("run",),
          ("execute",), ("proceed",), ("refuse",), ("i", "refuse"), ("decline",), ("deny",),
          ("reject",), ("pause",)}  # fmt: skip


def is_bare_answer(text: str) -> bool:
    """An answer with nothing else in it: yes, no, or an answer that makes an approval rule
    ("yes, always here", "never run that"). A wait ("hold on") or a question is not one, nor
    a verb that is also a request ("go on", "go", "refuse"): with nothing asked, the mode
    hears those."""
    words, _ = _words(text)
    said = [(a, b) for kind, a, b in _phrases(words) if kind != "filler"]
    if said and all(tuple(w.text for w in words[a:b]) in _GO_ON for a, b in said):
        return False
    heard = hear_answer(text)
    if heard is not None and heard.outcome in (YES, NO):
        return True
    return _rule_shaped(text)


def _rule_shaped(text: str) -> bool:
    """ "yes, always here", "yeah for this session", "never run that": an answer word (or
    none), then words of a rule at once."""
    words, _ = _words(text)
    if not words or len(words) > 20:
        return False
    texts = [w.text for w in words]
    i = 0
    while i < len(texts) and _PHRASES.get((texts[i],)) == "filler":
        i += 1
    for n in range(min(_LONGEST, len(texts) - i), 0, -1):
        if _PHRASES.get(tuple(texts[i : i + n])) in (YES, NO):
            if texts[i] == "never":
                return True  # "never", "never run that"
            i += n
            break
    while i < len(texts) and _PHRASES.get((texts[i],)) == "filler" and texts[i] != "for":
        i += 1
    return any(tuple(texts[i : i + len(p)]) == p for p in _RULE_WORDS)


NOTHING_WAITING = "Nothing is waiting for a yes or a no; say what you want done."


def nothing_waiting(
    text: str,
    session: Any,
    mode: str,
    named: bool,
    handed: dict | None,
    idle_secs: float,
    now: float,
    store: Any,
) -> str | None:
    """The sentence for a bare answer ("yes", "no, never run that") that no question waits
    for, in any mode: no model call. None when the mode should hear it: a
    question was handed to it, its own question is waiting ("marat yes"), or its last reply
    asked something and this is a plain yes or no to that; or `named` (a directive named the
    mode) and the mode keeps state in this session (it may keep a question of its own)."""
    if handed is not None or not is_bare_answer(text):
        return None
    if named and session.state.get(mode):
        return None
    fresh = bool(session.last_active) and now - session.last_active < idle_secs
    kept = session.pending
    heard = hear_answer(text)
    if fresh and heard is not None and heard.outcome in (YES, NO):
        last = store.history(session.name, 1)
        if (
            last
            and last[-1].role == "assistant"
            and last[-1].mode == mode
            and last[-1].content.rstrip().endswith("?")
        ):
            return None  # "Shall I go on?" "Yes."
    if kept:
        return (
            f"Nothing is waiting for a yes or a no any more: my question went unanswered for "
            f"{_duration(idle_secs)}, so I dropped it; say what you want done."
        )
    return NOTHING_WAITING


def _duration(secs: float) -> str:
    if secs >= 120 and secs % 60 == 0:
        return f"over {plural(int(secs // 60), 'minute')}"
    return f"over {plural(int(secs), 'second')}"
