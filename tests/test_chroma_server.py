"""Semantic memory against a real ``chroma run`` server, as several app processes share it."""

from __future__ import annotations

import uuid

import pytest

from skilldeck.tools.vectors import VectorIndex, open_chroma

pytestmark = [pytest.mark.L2, pytest.mark.server]


def test_two_app_processes_share_one_chroma_server(chroma_url: str) -> None:
    user = f"u-{uuid.uuid4().hex}"  # the server is shared by the whole session
    writer = VectorIndex(open_chroma(url=chroma_url))
    reader = VectorIndex(open_chroma(url=chroma_url))  # another process's client and cache
    writer.add(user, ["a"], ["I drink green tea every morning"], ["user"], [100.0], ["t"])
    assert [h.id for h in reader.query(user, text="tea", role="user", since=0.0)] == ["a"]
    writer.add(user, ["b"], ["Green tea with jasmine is my favourite"], ["user"], [200.0], ["t"])
    filtered = reader.query(user, text="jasmine tea", role="user", since=150.0)
    assert [h.id for h in filtered] == ["b"]  # the reader's cache reloaded from the server
    assert reader.query("someone-else", text="tea") == []
