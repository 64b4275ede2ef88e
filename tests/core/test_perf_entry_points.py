"""The entry-point scan that spares `lmd --help` importing importlib.metadata agrees with it."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from importlib.metadata import entry_points as from_metadata
from pathlib import Path

from daemon.plugins import entry_points, scan_entry_points
from tests.daemons import ROOT


def dist(site: Path, dirname: str, entry_points_txt: str | None) -> None:
    info = site / dirname
    info.mkdir(parents=True)
    name = dirname.split("-")[0]
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if entry_points_txt is not None:
        (info / "entry_points.txt").write_text(entry_points_txt)


def metadata_view(path: list[str]) -> list[tuple[str, str]]:
    from importlib.metadata import distributions

    seen, found = set(), []
    for d in distributions(path=path):
        key = d._normalized_name  # how entry_points() tells distributions apart
        if key in seen:
            continue
        seen.add(key)
        found += [(ep.name, ep.value) for ep in d.entry_points if ep.group == "lmd"]
    return found


def test_the_installed_plugins_are_found_as_importlib_metadata_finds_them():
    expected = [(ep.name, ep.value) for ep in from_metadata(group="lmd")]
    assert scan_entry_points("lmd") == expected
    assert entry_points("lmd") == expected
    assert ("dali", "plugins.dali") in expected


def test_sites_in_path_order_first_distribution_wins(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    dist(first, "lmd_birds-2.0.dist-info", "# a comment\n[lmd]\nbirds = birds_v2\n\n[x]\nz = q\n")
    dist(first, "no_plugins-1.0.dist-info", None)
    dist(second, "LMD.Birds-1.0.dist-info", "[lmd]\nbirds = birds_v1\n")  # same name, later
    dist(second, "fish-1.0.egg-info", "[lmd]\n  fish =  fish_mod  \n[console_scripts]\nf = g\n")
    path = [str(first), str(second), str(tmp_path / "missing")]
    found = scan_entry_points("lmd", path)
    assert found == [("birds", "birds_v2"), ("fish", "fish_mod")]
    assert found == metadata_view(path)


def test_zips_and_eggs_are_left_to_importlib_metadata(tmp_path):
    archive = tmp_path / "plugins.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped-1.0.dist-info/entry_points.txt", "[lmd]\nzipped = zipped_mod\n")
    assert scan_entry_points("lmd", [str(archive)]) is None
    (tmp_path / "old.egg").mkdir()
    assert scan_entry_points("lmd", [str(tmp_path)]) is None


def test_help_loads_plugins_without_importlib_metadata():
    code = (
        "import sys; from daemon.cli import cli\n"
        "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
        "print('importlib.metadata' in sys.modules, 'asyncio' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert "  sql " in done.stdout  # lm_score's command is listed
    assert done.stdout.strip().splitlines()[-1] == "False False"
