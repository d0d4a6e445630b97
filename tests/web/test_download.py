"""Downloads stream from a temporary file (never built in memory) that is removed once sent."""

from __future__ import annotations

import asyncio
from pathlib import Path

from starlette.responses import FileResponse

from nprof.store import Store
from nprof.web.download import download_response
from tests.conftest import tiny_profile


def test_download_is_a_file_response_cleaned_up_after_sending(tmp_path: Path) -> None:
    store = Store(tmp_path / "store")
    store.ingest(tiny_profile(), "t")
    for fmt in ("json", "csv"):
        resp = download_response(store, "t", fmt)
        assert isinstance(resp, FileResponse)
        path = Path(resp.path)
        assert path.is_file() and path.stat().st_size > 0
        tmp = next(p for p in path.parents if p.name.startswith("nprof-dl-"))
        assert resp.background is not None
        asyncio.run(resp.background())
        assert not tmp.exists()
