"""Projections of a run's events: results, tables, and later comparisons and regressions."""
