"""How a name is compared with a node's name, in Python as in SQL.

Entity linking (stark_pg/retrieve/focus/link.py) and QA-GNN's query words (stark_pg/models/qagnn.py)
both match text against node names; they share this one normalisation so a name found by one is
found by the other.
"""

from __future__ import annotations

import re


def normalize(name: str) -> str:
    """Python's twin of stark.focus_normalize: runs of characters other than letters and digits become one space."""
    return re.sub(r"[\W_]+", " ", name.lower()).strip()
