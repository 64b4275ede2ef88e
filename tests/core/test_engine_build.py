"""Building the embedded engine (daemon/backends/engine_build.py): against the installed
llama-cpp-python's libraries, once, with a sentence for each thing that is missing. The build
itself ran at install time (make test): here, what it left and what it says."""

from __future__ import annotations

import subprocess

import pytest

from daemon.backends import engine_build

pytestmark = pytest.mark.skipif(
    engine_build.installed_wheel() is None, reason="needs the embedded extra (make test)"
)


def test_the_built_server_links_the_wheel_s_own_libraries():
    wheel = engine_build.installed_wheel()
    assert wheel.libs.parts[-2:] == ("llama_cpp", "lib")  # what its Python package loads
    program = engine_build.built_program()
    assert program.is_file() and engine_build.up_to_date(wheel)
    linked = subprocess.run(["ldd", str(program)], capture_output=True, text=True).stdout
    libllama = next(line for line in linked.splitlines() if "libllama" in line)
    assert str(wheel.libs) in libllama
    version = subprocess.run([str(program), "--version"], capture_output=True, text=True)
    assert wheel.source in version.stdout + version.stderr  # llama-server names its source
    licences = engine_build.install_dir() / "licenses"
    assert (licences / "llama.cpp.LICENSE").read_text().startswith("MIT License")


def test_an_up_to_date_engine_is_not_built_again():
    said: list[str] = []
    assert engine_build.build(say=said.append) == engine_build.built_program()
    assert said == [f"llama-server is up to date ({engine_build.installed_wheel().source})."]


def test_what_is_missing_is_one_sentence(monkeypatch):
    monkeypatch.setattr(engine_build, "up_to_date", lambda wheel, prefix=None: False)
    monkeypatch.setattr(engine_build, "_tool", lambda name: None)
    with pytest.raises(engine_build.BuildError) as e:
        engine_build.build(say=lambda line: None)
    assert str(e.value) == (
        "Building llama-server needs cmake and c++; install them (on Debian: apt-get install "
        "cmake g++) and run the build again."
    )
    monkeypatch.setattr(engine_build, "installed_wheel", lambda: None)
    with pytest.raises(engine_build.BuildError) as e:
        engine_build.build(say=lambda line: None)
    assert "llama-cpp-python is not installed" in str(e.value)
    assert engine_build.main(["--quiet"]) == 1  # the command says it and fails
