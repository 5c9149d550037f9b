"""CI's installs: .ci/run has uv install the README's packages, and .ci/uv_env.py points uv at the
places pip is configured to read (uv reads none of pip's configuration). A wrong mapping would let
uv install other builds than pip (a CUDA torch from the index instead of the CPU wheel on disk)."""
import importlib.util
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "uv_env.py"
LISTING = """:env:.find-links='/env/wheels /env/more'
global.find-links='/opt/wheels'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.constraint='/etc/xdg/pip/constraints.txt'
global.timeout='60'
"""


def exports(listing):
    spec = importlib.util.spec_from_file_location("uv_env", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # its __main__ block (pip config list) does not run
    return module.exports(listing)


def test_pip_s_places_become_uv_s():
    lines = exports(LISTING)
    assert "export UV_FIND_LINKS=/env/wheels,/env/more" in lines  # the environment's wins; commas
    indexes = "'file:///opt/pypi/simple file:///opt/pypi-more/simple'"
    assert f"export UV_EXTRA_INDEX_URL={indexes}" in lines
    assert "export UV_CONSTRAINT=/etc/xdg/pip/constraints.txt" in lines
    assert "export UV_COMPILE_BYTECODE=1" in lines  # as pip compiles at install
    assert not any("60" in line for line in lines)  # an option uv has no variable for is left out


def test_no_configuration_leaves_uv_s_defaults():
    assert all("INDEX_URL" not in line and "FIND_LINKS" not in line for line in exports(""))


def test_the_lines_set_the_variables_in_bash():
    """.ci/run evals them: the quoting must give bash back the values, spaces included."""
    shown = 'echo "$UV_EXTRA_INDEX_URL|$UV_FIND_LINKS"'
    out = subprocess.run(["bash", "-c", f'eval "$1"; {shown}', "_", "\n".join(exports(LISTING))],
                         capture_output=True, text=True, check=True).stdout
    assert out == "file:///opt/pypi/simple file:///opt/pypi-more/simple|/env/wheels,/env/more\n"
