"""pytest collects the examples of README.md and docs/*.md (tests/doc_examples.py says how);
`make test` hands test files to its workers as tests/scheduling.py says."""

from tests.doc_examples import sybil

pytest_collect_file = sybil.pytest()


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (make test) with the real-model tier as one unit."""
    if config.getoption("dist") == "loadfile":
        from tests.scheduling import Scheduling

        return Scheduling(config, log)
    return None
