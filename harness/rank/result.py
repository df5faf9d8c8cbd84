"""What one rank measured: raw numbers only, JSON-serialisable so ranks in other processes
can report them; turning them into metrics is the collectors' job."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RankResult:
    """Raw measurements of one rank; JSON-serialisable so ranks in other processes can report."""

    rank: int
    world_size: int
    device_name: str
    settings: dict[str, Any]
    step_times: list[float] = field(default_factory=list)
    # Seconds of each warm-up step (the first holds compilation and IPEX's first rewrite)
    warmup_times: list[float] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    peak_memory: int | None = None
    energy_joules: float | None = None
    energy_reason: str | None = None
    quality: dict[str, float] | None = None
    quality_history: list[dict[str, Any]] = field(default_factory=list)
    target_reached: bool | None = None
    time_to_train: float | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    # Bytes this rank sent in each measured step, by kind (counted, harness/strategies/meter)
    comm_bytes: list[dict[str, int]] = field(default_factory=list)
    # Seconds per phase (forward, backward, exchange, optimizer, ...) of each measured step
    phase_times: list[dict[str, float]] = field(default_factory=list)
    # Bytes of parameters, gradients and optimizer state this rank holds after the steps
    state_bytes: dict[str, int] = field(default_factory=dict)
    role: str = "worker"
    strategy_stats: dict[str, Any] = field(default_factory=dict)
    param_checksums: list[float] = field(default_factory=list)
    # In-run peak readings of this rank's device: {"when", "flops", "memory_bandwidth", ...}.
    peak_readings: list[dict[str, Any]] = field(default_factory=list)
    # This node's fingerprint summary, from the first rank of each node of a multi-node run.
    node: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RankResult:
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
