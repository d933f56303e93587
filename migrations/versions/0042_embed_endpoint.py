"""stark.embed's endpoint setting and vector cache, in the owner's own schema stark_embed: endpoint
(where the query vectors come from, set by the database owner) and cache (the vectors by model and
text). Runs sql/schema/0042_embed_endpoint.sql.

Revision ID: 0042
Revises: 0041
"""

from alembic import op

from stark_pg.db.migrate import run_sql_file

revision = "0042"
down_revision = "0041"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0042_embed_endpoint.sql")


def downgrade() -> None:
    """The cached vectors go with the setting: an endpoint can give them again."""
    op.execute("drop schema if exists stark_embed cascade")
