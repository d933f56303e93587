"""DiskANN searches re-score as many candidates with the full vectors as their search list holds
(stark.vector_search_settings sets diskann.query_rescore beside diskann.query_search_list_size, and
stark.vector_search_restore puts it back): pgvectorscale's default of 50 re-scored candidates, not the
list, had capped DiskANN's recall. Re-runs sql/functions/dense.sql.

Revision ID: 0027
Revises: 0026
"""

from stark_pg.db.migrate import run_sql_file

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("functions/dense.sql")


def downgrade() -> None:
    """0026's two functions come back: DiskANN scans re-score pgvectorscale's default number again."""
    run_sql_file("downgrade/0027_diskann_rescore.sql")
