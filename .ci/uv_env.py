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

listing = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                         text=True, check=True).stdout
found = {}
lines = listing.splitlines()  # e.g. global.find-links='/opt/wheels', :env:.find-links='...'
for line in sorted(lines, key=lambda line: line.startswith(":env:")):  # the environment's last
    key, _, value = line.partition("=")
    option = key.rsplit(".", 1)[-1]
    if option in OPTIONS:
        found[option] = value.strip().strip("'\"").split()
for option, values in found.items():
    name, sep = OPTIONS[option]
    print(f"export {name}={shlex.quote(sep.join(values))}")
print("export UV_INDEX_STRATEGY=unsafe-best-match")  # pip's way: the best match over every index
print("export UV_COMPILE_BYTECODE=1")  # as pip does: else each first import compiles, in the tests
print("export UV_LINK_MODE=copy")  # no warning where uv's cache lies on another file system
