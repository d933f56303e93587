"""The embedded server's resource profile: one budget of memory, split by fixed rules, sized to the machine.

Why a budget rather than "a quarter of RAM for shared buffers": every stark-pg home runs its own
cluster (a user's, each test session's, each benchmark's), and several clusters that each take a
quarter of the machine overcommit it. The budget defaults to a quarter of the machine's memory
(at least 512 MB, at most 16 GB) and `STARK_PG_MEMORY_MB` sets it, e.g. small for throwaway test
clusters or large for a dedicated 1M-node server. Out of the budget:

- shared_buffers: half (HNSW indexes answer in milliseconds only from memory: 1M 384-d vectors
  with their graph are about 1.5 GB);
- maintenance_work_mem: a quarter, at most 2 GB (HNSW and pg_textsearch builds, bulk index
  builds of edge partitions), shared by the parallel maintenance workers;
- work_mem: 1/64, between 4 MB and 64 MB (hash joins and sorts of the graph and ranking SQL; a
  query may use it several times);
- effective_cache_size: the rest of the machine's memory the planner may assume the OS caches.
Parallel maintenance workers (B-tree and HNSW builds use them) are the machine's cores minus one,
at most 4. Applied to a new cluster (`stark_pg.db.embedded`), shown by `stark-pg db status`.
"""

from __future__ import annotations

import os

from stark_pg.config import ENV_MEMORY_MB, env
from stark_pg.db.errors import DatabaseError

MIN_BUDGET_MB, MAX_BUDGET_MB = 512, 16384
ENV = ENV_MEMORY_MB
PROFILE_SETTINGS = ("shared_buffers", "maintenance_work_mem", "work_mem", "effective_cache_size",
                    "max_parallel_maintenance_workers")


class ProfileError(DatabaseError):
    """STARK_PG_MEMORY_MB is not a number of megabytes in range."""


def budget_mb(total_mb: int, override: str | None = None) -> int:
    """The server's memory budget in MB: `override` (STARK_PG_MEMORY_MB) or a quarter of `total_mb`."""
    if override not in (None, ""):
        try:
            value = int(override)
        except ValueError:
            raise ProfileError(f"{ENV}={override!r}: expected a whole number of megabytes") from None
        if not MIN_BUDGET_MB <= value <= max(MAX_BUDGET_MB, total_mb):
            raise ProfileError(f"{ENV}={value}: expected {MIN_BUDGET_MB} to {max(MAX_BUDGET_MB, total_mb)} MB")
        return value
    return max(MIN_BUDGET_MB, min(total_mb // 4, MAX_BUDGET_MB))


def settings(total_mb: int, cpus: int, budget: int) -> dict[str, str]:
    """PostgreSQL settings for a server with `budget` MB on a machine of `total_mb` MB and `cpus` cores."""
    return {
        "shared_buffers": f"{budget // 2}MB",
        "maintenance_work_mem": f"{min(budget // 4, 2048)}MB",
        "work_mem": f"{max(4, min(budget // 64, 64))}MB",
        "effective_cache_size": f"{max(budget, total_mb - budget) * 3 // 4}MB",
        "max_parallel_maintenance_workers": str(max(0, min(cpus - 1, 4))),
    }


def machine_profile() -> dict[str, str]:
    """The settings for this machine and the current STARK_PG_MEMORY_MB."""
    import psutil

    total_mb = psutil.virtual_memory().total // (1 << 20)
    return settings(total_mb, os.cpu_count() or 1, budget_mb(total_mb, env(ENV)))
