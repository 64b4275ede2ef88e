"""pytest collects the examples of README.md and docs/*.md (tests/doc_examples.py says how);
`make test` hands test files to its workers as tests/scheduling.py says."""

import pytest

from tests.doc_examples import sybil

pytest_collect_file = sybil.pytest()


class _Scheduler:
    """`--dist loadgroup` (make test): the groups of tests/scheduling.py."""

    @staticmethod
    def pytest_xdist_make_scheduler(config: pytest.Config, log):
        if config.getoption("dist") == "loadgroup":
            from tests.scheduling import Scheduling

            return Scheduling(config, log)
        return None


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):  # its hook is unknown without it
        config.pluginmanager.register(_Scheduler(), "lmd-scheduling")
