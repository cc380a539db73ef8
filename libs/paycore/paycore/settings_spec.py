"""Each ``PAYCORE_*`` setting declared once, and one reader for all of them.

A :class:`Setting` is declared next to the component it governs, in a
:class:`Group` that says which component that is: its variable, its kind (the
type and its bounds), its default and a one-line description. ``read(env)``
returns the typed value, or raises :class:`ConfigError` naming the variable, so
a bad value stops the process at start-up. Rules that tie two settings together
(a margin below the retention, an audience required with a JWKS) stay with the
code that assembles them. ``tools/settings_doc.py`` renders the groups as the
configuration tables of the docs; ``tests/test_settings_doc.py`` keeps them equal.

A settings class declares each of its settings once, as its field
(docs/decisions/0010-settings-declared-once.md)::

    @dataclass(frozen=True, kw_only=True)
    class RecoverySettings:
        lease_s: float = RECOVERY.field("PAYCORE_RECOVERY_LEASE_S", SECONDS, 90.0, "an attempt's lease")

and :func:`load` reads every such field from the environment: no field or load
line names a setting a second time.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol, TypeVar, overload
from urllib.parse import urlsplit

from paycore.errors import PaycoreError

# asyncio accepts any finite float, but a budget beyond int32 milliseconds is a
# misconfiguration; the same conservative bound the reference validates.
MAX_BUDGET_S = 2_147_483.647

T = TypeVar("T")
U = TypeVar("U")
V = TypeVar("V")
T_co = TypeVar("T_co", covariant=True)
if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    C = TypeVar("C", bound=DataclassInstance)


class ConfigError(PaycoreError, ValueError):
    """A setting is missing or invalid; ``variable`` names it."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


class Secret:
    """A string that never appears in ``repr``, ``str`` or logs."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


class Invalid(PaycoreError, ValueError):
    """A kind refuses a raw value; the message completes ``<VARIABLE>: ``."""


class Kind(Protocol[T_co]):
    """How a raw (stripped, non-empty) value becomes a typed one."""

    def parse(self, raw: str) -> T_co: ...  # raises Invalid

    def accepts(self) -> str: ...  # what the docs' "accepts" column says


def _num(value: float) -> str:
    return str(int(value)) if math.isfinite(value) and value == int(value) else repr(value)


@dataclass(frozen=True)
class Number:
    """A finite number of ``unit``: positive (or zero if allowed), at most ``maximum``."""

    unit: str = "seconds"
    allow_zero: bool = False
    maximum: float | None = MAX_BUDGET_S
    checked: bool = True  # False: any number; its rules are checked where it lands (the sandbox's file)

    def parse(self, raw: str) -> float:
        of = f" of {self.unit}" if self.unit else ""
        try:
            value = float(raw)
        except ValueError:
            raise Invalid(f"must be a number{of}, got {raw!r}") from None
        if not self.checked:
            return value
        if not math.isfinite(value) or value < 0 or (value == 0 and not self.allow_zero):
            raise Invalid(f"must be a positive number{of}, got {raw!r}")
        if self.maximum is not None and value > self.maximum:
            raise Invalid(f"must be at most {_num(self.maximum)}{' ' + self.unit if self.unit else ''}, "
                          f"got {raw!r}")
        return value

    def accepts(self) -> str:
        if not self.checked:
            return "number"
        bound = "≥ 0" if self.allow_zero else "> 0"
        if self.maximum is not None and self.maximum != MAX_BUDGET_S:
            bound += f", ≤ {_num(self.maximum)}"
        return f"{self.unit or 'number'} {bound}"


@dataclass(frozen=True)
class Count:
    """A whole number from 1 to ``maximum``."""

    maximum: int = 1_000_000_000

    def parse(self, raw: str) -> int:
        try:
            value = int(raw)
        except ValueError:
            raise Invalid(f"must be a whole number, got {raw!r}") from None
        if not 1 <= value <= self.maximum:
            raise Invalid(f"must be between 1 and {self.maximum}, got {raw!r}")
        return value

    def accepts(self) -> str:
        return "whole number ≥ 1" if self.maximum == Count.maximum else f"whole number 1–{self.maximum}"


@dataclass(frozen=True)
class Flag:
    def parse(self, raw: str) -> bool:
        value = raw.lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        raise Invalid(f"must be true or false, got {raw!r}")

    def accepts(self) -> str:
        return "`true` | `false`"


@dataclass(frozen=True)
class Url:
    """An absolute http(s) URL, without trailing slashes. ``https_off_loopback``: plain http only
    to a loopback host (what an attacker on the path could change must come over TLS)."""

    https_off_loopback: bool = False

    def parse(self, raw: str) -> str:
        parts = urlsplit(raw)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise Invalid(f"must be an absolute http(s) URL, got {raw!r}")
        if self.https_off_loopback and parts.scheme == "http" and not is_loopback(parts.hostname or ""):
            raise Invalid(f"must be https (plain http only to localhost, 127.0.0.1 or ::1): whoever can "
                          f"intercept a plain http fetch could substitute its answer, got {raw!r}")
        return raw.rstrip("/")

    def accepts(self) -> str:
        return "https URL (http to a loopback host)" if self.https_off_loopback else "http(s) URL"


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Choice:
    """One of ``choices``; ``case`` folds the raw value first."""

    choices: tuple[str, ...]
    case: Literal["upper", "lower", "exact"] = "exact"

    def parse(self, raw: str) -> str:
        value = raw.upper() if self.case == "upper" else raw.lower() if self.case == "lower" else raw
        if value not in self.choices:
            *rest, last = (repr(c) for c in self.choices)
            raise Invalid(f"must be {', '.join(rest)} or {last}, got {raw!r}")
        return value

    def accepts(self) -> str:
        return " | ".join(f"`{c}`" for c in self.choices)


@dataclass(frozen=True)
class Text:
    """Any text; ``printable`` refuses control and other invisible characters, ``forbidden`` the
    characters that separate the parts of a larger name (``:`` in a provider-account id)."""

    printable: bool = False
    forbidden: str = ""

    def parse(self, raw: str) -> str:
        # Compared verbatim with what others send (token claims): invisible characters never match.
        if self.printable and any(not c.isprintable() for c in raw):
            raise Invalid("must not contain control or other non-printable characters")
        if any(c in self.forbidden for c in raw):
            raise Invalid(f"must not contain {' or '.join(repr(c) for c in self.forbidden)}")
        return raw

    def accepts(self) -> str:
        kind = "printable text" if self.printable else "text"
        return kind + (f" without {' or '.join(repr(c) for c in self.forbidden)}" if self.forbidden else "")


@dataclass(frozen=True)
class IpNetwork:
    """An IP address or network (``10.0.0.0/8``, ``2001:db8::/32``, ``192.0.2.7``), as written."""

    def parse(self, raw: str) -> str:
        try:
            ipaddress.ip_network(raw, strict=False)
        except ValueError:
            raise Invalid(f"must be an IP address or network like 10.0.0.0/8, got {raw!r}") from None
        return raw

    def accepts(self) -> str:
        return "IP address or network"


@dataclass(frozen=True)
class SecretText:
    """A secret of at least ``min_length`` characters, held as :class:`Secret`."""

    min_length: int = 1

    def parse(self, raw: str) -> Secret:
        if len(raw) < self.min_length:
            raise Invalid(f"must be at least {self.min_length} characters")
        return Secret(raw)

    def accepts(self) -> str:
        return f"secret, ≥ {self.min_length} characters" if self.min_length > 1 else "secret"


@dataclass(frozen=True)
class FilePath:
    def parse(self, raw: str) -> Path:
        return Path(raw)

    def accepts(self) -> str:
        return "path"


@dataclass(frozen=True)
class Items(Generic[T]):
    """Comma-separated values of one kind; ``drop_empty`` ignores empty entries (a trailing comma)."""

    item: Kind[T]
    drop_empty: bool = False

    def parse(self, raw: str) -> tuple[T, ...]:
        values: list[T] = []
        for i, part in enumerate((p.strip() for p in raw.split(",")), start=1):
            if not part:
                if self.drop_empty:
                    continue
                raise Invalid(f"entry {i} is empty in {raw!r}")
            try:
                values.append(self.item.parse(part))
            except Invalid as exc:
                raise Invalid(f"entry {i} {exc}") from None
        return tuple(values)

    def accepts(self) -> str:
        return f"comma-separated {self.item.accepts()}"


def env_value(env: Mapping[str, str], name: str) -> str | None:
    """The variable's value stripped, or None when it is unset or blank."""
    value = env.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One ``PAYCORE_*`` variable: name, kind, default and what it does."""

    name: str
    kind: Kind[T]
    default: T
    about: str
    governs: str
    shown_default: str | None = None  # how the docs show a default the code works out

    def get(self, env: Mapping[str, str]) -> T | None:
        """The validated value, or None when the variable is unset or blank."""
        raw = env_value(env, self.name)
        if raw is None:
            return None
        try:
            return self.kind.parse(raw)
        except Invalid as exc:
            raise ConfigError(self.name, str(exc)) from None

    def read(self, env: Mapping[str, str]) -> T:
        """The validated value, or the default when the variable is unset or blank."""
        value = self.get(env)
        return self.default if value is None else value

    def require(self: Setting[U | None], env: Mapping[str, str], hint: str = "") -> U:
        """The validated value; unset is a :class:`ConfigError` ``is required`` + ``hint``."""
        value = self.get(env)
        if value is None:
            raise ConfigError(self.name, f"is required{hint}")
        return value

    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        return _shown(self.default)

    @overload
    def field(self) -> T: ...
    @overload
    def field(self, *, convert: Callable[[T], V]) -> V: ...
    @overload
    def field(self, *, unset: None) -> T | None: ...

    def field(self, *, convert: Callable[[Any], Any] | None = None, unset: Any = ...) -> Any:
        """A dataclass field that :func:`load` reads from this setting: the variable's value, or
        the default when unset, through ``convert`` when given; ``unset`` (None) instead of the
        default when the variable is unset (the docs' default is then what the code works out)."""
        read = _Read(self, convert, unset is not ...)
        metadata = {_SETTING: read}
        default = read.unset()
        if type(default).__hash__ is None:  # a list: each instance its own
            return dataclasses.field(default_factory=read.unset, metadata=metadata)
        return dataclasses.field(default=default, metadata=metadata)


@dataclass(frozen=True)
class _Read:
    """How :func:`load` fills a field from its setting."""

    setting: Setting[Any]
    convert: Callable[[Any], Any] | None
    none_when_unset: bool

    def value(self, value: Any) -> Any:
        return value if self.convert is None or value is None else self.convert(value)

    def unset(self) -> Any:
        return None if self.none_when_unset else self.value(self.setting.default)

    def load(self, env: Mapping[str, str]) -> Any:
        value = self.setting.get(env)
        return self.unset() if value is None else self.value(value)


_SETTING = "paycore.settings_spec.setting"
_NESTED = "paycore.settings_spec.nested"


def nested(factory: Callable[[], U]) -> U:
    """A field holding another settings class, which :func:`load` loads from the same environment."""
    return dataclasses.field(default_factory=factory, metadata={_NESTED: True})


def load(cls: type[C], env: Mapping[str, str], /, **given: Any) -> C:
    """``cls`` with each field a setting declares read from ``env`` (a bad value is a
    :class:`ConfigError` naming its variable), each :func:`nested` class loaded the same way,
    and ``given`` the other fields (and any to take as they are)."""
    values = dict(given)
    hints: dict[str, Any] | None = None
    for f in dataclasses.fields(cls):
        if f.name in given:
            continue
        if (read := f.metadata.get(_SETTING)) is not None:
            values[f.name] = read.load(env)
        elif f.metadata.get(_NESTED):
            if isinstance(f.default_factory, type):  # nested(Budgets)
                values[f.name] = load(f.default_factory, env)
            else:  # nested(lambda: JwtClaimRules()): a class declared later, found by its annotation
                hints = typing.get_type_hints(cls) if hints is None else hints
                values[f.name] = load(hints[f.name], env)
    return cls(**values)


def overrides(cls: type[DataclassInstance], env: Mapping[str, str]) -> dict[str, Any]:
    """The fields of ``cls`` whose variables ``env`` sets, by field name (the sandbox's variables
    override its file's keys)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        read: _Read | None = f.metadata.get(_SETTING)
        if read is not None and (value := read.setting.get(env)) is not None:
            out[f.name] = read.value(value)
    return out


def setting_of(cls: type[DataclassInstance], name: str) -> Setting[Any]:
    """The setting that declares field ``name`` of ``cls`` (for another module to name it)."""
    for f in dataclasses.fields(cls):
        if f.name == name and (read := f.metadata.get(_SETTING)) is not None:
            return typing.cast(Setting[Any], read.setting)
    raise AttributeError(f"{cls.__name__}.{name} is not declared by a setting")


def _shown(value: object) -> str:
    if value is None or value == ():
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _num(value)
    if isinstance(value, tuple):
        return "`" + ",".join(_num(v) if isinstance(v, int | float) else str(v) for v in value) + "`"
    return f"`{value}`"


@dataclass
class Group:
    """The settings of one component, in the order its docs table lists them."""

    governs: str
    settings: list[Setting[Any]] = field(default_factory=list)

    def declare(self, name: str, kind: Kind[T], default: T, about: str, *,
                shown_default: str | None = None) -> Setting[T]:
        if not name.startswith("PAYCORE_"):
            raise ValueError(f"{name}: paycore's settings are named PAYCORE_*")
        if any(s.name == name for s in self.settings):
            raise ValueError(f"{name} is declared twice")
        setting = Setting(name, kind, default, about, self.governs, shown_default)
        self.settings.append(setting)
        return setting

    @overload
    def field(self, name: str, kind: Kind[T], default: T, about: str, *,
              shown_default: str | None = None) -> T: ...
    @overload
    def field(self, name: str, kind: Kind[T], default: T, about: str, *,
              shown_default: str | None = None, convert: Callable[[T], V]) -> V: ...
    @overload
    def field(self, name: str, kind: Kind[T], default: T, about: str, *,
              shown_default: str | None = None, unset: None) -> T | None: ...

    def field(self, name: str, kind: Kind[Any], default: Any, about: str, *,
              shown_default: str | None = None, convert: Callable[[Any], Any] | None = None,
              unset: Any = ...) -> Any:
        """Declare a setting as a settings class's field: ``x: float = GROUP.field("PAYCORE_…", ...)``.
        Its value is the variable's, or ``default``; ``convert`` makes the field's value of it
        (``int`` of seconds); ``unset`` is the field's value when the variable is unset."""
        setting = self.declare(name, kind, default, about, shown_default=shown_default)
        if convert is not None:
            return setting.field(convert=convert)
        return setting.field() if unset is ... else setting.field(unset=unset)


@dataclass(frozen=True)
class FileField:
    """One key of a JSON configuration file (an accounts file entry, the sandbox's file)."""

    key: str
    default: str  # as the docs show it; "required" when there is none
    about: str
