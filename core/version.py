"""dynashape's version (``dynashape.__version__``; pyproject.toml holds the same string)."""

__version__ = "0.1.0"
