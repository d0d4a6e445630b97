"""The web viewer: FastAPI app (`create_app(store)`), JSON API (docs/api.md), `nprof view` serving.

Importing this package is cheap; uvicorn loads only when serving.
"""

from nprof.web.app import create_app

__all__ = ["create_app"]
