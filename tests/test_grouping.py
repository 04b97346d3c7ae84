"""The suite's own scheduling: the tests of one built site run in one pytest-xdist worker, and a
hung test fails instead of holding the run.

Every test that reads the full site asks for ``site`` or ``html_dir``; ``tests/conftest.py`` puts
them in one xdist group so the site is built once, by one worker. When that grouping silently
stopped working (pytest 9.2 with pytest-xdist 3.8, and a hook that ran after xdist's), a second
worker waited 160 s on the build lock and the shard fixture was built twice. This runs the
project's own hook on a throwaway suite, the way ``nox -s tests`` runs pytest.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from conftest import ROOT

from conf import settings

THROWAWAY = '''
    import os

    import pytest


    @pytest.fixture
    def html_dir():
        return "not the real site"


    def _where(name):
        with open(os.environ["GROUPING_LOG"], "a") as fh:
            fh.write(f"{os.environ['PYTEST_XDIST_WORKER']} {name}\\n")


    @pytest.mark.parametrize("i", range(4))
    def test_reads_the_site(html_dir, i):
        _where(f"site-{i}")


    @pytest.mark.parametrize("i", range(4))
    def test_alone(i):
        _where(f"alone-{i}")
'''


def test_tests_of_the_site_share_one_worker(tmp_path):
    (tmp_path / "test_throwaway.py").write_text(textwrap.dedent(THROWAWAY))
    log = tmp_path / "where.log"
    env = {**os.environ, "GROUPING_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "conftest",
         "-p", "no:cacheprovider", "-v", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [line.split() for line in log.read_text().splitlines()]
    site_workers = {worker for worker, name in ran if name.startswith("site-")}
    assert len([n for _, n in ran if n.startswith("site-")]) == 4
    assert len(site_workers) == 1, f"the site's tests ran on {sorted(site_workers)}:\n{proc.stdout}"
    assert "test_reads_the_site[0]@site" in proc.stdout


HUNG = '''
    import threading


    def test_waits_for_ever():
        threading.Event().wait()  # a deadlock, as a forked pool's worker once had


    def test_fine():
        pass
'''


def test_a_hung_test_fails_and_names_where_it_hangs(tmp_path):
    """``nox -s tests`` passes ``settings.TESTS_TIMEOUT_ARGS``: a test that never returns fails
    where it waits (the stacks of the worker's other threads printed too), and the run goes on,
    instead of holding CI until it is killed. Here with the same arguments and a 3 s limit,
    under xdist as the suite runs. (``--timeout-method thread`` would kill the worker instead, and
    xdist then ran the hung test again on each replacement worker: 9 times here.)"""
    (tmp_path / "test_hung.py").write_text(textwrap.dedent(HUNG))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", *settings.TESTS_TIMEOUT_ARGS,
         "--timeout", "3", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Failed: Timeout (>3.0s) from pytest-timeout" in out, out[-3000:]
    assert "threading.Event().wait()" in out, "the failure does not show where the test hung"
    assert "1 failed, 1 passed" in out, out[-3000:]
