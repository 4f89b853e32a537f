"""The errors more than one module of jobs/ raises or handles, in a module of their own:
the library raises them, the subcommands map them to UsageError, and none of it imports the CLI.

Each message names the problem in one line; `roadgate` prints it and exits 2.
"""


class UsageError(Exception):
    """Bad input from the user: printed as one line, exit status 2."""


class WorkloadError(ValueError):
    """A workload name or spec is bad; the message names the workload and field."""


class InputError(ValueError):
    """The prompts file is missing, unreadable or has a bad row."""


class GenerateError(ValueError):
    """Bad input for a generation job; nothing was written."""


class BatchError(ValueError):
    """Bad parameters, input or output for a batch generation; the message names the problem."""


class StorageError(ValueError):
    """A URI that names no usable place; the message names it in one line."""


class RefError(ValueError):
    """The ref cannot be resolved to a commit, or this code is not in a git checkout."""


class RoadmapError(ValueError):
    """The roadmap file is malformed; the message names the row and the field."""


class StoreUnavailable(RuntimeError):
    """The results store cannot be used as configured; the message names the problem in one line."""


class StoreNotReady(RuntimeError):
    """The database lacks the views the report reads (never upgraded, or upgraded by an older version)."""
