"""The wheel: built, installed in a fresh venv, it finds its templates, catalogs and worker."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support import ROOT

SCRIPT = textwrap.dedent('''
    import os, sys, importlib.resources
    import pgbus_flask
    from flask import Flask
    from pgbus_flask import PgBus
    venv_root = sys.argv[1]
    assert pgbus_flask.__file__.startswith(venv_root), pgbus_flask.__file__
    app = Flask("wheel_check")
    app.config.update(TESTING=True, SECRET_KEY="x", PGBUS_DATABASE_URL=os.environ["URL_PG"],
                      PGBUS_REDIS_URL=os.environ["URL_REDIS"])
    PgBus(app)
    template = app.jinja_env.get_or_select_template("pgbus/overview.html")
    assert template.filename.startswith(venv_root), template.filename
    client = app.test_client()
    page = client.get("/pgbus/?locale=de")
    assert page.status_code == 200, page.status_code
    html = page.get_data(as_text=True)
    assert 'lang="de"' in html, html[:300]
    mo = importlib.resources.files("pgbus_flask.translations") / "ja" / "LC_MESSAGES" / "pgbus.mo"
    assert mo.is_file()
    from pgbus_flask.sql import STATEMENTS
    assert "claim_attempt" in STATEMENTS and "status_counts" in STATEMENTS, sorted(STATEMENTS)[:5]
    css = client.get("/pgbus/static/pgbus.css")
    assert css.status_code == 200 and len(css.data) > 100
    print("WHEEL-OK", template.filename)
''')


@pytest.mark.slow
def test_wheel_installs_and_renders_from_its_own_files(tmp_path: Path, pg_url: str, redis_url: str,
                                                       clean: None) -> None:
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels), ROOT],
        capture_output=True, text=True, timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = wheels.glob("pgbus_flask-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "pgbus_flask/worker/cli.py" in names
    assert "pgbus_flask/templates/pgbus/overview.html" in names
    assert "pgbus_flask/translations/de/LC_MESSAGES/pgbus.mo" in names
    assert "pgbus_flask/sql/migrations/0001_initial.sql" in names
    assert "pgbus_flask/sql/runner.sql" in names and "pgbus_flask/sql/reads.sql" in names
    assert not any(n.startswith(("worker/", "templates/", "translations/", "tests/")) for n in names)

    target = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = target / "bin" / "python"
    # Without PYTHONPATH: a checkout on it (as in a worktree's shell) would make pip see pgbus-flask
    # installed already and install nothing.
    pip_environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    installed = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        capture_output=True, text=True, timeout=300, env=pip_environ,
    )
    assert installed.returncode == 0, installed.stderr
    # The dependencies come from this venv's site-packages (a path entry, so its
    # .pth files, among them the editable install of this checkout, are not read).
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PGBUS_")}
    environ.update(PYTHONPATH=os.pathsep.join(site.getsitepackages()), URL_PG=pg_url, URL_REDIS=redis_url)
    checked = subprocess.run([str(python), "-c", SCRIPT, str(target)], capture_output=True, text=True,
                             timeout=120, env=environ, cwd=str(tmp_path))
    assert checked.returncode == 0, checked.stderr + checked.stdout
    assert "WHEEL-OK" in checked.stdout
    worker = subprocess.run([str(target / "bin" / "pgbus-worker"), "--help"], capture_output=True, text=True,
                            timeout=60, env=environ, cwd=str(tmp_path))
    assert worker.returncode == 0 and "--queues" in worker.stdout
    site_packages = next((target / "lib").glob("python*/site-packages"))
    assert not (site_packages / "worker").exists()
