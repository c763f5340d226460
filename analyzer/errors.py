"""Typed errors. The CLI maps every RunlensError to exit code 2 and a one-line message."""


class RunlensError(Exception):
    """Base class: bad usage or unreadable input. str(error) is the whole user message."""


class RunDirError(RunlensError):
    """A path is missing, is not a run directory, or holds no readable step."""


class InputFileError(RunlensError):
    """One input file (step, graph, op log, baseline) cannot be parsed."""
