"""tessera from Python: the counters of tessera's stats pages, and PyTorch through tessera.

    import tessera
    s = tessera.stats()                       # this process's counters, torch.cuda.memory_stats() names
    s["reserved_bytes.all.peak"]              # an int
    tessera.stats(pid=4242, device=0)         # another process's page, trusted as tessera-stat trusts it
    tessera.processes()                       # the tessera processes this user may read
    tessera.snapshot(4242, "snap.pickle")     # a PyTorch memory snapshot of a running process
    tessera.pause(); tessera.resume()         # this process's device memory to host memory and back
    import tessera.torch
    tessera.torch.enable()                    # PyTorch allocates through tessera (its pluggable allocator)

No dependencies. Pages are read by the C code tessera-stat uses (tessera._native): the same
checks of the file's owner, size, layout and version, the same consistent copy of a slot under
its sequence lock; a page that cannot be read or trusted raises PageError, whose .kind says why.
"""
import collections
import collections.abc
import os
import shutil
import subprocess

from tessera import _layout, _native
from tessera._native import KEYS, ConfigError, PageError, Stats, stats

__all__ = ["stats", "processes", "snapshot", "pause", "resume", "check_config", "library_path",
           "tool_path", "Stats", "Process", "PageError", "ConfigError", "SnapshotError",
           "PauseError", "KEYS"]
__version__ = _native.VERSION

# A Stats is a read-only mapping (keys, values, items, get, in, len, iteration, to_dict()).
collections.abc.Mapping.register(Stats)

Process = collections.namedtuple(
    "Process", "pid command devices state state_reason version config")
Process.__doc__ = """A tessera process whose page this user may read: pid, command (its command
line), devices (the device ordinals it uses through tessera), state ('live', or 'stale' with
processes(stale=True)), state_reason, version (tessera's), config (the effective configuration)."""


class SnapshotError(RuntimeError):
    """tessera-stat could not take the snapshot (its message says why)."""


class PauseError(RuntimeError):
    """A pause or a resume was refused, or could not be asked (its message says why)."""


def processes(dir=None, stale=False):
    """The tessera processes whose pages this user may read, as Process tuples, by pid.

    Only pages tessera-stat shows as processes: readable, trusted, their owner verified; with
    stale=True also those of processes that are gone (TESSERA_STATS_KEEP=1, or killed). dir:
    the page directory ($TESSERA_STATS_DIR, else /dev/shm)."""
    out = []
    for pid, command, devices, state, why, version, config in _native.processes(dir, stale):
        out.append(Process(pid, command.decode("utf-8", "replace"), devices, state, why,
                           version.decode("utf-8", "replace"), config.decode("utf-8", "replace")))
    return out


def check_config(text=None):
    """The effective configuration, as tessera prints it: text parsed strictly as
    TESSERA_ALLOC_CONF, or (text None) the environment as a process under tessera reads it
    (TESSERA_ALLOC_CONF strictly, else PYTORCH_CUDA_ALLOC_CONF or PYTORCH_ALLOC_CONF leniently).
    Returns (config, source variable or None, notes). Raises ConfigError."""
    return _native.check_config(text)


def _here(path):
    return path if os.path.isabs(path) else os.path.join(os.path.dirname(__file__), path)


def library_path():
    """The path of libtessera.so: to preload (LD_PRELOAD), or for torch's pluggable allocator."""
    path = os.path.realpath(_here(_layout.LIBRARY))
    if not os.path.isfile(path):
        raise FileNotFoundError(f"libtessera.so is not where this installation put it: {path}")
    return path


def tool_path(name):
    """The path of one of tessera's tools (tessera, tessera-stat, tessera-replay, tessera-costs):
    the one installed with this module, else the first on PATH."""
    path = os.path.join(_here(_layout.TOOLS), name)
    if os.path.isfile(path) and os.access(path, os.X_OK):
        return os.path.realpath(path)
    found = shutil.which(name)
    if not found:
        raise FileNotFoundError(f"{name} is neither beside this module ({path}) nor on PATH")
    return found


def snapshot(pid, path, wait=2.0, dir=None):
    """Write a PyTorch memory snapshot (the pickle torch.cuda.memory._snapshot() returns, for
    PyTorch's memory viewer) of process pid's tessera allocators to path, through tessera-stat
    snapshot. Returns what it said, one line per device (how current the block layout is) and
    the file written. Raises SnapshotError."""
    argv = [tool_path("tessera-stat")]
    if dir is not None:
        argv += ["--dir", os.fspath(dir)]
    argv += ["snapshot", str(int(pid)), "-o", os.fspath(path), "--wait", str(float(wait))]
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode != 0:
        raise SnapshotError(run.stderr.strip() or f"tessera-stat exited {run.returncode}")
    return run.stdout.splitlines()


def _pause_or_resume(verb, pid, dir):
    argv = [tool_path("tessera-stat")]
    if dir is not None:
        argv += ["--dir", os.fspath(dir)]
    argv += [verb, str(os.getpid() if pid is None else int(pid))]
    run = subprocess.run(argv, capture_output=True, text=True)
    if run.returncode != 0:
        raise PauseError((run.stdout + run.stderr).strip() or f"tessera-stat exited {run.returncode}")
    return run.stdout.splitlines()


def pause(pid=None, dir=None):
    """Pause process pid (default: this one) through tessera-stat pause: its live device memory is
    copied to its host memory and the GPU gets every page back, every address kept; its CUDA
    calls that could touch device memory wait until resume(). Returns what it said, one line per
    device. Raises PauseError (a capture underway, blocks exported over CUDA IPC, another user's
    process, ...). This process's own threads must not make CUDA calls before resume(): they
    would wait for it."""
    return _pause_or_resume("pause", pid, dir)


def resume(pid=None, dir=None):
    """Resume process pid (default: this one): pages mapped again at the same addresses and the
    bytes copied back. Raises PauseError (not paused; the device is full now: try again later)."""
    return _pause_or_resume("resume", pid, dir)
