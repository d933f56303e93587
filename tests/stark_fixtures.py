"""Small STaRK knowledge bases written in the exact layout STaRK publishes (`processed/`), for loader tests.

The files are written the way STaRK's `stark_qa.tools.io.save_files` writes them (dicts with
`pickle.dump`, tensors with `torch.save`), and the node attributes mimic what STaRK's processing
leaves in them: numpy scalars from pandas rows, NaN for missing values, MAG's -1 for unknown, Amazon's
lists of reviews and Q&A. The data itself is invented. `write_processed` is reusable by database tests.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch

NAN = float("nan")

PRIME_NODE_TYPES = ["disease", "gene/protein", "molecular_function", "drug", "pathway", "anatomy",
                    "effect/phenotype", "biological_process", "cellular_component", "exposure"]
PRIME_RELATIONS = ["ppi", "carrier", "enzyme", "target", "transporter", "contraindication", "indication",
                   "off-label use", "synergistic interaction", "associated with", "parent-child", "phenotype absent",
                   "phenotype present", "side effect", "interacts with", "linked to", "expression present",
                   "expression absent"]
MAG_NODE_TYPES = {0: "author", 1: "institution", 2: "field_of_study", 3: "paper"}
MAG_RELATIONS = {0: "author___affiliated_with___institution", 1: "paper___cites___paper",
                 2: "paper___has_topic___field_of_study", 3: "author___writes___paper"}
AMAZON_NODE_TYPES = {0: "product", 1: "brand", 2: "category", 3: "color"}
AMAZON_RELATIONS = {0: "also_buy", 1: "also_view", 2: "has_brand", 3: "has_category", 4: "has_color"}


def prime_data() -> dict:
    node_info = {
        np.int64(0): {"id": np.int64(7157), "type": "gene/protein", "name": "TP53", "source": "NCBI", "details": {
            "_id": "7157", "name": "tumor protein p53", "alias": ["BCC7", "LFS1"],
            "summary": "This gene encodes a tumor suppressor protein.", "type_of_gene": "protein-coding",
            "genomic_pos": [{"chr": "17", "start": 7661779, "end": 7687538, "strand": -1},
                            {"chr": "17_alt", "start": 1, "end": 2, "strand": -1}],
            "interpro": [{"desc": "p53 DNA-binding domain", "id": "IPR011615"},
                         {"desc": "p53 tetramerisation domain", "id": "IPR010991"}],
            "generif": [{"pubmed": 1, "text": "p53 regulates apoptosis."}, {"pubmed": 2, "text": "p53 binds DNA."}],
            "ensembl_id": "ENSG00000141510"}},
        np.int64(1): {"id": "5044_13548", "type": "disease", "name": "Crohn disease", "source": "MONDO_grouped",
                      "details": {"mondo_id": np.float64(5011.0), "mondo_name": "Crohn disease",
                                  "mondo_definition": "A gastrointestinal disorder of the ileum.",
                                  "umls_description": NAN, "orphanet_prevalence": np.float64(NAN),
                                  "mayo_symptoms": ""}},
        np.int64(2): {"id": "DB00945", "type": "drug", "name": "Aspirin", "source": "DrugBank",
                      "details": {"description": "Aspirin is a salicylate.", "half_life": "about 15 minutes",
                                  "molecular_weight": np.float64(180.16), "group": "approved"}},
        np.int64(3): {"id": "UBERON:0000059", "type": "anatomy", "name": "large intestine", "source": "UBERON"},
    }
    edges = [(0, 9, 1), (1, 9, 0), (2, 3, 0), (0, 3, 2), (0, 16, 3), (3, 16, 0)]
    return {"node_info": node_info, "node_types": [1, 0, 3, 5], "edges": edges,
            "node_type_dict": dict(enumerate(PRIME_NODE_TYPES)), "edge_type_dict": dict(enumerate(PRIME_RELATIONS))}


def mag_data() -> dict:
    def row(new_id, kind, **values):
        return {"id": np.int64(new_id + 100), "mag_id": np.int64(9000 + new_id), **values, "type": kind,
                "new_id": np.int64(new_id)}

    node_info = {
        0: row(0, "author", DisplayName="Ada Lovelace", PaperCount=np.int64(12), CitationCount=np.int64(3400),
               LastKnownAffiliationId=np.int64(-1)),
        1: row(1, "institution", DisplayName="University of London", PaperCount=np.int64(-1),
               CitationCount=np.int64(77)),
        2: row(2, "field_of_study", DisplayName="Analytical engine", Level=np.int64(2), PaperCount=np.int64(5),
               CitationCount=np.int64(9)),
        3: row(3, "paper", title="Notes on the analytical engine", abstract="We describe a machine.\r\nIt computes.\n",
               Date="1843-09-01", Year=np.int64(1843), OriginalVenue="Scientific Memoirs", JournalDisplayName=-1,
               ConferenceSeriesDisplayName="Memoirs Series", ConferenceInstancesDisplayName=-1,
               PaperRank=np.int64(15000), DocType="Journal"),
        4: row(4, "paper", title="Bernoulli numbers by machine", abstract="A program.", Date=-1,
               Year=np.int64(1843), OriginalVenue=-1, JournalDisplayName="Journal of Engines",
               ConferenceSeriesDisplayName=-1, ConferenceInstancesDisplayName=-1, PaperRank=np.int64(16000),
               DocType=-1),
    }
    edges = [(0, 3, 3), (0, 0, 1), (3, 2, 2), (4, 1, 3)]
    return {"node_info": node_info, "node_types": [0, 1, 2, 3, 3], "edges": edges,
            "node_type_dict": dict(MAG_NODE_TYPES), "edge_type_dict": dict(MAG_RELATIONS)}


def _review(summary, text, vote):
    return {"reviewerID": "A" + summary[:3], "summary": summary, "style": {"size:": "10"}, "reviewText": text,
            "vote": vote, "overall": np.float64(4.0), "verified": np.bool_(True), "reviewTime": "01 2, 2018"}


def amazon_products() -> dict:
    return {
        0: {"review": [_review("Great fit", "Fits well and grips.", "3"), _review("Okay", "Fine.", NAN),
                       _review("Too narrow", "Pinches my toes.", "1,204")],
            "qa": [{"questionType": "yes/no", "answerType": "N", "question": "Is it waterproof?",
                    "answer": "No, it is not.", "answerTime": "Jan 1, 2018"}],
            "color": ["black"], "asin": "B000TRAIL", "title": "Trail Running Shoe",
            "global_category": "Sports and Outdoors", "category": ["running", "shoes"], "price": "$59.99",
            "brand": "Salomon", "feature": ["Breathable mesh upper", "", "ASIN: B000TRAIL", "Rubber sole"],
            "rank": "12,345 in Sports & Outdoors",
            "details": {"dictionary": {"product_dimensions": "12 x 4 x 5 inches ; 1.2 pounds"}},
            "description": ["Lightweight shoe for rocky trails.", "Great grip."]},
        1: {"review": [], "qa": [], "asin": "B000BOTTLE", "title": "Water Bottle",
            "global_category": "Sports and Outdoors", "category": ["running"], "price": NAN, "feature": [],
            "rank": [], "details": {}, "description": []},
    }


def amazon_data(base: bool = False) -> dict:
    """`base`: the product-only files (processed/); otherwise the meta-link cache AmazonSKB builds from them."""
    node_info = amazon_products()
    edges = [(0, 0, 1), (1, 1, 0)]
    if base:
        return {"node_info": node_info, "edges": edges, "edge_type_dict": {0: "also_buy", 1: "also_view"}}
    node_info.update({2: {"brand_name": "Salomon"}, 3: {"category_name": "running"},
                      4: {"category_name": "shoes"}, 5: {"color_name": "black"}})
    edges += [(0, 2, 2), (0, 3, 3), (1, 3, 3), (0, 3, 4), (0, 4, 5)]
    return {"node_info": node_info, "node_types": [0, 0, 1, 2, 2, 3], "edges": edges,
            "node_type_dict": dict(AMAZON_NODE_TYPES), "edge_type_dict": dict(AMAZON_RELATIONS)}


DATASETS = {"prime": prime_data, "mag": mag_data, "amazon": amazon_data}


def write_processed(root: Path, dataset: str, *, data: dict | None = None, type_dicts: bool | None = None,
                    amazon_base: bool = False, replace: dict | None = None) -> Path:
    """Write `dataset`'s fixture under `root/processed/` as STaRK does; return the processed directory.

    type_dicts: write node_type_dict.pkl / edge_type_dict.pkl (default: as STaRK does — not for MAG).
    amazon_base: write Amazon's product-only files in processed/ instead of the cache directory.
    replace: file stem -> what to write instead of the fixture's object (pickled, or torch.save'd for the
             tensor files; bytes are written as they are), or None to leave that file out.
    """
    data = data or (amazon_data(base=True) if dataset == "amazon" and amazon_base else DATASETS[dataset]())
    directory = Path(root) / "processed"
    if dataset == "amazon" and not amazon_base:
        directory = directory / "cache" / "brand-category-color"
    directory.mkdir(parents=True, exist_ok=True)
    if type_dicts is None:
        type_dicts = dataset != "mag"
    files = {
        "node_info": data["node_info"],
        "edge_index": torch.LongTensor([[s for s, _, _ in data["edges"]], [d for _, _, d in data["edges"]]]),
        "edge_types": torch.LongTensor([t for _, t, _ in data["edges"]]),
    }
    if "node_types" in data:
        files["node_types"] = torch.LongTensor(data["node_types"])
    if type_dicts:  # Amazon's base files carry edge_type_dict only
        files.update({k: data[k] for k in ("node_type_dict", "edge_type_dict") if k in data})
    files.update(replace or {})
    for stem, value in files.items():
        tensor_file = stem in ("edge_index", "edge_types", "node_types")
        if value is None:
            continue
        if isinstance(value, bytes):
            (directory / f"{stem}{'.pt' if tensor_file else '.pkl'}").write_bytes(value)
        elif isinstance(value, torch.Tensor) or tensor_file:
            torch.save(value, directory / f"{stem}.pt")
        else:
            with open(directory / f"{stem}.pkl", "wb") as handle:
                pickle.dump(value, handle)
    return directory


class RunsCommand:
    """Unpickling this calls os.system: what a tampered pickle would do."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        import os

        return os.system, (self.command,)


def malicious_pickle_bytes(marker: Path) -> dict[str, bytes]:
    """Hostile pickles by the trick they use; a plain unpickler would create `marker` from all but the getattr
    one (which only fetches the gadget such attacks build on)."""
    command = f"touch {marker}"
    return {
        "os.system via GLOBAL": f"cos\nsystem\n(S'{command}'\ntR.".encode(),
        "reduce to posix.system": pickle.dumps({0: RunsCommand(command)}, protocol=4),
        "builtins.eval": f"cbuiltins\neval\n(S'__import__(\"os\").system(\"{command}\")'\ntR.".encode(),
        "builtins.getattr": pickle.dumps(getattr, protocol=4),
        "subprocess.Popen": f"csubprocess\nPopen\n((S'touch'\nS'{marker}'\nltR.".encode(),
    }
