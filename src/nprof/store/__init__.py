"""The embedded store: DuckDB files per profile, a JSON catalog, and the viewer's queries.

Public API: `Store` (ingest, list, rename, delete, read-only sessions), `NotFound`,
`Annotations` (markers and marker sets), `check_id`, `derive_id`,
`default_store_path`, and the query functions `viewport`, `rows_answer`,
`event_details`, `search`, `box_select`, `profile_answer`, `summary_answer`,
`table_answer`. See each module's docstring for its contract.
"""

from nprof.store.annotations import Annotations
from nprof.store.catalog import check_id, derive_id
from nprof.store.details import event_details
from nprof.store.info import profile_answer, public_entry, summary_answer, table_answer
from nprof.store.search import SEARCH_FIELDS, box_select, search
from nprof.store.store import NotFound, Store, default_store_path
from nprof.store.view import rows_answer, viewport

__all__ = [
    "SEARCH_FIELDS",
    "Annotations",
    "NotFound",
    "Store",
    "box_select",
    "check_id",
    "default_store_path",
    "derive_id",
    "event_details",
    "profile_answer",
    "public_entry",
    "rows_answer",
    "search",
    "summary_answer",
    "table_answer",
    "viewport",
]
