"""alembic environment for stark-pg: online migrations only, one transaction per run."""

from alembic import context
from sqlalchemy import create_engine, pool

config = context.config
version_table = config.attributes.get("version_table", "stark_pg_alembic_version")


def run_migrations_online() -> None:
    engine = create_engine(config.get_main_option("sqlalchemy.url"), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=version_table, transaction_per_migration=False)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("stark-pg migrations run online only: use `stark-pg db upgrade`")
run_migrations_online()
