"""setup.cfg ships every package of the library (a new folder left out of ``packages`` would be
missing from the wheel, and only an installed copy would tell)."""

from __future__ import annotations

import configparser
from pathlib import Path

from tests.support import ROOT


def test_every_package_folder_is_listed_in_setup_cfg() -> None:
    config = configparser.ConfigParser()
    config.read(Path(ROOT) / "setup.cfg", encoding="utf-8")
    listed = set(config["options"]["packages"].split())
    library = Path(ROOT) / "pgbus_flask"
    found = {".".join(("pgbus_flask", *init.parent.relative_to(library).parts)).rstrip(".")
             for init in library.rglob("__init__.py")}
    assert found - listed == set(), f"add to [options] packages in setup.cfg: {sorted(found - listed)}"
