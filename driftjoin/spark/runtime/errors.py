"""The one line a user needs from a failed Spark query or job: the innermost driftjoin or Python error.

When a micro-batch fails, the exception a user holds is a ``StreamingQueryException`` whose text
is Spark's error class, the Python worker's traceback (for an error raised in driftjoin's
operators or a user's UDF), sometimes a Java stack, and then the whole logical plan of the query;
a failed static job arrives as a ``PythonException`` or a ``Py4JJavaError`` with ``Caused by:``
chains. The cause is one line somewhere inside (a restart with other settings: a
``PlanChangedError`` among about 450 lines). :func:`explain_error` finds it:

1. the innermost Python exception of the ``__cause__`` chain that is not a wrapper of Spark's
   (a :class:`~driftjoin.spark.runtime.settings.SettingError` raised before the start, say);
2. else, in the text, the exception line that ends the last Python traceback (its message up to
   Spark's ``SQLSTATE`` marker), with the module path dropped
   (``driftjoin.spark.runtime.plan_guard.PlanChangedError: ...`` becomes ``PlanChangedError: ...``);
3. else the message after ``terminated with exception:`` of a failed query, or the last Java
   ``Caused by:`` line, or the first line of the text, without Spark's ``[ERROR_CLASS]`` prefix.

The plan, the JVM stack and the Python frames are dropped; :func:`root_cause` gives the name of
the exception and its message apart, so a caller can decide (the CLI exits with 2 for a setting
to change, 1 for a failure while running).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Exception names that mean "change a setting", not "something broke": a bad value, a restart
#: with other settings than the checkpoint's, a query Spark cannot analyse (a missing column).
SETTING_ERRORS = frozenset({"SettingError", "PlanChangedError", "AnalysisException", "ParseException"})

_TRACEBACK = "Traceback (most recent call last):"
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Warning))(?::\s?(.*))?$")
_ERROR_CLASS = re.compile(r"^\[[A-Z0-9_.]+\]\s*")
_CUT = re.compile(r"\s*SQLSTATE: \w+.*$", re.DOTALL)
_TERMINATED = "terminated with exception:"
#: Spark's error for a checkpoint whose state metadata names schema files in a folder it has left.
_MOVED_CHECKPOINT = re.compile(r"/state/\d+/_stateSchema/\S* does not exist")
#: Text that shows an exception carries a Spark failure inside its message.
_MARKERS = (_TRACEBACK, _TERMINATED, "\nCaused by:", "JVM stacktrace:")


@dataclass(frozen=True)
class Cause:
    """The innermost error of a failure: the exception's class name (empty when the text named
    none) and its message."""

    kind: str
    message: str

    def __str__(self) -> str:
        return ": ".join(part for part in (self.kind, self.message) if part)

    @property
    def is_setting(self) -> bool:
        """Whether the cause is a setting or input to change (a refused plan, a bad value)."""
        return self.kind in SETTING_ERRORS


def _spark_wrapper(error: BaseException) -> bool:
    module = type(error).__module__ or ""
    return module.startswith(("pyspark.", "py4j."))


def root_cause(error: BaseException) -> Cause:
    """The innermost driftjoin or Python exception of ``error`` (see the module docstring).

    >>> root_cause(ValueError("threshold must be a finite distance > 0, got -1"))
    Cause(kind='ValueError', message='threshold must be a finite distance > 0, got -1')
    """
    chain = [error]
    while (nxt := chain[-1].__cause__ or chain[-1].__context__) is not None and nxt not in chain:
        chain.append(nxt)
    for e in reversed(chain):
        text = str(e)
        if _spark_wrapper(e) or any(marker in text for marker in _MARKERS):
            found = cause_in_text(text)
            if found is not None:
                return found if found.kind else Cause(type(e).__name__, found.message)
        else:
            return Cause(type(e).__name__, _first_line(text))
    return Cause(type(error).__name__, _first_line(str(error)))


def cause_in_text(text: str) -> Cause | None:
    """The innermost error named in the text of a Spark, Py4J or Python worker exception
    (None when the text names none)."""
    text = text.split("JVM stacktrace:")[0]
    if _TRACEBACK in text:
        tail = text.split(_TRACEBACK)[-1]
        lines = tail.splitlines()
        for i, line in enumerate(lines):
            if not line.strip() or line.startswith((" ", "\t")):
                continue
            m = _EXCEPTION_LINE.match(line.strip())
            if m:
                rest = " ".join([m.group(2) or "", *_continuation(lines[i + 1:])]).strip()
                return Cause(m.group(1), _CUT.sub("", rest).strip())
    if _TERMINATED in text:
        message = _CUT.sub("", text.split(_TERMINATED, 1)[1].split("\n=== Streaming Query ===")[0]).strip()
        return _as_cause(_ERROR_CLASS.sub("", message))
    caused = [ln.strip()[len("Caused by:"):].strip() for ln in text.splitlines() if ln.strip().startswith("Caused by:")]
    if caused:
        return _as_cause(caused[-1])
    first = _first_line(_ERROR_CLASS.sub("", text.strip()))
    return _as_cause(first) if first else None


def _continuation(lines: list[str]) -> list[str]:
    """Lines that continue an exception's message (up to the next blank line or Spark's markers)."""
    out = []
    for line in lines:
        if not line.strip() or line.startswith(("\tat ", "=== ")) or line.strip().startswith("SQLSTATE"):
            break
        out.append(line.strip())
    return out


def _as_cause(line: str) -> Cause:
    """``pkg.Kind: message`` as a cause; a bare Java exception name keeps its last part."""
    line = _CUT.sub("", line).strip()
    m = _EXCEPTION_LINE.match(line.splitlines()[0] if line else "")
    if m:
        inner = m.group(2) or ""
        nested = _EXCEPTION_LINE.match(inner.strip())
        if nested:  # e.g. "java.lang.IllegalStateException: PlanChangedError: ..."
            return Cause(nested.group(1), (nested.group(2) or "").strip())
        return Cause(m.group(1), inner.strip())
    nested = _EXCEPTION_LINE.match(_first_line(line))
    if nested:
        return Cause(nested.group(1), (nested.group(2) or "").strip())
    return Cause("", _first_line(line))


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def explain_error(error: BaseException) -> str:
    """One line that says why a driftjoin query or job failed, for a person to read.

    Finds the innermost driftjoin or Python exception inside whatever Spark raised
    (``StreamingQueryException`` with the query's plan appended, ``PythonException``,
    ``Py4JJavaError`` with Java ``Caused by:`` chains) and returns ``"<Name>: <message>"``.

    Parameters
    ----------
    error:
        The exception: from ``query.awaitTermination()``, ``query.exception()``, an action such
        as ``collect()``, or a driftjoin function that refused its settings.

    Returns
    -------
    str
        The exception's class name (without its module) and message, e.g.
        ``"PlanChangedError: similarity_join: ... (threshold: checkpoint has 0.001, this query has
        0.002) ..."``.

    Examples
    --------
    >>> from driftjoin import explain_error
    >>> text = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [PYTHON_EXCEPTION] "
    ...         "An exception was thrown from the Python worker: Traceback (most recent call last):\\n"
    ...         '  File "worker.py", line 3, in check\\n'
    ...         "driftjoin.spark.runtime.plan_guard.PlanChangedError: threshold changed SQLSTATE: 38000\\n"
    ...         "=== Streaming Query ===\\nLogical Plan:\\n~Project [left_id#37L]")
    >>> explain_error(RuntimeError(text))
    'PlanChangedError: threshold changed'
    """
    line = str(root_cause(error))
    if _MOVED_CHECKPOINT.search(line):
        line += (" (the checkpoint was moved or copied from that folder: call "
                 "driftjoin.relocate_checkpoint('<its folder now>') before restarting it)")
    return line
