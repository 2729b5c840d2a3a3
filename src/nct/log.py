"""Loggers that cost nothing until used.

The hook and the shim start on every container operation; importing `logging` costs them
~5 ms just to drop debug messages nobody asked for. `get_logger()` returns a proxy that
imports logging only to emit: debug/info only once logging has been set up by someone
(a front end that was asked for a log file), warnings and errors always.
"""

from __future__ import annotations

import sys


class LazyLogger:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def _logger(self):
        import logging

        return logging.getLogger(self.name)

    def debug(self, msg: str, *args, **kwargs) -> None:
        if "logging" in sys.modules:
            self._logger().debug(msg, *args, **kwargs)

    def info(self, msg: str, *args, **kwargs) -> None:
        if "logging" in sys.modules:
            self._logger().info(msg, *args, **kwargs)

    def warning(self, msg: str, *args, **kwargs) -> None:
        self._logger().warning(msg, *args, **kwargs)

    def error(self, msg: str, *args, **kwargs) -> None:
        self._logger().error(msg, *args, **kwargs)

    def isEnabledFor(self, level: int) -> bool:  # noqa: N802 (logging's spelling)
        return "logging" in sys.modules and self._logger().isEnabledFor(level)


def get_logger(name: str) -> LazyLogger:
    return LazyLogger(name)
