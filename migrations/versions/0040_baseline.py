"""The baseline: the tables, indexes, types and role of stark-pg's schema, as revisions 0001-0040 left
them, in one step. Functions are not migrated: stark_pg/db/functions.py installs `sql/functions/`
after the migrations run (and whenever those files change).

The revision keeps the id 0040, the head of the chain it replaces, so a database that chain built is
already at the baseline. A database at an older revision of that chain is refused with what to do
(stark_pg/db/migrate.py). The schema files run in the order their migrations first ran them, with the
two steps those migrations did in Python (0013's comment on the LLM cache, 0021's virtual column).

Revision ID: 0040
Revises:
"""

from alembic import op

from stark_pg.db.migrate import run_sql_file

revision = "0040"
down_revision = None
branch_labels = None
depends_on = None

SCHEMA_FILES = ("0001_core", "0002_lexical", "0003_dense", "0005_eval", "0006_llm", "0007_mfar", "0009_query_vectors",
                "0011_agent", "0016_fusion", "0020_trained_model", "0026_edge_type_link", "0030_edge_symmetry",
                "0035_fusion_bag", "0036_query_link", "0038_fusion_score_columns")


def upgrade() -> None:
    for name in SCHEMA_FILES:
        run_sql_file(f"schema/{name}.sql")
        if name == "0006_llm":
            op.execute("comment on table stark.llm_cache is 'Every LLM request and its response, keyed by "
                       "(provider, model, sha256 of the canonical request JSON with the endpoint that answered).'")
        if name == "0020_trained_model" and _server_major() >= 18:
            # PostgreSQL 18's virtual generated column: a load no longer stems every field it stores
            op.execute("alter table stark.node_field drop column tsv")
            op.execute("alter table stark.node_field add column tsv tsvector "
                       "generated always as (to_tsvector('english'::regconfig, body)) virtual")
            op.execute("comment on column stark.node_field.tsv is "
                       "'The field''s English tsvector (virtual generated column).'")


def _server_major() -> int:
    return int(op.get_bind().exec_driver_sql("show server_version_num").scalar()) // 10000


def downgrade() -> None:
    raise RuntimeError("the baseline cannot be undone: drop the schemas stark and agent instead")
