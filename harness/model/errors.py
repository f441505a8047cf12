"""One root for every error the harness raises, so ``except DispatchError`` catches them all.

Each is also the built-in exception a caller would expect (a bad argument is a ``TypeError``
or ``ValueError``, an unreadable data file a ``ValueError``), and each message says what is
wrong, where (operator, file:line) and what to do about it.
"""

from __future__ import annotations


class DispatchError(Exception):
    """Root of the harness's errors."""


class InvalidModel(DispatchError, ValueError):
    """A dispatch model whose declarations contradict each other (duplicate names, a path
    restricted to an operation the model does not have, a kernel pattern that is no regex)."""


class InvalidArgument(DispatchError, TypeError, ValueError):
    """An argument of the wrong type or value; the message names it and what would do."""


class PathNotAllowed(DispatchError, ValueError):
    """A forced path that the operation cannot take or whose guards do not hold."""


class UnknownPathError(DispatchError, ValueError):
    """A requirement that names an operator or a path no registered model declares."""


class DataError(DispatchError, ValueError):
    """A coverage data document that cannot be read or merged; the message says why."""


class NoDataError(DataError):
    """Nothing to read or combine."""


class ModelConflict(DataError):
    """Two coverage documents record the same operator under different declarations."""
