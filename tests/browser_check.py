"""The explorers in a real browser: JupyterLab on 127.0.0.1, driven by Chromium through playwright.

Each explorer (an ipywidgets `interactive` with a plot) gets two control changes, as a student's:
a slider's value typed into its readout, a dropdown's option picked. After each, the explorer's
plot must change and must not be blank. A widget's callback may run on a kernel subshell thread
(JupyterLab 4.6 handles widget messages there) while the inline backend redraws every open pyplot
figure: an explorer that draws with pyplot tears or blanks its plot here, not in a unit test.

    python tests/browser_check.py                    # the package's explorers (kit.viz), ~30 s
    python tests/browser_check.py notebooks/01_*.ipynb ...    # whole notebooks, every explorer
    MINISPEC_BROWSER_SHOTS=dir python tests/browser_check.py  # also save each plot as a PNG

Needs Debian's chromium and playwright's Python package (apt-get install chromium && pip install
playwright; no `playwright install`: the system browser is used) and jupyterlab.
tests/test_browser.py runs it under pytest.
"""
import base64
import contextlib
import io
import json
import os
import pathlib
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
HOW = "apt-get install chromium && pip install playwright"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

# The package's explorers, called as the notebooks call them (01, 04: trace_explorer; 02:
# pq_explorer); the last opens on a sampled view (its opening-view arguments, as 01's VIEW).
EXPLORERS = '''\
import torch
import minispec as ms
from minispec import viz
from minispec.kit.data import HELD_OUT, prompts
torch.set_num_threads(1)
target, draft = ms.load_model("target"), ms.load_model("draft")
PROMPTS = {f"{HELD_OUT[i % 6]} #{i}": ms.decode(prompts(1, offset=i)[0]) for i in (8, 3, 4, 9)}
DEMO = {"fibonacci": "def fibonacci(n):\\n    ", "class": "class Stack:\\n    def __init__(self):"}
---
viz.trace_explorer(target, draft, PROMPTS)
---
viz.pq_explorer(target, draft, ms.decode(prompts(1, offset=10)[0]))
---
viz.trace_explorer(target, ms.PromptLookupDrafter(max_n=3),
                   {f"held-out {i}": ms.decode(ids) for i, ids in enumerate(prompts(2))})
---
viz.trace_explorer(target, draft, DEMO, temperature=1.0)
'''


def missing():
    """Why the check cannot run here (None: it can)."""
    if not (shutil.which("chromium") or os.path.exists("/usr/bin/chromium")):
        return f"no Chromium at /usr/bin/chromium ({HOW})"
    for module, how in (("playwright", HOW), ("jupyterlab", "pip install jupyterlab")):
        try:
            __import__(module)
        except ImportError:
            return f"no {module} ({how})"
    return None


def explorer_notebook(path):
    """Write a notebook whose cells call each kit.viz explorer as the notebooks do."""
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
              "source": src.strip()} for src in EXPLORERS.split("---\n")]
    nb = {"cells": cells, "nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                      "language": "python"}}}
    path.write_text(json.dumps(nb, indent=1))
    return len(cells) - 1


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def lab(root, timeout=60):
    """A JupyterLab server on 127.0.0.1 serving `root`, with its own config and settings -> base
    URL and token; killed on exit."""
    port, token, home = _free_port(), secrets.token_hex(16), pathlib.Path(root) / ".jupyter-home"
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1",
           f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
           f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--ServerApp.allow_root=True", "--LabApp.expose_app_in_browser=True",
           "--LabApp.news_url=None", "--LabApp.extension_manager=readonly",
           "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    news = home / "settings" / "@jupyterlab" / "apputils-extension"
    news.mkdir(parents=True)  # no "Would you like to get notified about Jupyter news?" toast
    (news / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    log = open(home / "server.log", "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    log.flush()
                    tail = (home / "server.log").read_text()[-2000:]
                    raise RuntimeError(f"JupyterLab did not start:\n{tail}")
                time.sleep(0.3)
        yield url, token
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _gray(png):
    import numpy as np
    from PIL import Image
    return np.asarray(Image.open(io.BytesIO(png)).convert("L"))


def blank(png):
    """Why a PNG plot looks blank (None: it shows something): one or two shades, or almost all
    background."""
    import numpy as np
    _, counts = np.unique(_gray(png), return_counts=True)
    if len(counts) < 3:
        return f"{len(counts)} shade(s)"
    ink = 1 - counts.max() / counts.sum()
    return None if ink > 0.01 else f"{ink:.1%} of the pixels drawn"


def framed(png):
    """Whether a whole axes frame is drawn: near-black lines down at least half the height (two:
    left and right spines) and across at least 30% of the width (two). A torn plot, drawn by two
    threads at once, loses its lower half or more (bars are lighter than 50 of 255)."""
    import numpy as np
    dark = _gray(png) < 50

    def longest_runs(a):  # per column: the longest run of dark pixels
        best = cur = np.zeros(a.shape[1], int)
        for row in a:
            cur = np.where(row, cur + 1, 0)
            best = np.maximum(best, cur)
        return best
    h, w = dark.shape
    return (longest_runs(dark) >= h / 2).sum() >= 2 and (longest_runs(dark.T) >= 0.3 * w).sum() >= 2


JS_RUN_ALL = """async () => {
  const app = window.jupyterapp;
  const nb = app.shell.currentWidget;
  await nb.context.ready; await nb.sessionContext.ready;
  await app.commands.execute('notebook:run-all-cells');
}"""
JS_DONE = """() => {
  const nb = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  if (!nb || !nb.content || !nb.sessionContext.session) return null;
  const kernel = nb.sessionContext.session.kernel;
  const cells = nb.content.widgets.filter(c => c.model.type === 'code');
  const errors = [];
  for (const c of cells) for (let i = 0; i < c.model.outputs.length; i++) {
    const o = c.model.outputs.get(i).toJSON();
    if (o.output_type === 'error') errors.push(o.ename + ': ' + o.evalue);
  }
  const done = kernel && kernel.status === 'idle' && cells.every(c =>
    c.model.executionCount !== null
      && !(c.node.querySelector('.jp-InputPrompt')?.textContent || '').includes('*'));
  return {done, errors};
}"""
JS_PLOT = """(el) => {
  const imgs = el.querySelectorAll('.widget-output img');
  const img = imgs[imgs.length - 1];
  return img && img.complete && img.naturalWidth > 0 ? img.src : null;
}"""


def _wait(page, fn, arg=None, timeout=60, what="the page"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        out = page.evaluate(fn, arg) if arg is None else arg.evaluate(fn)
        if out:
            return out
        page.wait_for_timeout(200)
    raise TimeoutError(f"timed out waiting for {what}")


def _png(src):
    if not src.startswith("data:image/png;base64,"):
        raise ValueError(f"not an inline PNG: {src[:40]}")
    return base64.b64decode(src.split(",", 1)[1])


def _changes(box):
    """Two control changes for one explorer: (label, element, kind). A slider and a dropdown when
    it has both, else one slider moved twice."""
    def label(el):
        return el.query_selector(".widget-label").inner_text().strip()
    sliders = box.query_selector_all(".widget-slider")
    dropdowns = box.query_selector_all(".widget-dropdown")
    out = [(f"slider {label(s)}", s, "slider") for s in sliders[:1]]
    out += [(f"dropdown {label(d)}", d, "dropdown") for d in dropdowns[:1]]
    if len(out) == 1 and sliders:
        out.append((out[0][0] + " (again)", sliders[0], "slider"))
    return out


def _act(page, el, kind):
    """A student's change: the dropdown's next option, or a slider's value typed into its
    readout (a quarter of its range up, or down near the top)."""
    if kind == "dropdown":
        select = el.query_selector("select")
        options = select.evaluate("s => Array.from(s.options).map(o => o.value)")
        current = select.evaluate("s => s.value")
        select.select_option(next(o for o in options if o != current))
        return
    readout, handle = el.query_selector(".widget-readout"), el.query_selector(".noUi-handle")
    text = readout.inner_text().strip()
    lo, hi = (float(handle.get_attribute(a)) for a in ("aria-valuemin", "aria-valuemax"))
    value, step = float(text), (hi - lo) / 4
    new = value + step if value + step <= hi else value - step
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(f"{new:.2f}" if "." in text else str(round(new) if round(new) != value
                                                              else int(value) + 1))
    page.keyboard.press("Enter")


def _copy(nb, tmp):
    """Copy a notebook to tmp -> its path there. The repository's notebooks come with notebooks/
    and scripts/ (they read ../scripts), so that nothing runs in, or saves to, the checkout."""
    if ROOT / "notebooks" not in nb.parents:
        shutil.copy(nb, tmp)
        return nb.name
    for part in ("notebooks", "scripts"):
        if not (tmp / part).exists():
            shutil.copytree(ROOT / part, tmp / part)
    return nb.relative_to(ROOT).as_posix()


def check(notebooks, timeout=120, shots=None):
    """Open each notebook (paths) in JupyterLab, run all cells, change two controls of every
    explorer -> list of dicts (notebook, explorer, control, changed, blank: a reason or None),
    and the wall seconds."""
    from playwright.sync_api import sync_playwright
    start, results = time.time(), []
    with tempfile.TemporaryDirectory() as tmp, lab(tmp) as (url, token), sync_playwright() as p:
        names = [_copy(pathlib.Path(nb).resolve(), pathlib.Path(tmp)) for nb in notebooks]
        ctx = p.chromium.launch_persistent_context(
            os.path.join(tmp, ".chromium"), executable_path=shutil.which("chromium")
            or "/usr/bin/chromium", headless=True, args=ARGS, viewport={"width": 1400,
                                                                       "height": 1000})
        try:
            for name in names:
                results += _check_one(ctx, url, token, name, timeout, shots)
        finally:
            ctx.close()
    return results, time.time() - start


def _check_one(ctx, url, token, name, timeout, shots):
    page = ctx.new_page()
    page.goto(f"{url}/lab/tree/{name}?token={token}&reset", timeout=timeout * 1000)
    _wait(page, "() => !!(window.jupyterapp && window.jupyterapp.shell.currentWidget"
          " && window.jupyterapp.shell.currentWidget.sessionContext)", timeout=timeout,
          what="the notebook to open")
    page.evaluate(JS_RUN_ALL)
    state = _wait(page, f"() => {{ const s = ({JS_DONE})(); return s && s.done ? s : null; }}",
                  timeout=timeout, what=f"{name} to run")
    if state["errors"]:
        raise RuntimeError(f"{name}: {state['errors']}")
    out = []
    for i, box in enumerate(page.query_selector_all(".widget-interact")):
        box.scroll_into_view_if_needed()
        try:
            before = _wait(page, JS_PLOT, box, timeout=30, what="a plot")
        except TimeoutError:
            out.append(dict(notebook=name, explorer=i, control="(none)", changed=False,
                            blank="no plot image"))
            continue
        frame = framed(_png(before))
        for k, (label, el, kind) in enumerate(_changes(box)):
            _act(page, el, kind)
            deadline, after = time.time() + 30, before
            while after == before and time.time() < deadline:
                page.wait_for_timeout(100)
                after = box.evaluate(JS_PLOT) or before
            page.wait_for_timeout(300)  # a second redraw (torn, blank) would land now
            after = box.evaluate(JS_PLOT) or after
            png = _png(after)
            if shots:
                pathlib.Path(shots).mkdir(parents=True, exist_ok=True)
                (pathlib.Path(shots) / f"{pathlib.Path(name).stem}-{i}-{k}.png").write_bytes(png)
            torn = frame and not framed(png)  # it had its frame before any change
            out.append(dict(notebook=name, explorer=i, control=label, changed=after != before,
                            blank=blank(png) or ("torn: its axes frame is cut" if torn else None)))
            before = after
        if shots:
            box.screenshot(path=str(pathlib.Path(shots) / f"{pathlib.Path(name).stem}-{i}.png"))
    page.close()
    return out


def main(argv):
    why = missing()
    if why:
        print("skipped:", why)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        paths = argv or [pathlib.Path(tmp) / "explorers.ipynb"]
        if not argv:
            explorer_notebook(paths[0])
        results, wall = check(paths, timeout=300 if argv else 120,
                              shots=os.environ.get("MINISPEC_BROWSER_SHOTS"))
    for r in results:
        print(f"{r['notebook']:32} explorer {r['explorer']}  {r['control']:24} "
              f"changed: {r['changed']!s:5}  blank: {r['blank'] or 'no'}")
    bad = [r for r in results if not r["changed"] or r["blank"]]
    print(f"{len(results)} control changes, {len(bad)} broken, {wall:.0f} s")
    return 1 if bad or not results else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
