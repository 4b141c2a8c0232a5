"""Shared by the Python module's tests: where the build is, a clean environment, and Python
scripts run as a process under tessera on the simulated device (tessera run --sim), or with the
library only loaded (the pluggable allocator), each printing JSON on its last line.

Environment: TS_BUILD (the build directory), TS_SOURCE (the source directory); PYTHONPATH holds
<build>/python, the module under test.
"""
import json
import os
import subprocess
import sys
import tempfile
import textwrap

BUILD = os.environ["TS_BUILD"]
SOURCE = os.environ["TS_SOURCE"]
TOOLS = os.path.join(BUILD, "tools")
SIM = os.path.join(BUILD, "tests", "sim")
SHIM = os.path.join(BUILD, "shim", "libtessera.so")
FAKE_TORCH = os.path.join(SOURCE, "tests", "python", "fake_torch")
MODULE = os.path.join(BUILD, "python")
MiB = 1 << 20

# Prepended to every script: a CUDA runtime through ctypes (the simulated one, found through
# LD_LIBRARY_PATH), the way a program without PyTorch reaches the device.
PRELUDE = textwrap.dedent("""\
    import ctypes, json, os, sys
    import tessera
    rt = ctypes.CDLL("libcudart.so.13")
    def malloc(n):
        p = ctypes.c_void_p()
        assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)) == 0
        return p
    def free(p):
        assert rt.cudaFree(p) == 0
    def set_device(d):
        assert rt.cudaSetDevice(d) == 0
    def done(**facts):
        print(json.dumps(facts))
    """)


def clean_env(stats_dir, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TESSERA_", "PYTORCH_"))}
    env["TESSERA_STATS_DIR"] = stats_dir
    env["TESSERA_SIM_MEMORY"] = "1G"
    env["PYTHONPATH"] = MODULE
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


def run_script(body, stats_dir, under_tessera=True, pythonpath=None, timeout=120, **extra):
    """Run PRELUDE + body in a new Python process: under `tessera run --sim`, or (under_tessera
    False) with only the simulated device on the library path. Returns (process, facts), facts
    being the JSON of the last line of stdout (None when there is none)."""
    env = clean_env(stats_dir, **extra)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(pythonpath + [MODULE])
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(PRELUDE + textwrap.dedent(body))
        script = f.name
    try:
        if under_tessera:
            argv = [os.path.join(TOOLS, "tessera"), "run", "--sim", "--", sys.executable, script]
        else:
            env["LD_LIBRARY_PATH"] = SIM
            argv = [sys.executable, script]
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    finally:
        os.unlink(script)
    lines = p.stdout.strip().splitlines()
    facts = None
    if lines:
        try:
            facts = json.loads(lines[-1])
        except ValueError:
            pass
    return p, facts


def main(module):
    """Run the named test classes of module (all without names); exit 0 only when they pass."""
    import unittest
    names = sys.argv[1:]
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromName(n, module) for n in names) if names \
        else loader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
