"""Errors that a user can act on. Each carries an exit code and a hint.

Exit codes (stable, documented in the README):
  0  success
  1  unexpected internal error (a bug: please report it)
  2  bad usage: unknown recipe/target/precision, bad option
  3  parity failure: the artifact was built and measured, and did not pass
  4  plan rejected: the request cannot be met on that target (a recorded rejection)
  5  integrity failure: checkpoint pin mismatch, tampered bundle, bad signature
  6  missing prerequisite: a tool, SDK or package is not installed
"""

from __future__ import annotations


class EdgeExportError(Exception):
    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


class UsageError(EdgeExportError):
    exit_code = 2


class UnknownNameError(UsageError):
    """An unknown recipe, target, precision or component, with the nearest names."""

    def __init__(self, kind: str, name: str, known: list[str]):
        from exporter.names import nearest

        close = nearest(name, known)
        hint = (f"did you mean {', '.join(repr(c) for c in close)}? " if close else "") + (
            f"known {kind}s: {', '.join(sorted(known))}"
        )
        super().__init__(f"unknown {kind} {name!r}", hint)
        self.kind = kind
        self.name = name
        self.suggestions = close


class ParityError(EdgeExportError):
    exit_code = 3


class PlanRejected(EdgeExportError):
    exit_code = 4


class IntegrityError(EdgeExportError):
    exit_code = 5


class MissingPrerequisite(EdgeExportError):
    exit_code = 6
