"""PyTorch through tessera, with PyTorch's own caching switched off by nothing: PyTorch's
pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator) over libtessera.so.

    import tessera.torch
    tessera.torch.enable()        # before the first CUDA tensor
    ...                           # every tensor is allocated by tessera, on its stream
    tessera.stats()               # tessera's counters (torch.cuda.memory_stats() raises in this mode)

Or with no change to the program: TESSERA_TORCH=1 and the optional sitecustomize (see
`python -m tessera.torch --sitecustomize-dir`).

What PyTorch gives a pluggable allocator, and so what this mode does and does not do:
- each tensor's allocation and free, with its device and stream: tessera serves them as
  cudaMallocAsync/cudaFreeAsync on that stream (a block freed is that stream's at once);
- no record_stream: a tensor used on another stream than its own must be ordered by the program
  (wait_stream) before it is freed, as with any pluggable allocator;
- no private pools for CUDA graphs: allocations made while a stream captures are the driver's
  graph memory (allocation nodes), not tessera's;
- no statistics: torch.cuda.memory_stats(), memory_allocated() and memory_reserved() raise;
  tessera.stats() has the same names.
"""
import ctypes
import os
import sys

import tessera

_enabled = None


def _loaded(path):
    """Is libtessera.so already in this process (preloaded by tessera run or LD_PRELOAD)?"""
    try:
        ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 4))
        return True
    except OSError:
        return False


def enable(conf=None):
    """Make PyTorch allocate CUDA memory through tessera; returns the allocator object.

    Call it before PyTorch's first CUDA allocation (PyTorch cannot swap an allocator in use).
    conf: a TESSERA_ALLOC_CONF for tessera (checked first: ConfigError), when libtessera.so is
    not loaded yet; otherwise the configuration comes from the environment, as for any process
    under tessera. A second call returns the first call's allocator."""
    global _enabled
    if _enabled is not None:
        return _enabled
    library = tessera.library_path()
    if conf is not None:
        if _loaded(library):
            raise RuntimeError("libtessera.so is already loaded in this process (preloaded): its "
                               "configuration is the environment's; call enable() without conf")
        tessera.check_config(conf)
        os.environ["TESSERA_ALLOC_CONF"] = conf
    # what the library reads when it loads, checked here: a bad configuration raises instead of
    # stopping the interpreter
    tessera.check_config()
    import torch

    alloc_name, free_name = tessera._native.PLUGGABLE
    allocator = torch.cuda.memory.CUDAPluggableAllocator(library, alloc_name, free_name)
    try:
        torch.cuda.memory.change_current_allocator(allocator)
    except RuntimeError as e:
        raise RuntimeError(f"{e} (call tessera.torch.enable() before the first CUDA tensor)") from e
    _enabled = allocator
    return allocator


def sitecustomize_dir():
    """The directory of tessera's optional sitecustomize: put it first on PYTHONPATH, with
    TESSERA_TORCH=1, to enable() in every Python process before its program runs."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")


def _main(argv):
    if argv == ["--sitecustomize-dir"]:
        print(sitecustomize_dir())
        return 0
    print("usage: python -m tessera.torch --sitecustomize-dir", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
