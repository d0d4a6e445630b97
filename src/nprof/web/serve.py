"""`nprof view` (output format db): ingest into the store, then serve the viewer.

Contract: `view_from_args(args) -> (Outcome, serve)` is the CLI-facing entry point: it
ingests and binds the port, and returns what the CLI prints first and `serve()`, which
runs the server until Ctrl-C (None with `--ingest-only`); nothing here prints:
* `-s PROFILE` ingests the file (id from `--db-bucket`, else derived; an unchanged
  file already stored is reused; `--force` re-ingests); the outcome says
  `View profile at http://localhost:<port>/profile/<id>`;
* `-d DIR` ingests every `profile_rank_<i>.ntff` of a multi-worker capture (or of
  `nprof capture -s DIR -- torchrun ...`: one system profile per rank, with the device
  profiles beside each) as the ranks of one group — ranks of several captures (one per node) are first put
  on one clock (`capture.rendezvous.aligned_files`) —; the outcome gives the `/profile_cc/<group id>` link;
* neither: serves the list of stored profiles (`/`);
* `--ingest-only`: the outcome says `Profile "<id>" is ready to view`;
* the port is bound before anything is ingested or printed: a port in use is a
  one-line NprofError suggesting `--port N` and the store is unchanged. Serves with
  uvicorn until Ctrl-C. `--host ''` is refused; with a non-loopback `--host` the outcome
  carries a warning that the viewer has no authentication; requests naming another host or
  state-changing requests from another origin are refused (`nprof.web.guard`).
`ingest_directory(store, dir, ...)` is the library half of `-d`.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import re
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nprof.errors import NprofError
from nprof.outcome import Outcome
from nprof.store import Store, derive_id
from nprof.store.rows import natural_key
from nprof.store.system_links import ingest_device_profiles
from nprof.web.guard import WILDCARD, allowed_names, is_loopback

if TYPE_CHECKING:
    from nprof.analysis.thresholds import Thresholds

RANK_FILE = re.compile(r"profile_rank_(\d+)\.ntff$")


def ingest_directory(
    store: Store,
    directory: str,
    *,
    group_id: str | None,
    display_name: str | None,
    force: bool,
    thresholds: Thresholds | None = None,
) -> dict[str, Any]:
    """Ingest every profile_rank_<i>.ntff of `directory` as one group, findings by `thresholds` (None: the
    defaults, which leave the group id as it always was); returns the group entry."""
    d = Path(directory).expanduser()
    if not d.is_dir():
        raise NprofError(f"{d}: not a directory; -d takes the -s directory of a multi-worker capture")
    files = sorted((p for p in d.iterdir() if RANK_FILE.search(p.name)), key=lambda p: natural_key(p.name))
    if not files:
        raise NprofError(f"{d}: no profile_rank_<i>.ntff files; capture with -r/--collectives-workers-per-node")
    fp = "|".join(f"{p.resolve()}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in files)
    if thresholds is not None and thresholds.changed():
        fp += f"|thresholds {sorted(thresholds.changed().items())}"
    gid = group_id or derive_id(d.resolve().name, fp)
    name = display_name or d.resolve().name
    old = store.catalog.group(gid)
    if old is not None and not force:
        if group_id is not None or old.get("fingerprint") != hashlib.sha1(fp.encode()).hexdigest():
            raise NprofError(f'group "{gid}" is already in the store; use --force to replace it')
        return old
    from nprof.capture.rendezvous import aligned_files
    from nprof.store.group_ingest import ingest_group  # index + parallel ingest of the ranks (multi-worker)

    rank_files = [(int(m.group(1)), p) for p in files if (m := RANK_FILE.search(p.name))]
    with store.claim(f"{gid}.group"), tempfile.TemporaryDirectory(prefix="nprof-align-") as work:
        clocked = aligned_files(rank_files, Path(work))  # ranks of several captures (nodes): one clock
        ranks = _all_or_nothing(
            store,
            gid,
            [r for r, _ in rank_files],
            # aligned copies live in `work` only: their ranks are ingested now, not on first open
            lambda: ingest_group(
                store, clocked, gid, name, thresholds=thresholds, eager=True if clocked is not rank_files else None
            ),
        )
        for (_rank, pid), (_, path) in zip(ranks, rank_files, strict=True):  # a system profile's executions
            if store.catalog.get(pid) is not None:  # (a large group's ranks are ingested when first opened)
                ingest_device_profiles(store, pid, path, force=force, thresholds=thresholds)
        group = store.register_group(gid, name, ranks, force=True)

        def stamp(data: dict[str, Any]) -> dict[str, Any]:
            g = data["groups"][gid]
            g["fingerprint"] = hashlib.sha1(fp.encode()).hexdigest()
            g["sources"] = {str(rank): str(path.resolve()) for rank, path in rank_files}
            g["thresholds"] = thresholds.changed() if thresholds is not None else {}
            return g

        group = store.catalog.update(stamp)
    return group


def _all_or_nothing(
    store: Store, gid: str, ranks: list[int], ingest: Callable[[], list[tuple[int, str]]]
) -> list[tuple[int, str]]:
    """Run `ingest()`; if it fails, remove every rank profile it wrote (and, with --force, the group
    it replaced), so a failed `view -d` leaves no dangling catalog entry."""
    try:
        return ingest()
    except BaseException:
        for rank in ranks:
            pid = f"{gid}.rank{rank}"
            if store.catalog.get(pid) is not None:
                with contextlib.suppress(NprofError):
                    store.delete(pid)
        raise


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise NprofError(f"port {port} is already in use; choose another with --port N") from exc
        if exc.errno == errno.EACCES:
            raise NprofError(f"not allowed to listen on port {port}; use --port N with N >= 1024") from exc
        raise NprofError(f"cannot listen on {host}:{port} ({exc.strerror}); check --host and --port") from exc
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def _url_host(host: str) -> str:
    if host in WILDCARD or is_loopback(host):
        return "localhost"
    return f"[{host}]" if ":" in host else host


def check_host(host: str) -> str | None:
    """Refuse an empty/blank --host; the no-authentication warning for a non-loopback address, else None."""
    if not host.strip():
        raise NprofError(
            "--host '' is ambiguous; give --host 127.0.0.1 (this machine only) or --host 0.0.0.0 (every interface)"
        )
    if is_loopback(host):
        return None
    where = "every interface" if host in WILDCARD else host
    return (
        f"nprof view: WARNING: listening on {where}: the viewer has no authentication; anyone who can reach "
        f"this port can read, change and delete the stored profiles"
    )


def _ingest(store: Store, args: argparse.Namespace) -> tuple[str, str | None]:
    """Ingest -s or -d as asked; (page path, id ready to view or None)."""
    profile_arg = getattr(args, "profile", None)
    directory = getattr(args, "directory", None)
    thresholds = getattr(args, "thresholds", None)
    if profile_arg and not directory:
        from nprof.capture.multiworker import worker_dir_for

        workers = worker_dir_for(profile_arg)  # -s DIR/profile.ntff of a multi-worker capture: its ranks
        if workers is not None:
            directory, profile_arg = str(workers), None
    if directory:
        group = ingest_directory(
            store,
            directory,
            group_id=args.db_bucket,
            display_name=args.display_name,
            force=args.force,
            thresholds=thresholds,
        )
        return f"/profile_cc/{group['id']}", group["id"]
    if profile_arg:
        entry, _reused = store.ingest_file(
            profile_arg,
            profile_id=args.db_bucket,
            display_name=args.display_name,
            force=args.force,
            thresholds=thresholds,
        )
        # a system profile's executions
        ingest_device_profiles(store, entry["id"], profile_arg, force=args.force, thresholds=thresholds)
        return f"/profile/{entry['id']}", entry["id"]
    return "/", None


def view_from_args(args: argparse.Namespace) -> tuple[Outcome, Callable[[], None] | None]:
    """`nprof view` with --output-format db (see module doc): what to print, then the server to run."""
    store = Store(args.db)
    program = getattr(args, "program", None)
    if program:  # optional: validated, and checked against the profile where it records its program
        from nprof.capture.program_match import check_program

        profile = getattr(args, "profile", None)
        check_program(Path(program).expanduser(), Path(profile).expanduser() if profile else None)
    root = getattr(args, "nki_source_root", None)
    if root and not Path(root).expanduser().is_dir():
        raise NprofError(f"--nki-source-root {root}: no such directory; give the folder holding the kernel files")
    if getattr(args, "profile", None) and getattr(args, "directory", None):
        raise NprofError("give either -s PROFILE or -d DIR, not both")
    if args.ingest_only and not (args.profile or args.directory):
        raise NprofError("--ingest-only needs -s PROFILE or -d DIR")
    sock = None
    if not args.ingest_only:
        warning = check_host(args.host)
        sock = _bind(args.host, args.port)  # before the ingest: a busy port changes nothing in the store
    try:
        path, ready = _ingest(store, args)
    except BaseException:
        if sock is not None:
            sock.close()
        raise
    if sock is None:
        return Outcome(f'Profile "{ready}" is ready to view\n'), None
    what = "profile" if ready else "profiles"
    notes = [f"nprof view: serving the store {store.dir} on {args.host}:{args.port}; Ctrl-C to stop"]
    if warning:
        notes.append(warning)
    outcome = Outcome(f"View {what} at http://{_url_host(args.host)}:{args.port}{path}\n", tuple(notes))
    listening = sock

    def serve() -> None:
        """Serve the viewer on the bound socket until Ctrl-C, then close the socket and the store."""
        import uvicorn

        from nprof.web.app import create_app

        app = create_app(store, hosts=allowed_names(args.host), source_root=root)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        try:
            uvicorn.Server(config).run(sockets=[listening])
        finally:
            listening.close()
            store.close()

    return outcome, serve
