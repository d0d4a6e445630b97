"""The Profile file (our NTFF-like format): schemas, the `Profile` model, save/load."""

from nprof.profile.model import Profile, ProfileInfo, TensorInfo, make_table
from nprof.profile.schema import ENGINES, FORMAT, SCHEMA_VERSION, TABLES

__all__ = ["ENGINES", "FORMAT", "SCHEMA_VERSION", "TABLES", "Profile", "ProfileInfo", "TensorInfo", "make_table"]
