"""Settings for every test run.

Tool discovery ranks lexically unless a test asks for embeddings: the bundled embedding model
(`heron[embeddings]`) would otherwise embed each test's catalogue into the user's cache file
and make rankings depend on what is installed. Tests of the dense path pass an embedder, or
clear the switch with `monkeypatch.delenv`. Subprocesses (`heron` in the e2e tests) inherit it.
"""

from __future__ import annotations

import os

os.environ.setdefault("HERON_DISCOVERY_EMBEDDINGS", "off")
