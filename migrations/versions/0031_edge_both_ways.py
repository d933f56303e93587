"""One function answers "is every edge of this SKB also stored reversed?": stark.edge_both_ways(skb),
read by 4StepFocus's substitution (stark.focus_substitute) and KAR's relation propagation
(stark.kar_neighbours_sql), which each asked stark.edge_symmetry themselves. Same results. Re-runs
sql/functions/graph.sql, focus.sql and kar.sql.

Revision ID: 0031
Revises: 0030
"""

from stark_pg.db.migrate import run_sql_file

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/graph.sql")
    run_sql_file("functions/focus.sql")
    run_sql_file("functions/kar.sql")


def downgrade() -> None:
    """The callers keep their bodies, whose results are 0030's; stark.edge_both_ways stays with them
    until 0030's downgrade, which restores bodies that do not call it, drops it with the table it reads."""
