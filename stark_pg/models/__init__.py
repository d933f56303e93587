"""Trained models as a search uses them: loading a stored model and scoring a query with it.

Training (stark_pg/train) fits and saves these models; retrieval (stark_pg/retrieve) loads and scores
them. Both import this package, so a search never walks through the training code, and a query is
scored at search time exactly as it was while the model was trained. Nothing here imports
`stark_pg.retrieve` or `stark_pg.train` (tests/test_layers.py).
"""
