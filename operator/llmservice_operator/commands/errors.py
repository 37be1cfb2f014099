"""How every `llmservice` subcommand reports bad input: one line on stderr, exit status 1.

``llmservice <command>: error: <what is wrong>``, never a traceback and never argparse's usage
block. argparse's own usage errors (an unknown flag, a value that is not a number) read the
same and exit 1 as well, not argparse's customary 2: `llmservice size` exits 2 when the model
does not fit (its report still printed), and a script must not mistake a typo for that answer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_DOES_NOT_FIT",
    "CommandError",
    "OneLineParser",
    "one_line",
    "read_utf8",
    "report",
]

EXIT_BAD_INPUT = 1
#: `llmservice size`: the input is fine, the model does not fit what it is given.
EXIT_DOES_NOT_FIT = 2


class CommandError(Exception):
    """Bad input to a subcommand; the message is the line to print."""


def one_line(message: object) -> str:
    """``message`` on one line (YAML and validation errors span several)."""
    return " ".join(str(message).split())


def report(command: str, message: object, code: int = EXIT_BAD_INPUT) -> int:
    """Print ``llmservice <command>: error: <message>`` to stderr; returns the exit status."""
    print(f"llmservice {command}: error: {one_line(message)}", file=sys.stderr)
    return code


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line in the commands' voice and exits 1."""

    def error(self, message: str) -> NoReturn:
        self.exit(
            EXIT_BAD_INPUT, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n"
        )


def read_utf8(path: Path) -> str:
    """The text of ``path``, read as UTF-8 (whatever the locale), or CommandError saying why
    not in one line: a file that cannot be read, or bytes that are not UTF-8."""
    try:
        return path.read_text("utf-8")
    except OSError as err:
        raise CommandError(f"cannot read {err.filename or path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise CommandError(
            f"{path} is not UTF-8 text: byte 0x{err.object[err.start]:02x} at offset "
            f"{err.start} ({err.reason}); save it as UTF-8"
        ) from None
