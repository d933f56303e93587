"""Semi-structured knowledge bases in PostgreSQL: the records loaders produce, storing and listing them."""
