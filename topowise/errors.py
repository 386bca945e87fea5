"""The one exception type that becomes `topowise: error: ...` and exit status 2."""


class UsageError(Exception):
    """Bad input from the user: the message says what is wrong and what would be right."""
