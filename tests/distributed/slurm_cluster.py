"""A real one-node Slurm cluster for tests: Debian's slurmctld, slurmd and munge.

    with slurm_cluster() as cluster:          # raises ClusterUnavailable with a reason
        subprocess.run(["salloc", "-n2", ...], env=cluster.env(os.environ))

`ensure_installed()` installs the packages with apt-get when they are missing (root only;
`apt-get update` is run only if the first attempt fails). `OneNodeCluster` writes a minimal
slurm.conf for this host into a temporary directory, creates a MUNGE key there, and starts
munged, slurmctld and slurmd in the foreground as child processes, each with its own socket,
ports, state, pid and log files in that directory. Nothing under /etc is written, and the
daemons' ports are free ones, so a cluster already running on the machine is not disturbed.
Clients find the cluster through SLURM_CONF (`cluster.env()`).

The daemons get SIGTERM if the process that started them dies (PR_SET_PDEATHSIG), and a
later start reaps what a killed run left behind (folders whose owner.pid is gone). `stop()`
cancels the cluster's jobs, stops the daemons, kills any slurmstepd of ours still running, and
removes the folder.

Fast path: if `sinfo` already answers with an idle node (a cluster the machine runs anyway,
or one whose SLURM_CONF is in the environment), that cluster is used and left running.

Plugins are chosen to work without cgroups and systemd (containers, small VMs):
proctrack/linuxproc, task/none, jobacct_gather/none, select/cons_tres with CR_Core.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge")
# For `srun --mpi=pmix` (the slurm launcher with --comm mpi); the cluster works without them.
OPTIONAL_PACKAGES = ("libpmix2", "libpmix-dev")
COMMANDS = ("slurmctld", "slurmd", "srun", "salloc", "sbatch", "sinfo", "munged", "mungekey")
SBIN_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin")

INSTALL_TIMEOUT_S = 240.0
APT_LOCK_WAIT_S = 60          # another apt/dpkg (unattended-upgrades) may hold the lock
START_TIMEOUT_S = 60.0
PR_SET_PDEATHSIG = 1
STOP_WAIT_S = 10.0
CLUSTER_NAME = "dtbench"
PARTITION = "debug"
FOLDER_PREFIX = "dtbench-slurm-"
OWNER_FILE = "owner.pid"
DAEMONS = ("slurmd", "slurmctld", "munged")


class ClusterUnavailable(RuntimeError):
    """Slurm cannot be installed or started here; the message says why (with log tails)."""


def _which(name: str) -> str | None:
    """A command on PATH or in an sbin directory (root's PATH may lack /usr/sbin)."""
    found = shutil.which(name)
    if found:
        return found
    for folder in SBIN_DIRS:
        candidate = Path(folder) / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def missing_commands() -> list[str]:
    """The Slurm and MUNGE commands a one-node cluster needs that are not installed."""
    return [name for name in COMMANDS if _which(name) is None]


def install_problem() -> str | None:
    """Why the packages cannot be installed by this process, or None when they can."""
    if os.name != "posix" or os.geteuid() != 0:
        return "installing Slurm needs root"
    if shutil.which("apt-get") is None:
        return "installing Slurm needs apt-get (a Debian-family system)"
    return None


def _tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _apt_get(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "NEEDRESTART_MODE": "a"}
    return subprocess.run(["apt-get", "-q", "-y", "-o", f"DPkg::Lock::Timeout={APT_LOCK_WAIT_S}",
                           "-o", "Dpkg::Options::=--force-confdef",
                           "-o", "Dpkg::Options::=--force-confold", *args],
                          env=env, capture_output=True, text=True, timeout=timeout, check=False,
                          stdin=subprocess.DEVNULL)


def _install(packages: tuple[str, ...], deadline: float) -> subprocess.CompletedProcess[str]:
    """apt-get install; on failure, apt-get update and one more try."""
    command = ("install", "--no-install-recommends", *packages)
    result = _apt_get(*command, timeout=max(1.0, deadline - time.monotonic()))
    if result.returncode != 0:
        _apt_get("update", timeout=max(1.0, deadline - time.monotonic()))
        result = _apt_get(*command, timeout=max(1.0, deadline - time.monotonic()))
    return result


def ensure_installed(optional: bool = True, timeout: float = INSTALL_TIMEOUT_S) -> list[str]:
    """Install whatever is missing; returns the packages installed now ([] if none were).

    Raises ClusterUnavailable when something is missing and cannot be installed. The optional
    PMIx packages are best effort: failing to install them is not an error.
    """
    deadline = time.monotonic() + timeout
    installed: list[str] = []
    if missing_commands():
        problem = install_problem()
        if problem is not None:
            raise ClusterUnavailable(f"Slurm is not installed ({', '.join(missing_commands())} "
                                     f"missing) and {problem}")
        try:
            result = _install(PACKAGES, deadline)
        except subprocess.TimeoutExpired:
            raise ClusterUnavailable(f"apt-get install {' '.join(PACKAGES)} took over "
                                     f"{timeout:.0f} s") from None
        if result.returncode != 0 or missing_commands():
            raise ClusterUnavailable(
                f"apt-get install {' '.join(PACKAGES)} failed (exit {result.returncode}); "
                f"still missing: {', '.join(missing_commands()) or 'nothing'}\n"
                f"{_tail(result.stdout + result.stderr)}")
        installed += PACKAGES
    if optional and install_problem() is None and not pmix_installed():
        with suppress(subprocess.SubprocessError, OSError):
            if _install(OPTIONAL_PACKAGES, deadline).returncode == 0:
                installed += OPTIONAL_PACKAGES
    return installed


def pmix_installed() -> bool:
    """Whether the PMIx library that Slurm's mpi/pmix plugin loads is present."""
    patterns = ("/usr/lib/*/libpmix.so*", "/usr/lib/*/pmix2/lib/libpmix.so*")
    return any(any(Path("/").glob(p.lstrip("/"))) for p in patterns)


def slurm_version() -> str | None:
    """The installed Slurm version ("22.05.8"), or None."""
    slurmd = _which("slurmd")  # client commands need a configuration even for --version
    if slurmd is None:
        return None
    try:
        out = subprocess.run([slurmd, "-V"], capture_output=True, text=True, timeout=10,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"(\d+\.\d+[\w.\-]*)", out)
    return found.group(1) if found else None


def short_hostname() -> str:
    return socket.gethostname().split(".")[0]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def memory_mb() -> int:
    """Total memory in MiB (from /proc/meminfo; 1024 when unknown)."""
    with suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 1024


DEFAULT_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")


def has_configuration(env: Mapping[str, str] | None = None) -> bool:
    """Whether Slurm clients have a configuration file to read (else they try DNS SRV records)."""
    conf = dict(os.environ if env is None else env).get("SLURM_CONF")
    return any(Path(p).is_file() for p in ([conf] if conf else DEFAULT_CONFS))


def idle_nodes(env: Mapping[str, str] | None = None, timeout: float = 10.0) -> list[str]:
    """Nodes `sinfo` reports idle (or mixed) in a responsive cluster; [] if it does not answer."""
    sinfo = _which("sinfo")
    if sinfo is None or not has_configuration(env):
        return []
    try:
        out = subprocess.run([sinfo, "-h", "-N", "-o", "%N %t"], capture_output=True, text=True,
                             timeout=timeout, check=False,
                             env=dict(os.environ if env is None else env))
    except (OSError, subprocess.SubprocessError):
        return []
    if out.returncode != 0:
        return []
    nodes = []
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].rstrip("*~#!%$@^-") in ("idle", "mix"):
            nodes.append(parts[0])
    return nodes


def slurm_conf(folder: Path, host: str, cpus: int, real_memory_mb: int, ctld_port: int,
               slurmd_port: int, munge_socket: Path) -> str:
    """A minimal slurm.conf for one node that is also the controller (Slurm 20.11 or later).

    The node is addressed as 127.0.0.1 so that the host name need not resolve.
    """
    return "\n".join([
        f"ClusterName={CLUSTER_NAME}",
        f"SlurmctldHost={host}(127.0.0.1)",
        f"SlurmctldPort={ctld_port}",
        f"SlurmdPort={slurmd_port}",
        "SlurmUser=root",
        "SlurmdUser=root",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd.log'}",
        "SlurmctldDebug=info",
        "SlurmdDebug=info",
        # No cgroups and no systemd here: plain /proc process tracking, no task binding.
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "SlurmctldTimeout=30",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "KillWait=5",
        # sbatch --wait sleeps 2 s between polls and multiplies that by 4 while it is below
        # MinJobAge/2 (integer division), up to 32 s: with 5, it polls every 2 s. A finished
        # job is forgotten after MinJobAge seconds, well after the next poll.
        "MinJobAge=5",
        "Waittime=0",
        f"NodeName={host} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={cpus} "
        f"RealMemory={real_memory_mb} State=UNKNOWN",
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


@dataclass
class OneNodeCluster:
    """munged + slurmctld + slurmd for this host, all files in one temporary directory.

    `start()` raises ClusterUnavailable (with the daemons' log tails) when the node does not
    come up idle within `timeout`; `stop()` kills the daemons it started and removes the folder.
    """

    timeout: float = START_TIMEOUT_S
    folder: Path | None = None
    conf: Path | None = None
    reused: bool = False
    host: str = field(default_factory=short_hostname)
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default os.environ) with SLURM_CONF pointing at this cluster, no SLURM_JOB_*.

        Variables of an enclosing allocation are dropped so that commands see only this one.
        """
        env = {k: v for k, v in dict(os.environ if base is None else base).items()
               if not k.startswith(("SLURM_", "SRUN_", "SALLOC_", "SBATCH_"))}
        if self.conf is not None:
            env["SLURM_CONF"] = str(self.conf)
        path = env.get("PATH", os.defpath).split(os.pathsep)
        env["PATH"] = os.pathsep.join(path + [d for d in SBIN_DIRS if d not in path])
        return env

    def start(self) -> OneNodeCluster:
        ambient = os.environ.get("SLURM_CONF")
        if idle_nodes():
            self.reused = True
            self.conf = Path(ambient) if ambient else None
            return self
        reap_stale_clusters()
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
        (self.folder / OWNER_FILE).write_text(f"{os.getpid()}\n")
        try:
            self._start_daemons()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_daemons(self) -> None:
        assert self.folder is not None
        folder = self.folder
        folder.chmod(0o755)  # slurm.conf readable by every client; the key is 0600
        for sub in ("state", "spool"):
            (folder / sub).mkdir(mode=0o700)
        (folder / "munge").mkdir(mode=0o755)  # munged wants its socket reachable by all
        munge_socket = folder / "munge" / "munge.socket"
        self._start_munge(folder / "munge", munge_socket)
        cpus = os.cpu_count() or 1
        real_memory = max(256, memory_mb() * 3 // 4)
        self.conf = folder / "slurm.conf"
        self.conf.write_text(slurm_conf(folder, self.host, cpus, real_memory, free_port(),
                                        free_port(), munge_socket))
        env = self.env()
        self._spawn("slurmctld", [_need("slurmctld"), "-D", "-i", "-f", str(self.conf)], env)
        self._spawn("slurmd", [_need("slurmd"), "-D", "-N", self.host, "-f", str(self.conf)],
                    env)
        self._wait_idle(env)

    def _start_munge(self, folder: Path, munge_socket: Path) -> None:
        key = folder / "munge.key"
        mungekey = _which("mungekey")
        created = False
        if mungekey is not None:
            created = subprocess.run([mungekey, "--create", f"--keyfile={key}"],
                                     capture_output=True, timeout=30,
                                     check=False).returncode == 0
        if not created:
            key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        self._spawn("munged", [_need("munged"), "--foreground", "--force",
                               f"--key-file={key}", f"--socket={munge_socket}",
                               f"--pid-file={folder / 'munged.pid'}",
                               f"--log-file={folder / 'munged.log'}",
                               f"--seed-file={folder / 'munged.seed'}"], dict(os.environ))
        deadline = time.monotonic() + 15
        while not munge_socket.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise ClusterUnavailable("munged did not create its socket within 15 s\n"
                                         + self.log_tails())
            time.sleep(0.1)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str]) -> None:
        assert self.folder is not None
        with open(self.folder / f"{name}.out", "wb") as out:
            self.procs[name] = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, env=env,
                                                start_new_session=True,
                                                preexec_fn=_die_with_parent)

    def daemons_state(self) -> str:
        """"munged running, slurmctld exited with 1, ..." for failure messages."""
        if self.reused:
            return "a cluster that was already running"
        return ", ".join(f"{name} " + ("running" if proc.poll() is None
                                       else f"exited with {proc.returncode}")
                         for name, proc in self.procs.items())

    def _check_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise ClusterUnavailable(f"{name} exited with code {proc.returncode} at "
                                         f"start-up\n{self.log_tails()}")

    def _wait_idle(self, env: dict[str, str]) -> None:
        deadline = time.monotonic() + self.timeout
        while True:
            self._check_alive()
            if self.host in idle_nodes(env, timeout=5):
                return
            if time.monotonic() > deadline:
                raise ClusterUnavailable(f"node {self.host} not idle within {self.timeout:.0f} "
                                         f"s\n{self.log_tails()}")
            time.sleep(0.5)

    def log_tails(self, lines: int = 8) -> str:
        """The last lines of every daemon log and console file, for a failure message."""
        if self.folder is None:
            return ""
        parts = []
        logs = sorted([*self.folder.glob("*.log"), *self.folder.glob("munge/*.log")])
        consoles = [p for p in sorted(self.folder.glob("*.out"))  # what went to stderr
                    if not (self.folder / f"{p.stem}.log").is_file()
                    or p.stem == "munged"]
        for path in [*logs, *consoles]:
            with suppress(OSError):
                text = _tail(path.read_text(errors="replace"), lines)
                if text:
                    parts.append(f"--- {path.name}\n{text}")
        return "\n".join(parts)

    def stop(self) -> None:
        """Cancel this cluster's jobs, stop the daemons this object started, clean up.

        A reused cluster is left as it was found.
        """
        if self.procs:
            self._cancel_jobs()
        for name in DAEMONS:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is not None:
                continue
            with suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                with suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_WAIT_S)
        if self.procs:
            self._kill_leftover_steps()
        self.procs.clear()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def _cancel_jobs(self) -> None:
        """scancel every job of this (private) cluster and wait a little for them to end."""
        ctld = self.procs.get("slurmctld")
        scancel, squeue = _which("scancel"), _which("squeue")
        if ctld is None or ctld.poll() is not None or scancel is None or squeue is None:
            return
        env = self.env()
        with suppress(OSError, subprocess.SubprocessError):
            subprocess.run([scancel, "--quiet", f"--partition={PARTITION}",
                            f"--user={os.getuid()}"], env=env, capture_output=True,
                           timeout=10, check=False)
            deadline = time.monotonic() + STOP_WAIT_S
            while time.monotonic() < deadline:
                out = subprocess.run([squeue, "-h", "-o", "%i"], env=env, capture_output=True,
                                     text=True, timeout=10, check=False)
                if out.returncode != 0 or not out.stdout.strip():
                    return
                time.sleep(0.3)

    def _kill_leftover_steps(self) -> None:
        """slurmstepd processes of this cluster that outlived slurmd, with their tasks.

        slurmstepd clears its environment; ours are recognised by a descriptor open on a file
        in this cluster's folder (slurmd's log, the step socket in the spool), and killed by
        pid, their tasks first.
        """
        import psutil

        if self.folder is None:
            return
        prefix = str(self.folder) + os.sep
        for proc in psutil.process_iter(["name"]):
            if proc.info["name"] != "slurmstepd" or not _has_open_file_under(proc.pid, prefix):
                continue
            with suppress(psutil.Error):
                for child in proc.children(recursive=True):
                    with suppress(psutil.Error):
                        child.kill()
                proc.kill()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the process that started it dies (Linux)."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale_clusters() -> list[int]:
    """Stop the daemons of clusters whose owning process is gone (a killed test run).

    Each cluster folder records the pid that started it; a daemon belongs to a folder when its
    command line names that folder. Returns the pids that were killed.
    """
    import psutil

    killed: list[int] = []
    for folder in Path(tempfile.gettempdir()).glob(f"{FOLDER_PREFIX}*"):
        try:
            owner = int((folder / OWNER_FILE).read_text().strip())
        except (OSError, ValueError):
            continue
        if _pid_alive(owner):
            continue
        marker = str(folder) + os.sep
        for proc in psutil.process_iter(["name", "cmdline"]):
            with suppress(psutil.Error):
                if proc.info["name"] in DAEMONS and \
                        any(marker in arg for arg in proc.info["cmdline"] or ()):
                    proc.kill()
                    killed.append(proc.pid)
        shutil.rmtree(folder, ignore_errors=True)
    return killed


def _has_open_file_under(pid: int, prefix: str) -> bool:
    folder = Path(f"/proc/{pid}/fd")
    try:
        for fd in folder.iterdir():
            with suppress(OSError):
                if os.readlink(fd).startswith(prefix):
                    return True
    except OSError:
        return False
    return False


def _need(name: str) -> str:
    path = _which(name)
    if path is None:
        raise ClusterUnavailable(f"{name} is not installed")
    return path


@contextmanager
def slurm_cluster(install: bool = True, timeout: float = START_TIMEOUT_S
                  ) -> Iterator[OneNodeCluster]:
    """A running one-node cluster for the block (installed first when `install`)."""
    if install:
        ensure_installed()
    elif missing_commands():
        raise ClusterUnavailable(f"Slurm is not installed ({', '.join(missing_commands())} "
                                 "missing)")
    cluster = OneNodeCluster(timeout=timeout).start()
    try:
        yield cluster
    finally:
        cluster.stop()
