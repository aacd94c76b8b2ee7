"""What a usage error is: the user asked for something that cannot be done as asked. The
command line says it in one line and exits 2 (``hyport_lib.commands._cli``); the workbook's
form says the same line under the field it names (``hyport_lib.workbook.form``).
"""

from __future__ import annotations

from hyport_lib.utils.printable import first_line

#: Exceptions that mean "the user asked for something that cannot be done as asked".
USAGE_ERRORS = (ValueError, TypeError, FileNotFoundError, NotADirectoryError,
                IsADirectoryError, PermissionError, RuntimeError)


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when it has none)."""
    if isinstance(exc, (FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError)) \
            and exc.filename and exc.strerror:
        return f"{exc.strerror}: {exc.filename}".splitlines()[0]
    return first_line(exc)
