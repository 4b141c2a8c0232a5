"""torch.cuda.memory's pluggable allocator, as PyTorch implements it in Python: load the library
with ctypes (RTLD_LOCAL), look the two functions up by name, keep their addresses. Here the
addresses become ctypes functions with PyTorch's C signatures, so a test can call them as
PyTorch's C++ side would: alloc(size, device, stream), free(ptr, size, device, stream)."""
import ctypes
import os

CALLS = []  # ("allocator", path, alloc_name, free_name) and ("change", allocator)

ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)


class CUDAPluggableAllocator:
    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        lib = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(lib, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(lib, free_fn_name), ctypes.c_void_p).value
        assert alloc_fn is not None and free_fn is not None
        self.alloc = ALLOC(alloc_fn)
        self.free = FREE(free_fn)
        CALLS.append(("allocator", path_to_so_file, alloc_fn_name, free_fn_name))


def change_current_allocator(allocator):
    if os.environ.get("FAKE_TORCH_INITIALIZED"):
        raise RuntimeError("Can't swap an already initialized allocator")
    CALLS.append(("change", allocator))
