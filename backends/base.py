"""The three axes a run is placed on: compute backend, communication backend, launcher."""
from __future__ import annotations

import contextlib
import importlib.util
import signal
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from harness.core.registry import Registry


@dataclass(frozen=True)
class Availability:
    """Whether a choice can run here and, if not, why (shown by `dtbench list`, kept in records)."""

    available: bool
    reason: str | None = None

    @classmethod
    def yes(cls) -> Availability:
        return cls(True, None)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)


def module_available(name: str) -> bool:
    """True when a module could be imported, without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


class StepTimer(ABC):
    """Times training steps without adding a host sync per step where the device is async."""

    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    # Steps whose times settled() may leave out: a device timer reads each step this many
    # steps late, so that reading never waits for the device to drain its queue.
    lag: int = 0

    @abstractmethod
    def samples(self) -> list[float]:
        """Per-step wall times in seconds, in step order (on a device: waits for all)."""

    def settled(self) -> list[float]:
        """The times known without waiting for the device's newest work: every step but the
        last `lag`; all of them on the host."""
        return self.samples()

    def cpu_samples(self) -> list[float]:
        """Per-step CPU seconds of this process (user + system, every thread), in step order;
        empty where the timer does not read them (a device's steps run on the device)."""
        return []


class ComputeBackend(ABC):
    """Where kernels run: device placement, precision contexts, timing and memory queries."""

    name: ClassVar[str]
    precisions: ClassVar[tuple[str, ...]]
    # Whether the launching process measures the device only in a child process of its own
    # (a GPU touched from it would keep a context and cached memory while the ranks run).
    probes_in_own_process: ClassVar[bool] = False

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability: ...

    @abstractmethod
    def device(self, local_rank: int = 0) -> torch.device: ...

    def bind(self, local_rank: int, share: bool = False) -> torch.device:
        """The device of the rank with this local rank on its node, made this process's
        current device where the backend has one: before any collective and any model.
        `share`: ranks may share a device (a GPU backend refuses it otherwise)."""
        return self.device(local_rank)

    @abstractmethod
    def configure(self, threads: int, precision: str) -> dict[str, Any]:
        """Apply process-wide settings (threads, TF32, cudnn.benchmark); return what was set."""

    def rank_threads(self, threads: int) -> int:
        """The CPU threads a rank that asks for `threads` (0: the default) runs with; known
        before it starts, so that a cached peak can be chosen for it."""
        return threads or torch.get_num_threads()

    def prepare_model(self, model: torch.nn.Module, device: torch.device,
                      channels_last: bool, compile_model: bool) -> torch.nn.Module:
        model = model.to(device)
        if channels_last:
            model = model.to(memory_format=torch.channels_last)
        if compile_model:
            model = torch.compile(model)  # type: ignore[assignment]
        return model

    @contextlib.contextmanager
    def autocast(self, device: torch.device, precision: str) -> Iterator[None]:
        if precision == "fp32":
            yield
            return
        dtype = torch.bfloat16 if precision == "bf16" else torch.float16
        with torch.autocast(device.type, dtype=dtype):
            yield

    def grad_scaler(self, precision: str) -> Any | None:
        """A gradient scaler for fp16, or None where the precision needs none."""
        return None

    def model_unsupported(self, model: torch.nn.Module, precision: str) -> str | None:
        """Why this device cannot train `model` in `precision` (the run is a skipped record
        that says so), or None."""
        return None

    @abstractmethod
    def timer(self, device: torch.device) -> StepTimer: ...

    def synchronize(self, device: torch.device) -> None:
        """Wait for queued work (no-op on the CPU)."""

    @abstractmethod
    def reset_peak_memory(self, device: torch.device) -> None: ...

    def release_freed_memory(self, device: torch.device) -> None:
        """Give memory that is freed but kept by an allocator back to the system, so that the
        harness's own work (the in-run peak probe) does not stay in the run's footprint."""

    @abstractmethod
    def peak_memory(self, device: torch.device) -> int:
        """Peak bytes since the last reset: resident (CPU) or allocated (device)."""

    def memory_details(self, device: torch.device) -> dict[str, int | None]:
        """Memory figures beside peak_memory (a GPU's reserved and in-use bytes); none here."""
        return {}

    def device_key(self, device: torch.device) -> str | None:
        """What identifies the physical device for counting it once (a GPU's UUID); None where
        each rank measures its own share (CPU ranks take their share of the cores)."""
        return None

    def device_state(self, device: torch.device) -> dict[str, Any] | None:
        """What of the device's configuration bounds its peak (a GPU's power limit and clocks):
        a cached peak holds only while it is unchanged; None where nothing is read."""
        return None

    def free_memory(self, device: torch.device) -> int | None:
        """Bytes free on the device now (a GPU's, after the model is placed); None where the
        device's memory is the host's."""
        return None

    def energy_meter(self, device: torch.device) -> EnergyMeter | None:
        """A counter of joules where the hardware has one, else None."""
        return None

    def energy_unavailable_reason(self) -> str:
        return "no energy counter on this backend"

    def clocks(self, device: torch.device) -> dict[str, Any] | None:
        """The device's clocks now and what limits them, where the backend can read them."""
        return None

    def device_name(self, device: torch.device) -> str:
        return device.type

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """Library versions and hardware features that explain this backend's numbers."""


class EnergyMeter(ABC):
    """Reads a cumulative energy counter in joules, per domain (a GPU board, a CPU package,
    its DRAM) under a key that names the physical domain, so that ranks sharing one count
    it once."""

    # what the counter measures, said in the record (a board or a package, not wall power)
    covers: str = "the device"

    @abstractmethod
    def joules(self) -> float: ...

    def by_domain(self) -> dict[str, float]:
        return {"device": self.joules()}

    def close(self) -> None:
        """Release the counter (a sampling thread, a library session)."""


class CommBackend(ABC):
    """How gradients move between ranks (torch.distributed process group backend)."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability: ...


# Deaths that usually follow another rank's failure rather than cause one: SIGTERM is how
# torchrun, mpirun and dtbench stop the ranks left after a failure, and gloo aborts a rank
# (SIGABRT) whose peer vanished in the middle of a collective.
CONSEQUENCE_SIGNALS = frozenset({signal.SIGTERM, signal.SIGABRT})


def killed_by_cause(code: int) -> bool:
    """An exit code that says the process was killed by a signal that is itself a cause."""
    return code < 0 and -code not in CONSEQUENCE_SIGNALS


def signal_name(code: int) -> str:
    """SIGKILL for the exit code -9."""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Launcher(ABC):
    """How ranks are started: spawned here, torchrun, mpirun, or srun in a Slurm allocation;
    each launcher also reads its own failure output."""

    name: ClassVar[str]

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability: ...

    @abstractmethod
    def commands(self, spec: Any, launch: Any, rank_args: list[str],
                 forward: Sequence[str]) -> list[Any]:
        """The processes that start this node's ranks (LaunchCommand list); `forward` names
        the environment variables that ranks on other hosts must be given."""

    @property
    def names_killed_ranks(self) -> bool:
        """Whether this launcher's output says which ranks a signal killed: a rank that
        vanished under it may then have been stopped after a peer failed."""
        return False

    def killed_ranks(self, output: str) -> list[tuple[int, int]]:
        """(rank, -signal) for each rank that this launcher's output says a signal killed,
        leaving out CONSEQUENCE_SIGNALS; the launcher's root cause first."""
        return []

    def failure_reason(self, output: str) -> str | None:
        """The first rank this launcher's output says a signal killed, as a run's failure."""
        kills = self.killed_ranks(output)
        if not kills:
            return None
        rank, code = kills[0]
        return f"rank {rank} killed by {signal_name(code)} ({self.name})"

    def rank_lines(self, lines: list[str], rank: int) -> list[str]:
        """What `rank` printed, out of a log that several ranks share ([] where this launcher
        does not mark whose a line is)."""
        return []


COMPUTE_BACKENDS: Registry[type[ComputeBackend]] = Registry("backend")
COMM_BACKENDS: Registry[type[CommBackend]] = Registry("comm backend")
LAUNCHERS: Registry[type[Launcher]] = Registry("launcher")
