"""Fetching a STaRK dataset's processed files from the Hugging Face Hub, once, into a local cache.

STaRK publishes them as `processed.zip` in the dataset repository `snap-stanford/stark` (Prime's lives
under `skb/primekg/`, as STaRK's `prime.py` names it). Many machines cannot reach the Hub, so failure
says what to do instead: fetch the zip by other means, unzip it, and load the directory.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from loaders.stark_processed import find_processed_dir
from stark_pg.skb.records import LoadError

REPO = "snap-stanford/stark"
ARCHIVES = {"prime": "skb/primekg/processed.zip", "mag": "skb/mag/processed.zip", "amazon": "skb/amazon/processed.zip"}


def hub_url(dataset: str) -> str:
    return f"https://huggingface.co/datasets/{REPO}/resolve/main/{ARCHIVES[dataset]}"


def download_processed(dataset: str, cache_dir: Path) -> Path:
    """The directory holding `dataset`'s processed files under `cache_dir`, downloaded and unzipped if absent."""
    if dataset not in ARCHIVES:
        raise LoadError(f"unknown STaRK dataset {dataset!r} (known: {', '.join(ARCHIVES)})")
    target = Path(cache_dir) / dataset
    try:
        return find_processed_dir(target)
    except LoadError:
        pass  # not there yet
    target.mkdir(parents=True, exist_ok=True)
    staging = target / ".download"
    try:
        archive = _fetch(dataset, staging)
        _unzip(archive, target, dataset)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return find_processed_dir(target)


def _fetch(dataset: str, staging: Path) -> Path:
    from huggingface_hub import hf_hub_download

    # the Hub library reads HF_HUB_OFFLINE once at import; honour it as set now, and fail fast
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
    try:
        return Path(hf_hub_download(REPO, ARCHIVES[dataset], repo_type="dataset", local_dir=staging,
                                    local_files_only=offline))
    except Exception as exc:  # network, offline mode, proxy, authentication: all end the same way for the user
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise LoadError(
            f"cannot download {ARCHIVES[dataset]} from the Hugging Face Hub (dataset {REPO}): {reason}. "
            f"This machine may have no access to huggingface.co. Download {hub_url(dataset)} by hand, "
            f"unzip it, and load the directory that holds processed/ (stark-pg load <that directory>)."
        ) from exc


def _unzip(archive: Path, target: Path, dataset: str) -> None:
    """Unpack into a scratch directory first, then move the entries into place, so a failed unzip leaves no half."""
    scratch = target / ".unzip"
    shutil.rmtree(scratch, ignore_errors=True)
    try:
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(scratch)  # zipfile drops absolute paths and '..' components
    except (zipfile.BadZipFile, OSError) as exc:
        shutil.rmtree(scratch, ignore_errors=True)
        raise LoadError(f"{archive.name} for {dataset} is not a readable zip archive: {exc}") from exc
    for entry in scratch.iterdir():
        destination = target / entry.name
        if destination.exists():
            shutil.rmtree(destination) if destination.is_dir() else destination.unlink()
        entry.rename(destination)
    scratch.rmdir()
