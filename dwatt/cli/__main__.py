"""`python -m dwatt.cli`: the `dwatt` console script."""

from . import entry

entry()
