"""Downloads stream from a temporary file (never built in memory) that is removed once sent."""

from __future__ import annotations

import asyncio
import threading
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
        _run_in_own_thread(resp.background)
        assert not tmp.exists()


def _run_in_own_thread(task) -> None:
    """Run an async background task to completion on a fresh loop in its own thread (the test thread may
    already run an event loop, e.g. after a playwright test in the same worker)."""
    worker = threading.Thread(target=lambda: asyncio.run(task()))
    worker.start()
    worker.join()
