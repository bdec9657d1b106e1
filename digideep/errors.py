"""Errors that the command line reports as one line on stderr with exit code 2."""

from __future__ import annotations


class UsageError(Exception):
    """Bad input from the user (arguments, params, cpanel, session, checkpoint).

    The message is one line that names what is wrong and how to fix it. The CLI prints it as
    ``digideep: error: <message>`` and exits with code 2; nothing on disk was changed.
    """
