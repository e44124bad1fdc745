"""How a command's settings are declared, read and shown.

A command's settings are a frozen dataclass whose fields are either
settings (declared with :func:`setting`: a default, a help text and how
the value is checked) or sections (nested frozen dataclasses of the same
kind). Every setting has one name: its command-line flag ``--name``
(unless it says another) and, unless ``flag_only``, its name in the
config's namelist group (the class's ``GROUP``: ``&train``,
``&generate``). Names are unique across a command's sections, so the
flat view (:func:`flat`) is the one users see.

:func:`read` is the one reader: the defaults, then the config's group,
then the flags given; each value checked against its type and its
setting's own check, then the class's ``checked`` method (what needs two
settings at once). :func:`add_arguments` makes the command line from the
same declarations, and :func:`describe` prints what a run will use and
where each value came from (``--print-config``).
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pompy.config import namelist_literal, read_group
from pompy.errors import InputError

S = TypeVar("S")
Check = Callable[[Any], "str | None"]       # a value -> why it is refused (None: accepted)
SOURCES = ("default", "config", "flag")


DTYPES = ("float64", "float32")          # a torch core's precisions


def dtype_setting(help: str) -> Any:
    """The precision of a torch core (float64 by default)."""
    return setting("float64", help, choices=DTYPES)


def setting(default: Any, help: str, *, check: Check | None = None, choices: tuple | None = None,
            flag_only: bool = False, required: bool = False, metavar: str | None = None,
            const: Any = None, flag: str | None = None, positional: bool = False,
            append: bool = False) -> Any:
    """A dataclass field that is a setting. ``check``: why a value is
    refused; ``flag_only``: not in the namelist group; ``const``: the value
    of the flag given alone; ``flag``: another spelling than ``--name``;
    ``positional``: an argument, not a flag; ``append``: a repeatable flag
    (a tuple)."""
    meta = dict(help=help, check=check, choices=choices, flag_only=flag_only or positional,
                required=required, metavar=metavar, const=const, flag=flag,
                positional=positional, append=append)
    return dataclasses.field(default=default, metadata={"setting": meta})


@dataclasses.dataclass(frozen=True)
class Leaf:
    """One setting of a command, where it sits and what it takes."""
    name: str
    path: tuple[str, ...]          # the sections leading to it
    kind: type                     # int, float, str, bool or Path
    default: Any
    meta: Mapping[str, Any]

    @property
    def flag(self) -> str:
        if self.meta["positional"]:
            return self.meta["metavar"] or self.name.upper()
        return self.meta["flag"] or f"--{self.name}"

    @property
    def in_namelist(self) -> bool:
        return not self.meta["flag_only"]


def _kind(hint: Any) -> type:
    """int, float, str, bool or Path of a field's annotation (None and
    tuple[...] aside)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) is tuple:
        return _kind(args[0])
    if args:
        return _kind(args[0])
    return hint


def leaves(cls: type, path: tuple[str, ...] = ()) -> Iterator[Leaf]:
    """Every setting of a settings class, sections walked in order."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            yield from leaves(hint, path + (f.name,))
        elif "setting" in f.metadata:
            yield Leaf(f.name, path, _kind(hint), f.default, f.metadata["setting"])


def flat(settings: Any) -> dict[str, Any]:
    """{name: value} of every setting (sections flattened)."""
    out = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        out |= flat(value) if dataclasses.is_dataclass(value) else {f.name: value}
    return out


def _build(cls: type[S], values: Mapping[str, Any]) -> S:
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        kwargs[f.name] = _build(hint, values) if dataclasses.is_dataclass(hint) else values[f.name]
    return cls(**kwargs)


# ------------------------------------------------------------------ values
_KIND_TEXT = {int: "an integer", float: "a number", str: "a string", bool: "a logical",
              Path: "a path (a string)"}


def _typed(leaf: Leaf, value: Any) -> Any:
    """``value`` as the setting's kind, or None where it is not of it (a
    namelist's int for a float is taken, a bool is never a number)."""
    kind = leaf.kind
    if isinstance(value, bool):
        return value if kind is bool else None
    if kind is float and isinstance(value, (int, float)):
        return float(value)
    if kind is int and isinstance(value, int):
        return value
    if kind is str and isinstance(value, str) or kind is Path and isinstance(value, (str, Path)):
        return kind(value)
    return None


def namelist_values(cls: type, config: Path) -> dict[str, Any]:
    """The class's group of the config (names lower-case), each value of
    its setting's kind; an unknown name, a name only a flag sets, or a
    value of another kind is an InputError naming it."""
    group = cls.GROUP
    by_name = {leaf.name: leaf for leaf in leaves(cls) if leaf.in_namelist}
    values = {}
    for name, value in read_group(config, group).items():
        retired = getattr(cls, "RETIRED", {})
        if name in retired:
            raise InputError(f"{config}: &{group} {name}: {retired[name]}; remove it")
        if name not in by_name:
            raise InputError(f"{config}: &{group} has unknown setting {name!r}; known: "
                             f"{', '.join(by_name)}")
        typed = _typed(by_name[name], value)
        if typed is None:
            raise InputError(f"{config}: &{group} {name} = {value!r}: expected "
                             f"{_KIND_TEXT[by_name[name].kind]}")
        values[name] = typed
    return values


def read(cls: type[S], flags: Mapping[str, Any] | None = None, config: Path | None = None,
         ) -> S:
    """The settings of ``cls``: defaults, then the config's group (``config``,
    else the flags' ``config``), then the flags given (None: not given);
    each value checked, then ``cls.checked``. InputError names what is wrong."""
    values, _ = _merge(cls, flags or {}, config)
    return _finish(cls, values)


def from_values(cls: type[S], values: Mapping[str, Any]) -> S:
    """The settings of plain values by name (a checkpoint's record): the
    defaults, then ``values``; checked as :func:`read` checks. No group is read."""
    defaults = {leaf.name: leaf.default for leaf in leaves(cls)}
    return _finish(cls, defaults | dict(values))


def _merge(cls: type, flags: Mapping[str, Any], config: Path | None
           ) -> tuple[dict[str, Any], dict[str, str]]:
    all_leaves = {leaf.name: leaf for leaf in leaves(cls)}
    unknown = set(flags) - set(all_leaves)
    if unknown:
        raise TypeError(f"{cls.__name__} has no setting {', '.join(sorted(unknown))}")
    values = {name: leaf.default for name, leaf in all_leaves.items()}
    source = dict.fromkeys(values, "default")
    config = config if config is not None else flags.get("config")
    if config is not None and getattr(cls, "GROUP", None):
        group = namelist_values(cls, Path(config))
        values |= group
        source |= dict.fromkeys(group, "config")
    given = {name: value for name, value in flags.items() if value is not None}
    values |= given
    source |= dict.fromkeys(given, "flag")
    return values, source


def _finish(cls: type[S], values: dict[str, Any]) -> S:
    return _build(cls, _checked_values(cls, values)).checked()


def _checked_values(cls: type, values: dict[str, Any], required: bool = True
                    ) -> dict[str, Any]:
    """Each value of its setting's kind and passing its check; a required
    one given (unless not ``required``)."""
    for name, leaf in {leaf.name: leaf for leaf in leaves(cls)}.items():
        value = values[name]
        if value is None:
            if leaf.meta["required"] and required:
                raise InputError(f"{leaf.flag} is required")
            continue
        if leaf.meta["append"]:
            values[name] = tuple(value)
            continue
        if leaf.kind is not bool and not (leaf.kind is Path and value is True):
            typed = _typed(leaf, value)
            if typed is None:
                raise InputError(f"{leaf.flag} {value!r}: expected {_KIND_TEXT[leaf.kind]}")
            values[name] = value = typed
        choices = leaf.meta["choices"]
        if choices is not None and value not in choices:
            raise InputError(f"{leaf.flag} {value}: {' or '.join(map(str, choices))}")
        why = leaf.meta["check"](value) if leaf.meta["check"] else None
        if why:
            raise InputError(f"{leaf.flag} {value}: {why}")
    return values


# ------------------------------------------------------------------ checks
def at_least(low: float) -> Check:
    return lambda v: None if v >= low else f"must be >= {low:g}"


def positive(v: float) -> str | None:
    return None if math.isfinite(v) and v > 0 else "must be finite and > 0"


def non_negative(v: float) -> str | None:
    return None if math.isfinite(v) and v >= 0 else "must be finite and >= 0"


def positive_days(v: float) -> str | None:
    return None if math.isfinite(v) and v > 0 else "a number of days > 0"


def non_negative_days(v: float) -> str | None:
    return None if math.isfinite(v) and v >= 0 else "a number of days >= 0"


def non_negative_seconds(v: float) -> str | None:
    return None if math.isfinite(v) and v >= 0 else "a number of seconds >= 0 (0: the config's)"


def a_seed(v: int) -> str | None:
    return None if 0 <= v < 2**32 else "a seed: an integer 0 .. 2**32-1"


# ------------------------------------------------------------------ the command line
_METAVARS = {int: "N", float: "X", str: "TEXT", Path: "PATH"}


def add_arguments(parser: argparse.ArgumentParser, cls: type, *,
                  print_config: bool = True) -> None:
    """Every setting of ``cls`` as an argument of ``parser``; a flag not
    given parses to None, so that the config's group stands.
    ``print_config``: a ``--print-config`` flag (:func:`describe`)."""
    group = getattr(cls, "GROUP", None)
    for leaf in leaves(cls):
        m = leaf.meta
        where = f"; &{group} {leaf.name}" if group and leaf.in_namelist else ""
        shown = _shown_default(leaf)
        text = m["help"] + (f" (default: {shown}{where})" if shown is not None else
                            f" ({where[2:]})" if where else "")
        if m["positional"]:
            parser.add_argument(leaf.name, type=leaf.kind, metavar=m["metavar"], help=text,
                                nargs=None if m["required"] else "?")
            continue
        kw: dict[str, Any] = dict(default=None, help=text, dest=leaf.name)
        if m["append"]:
            kw.update(action="append", metavar=m["metavar"])
        elif leaf.kind is bool:
            kw["action"] = "store_true" if leaf.meta["flag_only"] and not leaf.default \
                else argparse.BooleanOptionalAction
        else:
            kw.update(type=leaf.kind, choices=m["choices"],
                      metavar=None if m["choices"] else m["metavar"] or _METAVARS[leaf.kind])
            if m["const"] is not None:
                kw.update(nargs="?", const=m["const"])
        parser.add_argument(leaf.flag, **kw)
    if print_config:
        parser.add_argument("--print-config", action="store_true",
                            help="print the settings this command would use, each with where "
                                 "it comes from (default, the config's group, a flag), and exit")


def _shown_default(leaf: Leaf) -> str | None:
    default = leaf.default
    if default is None or leaf.meta["required"] or leaf.meta["append"]:
        return None
    if isinstance(default, bool):
        return "on" if default else "off"
    return str(default) if default != "" else "none"


def from_parsed(cls: type[S], parsed: argparse.Namespace) -> S:
    """The settings of a parsed command line (other attributes ignored)."""
    return read(cls, {leaf.name: getattr(parsed, leaf.name, None) for leaf in leaves(cls)})


def describe(cls: type, parsed: argparse.Namespace) -> str:
    """What ``--print-config`` prints: the settings as the config's
    namelist group would write them, section by section, each with its
    source; flag-only settings as comments. Each value is checked (a bad
    one is the InputError a run would give); what a run would still need
    (--data, ...) is said last."""
    flags = {leaf.name: getattr(parsed, leaf.name, None) for leaf in leaves(cls)}
    values, source = _merge(cls, flags, None)
    settings = _build(cls, _checked_values(cls, dict(values), required=False))
    try:
        settings, missing = settings.checked(), None
    except InputError as err:
        missing = str(err)
    resolved = flat(settings)
    group = getattr(cls, "GROUP", None) or cls.__name__
    lines, section = [f"&{group}"], None
    for leaf in leaves(cls):
        if leaf.path != section:
            section = leaf.path
            lines.append(f"    ! {'.'.join(section) or 'the command'}:")
        value = resolved[leaf.name]
        text = "none" if value is None else ", ".join(map(_literal, value)) \
            if isinstance(value, tuple) else _literal(value)
        entry = f"{leaf.name} = {text}"
        if not leaf.in_namelist:
            entry = f"! {entry}"
        lines.append(f"    {entry:<44} ! {source[leaf.name]}")
    lines.append("/")
    if missing:
        lines.append(f"! a run needs more: {missing}")
    return "\n".join(lines)


def _literal(value: Any) -> str:
    return namelist_literal(str(value) if isinstance(value, Path) else value)
