"""Typed settings: declarations, parsing with clear errors, and the layered view.

A value comes from, in order: the environment (`LMD_<NAME>`), the `settings` table, the declared
default. Its source says which: "env", "set" (a value the user chose) or "default" (the declared
default, also when the table holds it: daemon/core/defaults.py keeps those current). Every value
is parsed by its declaration, so a bad one is refused with a sentence naming the setting, the
value and what is allowed.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from daemon.core.approvals import relays_model
from daemon.core.errors import LmdError

TRUE_WORDS = {"true", "t", "yes", "y", "on", "1"}
FALSE_WORDS = {"false", "f", "no", "n", "off", "0"}


class SettingError(LmdError):
    """A setting value that cannot be used."""

    status = 400


class UnknownSetting(LmdError):
    status = 404


# What a setting may govern that makes it the user's alone. A setting declares each it governs
# (`shapes`), and is protected because of it: over HTTP (a route, or a mode such as knob
# answering /v1) it changes only for a request that presents the daemon's token, never for an
# agent (`lmd mcp serve`, marked X-Lmd-Agent) nor for a local program without the token; the
# CLI always can. docs/security.md states it; tests/core/test_protected_settings.py checks it
# over every declared setting.
SHAPES = {
    "prompt": "what the model is told: its system message, instructions, memory, tools, protocol",
    "approval": "what runs without a spoken yes, and how long a yes, a question or a rule lasts",
    "safety": "the sandbox, where commands and builds run, what the daemon loads or runs, "
    "where the API key and the user's words go, and who may call",
    "model": "which model and which server answer: who hears the user's words and whose "
    "answers (replies, scores, verdicts) lmd takes",
}


@dataclass(frozen=True)
class Setting:
    """Declaration of one setting: its type, default and what is allowed.

    `type` is one of int, float, str, bool, choice, json. `synonyms` maps accepted spellings
    to canonical values (e.g. {"maj": "majority"}); `check` adds a custom rule returning an
    error sentence or None. `shapes` names what of SHAPES it governs: any makes it protected
    (`protected=True` alone, as older plugins write it, means "safety").
    """

    name: str
    default: Any
    type: str = "str"
    help: str = ""
    choices: tuple[str, ...] = ()
    min: float | None = None
    max: float | None = None
    synonyms: Mapping[str, str] = field(default_factory=dict)
    check: Callable[[Any], str | None] | None = None
    plugin: str = "core"
    # Protected settings are the user's alone (see SHAPES): over HTTP they change only for a
    # request that presents the daemon's token; the CLI always can. Derived from `shapes`.
    protected: bool = False
    # Earlier defaults, as an older lmd wrote them into the table: a home from before lmd
    # recorded who chose a value counts a stored one of these as not chosen. Changing a
    # default? Add the old one here.
    past_defaults: tuple[Any, ...] = ()
    shapes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        unknown = [s for s in self.shapes if s not in SHAPES]
        if unknown:
            raise ValueError(
                f"The setting {self.name} declares shapes {unknown}; they are {', '.join(SHAPES)}."
            )
        if self.shapes and not self.protected:
            object.__setattr__(self, "protected", True)
        elif self.protected and not self.shapes:
            object.__setattr__(self, "shapes", ("safety",))

    def allowed(self) -> str:
        """Say in words what values are allowed."""
        if self.type == "bool":
            return "true or false (also yes/no, t/f, on/off)"
        if self.type == "choice":
            return "one of " + ", ".join(self.choices)
        if self.type == "json":
            return "a JSON value"
        if self.type in ("int", "float"):
            kind = "a whole number" if self.type == "int" else "a number"
            if self.min is not None and self.max is not None:
                return f"{kind} from {_num(self.min)} to {_num(self.max)}"
            if self.min is not None:
                return f"{kind} of at least {_num(self.min)}"
            if self.max is not None:
                return f"{kind} of at most {_num(self.max)}"
            return kind
        return "any text"

    def parse(self, raw: Any) -> Any:
        """Turn raw text (or an already-typed value) into this setting's typed value."""
        try:
            value = self._convert(raw)
        except (ValueError, TypeError):
            raise self._refuse(raw) from None
        if self.type in ("int", "float"):
            if (self.min is not None and value < self.min) or (
                self.max is not None and value > self.max
            ):
                raise self._refuse(raw)
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise SettingError(f"{self.name} cannot be {_show(raw)}: {problem}.")
        return value

    def _convert(self, raw: Any) -> Any:
        if isinstance(raw, str):
            text = raw.strip()
            text = self.synonyms.get(text.lower(), text)
        else:
            text = raw
        if self.type == "int":
            if isinstance(text, bool):
                raise ValueError
            if isinstance(text, float):
                if not text.is_integer():
                    raise ValueError
                return int(text)
            return int(str(text).replace("_", ""))
        if self.type == "float":
            if isinstance(text, bool):
                raise ValueError
            value = float(text)
            if not math.isfinite(value):
                raise ValueError
            return value
        if self.type == "bool":
            if isinstance(text, bool):
                return text
            word = str(text).strip().lower()
            if word in TRUE_WORDS:
                return True
            if word in FALSE_WORDS:
                return False
            raise ValueError
        if self.type == "choice":
            word = str(text).strip().lower()
            word = self.synonyms.get(word, word)
            if word not in self.choices:
                raise ValueError
            return word
        if self.type == "json":
            return json.loads(text) if isinstance(text, str) else text
        if not isinstance(text, str):
            raise TypeError
        return text

    def dump(self, value: Any) -> str:
        """Canonical text for the table."""
        if self.type == "bool":
            return "true" if value else "false"
        if self.type == "json":
            return json.dumps(value, ensure_ascii=False)
        return str(value)

    def _refuse(self, raw: Any) -> SettingError:
        return SettingError(f"{self.name} cannot be {_show(raw)}; it must be {self.allowed()}.")


def refuse_if_protected(spec: Setting, token_presented: bool) -> None:
    """Refuse (403) a change to a protected setting that arrives over HTTP (a route, or a mode
    answering /v1) without the daemon's token: being the owner's process is not enough for
    these (see token_presented). An agent's request (X-Lmd-Agent: a model's words relayed)
    changes no setting at all: an unprotected one still bounds every request, command and
    model call of the user's (max_body_bytes, llm_timeout_secs, ...)."""
    if relays_model():
        raise LmdError(
            f"The setting {spec.name} is protected from agents: a client relaying a model's "
            "words changes no setting; the user changes it with "
            f"`lmd settings set {spec.name} ...` or by voice (lmd say knob ...).",
            status=403,
        )
    if spec.protected and not token_presented:
        raise LmdError(
            f"The setting {spec.name} is protected: change it with "
            f"`lmd settings set {spec.name} ...`, or send the daemon's token with the request "
            "(lmd say sends it by itself).",
            status=403,
        )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _show(raw: Any) -> str:
    text = raw if isinstance(raw, str) else json.dumps(raw)
    if len(text) > 60:
        text = text[:57] + "..."
    return repr(text)


def env_name(name: str) -> str:
    """The environment variable that overrides a setting: `LMD_<NAME>`."""
    return "LMD_" + name.upper()


class Settings:
    """A snapshot of every declared setting, typed, with where each value came from."""

    def __init__(
        self,
        specs: Mapping[str, Setting],
        stored: Mapping[str, str],
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.specs = specs
        self._stored = stored
        self._environ = os.environ if environ is None else environ
        self._cache: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        try:
            return self._cache[name]
        except KeyError:
            pass
        value = self._resolve(name)[0]
        self._cache[name] = value
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self[name]
        except UnknownSetting:
            raise AttributeError(name) from None

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except UnknownSetting:
            return default

    def spec(self, name: str) -> Setting:
        try:
            return self.specs[name]
        except KeyError:
            raise UnknownSetting(
                f"There is no setting called {name}; `lmd settings list` shows them all."
            ) from None

    def source(self, name: str) -> str:
        return self._resolve(name)[1]

    def _resolve(self, name: str) -> tuple[Any, str]:
        spec = self.spec(name)
        env = self._environ.get(env_name(name))
        if env is not None:
            try:
                return spec.parse(env), "env"
            except SettingError as e:
                raise SettingError(f"The environment variable {env_name(name)}: {e}") from None
        if name in self._stored:
            # a plain mapping (tests, callers with their own values) holds chosen values
            chosen = getattr(self._stored, "chosen", None)
            source = "set" if chosen is None or name in chosen else "default"
            try:
                return spec.parse(self._stored[name]), source
            except SettingError as e:
                raise SettingError(
                    f"The stored value is broken: {e} Fix it with `lmd settings set {name} ...`."
                ) from None
        return spec.default, "default"

    def problems(self) -> list[str]:
        """Sentences for every value that does not parse (used by `serve` and `doctor`)."""
        found = []
        for name in self.specs:
            try:
                self._resolve(name)
            except SettingError as e:
                found.append(str(e))
        return found

    def describe(self, names: Iterable[str] | None = None) -> list[dict]:
        """Rows for listings: name, value, default, source, type, allowed, help, plugin."""
        rows = []
        for name in names if names is not None else sorted(self.specs):
            spec = self.spec(name)
            try:
                value, source = self._resolve(name)
            except SettingError as e:
                value, source = self._stored.get(name), f"invalid: {e}"
            row = {
                "name": name,
                "value": value,
                "default": spec.default,
                "source": source,
                "type": spec.type,
                "allowed": spec.allowed(),
                "help": spec.help,
                "plugin": spec.plugin,
            }
            if spec.protected:
                row["protected"] = True
                row["shapes"] = list(spec.shapes)
            rows.append(row)
        return rows
