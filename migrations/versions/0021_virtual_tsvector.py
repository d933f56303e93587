"""stark.node_field.tsv becomes a virtual generated column on PostgreSQL 18 (computed when read).

Why: nothing in stark-pg reads it (BM25 tokenizes the rendered documents itself, into stark.lex_posting
and pg_textsearch's tables); it is there for analysts writing `tsv @@ to_tsquery(...)` in psql. Stored,
every load paid for the English stemming of every text field: 2.6 s of a 100,000-node load's 7.1 s
node stage (`insert ... select` of the same rows: 2,634 ms stored, 280 ms virtual). Virtual, a load
pays nothing and a reader pays per row read, as with any expression. PostgreSQL 15-17 have no virtual
generated columns: there the column stays stored.

Revision ID: 0021
Revises: 0020
"""

from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

EXPRESSION = "to_tsvector('english'::regconfig, body)"


def _server_major() -> int:
    return int(op.get_bind().exec_driver_sql("show server_version_num").scalar()) // 10000


def _set(kind: str) -> None:
    op.execute("alter table stark.node_field drop column tsv")
    op.execute(f"alter table stark.node_field add column tsv tsvector generated always as ({EXPRESSION}) {kind}")
    op.execute("comment on column stark.node_field.tsv is "
               f"'The field''s English tsvector ({kind} generated column).'")


def upgrade() -> None:
    if _server_major() >= 18:
        _set("virtual")


def downgrade() -> None:
    if _server_major() >= 18:
        _set("stored")
