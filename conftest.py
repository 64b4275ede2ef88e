"""pytest collects the examples of README.md and docs/*.md (tests/doc_examples.py says how)."""

from tests.doc_examples import sybil

pytest_collect_file = sybil.pytest()
