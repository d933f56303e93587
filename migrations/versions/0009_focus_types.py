"""4StepFocus and answer types: stored query embeddings (stark.query_vector), the answer-type vote
of the nearest training queries (sql/functions/answer_type.sql), and ranking in three tiers:
candidates, other nodes of the target's type, the rest (sql/functions/focus_rank.sql replaces the
two-tier function 0008 created).

Revision ID: 0009
Revises: 0008
"""

from stark_pg.db.migrate import run_sql_file

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0009_query_vectors.sql")
    run_sql_file("functions/answer_type.sql")
    run_sql_file("functions/focus_rank.sql")


def downgrade() -> None:
    from alembic import op

    execute = op.get_bind().connection.driver_connection.execute
    execute("drop function if exists stark.focus_rank(text, vector, bigint[], text, int, text), "
            "stark.answer_type_votes(text, vector, text, int, text, text)")
    execute("drop table if exists stark.query_vector")
