"""The errors a `dwatt` command reports in one line (besides `ValueError` and `OSError`): defined apart from the
modules that raise them, so that the command line can catch them without importing those modules."""


class HubError(RuntimeError):
    """A Hub request that failed, said in one line: what happened and what to do."""


class SweepBusyError(RuntimeError):
    """Another process has held a results file's lock for longer than an append takes."""


class FolderBusyError(RuntimeError):
    """Another process is writing the folder a command would write (an export, a saved model)."""


def first_line(error: BaseException) -> str:
    """An error's message as one line: its first, or the error's type where it says nothing."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


__all__ = ["FolderBusyError", "HubError", "SweepBusyError", "first_line"]
