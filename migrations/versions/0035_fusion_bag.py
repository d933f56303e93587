"""A fusion model may be a bag of N LightGBM models (`stark-pg train fusion --bag N`): stark.fusion_model's
`booster` (one model's text) becomes `boosters` (each model's, in seed order); a stored model becomes a
bag of one. Its score_sql is unchanged. Runs sql/schema/0035_fusion_bag.sql.

Revision ID: 0035
Revises: 0034
"""

from stark_pg.db.migrate import run_sql_file

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("schema/0035_fusion_bag.sql")


def downgrade() -> None:
    """Back to one model's text per row. A bag has no such text (its score is the mean of several), so
    the downgrade refuses while one is stored, naming each, rather than dropping it."""
    from alembic import op
    from sqlalchemy import text

    bags = op.get_bind().execute(text(
        "select coalesce(s.name, '#' || m.skb_id), m.name, cardinality(m.boosters) "
        "from stark.fusion_model m left join stark.skb s using (skb_id) "
        "where cardinality(m.boosters) > 1 order by 1, 2")).fetchall()
    if bags:
        named = ", ".join(f"{model!r} of SKB {skb!r} ({n} models)" for skb, model, n in bags)
        raise RuntimeError(f"cannot downgrade below 0035 while bagged fusion models are stored: {named}; "
                           f"retrain each without --bag (stark-pg train fusion SKB --name NAME) first")
    op.execute("alter table stark.fusion_model rename column boosters to booster")
    op.execute("alter table stark.fusion_model alter column booster type text using booster[1]")
    op.execute("comment on column stark.fusion_model.booster is null")
