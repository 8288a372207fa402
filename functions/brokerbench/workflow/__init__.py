"""The benchmark-run workflow's steps and the adapters they run on (AWS or local)."""
