"""Bad input on disklab's command line, raised wherever a command finds it."""


class UsageError(Exception):
    """Bad input on the command line; printed as one line, exit status 2."""
