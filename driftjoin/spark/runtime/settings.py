"""Checks of an operator's settings that run before Spark does anything, shared by every operator.

A bad setting found by Spark costs a session start (about 12 s on a laptop) and arrives as a
Java error that does not name it (``parallelism = 0`` failed in ``SessionStateBuilder``). So each
operator has one settings class (``driftjoin.spark.<operator>.settings``) that every entry point
goes through first: the Python function, the ``driftjoin run`` job file and the command-line
flags. It checks each value on its own and the values against each other, with no Spark and no
data, and fails with a :class:`SettingError` that names the setting the way the caller wrote it
(``parallelism``, ``[join] parallelism`` or ``--parallelism``), the value and what to change.
Checks that need the input (its columns, whether it is a stream) stay with the operator.

This module has the pieces the operators share: the error and one checker per kind of value.
Each checker returns the value in the form the operator uses (a float for a number, seconds for
a duration) so the settings classes hold checked, normalised values.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from driftjoin.durations import parse_duration


class SettingError(ValueError):
    """A setting that cannot work: which one, its value, and what to change.

    ``str()`` reads ``<name> must be ..., got <value>``; :meth:`spelled` renames the setting the
    way another entry point writes it (a job file's ``[join] parallelism``, a flag's
    ``--parallelism``), keeping the rest of the message.
    """

    def __init__(self, name: str, problem: str, value: Any = None, *, show_value: bool = True) -> None:
        self.name, self.problem, self.value, self.show_value = name, problem, value, show_value
        self.label = name
        super().__init__(self._text())

    def _text(self) -> str:
        got = f", got {self.value!r}" if self.show_value else ""
        gap = "" if self.problem.startswith("=") else " "
        return f"{self.label}{gap}{self.problem}{got}"

    def spelled(self, label: str) -> SettingError:
        """The same error with the setting named ``label`` (e.g. ``[join] threshold``)."""
        error = type(self)(self.name, self.problem, self.value, show_value=self.show_value)
        error.label = label
        error.args = (error._text(),)
        return error

    @classmethod
    def worded(cls, name: str, message: str) -> SettingError:
        """The error whose text is ``message``, which names the setting first (``"dim is required
        ..."``, ``"value_col='x' is not a column ..."``); a message that does not is kept after
        ``<name> is not usable:``."""
        problem = message[len(name):].lstrip() if message.startswith(name) else f"is not usable: {message}"
        return cls(name, problem, show_value=False)


class ColumnTypeError(SettingError, TypeError):
    """A column whose type cannot hold what the setting naming it says (``id_col='id' has type
    double; ...``): a :class:`SettingError`, and a ``TypeError`` as such errors were before."""


class InputTypeError(SettingError, TypeError):
    """An input that is not a DataFrame (``left``, ``right``, ``docs``, ...): a
    :class:`SettingError` naming the argument, and a ``TypeError`` as Python's own would be."""


def known(given: Mapping[str, Any], names: Iterable[str], owner: str) -> None:
    """Refuse the first (in sorted order) of the settings ``given`` that is not one of ``names``,
    the settings ``owner`` (a function's name) takes, listing them."""
    names = list(names)
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise SettingError(unknown[0], f"is not a setting of {owner}; settings are: {', '.join(names)}", show_value=False)


def integer(name: str, value: Any, *, low: int | None = 1, high: int | None = None, what: str = "") -> int:
    """An integer in ``[low, high]`` (numpy integers too; ``bool`` is not an integer here)."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if ok and (low is None or value >= low) and (high is None or value <= high):
        return int(value)
    if high is None:
        need = f"must be an integer >= {low}" if low is not None else "must be an integer"
    else:
        need = f"must be an integer in [{low}, {high}]"
    raise SettingError(name, need + (f" ({what})" if what else ""), value)


def number(name: str, value: Any, *, low: float | None = None, high: float | None = None, low_open: bool = False,
           what: str = "") -> float:
    """A finite number in the given range (``low_open``: ``low`` itself is excluded)."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)) and math.isfinite(value)
    if ok:
        v = float(value)
        above = low is None or (v > low if low_open else v >= low)
        if above and (high is None or v <= high):
            return v
    bound = []
    if low is not None:
        bound.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        bound.append(f"<= {high:g}")
    need = "must be a finite number" + (f" {' and '.join(bound)}" if bound else "")
    raise SettingError(name, need + (f" ({what})" if what else ""), value)


def flag(name: str, value: Any) -> bool:
    """``True`` or ``False`` (not 1, not "yes": a typo there should not silently mean something)."""
    if isinstance(value, bool):
        return value
    raise SettingError(name, "must be true or false", value)


def text(name: str, value: Any, *, optional: bool = False, what: str = "") -> str | None:
    """A non-empty string (a column name, a path), or None when ``optional``."""
    if value is None and optional:
        return None
    if isinstance(value, str) and value.strip():
        return value
    raise SettingError(name, "must be a non-empty string" + (f" ({what})" if what else ""), value)


def choice(name: str, value: Any, options: Iterable[str], *, what: str = "") -> str:
    """One of ``options``."""
    options = tuple(options)
    if isinstance(value, str) and value in options:
        return value
    listed = ", ".join(repr(o) for o in options)
    raise SettingError(name, f"must be one of {listed}" + (f" ({what})" if what else ""), value)


def duration(name: str, value: Any, *, allow_zero: bool = False, optional: bool = False) -> float | None:
    """Seconds of a duration like ``"1 minute"``, ``"500 ms"`` or a number of seconds."""
    if value is None and optional:
        return None
    return core(name, lambda: parse_duration(value, name, allow_zero=allow_zero))


def core(name: str, check: Callable[[], Any], *others: str) -> Any:
    """Run a check of a core module that raises ``ValueError`` with a message that starts with
    the setting's name, as a :class:`SettingError` with that message. ``others``: further
    settings the check may name first (the error names the one it starts with, else ``name``)."""
    try:
        return check()
    except SettingError:
        raise
    except ValueError as e:
        message = str(e)
        named = next((n for n in others if message.startswith(n)), name)
        raise SettingError.worded(named, message) from None


def options(name: str, value: Any, checks: Mapping[str, Callable[[str, Any], Any]]) -> dict[str, Any]:
    """A dict of sub-settings: unknown keys are refused with the valid ones listed, and each
    value is checked by its own checker (called with ``"<name>['<key>']"`` and the value)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SettingError(name, "must be a dict of settings, e.g. {'monitoring_window': 30}", value)
    unknown = sorted(set(value) - set(checks))
    if unknown:
        raise SettingError(name, f"has unknown key(s) {', '.join(map(repr, unknown))}; valid keys: "
                                 f"{', '.join(sorted(checks))}", show_value=False)
    return {k: checks[k](f"{name}[{k!r}]", v) for k, v in value.items()}
