"""Dense retrieval: the embedding-model registry, build records, chunk rendering, stark.vss(), stark.multivss().

The per-model vector tables are not created here: `stark-pg index` creates them when a model is
first used (sql/templates/dense.sql), since their vector dimension depends on the model.

Revision ID: 0003
Revises: 0002
"""

from stark_pg.db.migrate import run_sql_file

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0003_dense.sql")
    run_sql_file("functions/dense.sql")


def downgrade() -> None:
    from alembic import op

    # straight to psycopg, as run_sql_file does: the format() patterns must reach PostgreSQL untouched
    execute = op.get_bind().connection.driver_connection.execute
    execute("""
        do $$
        declare t record;
        begin
            for t in select doc_table, chunk_table from stark.embedding_model loop
                execute format('drop table if exists stark.%I, stark.%I', t.doc_table, t.chunk_table);
            end loop;
        end $$""")
    execute("drop function if exists stark.multivss(text, vector, int, text, text, int, int, boolean), "
            "stark.vss(text, vector, int, text, boolean), stark.node_vector(text, bigint, text), "
            "stark.dense_target(text, text, vector, boolean), stark.document_chunks(text, bigint, boolean), "
            "stark.render_chunks(int, bigint[], boolean, int, int)")
    execute("drop table if exists stark.embedding_build, stark.embedding_model")
