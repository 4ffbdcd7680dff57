"""Errors a user can cause: the CLI prints their message alone (no traceback) and exits 2."""
import difflib


class UserError(Exception):
    """A mistake in what the user asked for, with a message that says what to do."""


class Unsupported(Exception):
    """A cell this machine or installation cannot run; it becomes a row with status
    'unsupported'."""


def did_you_mean(word, choices):
    """' (did you mean 'x'?)' for a near miss, else ''."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def known_name(name, choices, what: str) -> str:
    """`name` if it is one of `choices`, else a UserError naming the `what` it is not, with a
    near miss and the choices."""
    if name not in choices:
        raise UserError(f"unknown {what} '{name}'{did_you_mean(name, choices)}; "
                        f"choose from {', '.join(choices)}")
    return name
