"""One search as a person asks for it: a method by name, its settings checked, and the ranking's nodes
with their type and name. `stark-pg search` and the Python API (`stark_pg.api`) both call this, so a
ranking seen in the terminal and one seen in a notebook are the same ranking.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import psycopg

from stark_pg.retrieve import Ranking, get_method


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked node: its rank (from 1), id, score, and its type and name for reading."""

    rank: int
    node_id: int
    type: str
    name: str | None
    score: float

    def to_dict(self) -> dict:
        return asdict(self)


def configure(method: str, pairs: list[str] | None = None, values: dict | None = None, explain: bool = False):
    """The method's module and its Options, from command-line `KEY=VALUE` pairs or Python `values`.

    Raises UnknownMethod (naming the known methods) or OptionError (naming the method's settings and
    their defaults). `explain` asks methods whose step-by-step explanation costs extra work for it.
    """
    from stark_pg.options import OptionError, describe, options_from_values, parse_options

    module = get_method(method)
    try:
        options = options_from_values(module.Options, values) if values else parse_options(module.Options, pairs)
    except OptionError as exc:
        raise OptionError(f"{exc}; {method} settings: {describe(module.Options)}") from exc
    if explain and hasattr(options, "explain"):
        options.explain = True
    return module, options


K_MAX = 100_000
"""The most results a search returns (the SQL API's stark.k_max()): a ranking deeper than that is no
use to anyone, and an unbounded k only reaches an allocation the server cannot make."""


def check_k(k: int, setting: str = "-k") -> int:
    from stark_pg.options import OptionError

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise OptionError(f"{setting} {k}: the number of results must be at least 1")
    if k > K_MAX:
        raise OptionError(f"{setting} {k}: the number of results must be at most {K_MAX}")
    return k


def search_described(conn: psycopg.Connection, skb: str, query: str, module, options, k: int = 10
                     ) -> tuple[list[SearchHit], Ranking]:
    """Run the method's search and describe each hit (type and name from stark.node)."""
    from stark_pg.resources import queries as sql
    from stark_pg.skb.catalog import require_skb

    from stark_pg.db.connection import one_snapshot
    from stark_pg.llm.embeddings import cache_in

    check_k(k)
    with cache_in(conn):      # an embedding API's vectors (-o model=openai:...) are cached in this database
        with one_snapshot(conn):    # every statement of the search, and the description, read one version
            ranking = module.search(conn, skb, query, k, options)
            about = {row[0]: row[1:] for row in sql().describe_nodes(conn, skb_id=require_skb(conn, skb),
                                                                     node_ids=ranking.node_ids)}
    hits = [SearchHit(i, h.node_id, about[h.node_id][0], about[h.node_id][1], h.score)
            for i, h in enumerate(ranking.hits, start=1)]
    return hits, ranking
