"""Print shell `export` lines that point uv at what pip is configured to read here.

uv does not read pip's configuration. Where pip takes wheels from a folder (find-links), extra
indexes or a constraints file, uv must take them from the same places, or it could install
other builds than pip would (a CUDA torch instead of the CPU wheel on disk, say).
"""
import shlex
import subprocess
import sys

# pip's option -> (uv's variable, how uv separates several values)
OPTIONS = {"find-links": ("UV_FIND_LINKS", ","), "index-url": ("UV_INDEX_URL", " "),
           "extra-index-url": ("UV_EXTRA_INDEX_URL", " "), "constraint": ("UV_CONSTRAINT", " "),
           "cert": ("SSL_CERT_FILE", " ")}


def exports(listing):
    """`pip config list`'s lines, e.g. global.find-links='/opt/wheels' or :env:.find-links='...'
    -> the `export` lines for uv; the environment's values win over the files'."""
    found = {}
    for line in sorted(listing.splitlines(), key=lambda line: line.startswith(":env:")):
        key, _, value = line.partition("=")
        option = key.rsplit(".", 1)[-1]
        if option in OPTIONS:
            found[option] = value.strip().strip("'\"").split()
    lines = []
    for option, values in found.items():
        name, sep = OPTIONS[option]
        lines.append(f"export {name}={shlex.quote(sep.join(values))}")
    return lines + ["export UV_INDEX_STRATEGY=unsafe-best-match",  # pip's: best over every index
                    "export UV_COMPILE_BYTECODE=1",  # as pip: else each first import compiles
                    "export UV_LINK_MODE=copy"]  # no warning where uv's cache is on another disk


if __name__ == "__main__":
    listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, check=True).stdout
    print("\n".join(exports(listing)))
