"""pytest collects the examples of README.md and docs/*.md (tests/doc_examples.py says how);
`make test` hands test files to its workers as tests/scheduling.py says; each run keeps its
temporary files in a folder of its own."""

import shutil
import signal
import tempfile

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


_OWN_BASETEMP: list[str] = []


@pytest.hookimpl(tryfirst=True)  # before pytest's tmp_path factory reads the option
def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):  # its hook is unknown without it
        config.pluginmanager.register(_Scheduler(), "lmd-scheduling")
        # the units in the collection's order, costliest first (tests/scheduling.py), not
        # xdist's by number of tests
        config.option.loadscopereorder = False
    # As root, sandboxed commands run as nobody, so tests open their folders to others
    # (tests/conftest.py). pytest's shared /tmp/pytest-of-USER is set back to 0700 by every
    # other pytest run of the same user, which then shut nobody out of this run's folders:
    # a folder of this run's own instead (workers get theirs inside it from xdist).
    # A run started in the background by a script (`make test &`) inherits SIGINT ignored, and
    # so would every `lmd say` the tests stop with Ctrl-C: Python keeps an ignored SIGINT
    # ignored. A handler here is reset to the default in each program the tests start.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        config.option.basetemp = tempfile.mkdtemp(prefix="lmd-tests-")
        _OWN_BASETEMP.append(config.option.basetemp)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A passing run leaves nothing behind; a failing one keeps its files to look at."""
    if _OWN_BASETEMP and exitstatus == 0 and not hasattr(session.config, "workerinput"):
        shutil.rmtree(_OWN_BASETEMP.pop(), ignore_errors=True)
