#!/usr/bin/env python3
"""The wheel, end to end: built from this source tree with meson-python, exactly as the README
says (Debian's python3-build and python3-mesonpy, no network), installed into a fresh virtual
environment with `pip install --no-index`, then used from there with nothing compiled on the
target: the tools on the environment's PATH, `tessera run --sim` on a program (the wheel carries
the simulated device), and a Python process under it reading its own numbers with import tessera.

The wheel's meson build directory is kept in <build>/wheel-build between runs (only what changed
is compiled again); the wheel and the environment are made anew in a temporary directory.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

import helpers
from helpers import BUILD, SOURCE, MiB

# The commands of the README's "Install" section, {wheel} being the file the first one made.
BUILD_WHEEL = "python3 -m build --wheel --no-isolation --outdir dist"
INSTALL_WHEEL = "pip install --no-index {wheel}"


class Wheel(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="tessera-wheel-")
        dist = os.path.join(cls.tmp, "dist")
        cmd = BUILD_WHEEL.split()
        cmd[0] = sys.executable  # the Python the module is built for (Debian's python3)
        cmd[cmd.index("dist")] = dist
        builddir = os.path.join(BUILD, "wheel-build")
        cmd += ["-Cbuilddir=" + builddir, SOURCE]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TESSERA_", "PYTHON"))}
        if not os.path.exists(os.path.join(builddir, "meson-private", "coredata.dat")):
            # meson-python 0.12 only reconfigures a build directory it is given: make it first
            subprocess.run(["meson", "setup", builddir, SOURCE, "-Dwheel=true", "-Dtests=disabled",
                            "-Dfuzz=disabled"], capture_output=True, check=True, env=env)
        cls.build = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1500)
        wheels = [f for f in os.listdir(dist)] if os.path.isdir(dist) else []
        cls.wheel = os.path.join(dist, wheels[0]) if len(wheels) == 1 else None
        cls.venv = os.path.join(cls.tmp, "venv")
        cls.bin = os.path.join(cls.venv, "bin")
        cls.install = None
        if cls.wheel:
            subprocess.run([sys.executable, "-m", "venv", cls.venv], check=True, env=env)
            cls.install = subprocess.run(
                [os.path.join(cls.bin, "pip")] + INSTALL_WHEEL.format(wheel=cls.wheel).split()[1:],
                capture_output=True, text=True, env=env, timeout=300)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        self.assertIsNotNone(self.wheel, self.build.stdout[-3000:] + self.build.stderr[-3000:])
        self.assertEqual(self.install.returncode, 0, self.install.stdout + self.install.stderr)
        self.stats = tempfile.mkdtemp(prefix="pages-", dir=self.tmp)

    def env(self):
        """What a user's shell has: the environment's bin first on PATH, no build tree around."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TESSERA_", "PYTORCH_", "PYTHON", "LD_"))}
        env["PATH"] = self.bin + os.pathsep + env.get("PATH", "")
        env["TESSERA_STATS_DIR"] = self.stats
        env["TESSERA_SIM_MEMORY"] = "1G"
        return env

    def test_the_readme_says_these_commands(self):
        readme = open(os.path.join(SOURCE, "README.md")).read()
        for command in (BUILD_WHEEL, INSTALL_WHEEL.format(wheel="dist/tessera-*.whl")):
            self.assertTrue(command in readme, "README.md does not say: " + command)

    def test_tools_on_the_environments_path(self):
        for tool in ("tessera", "tessera-stat", "tessera-replay", "tessera-costs"):
            with self.subTest(tool=tool):
                path = shutil.which(tool, path=self.env()["PATH"])
                self.assertEqual(path, os.path.join(self.bin, tool))
                with open(path, "rb") as f:
                    self.assertEqual(f.read(4), b"\x7fELF")  # built, not a script
                p = subprocess.run([tool, "--help"], env=self.env(), capture_output=True,
                                   text=True)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn("usage", p.stdout.lower())

    def test_run_sim_from_the_environment(self):
        churn = os.path.join(BUILD, "tests", "programs", "churn")
        p = subprocess.run(["tessera", "run", "--sim", "--summary", "--", churn, "--threads",
                            "2", "--iters", "100"], env=self.env(), capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("RESULT status=ok", p.stdout)
        self.assertRegex(p.stderr, r"tessera:\s+allocations served\s+\d+\s+\(num_alloc_calls\)")
        self.assertIn("tessera: program exit status 0", p.stderr)

    def test_import_tessera_reads_its_own_numbers(self):
        script = os.path.join(self.tmp, "own.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent("""\
                import ctypes, json, os, tessera
                rt = ctypes.CDLL("libcudart.so.13")     # the simulated runtime, via tessera run --sim
                p = ctypes.c_void_p()
                assert rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(3 << 20)) == 0
                s = tessera.stats()
                print(json.dumps({"allocated": s["allocated_bytes.all.current"],
                                  "calls": s["num_alloc_calls"], "module": tessera.__file__,
                                  "library": tessera.library_path(),
                                  "stat": tessera.tool_path("tessera-stat"),
                                  "preload": os.environ["LD_PRELOAD"]}))
                """))
        python = os.path.join(self.bin, "python")
        p = subprocess.run(["tessera", "run", "--sim", "--", python, script], env=self.env(),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertEqual((got["allocated"], got["calls"]), (3 * MiB, 1), got)
        venv = os.path.realpath(self.venv) + os.sep
        for k in ("module", "library", "stat"):
            self.assertTrue(os.path.realpath(got[k]).startswith(venv), (k, got[k]))
        self.assertEqual(got["preload"].split(":")[0], got["library"])  # tessera run's library
        self.assertEqual(got["stat"], os.path.join(os.path.realpath(self.bin), "tessera-stat"))


if __name__ == "__main__":
    result = unittest.TextTestRunner(verbosity=2).run(
        unittest.TestLoader().loadTestsFromTestCase(Wheel))
    sys.exit(0 if result.wasSuccessful() else 1)
