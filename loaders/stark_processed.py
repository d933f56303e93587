"""STaRK's processed knowledge bases (Prime, MAG, Amazon) as published in each dataset's `processed/` directory.

The files, as STaRK's `stark_qa.tools.io.save_files` writes them: `node_info.pkl` (node index -> dict
of attributes), `edge_index.pt` (LongTensor 2 x E), `edge_types.pt` (LongTensor E), `node_types.pt`
(LongTensor N), `edge_type_dict.pkl` and `node_type_dict.pkl` (type id -> name). Not every dataset
saves all of them: MAG keeps its two type dicts in code (`MagSKB.node_type_dict`), and Amazon's
product-only files lack node types (brand, category and color nodes are added when STaRK loads them,
and cached under `processed/cache/brand-category-color/`). Where a file is absent, the values STaRK's
code supplies are used, so that node ids and types match what STaRK's own `SKB` objects hold.

Each node's text is split into the fields STaRK's `get_doc_info` renders for that dataset (see the
`_render_*` functions); numbers and ids go to `attrs`. Pickles are read with `loaders.safe_pickle`,
so a tampered file cannot run code. Edges are yielded as stored (STaRK makes the graph undirected
in memory; the database indexes edges both ways instead).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from loaders.safe_pickle import load_pickle, load_tensor
from stark_pg.skb.records import LoadError, Node, Query

KINDS = ("prime", "mag", "amazon")

# Type names as STaRK's code defines them (PrimeSKB.NODE_TYPES / RELATION_TYPES, MagSKB.node_type_dict /
# edge_type_dict, AmazonSKB's {0: 'product'} plus post_process's meta link types).
PRIME_NODE_TYPES = ["disease", "gene/protein", "molecular_function", "drug", "pathway", "anatomy",
                    "effect/phenotype", "biological_process", "cellular_component", "exposure"]
PRIME_RELATIONS = ["ppi", "carrier", "enzyme", "target", "transporter", "contraindication", "indication",
                   "off-label use", "synergistic interaction", "associated with", "parent-child", "phenotype absent",
                   "phenotype present", "side effect", "interacts with", "linked to", "expression present",
                   "expression absent"]
AMAZON_META_LINKS = ["brand", "category", "color"]
DEFAULT_NODE_TYPES = {
    "prime": dict(enumerate(PRIME_NODE_TYPES)),
    "mag": {0: "author", 1: "institution", 2: "field_of_study", 3: "paper"},
    "amazon": dict(enumerate(["product", *AMAZON_META_LINKS])),
}
DEFAULT_RELATIONS = {
    "prime": dict(enumerate(PRIME_RELATIONS)),
    "mag": {0: "author___affiliated_with___institution", 1: "paper___cites___paper",
            2: "paper___has_topic___field_of_study", 3: "author___writes___paper"},
    "amazon": dict(enumerate(["also_buy", "also_view", *(f"has_{t}" for t in AMAZON_META_LINKS)])),
}
_CHUNK = 1 << 16  # edge columns turned into Python ints at a time


def find_processed_dir(path: Path) -> Path:
    """The directory holding node_info.pkl: `path` itself, its `processed/`, or Amazon's meta-link cache in either."""
    path = Path(path)
    for base in (path, path / "processed"):
        for candidate in (base / "cache" / "-".join(AMAZON_META_LINKS), base):
            if (candidate / "node_info.pkl").is_file():
                return candidate
    raise LoadError(f"{path}: no node_info.pkl here or in {path / 'processed'} (expected STaRK's processed files)")


class StarkProcessedSource:
    """An `SkbSource` over one STaRK dataset's processed files; `kind` is detected when not given."""

    format = "stark-processed"
    nodes_label = "node_info.pkl"
    edges_label = "edge_index.pt"
    queries_label = "(none)"

    def __init__(self, directory: Path, kind: str | None = None, *, max_entries: int = 25):
        if kind is not None and kind not in KINDS:
            raise LoadError(f"unknown STaRK dataset {kind!r} (known: {', '.join(KINDS)})")
        self.directory = find_processed_dir(Path(directory))
        self.location = str(self.directory.resolve())
        self.max_entries = max_entries  # AmazonSKB's cap on reviews and Q&A per product
        self._node_info: dict | None = None
        node_type_dict = self._type_dict("node_type_dict.pkl")
        edge_type_dict = self._type_dict("edge_type_dict.pkl")
        self.kind = self._settle_kind(kind, node_type_dict)
        self.node_types = self._int_vector("node_types.pt") if (self.directory / "node_types.pt").is_file() else None
        # Amazon's product-only files: STaRK adds brand/category/color nodes on load; so do we
        self._derive_links = self.kind == "amazon" and self.node_types is None
        self.node_type_dict = node_type_dict or dict(
            {0: "product"} if self._derive_links else DEFAULT_NODE_TYPES[self.kind])
        self.edge_type_dict = edge_type_dict or dict(
            {0: "also_buy", 1: "also_view"} if self._derive_links else DEFAULT_RELATIONS[self.kind])
        self.edge_index, self.edge_types = self._edge_tensors()
        if self.node_types is not None:
            _check_known_ids(self.node_types, self.node_type_dict, "node_types.pt", "node_type_dict.pkl", "entry")
        _check_known_ids(self.edge_types, self.edge_type_dict, "edge_types.pt", "edge_type_dict.pkl", "column")
        if self._derive_links:  # numbered after the stored types, as AmazonSKB.post_process numbers them
            nodes_before, edges_before = len(self.node_type_dict), len(self.edge_type_dict)
            for offset, link in enumerate(AMAZON_META_LINKS):
                self.node_type_dict[nodes_before + offset] = link
                self.edge_type_dict[edges_before + offset] = f"has_{link}"
        self._links: tuple[list, list] | None = None
        self.default_name = f"stark-{self.kind}"
        self.meta = {"dataset": self.kind}

    # -- the SkbSource protocol -------------------------------------------------------------------

    def nodes(self) -> Iterator[tuple[str, Node]]:
        info = self._load_node_info()
        types = self.node_types.tolist() if self.node_types is not None else None
        if types is not None and len(types) != len(info):
            raise LoadError(f"holds {len(info)} nodes but node_types.pt has {len(types)} entries", self.nodes_label)
        render = _RENDERERS[self.kind]
        for key, attributes in info.items():
            node_id = _node_index(key, self.nodes_label, _key(key))
            position = f"key {node_id}"
            if not isinstance(attributes, dict):
                raise LoadError(f"expected a dict of attributes, found {type(attributes).__name__}",
                                self.nodes_label, position)
            if types is not None:
                if not 0 <= node_id < len(types):
                    raise LoadError(f"node index {node_id} is outside node_types.pt ({len(types)} entries)",
                                    self.nodes_label, position)
                type_name = self.node_type_dict[types[node_id]]
            else:
                type_name = self._type_from_info(attributes, position)
            name, fields, attrs = render(attributes, type_name, self)
            yield position, Node(node_id=node_id, type=type_name, name=name, fields=fields, attrs=attrs or None)
        if self._derive_links:
            for node_id, type_name, value in self._meta_links()[0]:
                yield (f"(derived: {type_name} {value!r})",
                       Node(node_id=node_id, type=type_name, name=_clean(value), fields={"name": _clean(value)}))

    def edges(self) -> Iterator[tuple[str, int, str, int]]:
        names = self.edge_type_dict
        count = self.edge_index.shape[1]
        for start in range(0, count, _CHUNK):
            stop = min(start + _CHUNK, count)
            sources = self.edge_index[0, start:stop].tolist()
            targets = self.edge_index[1, start:stop].tolist()
            relations = self.edge_types[start:stop].tolist()
            for offset, (src, rel, dst) in enumerate(zip(sources, relations, targets)):
                yield f"column {start + offset}", src, names[rel], dst
        if self._derive_links:
            for src, relation, dst in self._meta_links()[1]:
                yield f"(derived from node_info.pkl key {src}: {relation})", src, relation, dst

    def queries(self) -> Iterator[tuple[str, Query]]:
        """None here: STaRK's QA files are read by `loaders.stark_qa`."""
        yield from ()

    # -- reading and checking the files -----------------------------------------------------------

    def _load_node_info(self) -> dict:
        if self._node_info is None:
            info = load_pickle(self.directory / "node_info.pkl", self.nodes_label)
            if not isinstance(info, dict):
                raise LoadError(f"expected a dict of node index -> attributes, found {type(info).__name__}",
                                self.nodes_label)
            self._node_info = info
        return self._node_info

    def _type_dict(self, filename: str) -> dict[int, str] | None:
        path = self.directory / filename
        if not path.is_file():
            return None
        value = load_pickle(path, filename)
        if not isinstance(value, dict):
            raise LoadError(f"expected a dict of type id -> name, found {type(value).__name__}", filename)
        table = {}
        for key, name in value.items():
            type_id = _node_index(key, filename, _key(key))
            if not isinstance(name, str) or not name:
                raise LoadError(f"type name {name!r} is not a non-empty string", filename, _key(key))
            table[type_id] = name
        return table

    def _settle_kind(self, kind: str | None, node_type_dict: dict[int, str] | None) -> str:
        if node_type_dict is not None:
            detected = _kind_of_types(set(node_type_dict.values()))
        else:
            sample = next(iter(self._load_node_info().values()), None)
            detected = _kind_of_attributes(sample) if isinstance(sample, dict) else None
        if kind is None:
            if detected is None:
                where = "node_type_dict.pkl" if node_type_dict is not None else "node_info.pkl"
                raise LoadError(f"cannot tell which STaRK dataset this is; pass the kind ({', '.join(KINDS)})", where)
            return detected
        if detected is not None and detected != kind and node_type_dict is not None:
            raise LoadError(f"these node types are STaRK-{detected}'s, not STaRK-{kind}'s "
                            f"({', '.join(sorted(node_type_dict.values()))})", "node_type_dict.pkl")
        return kind

    def _int_vector(self, filename: str) -> torch.Tensor:
        value = load_tensor(self.directory / filename, filename)
        if not _is_int_tensor(value) or value.dim() != 1:
            raise LoadError(f"expected a 1-d integer tensor, found {_describe(value)}", filename)
        return value

    def _edge_tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        edge_index = load_tensor(self.directory / "edge_index.pt", "edge_index.pt")
        if not _is_int_tensor(edge_index) or edge_index.dim() != 2 or edge_index.shape[0] != 2:
            raise LoadError(f"expected a 2 x E integer tensor, found {_describe(edge_index)}", "edge_index.pt")
        edge_types = self._int_vector("edge_types.pt")
        if edge_types.shape[0] != edge_index.shape[1]:
            raise LoadError(f"has {edge_types.shape[0]} entries but edge_index.pt has {edge_index.shape[1]} edges",
                            "edge_types.pt")
        return edge_index, edge_types

    def _type_from_info(self, attributes: dict, position: str) -> str:
        """Without node_types.pt: Prime and MAG name the type in each node; Amazon's base files hold products only."""
        if self._derive_links:
            return "product"
        value = attributes.get("type")
        if not isinstance(value, str) or not value:
            raise LoadError("node_types.pt is missing and this node names no 'type'", self.nodes_label, position)
        return value

    def _meta_links(self) -> tuple[list, list]:
        """Brand, category and color nodes and their edges, numbered as AmazonSKB.post_process numbers them.

        For each link type in turn, its distinct values (sorted) become new nodes after all existing ones,
        and every product carrying a value gets an edge `has_<type>` to it, in product order.
        """
        if self._links is not None:
            return self._links
        info = self._load_node_info()
        new_nodes, new_edges = [], []
        next_id = len(info)
        for link in AMAZON_META_LINKS:
            carriers: dict[str, list[int]] = {}
            for key, attributes in info.items():
                values = attributes.get(link) if isinstance(attributes, dict) else None
                if values is None:
                    continue
                product = _node_index(key, self.nodes_label, _key(key))
                for value in ([values] if link == "brand" else values):
                    carriers.setdefault(str(value), []).append(product)
            relation = f"has_{link}"
            for value in sorted(carriers):
                new_nodes.append((next_id, link, value))
                new_edges.extend((product, relation, next_id) for product in carriers[value])
                next_id += 1
        self._links = (new_nodes, new_edges)
        return self._links


# -- which dataset ----------------------------------------------------------------------------------

def _kind_of_types(names: set[str]) -> str | None:
    if "gene/protein" in names:
        return "prime"
    if {"paper", "author"} <= names:
        return "mag"
    if "product" in names:
        return "amazon"
    return None


def _kind_of_attributes(attributes: dict) -> str | None:
    if "mag_id" in attributes:
        return "mag"
    if "asin" in attributes or ("source" not in attributes and any(str(k).endswith("_name") for k in attributes)):
        return "amazon"
    if "source" in attributes and "name" in attributes:
        return "prime"
    return None


# -- rendering: STaRK's document text, split into fields ---------------------------------------------

def _render_prime(info: dict, type_name: str, source: StarkProcessedSource):
    """PrimeSKB.get_doc_info: name, type, source, then each `details` entry except keys starting with '_'
    or containing '_id' (those ids go to attrs). A details key equal to a top-level field becomes `details.<key>`."""
    fields: dict[str, str] = {}
    attrs: dict = {}
    for key in ("name", "type", "source"):
        if _text(info.get(key)):
            fields[key] = _text(info.get(key))
    details = info.get("details")
    if isinstance(details, dict):
        for key, value in details.items():
            key = str(key)
            if _missing(value) or key.startswith("_"):
                continue
            if "_id" in key:
                attrs[key] = _jsonable(value)
                continue
            body = _gene_detail(key, value) if type_name == "gene/protein" else _text(value)
            if body:
                fields[f"details.{key}" if key in fields else key] = body
    elif not _missing(details):
        fields["details"] = _text(details)
    attrs.update(_leftovers(info, {"name", "type", "source", "details"}))
    return fields.get("name"), fields, attrs


def _gene_detail(key: str, value) -> str:
    """The gene/protein entries STaRK unpacks: InterPro descriptions, GeneRIF texts, the first genomic position."""
    if key == "interpro":
        entries = [value] if isinstance(value, dict) else value
        if isinstance(entries, list):
            return _text([e.get("desc") for e in entries if isinstance(e, dict)])
    if key == "generif" and isinstance(value, list):
        joined = "; ".join(_text(e.get("text")) for e in value if isinstance(e, dict) and _text(e.get("text")))
        return " ".join(joined.split(" ")[:50_000])
    if key == "genomic_pos" and isinstance(value, list) and value:
        return _text(value[0])
    return _text(value)


_MAG_VENUES = ("OriginalVenue", "JournalDisplayName", "ConferenceSeriesDisplayName", "ConferenceInstancesDisplayName")


def _render_mag(info: dict, type_name: str, source: StarkProcessedSource):
    """MagSKB.get_doc_info: papers have title, abstract, publication date and the first known venue; authors,
    institutions and fields of study their DisplayName. MAG marks unknown values with -1."""
    fields: dict[str, str] = {}
    used = {"type", "new_id"}
    if type_name == "paper":
        for key in ("title", "PaperTitle", "OriginalTitle"):
            if not _missing(info.get(key), mag=True):
                fields["title"] = _text(info[key])
                used.add(key)
                break
        if not _missing(info.get("abstract"), mag=True):
            fields["abstract"] = _text(str(info["abstract"]).replace("\r", ""))
            used.add("abstract")
        if not _missing(info.get("Date"), mag=True):
            fields["date"] = _text(info["Date"])
            used.add("Date")
        for key in _MAG_VENUES:
            if not _missing(info.get(key), mag=True):
                fields["venue"] = _text(info[key])
                used.add(key)
                break
        name = fields.get("title")
    else:
        name = None
        if not _missing(info.get("DisplayName"), mag=True):
            name = fields["name"] = _text(info["DisplayName"])
            used.add("DisplayName")
    attrs = {k: v for k, v in _leftovers(info, used).items() if v != -1 and v != "-1"}
    return name, {k: v for k, v in fields.items() if v}, attrs


def _render_amazon(info: dict, type_name: str, source: StarkProcessedSource):
    """AmazonSKB.get_doc_info: brand/category/color nodes are just their name; products have title, brand,
    dimensions and weight (from details.product_dimensions), description, features (without ASIN lines),
    reviews (most voted first) and Q&A, each list capped as STaRK caps it."""
    if type_name in AMAZON_META_LINKS:
        name = _text(info.get(f"{type_name}_name")) or None
        return name, ({"name": name} if name else {}), _leftovers(info, {f"{type_name}_name"})
    fields: dict[str, str] = {"title": _text(info.get("title")), "brand": _text(info.get("brand"))}
    dimensions = _product_dimensions(info.get("details"))
    if dimensions and " ; " in dimensions and len(dimensions.split(" ; ")) == 2:
        fields["dimensions"], fields["weight"] = (part.strip() for part in dimensions.split(" ; "))
    description = info.get("description")
    fields["description"] = _text(" ".join(map(_text, description)) if isinstance(description, list) else description)
    features = info.get("feature") or []
    if isinstance(features, list):
        fields["features"] = "\n".join(t for t in map(_text, features) if t and "asin" not in t.lower())
    fields["reviews"] = _reviews(info.get("review"), source.max_entries)
    fields["qa"] = _qa(info.get("qa"), source.max_entries)
    attrs = _leftovers(info, {"title", "brand", "description", "feature", "review", "qa"})
    return fields["title"] or None, {k: v for k, v in fields.items() if v}, attrs


def _product_dimensions(details) -> str:
    if not isinstance(details, dict):
        return ""
    inner = details.get("dictionary")
    if isinstance(inner, dict) and "product_dimensions" in inner:
        return _text(inner["product_dimensions"])
    return _text(details.get("product_dimensions"))


def _kept(entries: list, max_entries: int) -> list:
    """STaRK's loops stop after the entry whose rank exceeds max_entries: max_entries + 2 entries at most."""
    return entries[: max_entries + 2]


def _reviews(reviews, max_entries: int) -> str:
    if not isinstance(reviews, list):
        return ""
    reviews = [r for r in reviews if isinstance(r, dict)]
    ranked = sorted(reviews, key=lambda r: -_votes(r.get("vote")))
    texts = ("\n".join(t for t in (_text(r.get("summary")), _text(r.get("reviewText"))) if t) for r in ranked)
    return "\n\n".join(t for t in _kept(list(texts), max_entries) if t)


def _votes(vote) -> int:
    if _missing(vote):
        return 0
    try:
        return int(str(vote).replace(",", "").split(".")[0])
    except ValueError:
        return 0


def _qa(entries, max_entries: int) -> str:
    if not isinstance(entries, list):
        return ""
    pairs = [f"Q: {_text(e.get('question'))}\nA: {_text(e.get('answer'))}" for e in entries if isinstance(e, dict)]
    return "\n\n".join(_kept(pairs, max_entries))


_RENDERERS = {"prime": _render_prime, "mag": _render_mag, "amazon": _render_amazon}


# -- values ------------------------------------------------------------------------------------------

def _missing(value, mag: bool = False) -> bool:
    """Empty in STaRK's sense: None, NaN, '' or 'nan' (clean_dict drops these); MAG also uses -1."""
    if value is None:
        return True
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return True
    if isinstance(value, (str, int, float, np.generic)) and str(value) in ("", "nan"):
        return True
    return mag and str(value) == "-1"


def _clean(text: str) -> str:
    return text.replace("\x00", "").strip()  # PostgreSQL text cannot hold NUL


def _text(value) -> str:
    """Readable text for any stored value: lists joined by '; ', dicts as 'key: value' pairs."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, str):
        return "" if value == "nan" else _clean(value)
    if isinstance(value, dict):
        parts = (f"{_clean(str(k))}: {_text(v)}" for k, v in value.items() if _text(v))
        return "; ".join(parts)
    if isinstance(value, (list, tuple, set, frozenset)):
        return "; ".join(t for t in map(_text, value) if t)
    if isinstance(value, bytes):
        return _clean(value.decode("utf-8", "replace"))
    return "" if _missing(value) else _clean(str(value))


def _jsonable(value):
    """A JSON (and jsonb) safe copy: numpy values as Python ones, NaN and infinities as null, no NUL."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return value.replace("\x00", "")
    if isinstance(value, dict):
        return {_clean(str(k)): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").replace("\x00", "")
    return _clean(str(value))


def _leftovers(info: dict, used: set[str]) -> dict:
    """The attributes no field took, JSON-safe; empty values dropped."""
    return {str(k): _jsonable(v) for k, v in info.items() if str(k) not in used and not _missing(v)}


def _key(key) -> str:
    """How a dict key is named in messages: 'key 17', or 'key 'abc'' for a key that is no integer."""
    return f"key {int(key)}" if isinstance(key, (int, np.integer)) and not isinstance(key, bool) else f"key {key!r}"


def _node_index(key, label: str, position: str) -> int:
    if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
        raise LoadError(f"expected an integer index, found {type(key).__name__}", label, position)
    return int(key)


def _is_int_tensor(value) -> bool:
    return (isinstance(value, torch.Tensor) and not value.dtype.is_floating_point and not value.dtype.is_complex
            and value.dtype != torch.bool)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def _check_known_ids(ids: torch.Tensor, names: dict[int, str], label: str, dict_label: str, unit: str) -> None:
    if ids.numel() == 0:
        return
    known = torch.tensor(sorted(names), dtype=ids.dtype)
    unknown = ~torch.isin(ids, known)
    if bool(unknown.any()):
        index = int(unknown.nonzero()[0])
        raise LoadError(f"type id {int(ids[index])} is not in {dict_label} ({len(names)} types)", label,
                        f"{unit} {index}")
