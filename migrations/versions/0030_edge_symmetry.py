"""Whether each SKB stores every edge both ways (stark.edge_symmetry, built beside the typed-link
summary by `stark-pg index` through stark.edge_type_link_build), and 4StepFocus's substitution reading
it: where every edge is stored both ways, a revision that ignores direction reads the revised set's
outgoing edges alone. stark.focus_revise gathers through the typed-link summary's list of a type from a
sixteenth as many edges as the type has nodes (it took twice as many). stark.carry_over_skb leaves the
symmetry with the version it describes. stark.kar_neighbours reads outgoing edges alone where
direction is ignored on such an SKB (the same rows). Re-runs sql/functions/graph.sql, skb.sql, focus.sql
and kar.sql.

Revision ID: 0030
Revises: 0029
"""

from stark_pg.db.migrate import run_sql_file

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0030_edge_symmetry.sql")
    run_sql_file("functions/graph.sql")
    run_sql_file("functions/skb.sql")
    run_sql_file("functions/focus.sql")
    run_sql_file("functions/kar.sql")


def downgrade() -> None:
    """The symmetry table goes; 0029's substitution, summary builder, carry-over and KAR statement come back."""
    run_sql_file("downgrade/0030_edge_symmetry.sql")
