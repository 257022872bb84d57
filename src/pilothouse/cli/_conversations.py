"""`pilothouse conversations` commands."""

from __future__ import annotations

__all__ = ["app"]

import typer

app = typer.Typer(help="conversations commands.", no_args_is_help=True)
