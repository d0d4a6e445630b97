"""Record what the nprof backend does on the host during a torch capture, for the system profile.

Contract:
* `DevicePolicy.parse("all" | "nth:N" | "none" | "default")` says which executions of each compiled
  graph keep their device profile: every one, the N-th (from 1), none, or by default the first
  execution after warm-up — the second when a graph ran at least twice, else its only one.
* `SystemRecorder(policy)` is a `nprof.compiler.runtime.OBSERVERS` callable: it keeps every
  `RuntimeEvent` (compile, cache_hit, fallback, h2d, launch, d2h) with the training step it happened
  in (a launch whose program has collectives also keeps their rows: `collectives`, each with the host's
  measured `host_start_ns`/`host_end_ns` of its data exchange when the run recorded them; every launch with a
  device profile keeps its `preset` and `preset_assumptions`), and the device Profiles the policy selects.
  `install()` / `uninstall()` add and remove it.
* `write(directory)` writes `directory/execs.json` (a list of event records, each with `step` and
  `device_profile`: the file name of its device profile or null) and the selected device profiles as
  `directory/devices/<module>_exec<k>.ntff`; returns the number of launches recorded.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import orjson

from nprof.errors import NprofError

EXEC_LOG = "execs.json"
DEVICES = "devices"


@dataclass(frozen=True)
class DevicePolicy:
    """Which executions keep their device profile (see module doc)."""

    mode: str  # all, nth, none or default
    nth: int = 0  # for mode nth: the execution number, from 1

    @classmethod
    def parse(cls, text: str) -> DevicePolicy:
        """`all`, `none`, `default` or `nth:N` (N >= 1); NprofError with the accepted forms otherwise."""
        if text in ("all", "none", "default"):
            return cls(text)
        head, _, number = text.partition(":")
        if head == "nth" and number.isdigit() and 1 <= int(number) <= 1_000_000:
            return cls("nth", int(number))
        raise NprofError(f"--device-profile {text!r}: use all, none, or nth:N (N >= 1)")

    def keeps(self, index: int) -> bool:
        """True when execution `index` (from 0) may be kept while the run goes on."""
        if self.mode == "all":
            return True
        if self.mode == "nth":
            return index == self.nth - 1
        return self.mode == "default" and index <= 1

    def final(self, indices: list[int]) -> set[int]:
        """The kept indices of one graph once the run is over (default: the 2nd if it ran twice, else the 1st)."""
        if self.mode != "default":
            return set(indices)
        return {1} if 1 in indices else set(indices[:1])


def _collective_records(profile: Any) -> list[dict[str, Any]]:
    """An execution's simulated collectives (for the system view's CC rows), each with the host's measured
    exchange span (`host_start_ns`, `host_end_ns`, Unix ns) when the device profile recorded it."""
    from nprof.device.process_group import EXCHANGE_META

    rows = profile.collectives.select(["id", "kind", "bytes", "ts", "duration", "wait_ns", "algorithm"]).to_pylist()
    spans = orjson.loads(profile.info.meta.get(EXCHANGE_META) or "[]")
    for row in rows:  # op id k of the execution = its k-th collective in program order = its k-th exchange
        if 0 <= int(row["id"]) < len(spans):
            row["host_start_ns"], row["host_end_ns"] = (int(t) for t in spans[int(row["id"])])
    return rows


class SystemRecorder:
    """Collects backend events and selected device profiles during a capture (see module doc)."""

    def __init__(self, policy: DevicePolicy) -> None:
        self.policy = policy
        self.events: list[dict[str, Any]] = []
        self._profiles: dict[tuple[str, int], Any] = {}

    def __call__(self, event: Any) -> None:
        from nprof.capture.torch_session import TorchSession

        session = TorchSession.active
        record = {k: v for k, v in asdict(event).items() if k != "profile"}
        record["step"] = session.step_num if session is not None else 0
        if event.kind == "launch" and event.profile is not None:
            info = event.profile.info  # the preset it ran on and that preset's assumed figures (trn3), if any
            record["preset"], record["preset_assumptions"] = info.preset, info.meta.get("preset_assumptions")
            if event.profile.collectives.num_rows:
                record["collectives"] = _collective_records(event.profile)
        self.events.append(record)
        if event.kind == "launch" and event.profile is not None and self.policy.keeps(event.exec_index):
            self._profiles[(event.module, event.exec_index)] = event.profile

    def install(self) -> None:
        from nprof.compiler.runtime import OBSERVERS

        OBSERVERS.append(self)

    def uninstall(self) -> None:
        runtime = sys.modules.get("nprof.compiler.runtime")
        if runtime is not None and self in runtime.OBSERVERS:
            runtime.OBSERVERS.remove(self)

    def _kept(self) -> dict[tuple[str, int], Any]:
        """The device profiles the policy keeps once the run is over."""
        by_module: dict[str, list[int]] = {}
        for module, index in sorted(self._profiles):
            by_module.setdefault(module, []).append(index)
        keep = {(m, i) for m, indices in by_module.items() for i in self.policy.final(indices)}
        return {key: p for key, p in self._profiles.items() if key in keep}

    def write(self, directory: Path) -> int:
        """Write the event log and the kept device profiles into `directory`; returns the launch count."""
        kept = self._kept()
        names = {key: f"{key[0]}_exec{key[1]}.ntff" for key in kept}
        if kept:
            (directory / DEVICES).mkdir(parents=True, exist_ok=True)
        for key, profile in kept.items():
            profile.save(directory / DEVICES / names[key])
        for record in self.events:
            key = (record["module"], record["exec_index"])
            record["device_profile"] = names.get(key) if record["kind"] == "launch" else None
        (directory / EXEC_LOG).write_bytes(orjson.dumps(self.events))
        return sum(1 for r in self.events if r["kind"] == "launch")
