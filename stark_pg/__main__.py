"""`python -m stark_pg` is the `stark-pg` command."""

from stark_pg.cli import main

main()
