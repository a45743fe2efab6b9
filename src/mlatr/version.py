"""mlatr's version (the package re-exports it as ``mlatr.__version__``)."""

__version__ = "0.1.0"
