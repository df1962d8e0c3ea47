"""Output formats: each module renders a list of diagnostics to a string."""

from fsdp_lint.output.formats import FORMATS, render  # noqa: F401
