"""lmd: a language-model daemon. The core knows no particular mode or feature."""

__version__ = "0.1.0"
