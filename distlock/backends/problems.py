"""Collect every problem in an alias's settings, so that one `manage.py check` names them all."""
from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ..exceptions import InvalidLockBackendError

T = TypeVar("T")


class Problems:
    """The configuration problems found so far while a backend parses its settings."""

    def __init__(self) -> None:
        self.found: list[InvalidLockBackendError] = []

    def parse(self, parse: Callable[[], T], fallback: T) -> T:
        """Return ``parse()``; if it raises InvalidLockBackendError, note the problems and
        return ``fallback``, so that parsing can go on to find the others."""
        try:
            return parse()
        except InvalidLockBackendError as exc:
            self.found.extend(exc.problems)
            return fallback

    def add(self, problem: InvalidLockBackendError) -> None:
        self.found.extend(problem.problems)

    def raise_any(self) -> None:
        """Raise the first problem, carrying all of them, if any was found."""
        if not self.found:
            return
        first, others = self.found[0], self.found[1:]
        message = str(first)
        if others:
            message += f" (and {len(others)} more problem(s): " + " ".join(
                str(problem) for problem in others) + ")"
        raise InvalidLockBackendError(message, check_id=first.check_id, hint=first.hint,
                                      problems=list(self.found))
