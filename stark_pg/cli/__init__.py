"""The `stark-pg` command line: one sub-module per command group, assembled here."""

from stark_pg.cli.app import app, main

__all__ = ["app", "main"]
