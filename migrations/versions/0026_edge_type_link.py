"""The typed-link summary of each SKB's graph (stark.edge_type_link, built by `stark-pg index` through
stark.edge_type_link_build) and 4StepFocus's substitution reading it (stark.focus_linked,
stark.focus_complement, stark.focus_gather_sql, stark.focus_edge_ends_sql; stark.focus_probe_sql takes
`relation_list`). stark.carry_over_skb leaves the summary with the version it describes. Re-runs sql/functions/graph.sql, skb.sql and focus.sql.

Revision ID: 0026
Revises: 0025
"""

from stark_pg.db.migrate import run_sql_file

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0026_edge_type_link.sql")
    run_sql_file("functions/graph.sql")
    run_sql_file("functions/skb.sql")
    run_sql_file("functions/focus.sql")


def downgrade() -> None:
    """The summary, its builder and the functions reading it go; 0025's revision functions and
    carry-over come back."""
    run_sql_file("downgrade/0026_edge_type_link.sql")
