"""The package's explorers work where students use them: in JupyterLab, in a real browser.

A notebook written here calls each kit.viz explorer as the notebooks do (trace_explorer as in 01
and 04, pq_explorer as in 02, and one opening on a sampled view). JupyterLab, bound to 127.0.0.1
with a token, runs it in Chromium (Debian's, driven by playwright); each explorer then gets two
control changes (a slider and a dropdown; pq_explorer's one slider twice), and after each its plot
must have changed and be neither blank nor torn. In a unit test the callback runs on the only
thread; in JupyterLab 4.6 it runs on a kernel subshell thread while the inline backend redraws
every open pyplot figure, and an explorer drawing with pyplot came out blank or torn after its
first change (6 of 6 changes, tried). About 30 s. A generated notebook, not the course's: the
notebooks take 30-60 s each to run (python tests/browser_check.py notebooks/*.ipynb checks them).

Skipped where there is no browser (apt-get install chromium && pip install playwright); .ci/run
installs one and sets MINISPEC_REQUIRE_BROWSER=1, which turns the skip into a failure.
"""
import importlib.util
import os
import pathlib

import pytest

_spec = importlib.util.spec_from_file_location(
    "browser_check", pathlib.Path(__file__).with_name("browser_check.py"))
browser_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(browser_check)


def test_every_explorer_redraws_in_a_browser(tmp_path):
    why = browser_check.missing()
    if why:
        if os.environ.get("MINISPEC_REQUIRE_BROWSER"):
            pytest.fail(f"MINISPEC_REQUIRE_BROWSER is set, but {why}")
        pytest.skip(why)
    notebook = tmp_path / "explorers.ipynb"
    n = browser_check.explorer_notebook(notebook)
    results, wall = browser_check.check([notebook])
    for r in results:
        print(r)
    print(f"{wall:.0f} s")
    assert sorted({r["explorer"] for r in results}) == list(range(n)), results
    assert len(results) == 2 * n, results
    bad = [r for r in results if not r["changed"] or r["blank"]]
    assert not bad, bad
