"""mFAR: type and relation fields in the lexical index, trained models (stark.mfar_model), stark.mfar().

Re-runs functions/lexical.sql, whose stark.scope_texts gained the 'type' and 'relation:<r>' scopes.

Revision ID: 0007
Revises: 0006
"""

from stark_pg.db.migrate import run_sql_file

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0007_mfar.sql")
    run_sql_file("functions/lexical.sql")
    run_sql_file("functions/mfar.sql")


def downgrade() -> None:
    from alembic import op

    op.execute("drop function if exists stark.mfar(text, text, vector, text, text[], text[], double precision[], "
               "double precision[], double precision[], int, int, double precision, double precision)")
    op.execute("drop function if exists stark.mfar_field_scores(text, text, vector, text, text[], text[], int, "
               "bigint[], double precision, double precision)")
    op.execute("drop function if exists stark.mfar_fields(text, text)")
    op.execute("drop function if exists stark.mfar_field_of_kind(text), stark.mfar_dense_kind(text), "
               "stark.mfar_lexical_scope(text)")
    op.execute("drop table if exists stark.mfar_model")
