"""Building the embedded model's engine: llama.cpp's own server, `llama-server`.

llama-cpp-python's wheel (the `embedded` extra) already holds llama.cpp's libraries (libllama,
libggml, libmtmd); its source distribution vendors the llama.cpp source they were built from.
So only the server's own sources (the server, llama.cpp's `common` library, the HTTP library)
are compiled here, against those libraries: some 4 CPU-minutes, about 2 minutes on two quiet
cores. The build directory is kept in the user's cache, so a new virtual environment of the
same version only links again (seconds).

    python -m daemon.backends.engine_build [--force] [--quiet]

`make run` and `make test` run it; `lmd doctor` names the version it built. Both projects are
MIT-licensed; llama-server's licence texts are installed beside it.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

DISTRIBUTION = "llama_cpp_python"
PROGRAM = "llama-server"
STAMP = "engine.json"

# What CMake builds: llama.cpp's own recipes for the server, `common`, the vendored libraries
# and the (disabled) web UI, with llama.cpp's libraries taken from the wheel instead of built.
WRAPPER = """\
cmake_minimum_required(VERSION 3.18)
project(lmd_llama_server C CXX)

set(CMAKE_BUILD_TYPE Release CACHE STRING "" FORCE)
set(BUILD_SHARED_LIBS OFF)
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
# llama.cpp's options: no TLS, no subprocesses (the server's own tools), no web UI download
set(LLAMA_BUILD_COMMON ON)
set(LLAMA_BUILD_SERVER ON)
set(LLAMA_OPENSSL OFF)
set(LLAMA_SUBPROCESS OFF)
set(LLAMA_LLGUIDANCE OFF)
set(LLAMA_BUILD_UI OFF)
set(LLAMA_USE_PREBUILT_UI OFF)
set(LLAMA_ALL_WARNINGS OFF)
# the variables llama.cpp's top-level recipe gives its subdirectories
set(PROJECT_SOURCE_DIR ${LLAMA_SOURCE})
list(APPEND CMAKE_MODULE_PATH "${LLAMA_SOURCE}/cmake/")
set(LLAMA_VERSION_MAJOR 0)
set(LLAMA_VERSION_MINOR 0)
set(LLAMA_VERSION_PATCH 0)
set(LLAMA_VERSION_BASE 0.0.0)
set(LLAMA_BUILD_NUMBER 0)
set(LLAMA_BUILD_COMMIT "${LMD_ENGINE_SOURCE}")
set(BUILD_COMPILER "${CMAKE_C_COMPILER_ID} ${CMAKE_C_COMPILER_VERSION}")
set(BUILD_TARGET "${CMAKE_SYSTEM_NAME} ${CMAKE_SYSTEM_PROCESSOR}")
include(${LLAMA_SOURCE}/ggml/cmake/common.cmake)
include(${LLAMA_SOURCE}/cmake/license.cmake)
function(llama_add_compile_flags)
endfunction()

function(imported name file includes)
    add_library(${name} SHARED IMPORTED GLOBAL)
    set_target_properties(${name} PROPERTIES
        IMPORTED_LOCATION "${LLAMA_LIBS}/${file}"
        INTERFACE_INCLUDE_DIRECTORIES "${includes}")
endfunction()
imported(ggml-base libggml-base.so "${LLAMA_SOURCE}/ggml/include")
imported(ggml libggml.so "${LLAMA_SOURCE}/ggml/include")
set_target_properties(ggml PROPERTIES INTERFACE_LINK_LIBRARIES ggml-base)
imported(llama libllama.so "${LLAMA_SOURCE}/include")
set_target_properties(llama PROPERTIES INTERFACE_LINK_LIBRARIES ggml)
imported(mtmd libmtmd.so "${LLAMA_SOURCE}/tools/mtmd")
set_target_properties(mtmd PROPERTIES INTERFACE_LINK_LIBRARIES llama)

find_package(Threads REQUIRED)
add_subdirectory(${LLAMA_SOURCE}/vendor vendor)
add_subdirectory(${LLAMA_SOURCE}/common common)
add_subdirectory(${LLAMA_SOURCE}/tools/ui ui)
add_subdirectory(${LLAMA_SOURCE}/tools/server server)
set_target_properties(llama-server PROPERTIES BUILD_RPATH "${LLAMA_LIBS}")
"""


class BuildError(Exception):
    """The engine could not be built; the message is one sentence saying why and what to do."""


@dataclass(frozen=True)
class Wheel:
    """The installed llama-cpp-python: its version and the directory of its libraries."""

    version: str
    libs: Path

    @property
    def source(self) -> str:
        return f"llama-cpp-python-{self.version}"


def installed_wheel() -> Wheel | None:
    """The installed llama-cpp-python, found through its metadata (never imported)."""

    try:
        dist = distribution(DISTRIBUTION)
    except PackageNotFoundError:
        return None
    found = [Path(str(dist.locate_file(f))) for f in dist.files or ()
             if f.name.startswith("libllama.so")]  # fmt: skip
    # the libraries its Python package loads (the wheel has a copy in site-packages/lib too)
    found.sort(key=lambda p: p.parent.parts[-2:] != ("llama_cpp", "lib"))
    return Wheel(dist.version, found[0].parent) if found else None


def install_dir(prefix: str | None = None) -> Path:
    """Where the built server lives: the environment's own libexec directory."""
    return Path(prefix or sys.prefix) / "libexec" / "lmd"


def built_program(prefix: str | None = None) -> Path:
    return install_dir(prefix) / PROGRAM


def stamp(prefix: str | None = None) -> dict | None:
    """What was built here (version, source, seconds), or None."""
    try:
        data = json.loads((install_dir(prefix) / STAMP).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _libs_identity(wheel: Wheel) -> str:
    st = (wheel.libs / "libllama.so").stat()
    return f"{wheel.libs}:{st.st_size}:{int(st.st_mtime)}"


def up_to_date(wheel: Wheel, prefix: str | None = None) -> bool:
    """Whether the server built here was built from and against this wheel."""
    found = stamp(prefix)
    return (
        found is not None
        and built_program(prefix).is_file()
        and found.get("source") == wheel.source
        and found.get("libs") == _libs_identity(wheel)
    )


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lmd" / "engine"


def _tool(name: str) -> str | None:
    """A build tool from this environment's bin directory, else from PATH."""
    here = Path(sys.prefix) / "bin" / name
    return str(here) if here.is_file() and os.access(here, os.X_OK) else shutil.which(name)


Say = Callable[[str], None]


def _run(argv: list[str], say: Say, cwd: Path | None = None, show: bool = True) -> None:
    """Run one build step, passing its lines on (the compiler's progress); BuildError with its
    last lines when it fails."""
    tail: list[str] = []
    proc = subprocess.Popen(
        argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
        errors="replace",
    )  # fmt: skip
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip()
        tail = (tail + [line])[-12:]
        if show:
            say(line)
    if proc.wait() != 0:
        raise BuildError(
            f"{Path(argv[0]).name} failed (exit code {proc.returncode}); its last lines:\n"
            + "\n".join(tail)
        )


def _sdist(wheel: Wheel, into: Path, say: Say) -> Path:
    """llama-cpp-python's source distribution of this version, through pip (its cache makes a
    second download free)."""
    for found in into.glob(f"llama_cpp_python-{wheel.version}.tar.gz"):
        return found
    say(f"Getting the llama.cpp source (llama-cpp-python {wheel.version}'s sdist) through pip...")
    with tempfile.TemporaryDirectory(dir=into) as tmp:
        _run(
            [sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps",
             "--progress-bar", "off", "-d", tmp, f"llama-cpp-python=={wheel.version}"],
            say,
        )  # fmt: skip
        got = list(Path(tmp).glob("*.tar.gz"))
        if not got:
            raise BuildError("pip downloaded no source archive of llama-cpp-python.")
        final = into / got[0].name
        os.replace(got[0], final)
    return final


def _extract(archive: Path, into: Path) -> Path:
    """The vendored llama.cpp tree of the archive, extracted once."""
    top = archive.name.removesuffix(".tar.gz")
    source = into / top / "vendor" / "llama.cpp"
    if (source / "tools" / "server" / "CMakeLists.txt").is_file():
        return source
    prefix = f"{top}/vendor/llama.cpp/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        try:
            tar.extractall(into, members=members, filter="data")
        except TypeError:  # Python before 3.11.4: no filters (pip checked the archive's hash)
            tar.extractall(into, members=members)
    if not (source / "tools" / "server" / "CMakeLists.txt").is_file():
        raise BuildError(f"{archive.name} holds no llama.cpp server source.")
    return source


def build(force: bool = False, say: Say = print, verbose: bool = True) -> Path:
    """Build llama-server against the installed llama-cpp-python (unless it is up to date) and
    install it in this environment; its path. BuildError says why not."""
    wheel = installed_wheel()
    if wheel is None:
        raise BuildError(
            "llama-cpp-python is not installed, so there are no llama.cpp libraries to build "
            "the server against; pip install 'lmd[embedded]' first (make run does)."
        )
    if not force and up_to_date(wheel):
        say(f"llama-server is up to date ({wheel.source}).")
        return built_program()
    missing = [t for t in ("cmake", "c++") if _tool(t) is None]
    if missing:
        raise BuildError(
            f"Building llama-server needs {' and '.join(missing)}; install them (on Debian: "
            "apt-get install cmake g++) and run the build again."
        )
    started = time.monotonic()
    cache = cache_dir() / wheel.source
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "lock", "a") as lock:
        say(f"Building llama-server from {wheel.source}'s llama.cpp source (one time: about 2 "
            "minutes on two quiet cores, longer on a busy machine).")  # fmt: skip
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            say("Another build of the same version is running; waiting for it...")
            fcntl.flock(lock, fcntl.LOCK_EX)
        source = _extract(_sdist(wheel, cache, say), cache)
        wrapper = cache / "wrapper"
        wrapper.mkdir(exist_ok=True)
        (wrapper / "CMakeLists.txt").write_text(WRAPPER)
        out = cache / "build"
        ninja = _tool("ninja")
        cmake = _tool("cmake")
        assert cmake is not None
        configure = [
            cmake, "-S", str(wrapper), "-B", str(out), f"-DLLAMA_SOURCE={source}",
            f"-DLLAMA_LIBS={wheel.libs}", f"-DLMD_ENGINE_SOURCE={wheel.source}",
        ]  # fmt: skip
        if ninja and not (out / "CMakeCache.txt").exists():
            configure += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        say("Configuring (cmake)...")
        _run(configure, say, show=verbose)
        jobs = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2)
        say(f"Compiling with {jobs} jobs; each line is one step of the build:")
        _run([cmake, "--build", str(out), "--target", PROGRAM, "-j", jobs], say, show=verbose)
        built = out / "server" / PROGRAM
        if not built.is_file():
            raise BuildError(f"The build finished without making {built}.")
        _install(built, source, wheel, time.monotonic() - started)
    took = time.monotonic() - started
    say(f"Built llama-server ({wheel.source}) in {_minutes(took)}: {built_program()}")
    return built_program()


def _install(built: Path, source: Path, wheel: Wheel, seconds: float) -> None:
    """Copy the program (atomically) and its licence texts into the environment."""
    target = install_dir()
    target.mkdir(parents=True, exist_ok=True)
    temp = target / f".{PROGRAM}.new"
    shutil.copy2(built, temp)
    os.replace(temp, target / PROGRAM)
    licences = target / "licenses"
    licences.mkdir(exist_ok=True)
    shutil.copy2(source / "LICENSE", licences / "llama.cpp.LICENSE")
    httplib = source / "vendor" / "cpp-httplib" / "LICENSE"
    if httplib.is_file():
        shutil.copy2(httplib, licences / "cpp-httplib.LICENSE")
    info = {
        "source": wheel.source,
        "libs": _libs_identity(wheel),
        "seconds": round(seconds, 1),
        "built_at": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    (target / STAMP).write_text(json.dumps(info, indent=1) + "\n")


def _minutes(secs: float) -> str:
    m, s = divmod(round(secs), 60)
    return f"{m} min {s} s" if m else f"{s} s"


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(description="Build llama-server for lmd's embedded model.")
    parser.add_argument("--force", action="store_true", help="build even if up to date")
    parser.add_argument("--quiet", action="store_true", help="no compiler lines")
    args = parser.parse_args(argv)
    say = lambda line: print(line, flush=True)  # noqa: E731
    try:
        program = build(force=args.force, say=say, verbose=not args.quiet)
    except BuildError as e:
        print(f"lmd: {e}", file=sys.stderr)
        return 1
    from daemon.backends import embedded, model_prep  # here: embedded imports this module

    model = embedded.wheel_model_path()
    if model is not None:  # a failure is said and costs only speed: no exit code for it
        model_prep.prepare(model, program.parent, say)
    return 0


if __name__ == "__main__":
    sys.exit(main())
