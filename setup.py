"""Only the optional C loop is declared here (pyproject.toml holds everything else): the
online-Elo bootstrap in plugins/elo/_online.c. Optional, so an install without a compiler
still works, on the numpy loop (about 2x slower); `lmd elo leaderboard` works either way."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("plugins.elo._online", ["plugins/elo/_online.c"], optional=True)])
