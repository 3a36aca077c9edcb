"""The package's version (one place; ``seqpack.__version__`` and ``seqpack --version`` read it)."""

__version__ = "0.1.0"
