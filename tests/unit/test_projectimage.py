"""The lab builds the project's own Dockerfile from local bases (tools/devcluster/projectimage.py):
its build arguments are the Dockerfile's, and its cache key covers every file the build reads."""

from __future__ import annotations

import re

import pytest

from tools.devcluster import projectimage

pytestmark = pytest.mark.unit

DOCKERFILE = (projectimage.ROOT / "Dockerfile").read_text()


def test_the_local_bases_replace_every_base_argument_of_the_dockerfile() -> None:
    declared = set(re.findall(r"^ARG (\w+)=", DOCKERFILE, re.M))
    assert set(projectimage.build_args("py", "tools")) == declared
    # Each argument is a base (a FROM), so no upstream base is left in a local build.
    assert {f"${{{name}}}" for name in declared} == {f for f in re.findall(r"^FROM (\S+)", DOCKERFILE, re.M)
                                                    if f.startswith("$")}


def test_the_cache_key_covers_what_the_dockerfile_copies() -> None:
    copied = {src.rstrip("/") for line in re.findall(r"^COPY (?!--from)(.+)$", DOCKERFILE, re.M)
              for src in line.split()[:-1]}
    assert set(projectimage.CONTEXT) == copied | {"Dockerfile"}
    files = projectimage.context_files(projectimage.ROOT)
    names = {str(p.relative_to(projectimage.ROOT)) for p in files}
    assert {"Dockerfile", "pyproject.toml", "sidecar/raftset/sidecar/__main__.py"} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_any_changed_byte_or_name_changes_the_key() -> None:
    base = {"Dockerfile": b"FROM x\n", "raftset/a.py": b"A = 1\n"}
    key = projectimage.content_key(base)
    assert re.fullmatch(r"[0-9a-f]{16}", key) and projectimage.content_key(dict(base)) == key
    assert projectimage.content_key({**base, "raftset/a.py": b"A = 2\n"}) != key
    assert projectimage.content_key({"Dockerfile": b"FROM x\n", "raftset/b.py": b"A = 1\n"}) != key
    assert projectimage.content_key({**base, "base:python": b"other"}) != key
