"""Vector index settings (issue 18): stark.vss and stark.multivss search whichever index `stark-pg index`
built for the SKB (HNSW over vector or halfvec, or pgvectorscale's DiskANN: stark.vector_index,
stark.vector_distance) with the candidate list of the session's `stark.ef_search` when set
(stark.vector_search_settings / stark.vector_search_restore). No table changes: the index settings
live in stark.embedding_build.settings (jsonb). Re-runs sql/functions/dense.sql.

Revision ID: 0018
Revises: 0017
"""

from stark_pg.db.migrate import run_sql_file

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/dense.sql")


def downgrade() -> None:
    """Nothing to undo: the searches keep their signatures and, without `stark.ef_search` and with HNSW
    over vector storage (all that 0016 built), behave as before; the helpers are left in place."""
