"""STaRK's processed files (Prime, MAG, Amazon): nodes, fields and edges as STaRK renders them; hostile
or malformed files refused with a LoadError naming the file (and key). No database needed."""

from __future__ import annotations

import json
import pickle
from collections import OrderedDict

import numpy as np
import pytest
import torch

from loaders.safe_pickle import load_pickle
from loaders.stark_download import download_processed, hub_url
from loaders.stark_processed import StarkProcessedSource
from stark_fixtures import RunsCommand, malicious_pickle_bytes, write_processed
from stark_pg.skb.records import LoadError


def load(tmp_path, dataset, kind=None, **options):
    source = StarkProcessedSource(write_processed(tmp_path, dataset, **options), kind)
    return source, {node.node_id: node for _, node in source.nodes()}, list(source.edges())


# -- Prime ------------------------------------------------------------------------------------------

def test_prime_nodes_follow_stark_rendering(tmp_path):
    source, nodes, _ = load(tmp_path, "prime")
    gene = nodes[0]
    assert (gene.type, gene.name) == ("gene/protein", "TP53")
    assert gene.fields == {
        "name": "TP53", "type": "gene/protein", "source": "NCBI",
        "details.name": "tumor protein p53",           # a details key equal to a top-level field
        "alias": "BCC7; LFS1",
        "summary": "This gene encodes a tumor suppressor protein.",
        "type_of_gene": "protein-coding",
        "genomic_pos": "chr: 17; start: 7661779; end: 7687538; strand: -1",   # the first position only
        "interpro": "p53 DNA-binding domain; p53 tetramerisation domain",    # descriptions only
        "generif": "p53 regulates apoptosis.; p53 binds DNA.",               # texts only
    }
    assert gene.attrs == {"id": 7157, "ensembl_id": "ENSG00000141510"}      # '_id' keys are ids, '_…' dropped
    disease = nodes[1]
    assert disease.fields == {"name": "Crohn disease", "type": "disease", "source": "MONDO_grouped",
                              "mondo_name": "Crohn disease",
                              "mondo_definition": "A gastrointestinal disorder of the ileum."}   # NaN and '' skipped
    assert disease.attrs == {"id": "5044_13548", "mondo_id": 5011.0}
    assert nodes[2].fields["molecular_weight"] == "180.16"
    assert nodes[3].fields == {"name": "large intestine", "type": "anatomy", "source": "UBERON"}


def test_prime_edges_stream_with_relation_names(tmp_path):
    _, _, edges = load(tmp_path, "prime")
    assert edges[0] == ("column 0", 0, "associated with", 1)
    assert [(s, r, d) for _, s, r, d in edges] == [
        (0, "associated with", 1), (1, "associated with", 0), (2, "target", 0), (0, "target", 2),
        (0, "expression present", 3), (3, "expression present", 0)]
    assert all(type(s) is int and type(d) is int for _, s, _, d in edges)


def test_source_attributes(tmp_path):
    directory = write_processed(tmp_path, "prime")
    source = StarkProcessedSource(tmp_path)                      # the parent of processed/ works too
    assert source.format == "stark-processed"
    assert (source.default_name, source.meta) == ("stark-prime", {"dataset": "prime"})
    assert source.location == str(directory.resolve())
    labels = (source.nodes_label, source.edges_label, source.queries_label)
    assert labels == ("node_info.pkl", "edge_index.pt", "(none)")
    assert list(source.queries()) == []
    assert StarkProcessedSource(directory).location == source.location
    positions = [position for position, _ in source.nodes()]
    assert positions[:2] == ["key 0", "key 1"]


# -- MAG --------------------------------------------------------------------------------------------

def test_mag_papers_and_entities(tmp_path):
    source, nodes, edges = load(tmp_path, "mag")            # no type dicts on disk, as STaRK saves MAG
    assert source.kind == "mag" and source.default_name == "stark-mag"
    paper = nodes[3]
    assert (paper.type, paper.name) == ("paper", "Notes on the analytical engine")
    assert paper.fields == {"title": "Notes on the analytical engine",
                            "abstract": "We describe a machine.\nIt computes.",
                            "date": "1843-09-01", "venue": "Scientific Memoirs"}
    assert paper.attrs["Year"] == 1843 and paper.attrs["mag_id"] == 9003
    assert "type" not in paper.attrs and "new_id" not in paper.attrs
    other = nodes[4]
    assert other.fields == {"title": "Bernoulli numbers by machine", "abstract": "A program.",
                            "venue": "Journal of Engines"}       # -1 venue and date skipped, next venue taken
    assert "DocType" not in other.attrs                           # -1 means unknown in STaRK's MAG
    assert (nodes[0].type, nodes[0].name, nodes[0].fields) == ("author", "Ada Lovelace", {"name": "Ada Lovelace"})
    assert nodes[0].attrs["PaperCount"] == 12 and "LastKnownAffiliationId" not in nodes[0].attrs
    assert nodes[1].type == "institution" and nodes[2].type == "field_of_study"
    assert [(s, r, d) for _, s, r, d in edges] == [
        (0, "author___writes___paper", 3), (0, "author___affiliated_with___institution", 1),
        (3, "paper___has_topic___field_of_study", 2), (4, "paper___cites___paper", 3)]


def test_mag_with_type_dicts_on_disk(tmp_path):
    source, nodes, _ = load(tmp_path, "mag", type_dicts=True)
    assert source.kind == "mag" and nodes[2].type == "field_of_study"


# -- Amazon -----------------------------------------------------------------------------------------

def test_amazon_products_and_meta_nodes(tmp_path):
    source, nodes, edges = load(tmp_path, "amazon")
    assert source.location.endswith("cache/brand-category-color")
    shoe = nodes[0]
    assert (shoe.type, shoe.name) == ("product", "Trail Running Shoe")
    assert shoe.fields == {
        "title": "Trail Running Shoe", "brand": "Salomon", "dimensions": "12 x 4 x 5 inches", "weight": "1.2 pounds",
        "description": "Lightweight shoe for rocky trails. Great grip.",
        "features": "Breathable mesh upper\nRubber sole",                        # empty and ASIN lines dropped
        "reviews": "Too narrow\nPinches my toes.\n\nGreat fit\nFits well and grips.\n\nOkay\nFine.",  # by votes
        "qa": "Q: Is it waterproof?\nA: No, it is not."}
    assert shoe.attrs["asin"] == "B000TRAIL" and shoe.attrs["category"] == ["running", "shoes"]
    assert not {"review", "qa", "feature", "description"} & set(shoe.attrs)
    assert nodes[1].fields == {"title": "Water Bottle"} and "price" not in nodes[1].attrs   # NaN price dropped
    assert [(n.node_id, n.type, n.name, n.fields) for n in list(nodes.values())[2:]] == [
        (2, "brand", "Salomon", {"name": "Salomon"}), (3, "category", "running", {"name": "running"}),
        (4, "category", "shoes", {"name": "shoes"}), (5, "color", "black", {"name": "black"})]
    assert ("column 2", 0, "has_brand", 2) in edges


def test_amazon_base_files_get_the_meta_links_stark_adds(tmp_path):
    cached, cached_nodes, cached_edges = load(tmp_path / "cache", "amazon")
    base, base_nodes, base_edges = load(tmp_path / "base", "amazon", amazon_base=True)
    assert base.location.endswith("processed") and base.kind == "amazon"
    assert (base.node_type_dict, base.edge_type_dict) == (cached.node_type_dict, cached.edge_type_dict)
    assert [(n.node_id, n.type, n.name, n.fields, n.attrs) for n in base_nodes.values()] == \
           [(n.node_id, n.type, n.name, n.fields, n.attrs) for n in cached_nodes.values()]
    assert [e[1:] for e in base_edges] == [e[1:] for e in cached_edges]


def test_amazon_caps_reviews_as_stark_does(tmp_path):
    source = StarkProcessedSource(write_processed(tmp_path, "amazon"), max_entries=0)
    shoe = next(node for _, node in source.nodes())
    assert shoe.fields["reviews"] == "Too narrow\nPinches my toes.\n\nGreat fit\nFits well and grips."


# -- every dataset ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dataset", ["prime", "mag", "amazon"])
def test_kind_is_detected_and_output_is_storable(tmp_path, dataset):
    source = StarkProcessedSource(write_processed(tmp_path, dataset))
    assert source.kind == dataset
    for _, node in source.nodes():
        assert type(node.node_id) is int
        assert all(isinstance(v, str) and v and "\x00" not in v for v in node.fields.values())
        json.dumps(node.attrs, allow_nan=False)                   # jsonb-safe: no NaN, no numpy values


def test_explicit_kind_that_contradicts_the_files(tmp_path):
    with pytest.raises(LoadError, match=r"node_type_dict.pkl: .*STaRK-prime's, not STaRK-mag's"):
        StarkProcessedSource(write_processed(tmp_path, "prime"), "mag")
    with pytest.raises(LoadError, match="unknown STaRK dataset 'dblp'"):
        StarkProcessedSource(tmp_path, "dblp")


def test_no_processed_files(tmp_path):
    with pytest.raises(LoadError, match="no node_info.pkl"):
        StarkProcessedSource(tmp_path)


# -- hostile pickles --------------------------------------------------------------------------------

@pytest.mark.parametrize("trick", list(malicious_pickle_bytes(__import__("pathlib").Path("x"))))
@pytest.mark.parametrize("stem", ["node_info", "node_type_dict"])
def test_malicious_pickle_is_refused_without_running(tmp_path, trick, stem):
    marker = tmp_path / "pwned"
    payload = malicious_pickle_bytes(marker)[trick]
    directory = write_processed(tmp_path / "kb", "prime", replace={stem: payload})
    with pytest.raises(LoadError, match=rf"^{stem}.pkl: refuses to unpickle \S+") as caught:
        list(StarkProcessedSource(directory).nodes())
    assert not marker.exists()
    expected = {"os.system via GLOBAL": "os.system", "reduce to posix.system": "posix.system",
                "builtins.eval": "builtins.eval", "builtins.getattr": "builtins.getattr",
                "subprocess.Popen": "subprocess.Popen"}[trick]
    assert expected in str(caught.value)


def test_malicious_tensor_file_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"
    directory = write_processed(tmp_path / "kb", "prime", replace={"edge_index": RunsCommand(f"touch {marker}")})
    with pytest.raises(LoadError, match=r"^edge_index.pt: refuses to unpickle posix.system"):
        StarkProcessedSource(directory)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_numpy_and_plain_values_are_admitted(tmp_path, protocol):
    value = {np.int64(1): {"a": np.float64(1.5), "b": np.bool_(True), "c": np.array([1, 2]), "d": np.str_("x"),
                           "e": np.array(["p", "q"]), "f": OrderedDict(k=[1, (2, 3)]), "g": {4, 5}, "h": b"raw",
                           "i": None, "j": float("nan")}}
    path = tmp_path / "value.pkl"
    path.write_bytes(pickle.dumps(value, protocol=protocol))
    loaded = load_pickle(path)
    inner = loaded[1]
    assert inner["a"] == 1.5 and inner["c"].tolist() == [1, 2] and inner["e"].tolist() == ["p", "q"]
    assert inner["f"] == OrderedDict(k=[1, (2, 3)]) and inner["g"] == {4, 5} and inner["h"] == b"raw"


# -- malformed files --------------------------------------------------------------------------------

BAD = {
    "node_info not a dict": (dict(replace={"node_info": [{"name": "x"}]}), r"^node_info.pkl: expected a dict"),
    "node not a dict": (dict(replace={"node_info": {0: {"name": "a"}, 1: "b", 2: {}, 3: {}}}),
                        r"^node_info.pkl key 1: expected a dict of attributes, found str"),
    "string node key": (dict(replace={"node_info": {0: {}, "x": {}, 2: {}, 3: {}}}),
                        r"^node_info.pkl key 'x': expected an integer index"),
    "fewer nodes than node types": (dict(replace={"node_info": {0: {}, 1: {}, 2: {}}}),
                                    r"^node_info.pkl: holds 3 nodes but node_types.pt has 4 entries"),
    "node index out of range": (dict(replace={"node_info": {0: {}, 1: {}, 2: {}, 7: {}}}),
                                r"^node_info.pkl key 7: node index 7 is outside node_types.pt"),
    "edge_index 3 x E": (dict(replace={"edge_index": torch.zeros(3, 6, dtype=torch.long)}),
                         r"^edge_index.pt: expected a 2 x E integer tensor, found .*shape \(3, 6\)"),
    "edge_index float": (dict(replace={"edge_index": torch.zeros(2, 6)}), r"^edge_index.pt: expected a 2 x E integer"),
    "edge_index a dict": (dict(replace={"edge_index": {"a": torch.zeros(2, 6, dtype=torch.long)}}),
                          r"^edge_index.pt: expected a 2 x E integer tensor, found a dict"),
    "edge_types too short": (dict(replace={"edge_types": torch.LongTensor([9, 9])}),
                             r"^edge_types.pt: has 2 entries but edge_index.pt has 6 edges"),
    "edge_types 2-d": (dict(replace={"edge_types": torch.zeros(2, 3, dtype=torch.long)}),
                       r"^edge_types.pt: expected a 1-d integer tensor"),
    "unknown edge type": (dict(replace={"edge_types": torch.LongTensor([9, 99, 3, 3, 16, 16])}),
                          r"^edge_types.pt column 1: type id 99 is not in edge_type_dict.pkl"),
    "unknown node type": (dict(replace={"node_types": torch.LongTensor([1, 0, 42, 5])}),
                          r"^node_types.pt entry 2: type id 42 is not in node_type_dict.pkl"),
    "type name not a string": (dict(replace={"node_type_dict": {0: "disease", 1: 5, 2: "x", 3: "drug", 5: "anatomy"}}),
                               r"^node_type_dict.pkl key 1: type name 5 is not a non-empty string"),
    "type dict a list": (dict(replace={"edge_type_dict": ["ppi"]}), r"^edge_type_dict.pkl: expected a dict"),
    "corrupt pickle": (dict(replace={"node_info": b"\x80\x04not a pickle"}), r"^node_info.pkl: not a readable pickle"),
    "corrupt tensor file": (dict(replace={"edge_types": b"garbage"}), r"^edge_types.pt: not a readable torch file"),
    "missing edge_index": (dict(replace={"edge_index": None}), r"^edge_index.pt: missing"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_malformed_files_name_file_and_key(tmp_path, case):
    options, message = BAD[case]
    with pytest.raises(LoadError, match=message):
        source = StarkProcessedSource(write_processed(tmp_path, "prime", **options))
        list(source.nodes())
        list(source.edges())


# -- download ---------------------------------------------------------------------------------------

def test_download_fails_clearly_when_the_hub_is_unreachable(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(LoadError) as caught:
        download_processed("prime", tmp_path)
    message = str(caught.value)
    assert "skb/primekg/processed.zip" in message and "Hugging Face Hub" in message
    assert hub_url("prime") in message and "by hand" in message
    assert not any(p.name.startswith(".") for p in (tmp_path / "prime").iterdir())   # no staging left behind


def test_download_uses_files_already_there(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    directory = write_processed(tmp_path / "mag", "mag")
    assert download_processed("mag", tmp_path) == directory
    with pytest.raises(LoadError, match="unknown STaRK dataset"):
        download_processed("dblp", tmp_path)
