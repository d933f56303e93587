"""STaRK's benchmark construction on any loaded SKB: relation templates (templates.py), a seeded plan of
instantiations and the questions made from it (pipeline.py), STaRK's QA files (export.py), and the
statistics STaRK reports of its datasets (stats.py)."""
