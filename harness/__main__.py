"""`python -m harness ...` is `dtbench ...`."""
from harness.commands.cli import entry_point

entry_point()
