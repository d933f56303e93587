"""Loaders: one module per source format, each turning its files into `stark_pg.skb.records` records.

`open_source` picks the loader for what the user typed after `stark-pg load`.
"""
