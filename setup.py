"""Only compiled parts are declared here (pyproject.toml holds everything else):

- the online-Elo bootstrap in plugins/elo/_online.c, optional, so an install without a
  compiler still works, on the numpy loop (about 2x slower);
- the sandbox's helper programs (daemon/execution/sandbox/landlock.c and stage.c), built into
  the package at install time, named by their source's digest; without a compiler now, lmd
  builds them on first use into the user's cache directory (daemon/execution/sandbox/helpers.py
  checks either before use), never into an installed package's directory."""

import hashlib
import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HELPERS_PACKAGE = "daemon.execution.sandbox"
HELPERS = {"landlock": "landlock.c", "stage": "stage.c"}


class build_ext_and_helpers(build_ext):  # noqa: N801 (a setuptools command's name)
    """build_ext, then the sandbox's helper executables (optional: a failure is a warning)."""

    def run(self):
        super().run()
        self._helpers = []
        source_dir = os.path.join(*HELPERS_PACKAGE.split("."))
        if self.inplace or getattr(self, "editable_mode", False):
            target_dir = self.get_finalized_command("build_py").get_package_dir(HELPERS_PACKAGE)
        else:
            target_dir = os.path.join(self.build_lib, source_dir)
        os.makedirs(target_dir, exist_ok=True)
        for kind, file in HELPERS.items():
            source = os.path.join(source_dir, file)
            with open(source, "rb") as f:
                tag = hashlib.sha256(f.read()).hexdigest()[:12]  # as helpers.digest()
            name = f"lmd-{kind}-{tag}"
            for old in os.listdir(target_dir):  # built from an earlier source: never used again
                if old.startswith(f"lmd-{kind}-") and old != name:
                    os.remove(os.path.join(target_dir, old))
            try:
                objects = self.compiler.compile(
                    [source],
                    output_dir=os.path.join(self.build_temp, kind),
                    macros=[("LMD_SOURCE_ID", f'"{tag}"')],
                    extra_postargs=["-O2"],
                )
                try:  # static where the C library allows it (no dynamic loading per command)
                    self.compiler.link_executable(
                        objects, name, output_dir=target_dir, extra_postargs=["-static"]
                    )
                except Exception:
                    self.compiler.link_executable(objects, name, output_dir=target_dir)
            except Exception as e:  # no compiler, old headers: lmd builds it on first use
                self.warn(f"lmd's {file} was not built ({e}); lmd builds it on first use")
                continue
            path = os.path.join(target_dir, name)
            os.chmod(path, 0o755)
            self._helpers.append(path)

    def get_outputs(self):
        return [*super().get_outputs(), *getattr(self, "_helpers", [])]


setup(
    ext_modules=[Extension("plugins.elo._online", ["plugins/elo/_online.c"], optional=True)],
    cmdclass={"build_ext": build_ext_and_helpers},
)
