"""brokerbench: repeatable broker and serialization-format comparisons, stored as events."""

__version__ = "0.1.0"
