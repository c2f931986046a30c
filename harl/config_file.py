"""Config files for `python -m harl.tune --config FILE.toml`: every field of the run's config
dataclasses (harl.config.TuneConfig and the agents' configs it holds), read, checked, merged and
written back as TOML.

A file's tables mirror the dataclasses: top-level keys set TuneConfig's own fields, `[measure]`
sets `TuneConfig.measure`, `[search.tile.policy]` sets `TuneConfig.search.tile.policy`, and so
on. What a run used is recorded in run.json and report.json (`recorded`), and a resumed run
compares it with what it is asked to use now (harl.config_resume).
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import inspect
import json
import math
import re
import textwrap
import tomllib
import types
import typing
from pathlib import Path

from harl.config import CostModelConfig, MeasureConfig, RpcConfig, TuneConfig, VerifyConfig
from harl.errors import HarlError

NOT_IN_FILE = {
    "model": "the model is given on the command line",
    "fresh": "--fresh is chosen per command",
    "config_changed_ok": "--config-changed-ok is chosen per command",
}
"""TuneConfig fields a config file may not set, and why"""

class ConfigError(HarlError):
    """A config file that cannot be read, or a key or value in it that harl does not take."""


# -- what the dataclasses say of themselves ---------------------------------------------------


def field_types(cls) -> dict[str, object]:
    """The resolved type of each field of config dataclass `cls` (its annotations are strings)."""
    from harl.agents.decision_surrogate import SurrogateConfig
    from harl.agents.sketch_chooser import SketchConfig
    from harl.agents.task_allocator import AllocatorConfig
    from harl.agents.tile_policy import TilePolicyConfig
    from harl.agents.tile_tuner import TileTunerConfig
    from harl.graph.config import EqsatConfig, GraphConfig
    from harl.graph.rl.config import PPOConfig, RlConfig
    from harl.naive_nests import NaiveNestConfig
    from harl.search.search_config import HarlSearchConfig

    known = {c.__name__: c for c in (
        TuneConfig, MeasureConfig, RpcConfig, VerifyConfig, CostModelConfig, HarlSearchConfig,
        SketchConfig, TileTunerConfig, TilePolicyConfig, SurrogateConfig, AllocatorConfig,
        NaiveNestConfig, GraphConfig, EqsatConfig, RlConfig, PPOConfig)}
    return typing.get_type_hints(cls, localns={**known, "Path": Path})


def field_docs(cls) -> dict[str, str]:
    """Each field's help: its `doc(...)` metadata, or the docstring written under it."""
    docs = {}
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = tree.body[0].body
    except (OSError, TypeError, IndexError):
        body = []
    for node, after in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[node.target.id] = " ".join(after.value.value.split())
    for f in dataclasses.fields(cls):
        if f.metadata.get("help"):
            docs[f.name] = " ".join(f.metadata["help"].split())
    return docs


def _is_config(tp) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _optional(tp) -> tuple[object, bool]:
    """(the type, whether None is allowed) of `X | None`; other types as they are."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], len(args) < len(typing.get_args(tp))
    return tp, False


# -- to plain values and back -------------------------------------------------------------------


def to_dict(config) -> dict:
    """A config dataclass as plain JSON values (paths as strings, tuples as lists)."""
    return _plain(config)


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _type_name(tp) -> str:
    tp, optional = _optional(tp)
    if _is_config(tp):
        name = "a table"
    elif tp is bool:
        name = "true or false"
    elif tp is int:
        name = "an integer"
    elif tp is float:
        name = "a number"
    elif tp in (str, Path):
        name = "a string"
    elif typing.get_origin(tp) is tuple:
        args = typing.get_args(tp)
        inner = _type_name(args[0])
        name = (f"a list of {inner.split(' ', 1)[1]}s" if len(args) == 2 and args[1] is ...
                else f"a list of {len(args)} {inner.split(' ', 1)[1]}s")
    elif typing.get_origin(tp) is dict:
        name = "a table whose every value is " + _type_name(typing.get_args(tp)[1])
    else:
        name = str(tp)
    return name


def _shown(value) -> str:
    kind = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a table"}.get(type(value), type(value).__name__)
    text = json.dumps(value) if not isinstance(value, dict) else "{...}"
    return f"{text[:40]} ({kind})"


def _convert(value, tp, key: str):
    """`value` read for field `key` of type `tp`, or a ConfigError saying what was expected."""
    tp, optional = _optional(tp)
    if value is None and optional:
        return None

    def wrong():
        return ConfigError(f"{key} must be {_type_name(tp)}, not {_shown(value)}")

    if _is_config(tp):
        if not isinstance(value, dict):
            raise wrong()
        return from_dict(tp, value, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise wrong()
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong()
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise wrong()
        return float(value)
    if tp in (str, Path):
        if not isinstance(value, str):
            raise wrong()
        return tp(value)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise wrong()
        if len(args) == 2 and args[1] is ...:
            return tuple(_convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise wrong()
        pairs = enumerate(zip(value, args, strict=True))
        return tuple(_convert(v, t, f"{key}[{i}]") for i, (v, t) in pairs)
    if origin is dict:
        if not isinstance(value, dict):
            raise wrong()
        return {str(k): _convert(v, args[1], f"{key}.{k}") for k, v in value.items()}
    raise ConfigError(f"{key}: harl cannot read a value of type {tp}")  # a new field's type


def from_dict(cls, data: dict, where: str = "", extra: dict | None = None):
    """Config dataclass `cls` from plain values, each checked against its field's type.

    `where` is the table's dotted name in messages; `extra` holds values given other than by
    the file (TuneConfig's model)."""
    types_ = field_types(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    prefix = f"{where}." if where else ""
    kwargs = dict(extra or {})
    for key, value in data.items():
        if key not in names or key in kwargs:
            raise ConfigError(_unknown(key, value, names, where))
        kwargs[key] = _convert(value, types_[key], prefix + key)
    missing = [f.name for f in dataclasses.fields(cls) if f.name not in kwargs
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{prefix}{missing[0]} is required ({_type_name(types_[missing[0]])})")
    try:
        return cls(**kwargs)
    except (ValueError, TypeError) as err:
        raise ConfigError(f"[{where or 'top level'}]: {err}") from None


def _unknown(key: str, value, names: list[str], where: str) -> str:
    if not where and key in NOT_IN_FILE:
        return f"{key} cannot be set in a config file: {NOT_IN_FILE[key]}"
    what = f"table [{where + '.' if where else ''}{key}]" if isinstance(value, dict) else (
        f"key {where + '.' if where else ''}{key}")
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unknown {what}{hint}; --print-config lists every key"


# -- files -----------------------------------------------------------------------------------


def read_config_file(path: Path) -> dict:
    """The tables of a TOML file, or a one-line ConfigError."""
    try:
        with open(path, "rb") as file:
            return tomllib.load(file)
    except OSError as err:
        raise ConfigError(f"cannot read config file {path}: {err.strerror or err}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"config file {path} is not valid TOML: {err}") from None


def merged(base: dict, override: dict) -> dict:
    """`base` with `override`'s values in its place, tables merged key by key."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def effective_config(model: Path, file: Path | None = None, flags: dict | None = None
                     ) -> TuneConfig:
    """The run's config: the defaults, then the config file's values, then the flags' (a dict
    shaped like the file, holding only the flags given)."""
    values = {}
    if file is not None:
        values = read_config_file(file)
        for key in NOT_IN_FILE:
            if key in values:
                raise ConfigError(f"config file {file}: {_unknown(key, None, [], '')}")
        try:
            from_dict(TuneConfig, values, extra={"model": model})  # the file's own errors first
        except ConfigError as err:
            raise ConfigError(f"config file {file}: {err}") from None
    return from_dict(TuneConfig, merged(values, flags or {}), extra={"model": model})


# -- TOML out --------------------------------------------------------------------------------

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    """A TOML key: bare where it can be, else a quoted string."""
    return key if _BARE_KEY.match(key) else json.dumps(key)


def toml_value(value) -> str:
    """A config value (bool, number, string, list, table) as TOML."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")  # + DEL
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(k)} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def _comment(text: str) -> list[str]:
    return textwrap.wrap(text, width=98, initial_indent="# ", subsequent_indent="# ") if text \
        else []


def to_toml(config: TuneConfig) -> str:
    """`config` as a TOML config file, each field under its help as a comment; fields that are
    unset (None) are shown commented out. Reading it back gives `config` again."""
    lines = ["# harl.tune config: every field of harl.config.TuneConfig and the configs it holds.",
             "# Precedence: the defaults < this file (--config) < flags given on the command line."]
    _table_lines(config, type(config), "", lines)
    return "\n".join(lines) + "\n"


def _table_lines(config, cls, where: str, lines: list[str]) -> None:
    docs, types_ = field_docs(cls), field_types(cls)
    tables = []
    for f in dataclasses.fields(cls):
        if not where and f.name in NOT_IN_FILE:
            continue
        value, (tp, _) = getattr(config, f.name), _optional(types_[f.name])
        if _is_config(tp):
            tables.append((f.name, value, tp))
            continue
        lines.append("")
        lines.extend(_comment(docs.get(f.name, "")))
        if value is None:
            lines.append(f"# {f.name} = ...  ({_type_name(tp)}; unset)")
        else:
            lines.append(f"{toml_key(f.name)} = {toml_value(_plain(value))}")
    for name, value, tp in tables:
        path = f"{where}.{name}" if where else name
        lines.append("")
        header = docs.get(name) or (tp.__doc__ or "").strip().split("\n")[0]
        if value is None:
            required = [f.name for f in dataclasses.fields(tp)
                        if f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING]
            lines.extend(_comment(f"[{path}]: {header} (unset; a [{path}] table with "
                                  f"{', '.join(required)} sets it)"))
            continue
        lines.extend(_comment(header))
        lines.append(f"[{path}]")
        _table_lines(value, tp, path, lines)


# -- recording ------------------------------------------------------------------------------


def recorded(config: TuneConfig) -> dict:
    """What run.json and report.json record of the config: all of it, as plain values."""
    return to_dict(config)
