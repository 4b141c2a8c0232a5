#!/usr/bin/env python3
"""tessera.torch with a stand-in for PyTorch (fake_torch/: PyTorch's pluggable allocator API,
recording each call), and the optional sitecustomize. The stand-in loads libtessera.so and calls
its two functions with PyTorch's signatures, as PyTorch does: allocations then go through tessera
in a process that never preloaded it, and tessera.stats() reads them.

Run one class:  test_torch.py Enable   (meson registers each class separately)
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
from helpers import FAKE_TORCH, MiB, run_script

import tessera

# What a script reports about the stand-in's calls.
CALLS = """
    import torch.cuda.memory as tm
    def calls():
        return [[c[0]] + (list(c[1:]) if c[0] == "allocator" else []) for c in tm.CALLS]
    """


class Base(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="tessera-torch-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)

    def script(self, body, **kw):
        kw.setdefault("pythonpath", [FAKE_TORCH])
        return run_script(textwrap.dedent(CALLS) + textwrap.dedent(body), self.dir, **kw)


class Enable(Base):
    def test_enable_plugs_libtessera_into_torch(self):
        p, facts = self.script("""
            import tessera.torch
            a = tessera.torch.enable()
            b = tessera.torch.enable()          # once only
            done(calls=calls(), same=a is b, changed_to=tm.CALLS[-1][1] is a,
                 library=tessera.library_path(), names=list(tessera._native.PLUGGABLE))
            """, under_tessera=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        lib = facts["library"]
        self.assertEqual(lib, os.path.realpath(helpers.SHIM))
        self.assertEqual(facts["names"], ["tessera_pluggable_alloc", "tessera_pluggable_free"])
        self.assertEqual(facts["calls"], [["allocator", lib] + facts["names"], ["change"]])
        self.assertTrue(facts["same"] and facts["changed_to"], facts)

    def test_bad_configuration_raises_before_torch(self):
        p, facts = self.script("""
            import tessera.torch
            try:
                tessera.torch.enable()
                said = None
            except tessera.ConfigError as e:
                said = str(e)
            done(said=said, calls=calls())
            """, under_tessera=False, TESSERA_ALLOC_CONF="expandable_segmnets:True")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("unknown key 'expandable_segmnets'", facts["said"])
        self.assertEqual(facts["calls"], [])  # PyTorch never saw a thing

    def test_conf_argument(self):
        p, facts = self.script("""
            import tessera.torch
            try:
                tessera.torch.enable(conf="max_split_size_mb:10")
                bad = None
            except tessera.ConfigError as e:
                bad = str(e)
            before = os.environ.get("TESSERA_ALLOC_CONF")
            tessera.torch.enable(conf="expandable_segments:False")
            done(bad=bad, before=before, after=os.environ.get("TESSERA_ALLOC_CONF"),
                 n=len(calls()))
            """, under_tessera=False)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("max_split_size_mb", facts["bad"])
        self.assertIsNone(facts["before"])  # a refused conf changes nothing
        self.assertEqual((facts["after"], facts["n"]), ("expandable_segments:False", 2), facts)

    def test_conf_refused_when_already_preloaded(self):
        p, facts = self.script("""
            import tessera.torch
            try:
                tessera.torch.enable(conf="expandable_segments:False")
                said = None
            except RuntimeError as e:
                said = str(e)
            done(said=said, n=len(calls()))
            """, under_tessera=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("already loaded", facts["said"])
        self.assertEqual(facts["n"], 0)

    def test_allocator_in_use_says_when_to_call(self):
        p, facts = self.script("""
            import tessera.torch
            try:
                tessera.torch.enable()
                said = None
            except RuntimeError as e:
                said = str(e)
            done(said=said)
            """, under_tessera=False, FAKE_TORCH_INITIALIZED="1")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("Can't swap an already initialized allocator", facts["said"])
        self.assertIn("before the first CUDA tensor", facts["said"])


class Allocate(Base):
    """PyTorch's calls, made through the stand-in: served by tessera, read by tessera.stats()."""

    BODY = """
        import tessera.torch
        rt.cudaFree(None)                       # torch's lazy initialisation of the device
        a = tessera.torch.enable()
        s1, s2 = ctypes.c_void_p(), ctypes.c_void_p()
        assert rt.cudaStreamCreateWithFlags(ctypes.byref(s1), 1) == 0
        assert rt.cudaStreamCreateWithFlags(ctypes.byref(s2), 1) == 0
        x = a.alloc(4 << 20, 0, s1)
        y = a.alloc(1 << 20, 0, s2)
        live = tessera.stats()
        a.free(x, 4 << 20, 0, s1)
        z = a.alloc(4 << 20, 0, s1)             # s1's block again, at once
        w = a.alloc(4 << 20, 0, s2)             # never s1's block
        a.free(y, 1 << 20, 0, s2); a.free(z, 4 << 20, 0, s1); a.free(w, 4 << 20, 0, s2)
        after = tessera.stats()
        done(x=bool(x), reused=z == x, other=w != x,
             live=[live["num_alloc_calls"], live["requested_bytes.all.current"]],
             after=[after["num_alloc_calls"], after["num_free_calls"],
                    after["allocation.all.current"]],
             preloaded="LD_PRELOAD" in os.environ)
        """

    def check(self, under_tessera):
        p, facts = self.script(self.BODY, under_tessera=under_tessera)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(facts["preloaded"], under_tessera)
        self.assertTrue(facts["x"] and facts["reused"] and facts["other"], facts)
        self.assertEqual(facts["live"], [2, 5 * MiB], facts)
        self.assertEqual(facts["after"], [4, 4, 0], facts)

    def test_loaded_by_torch_only(self):
        self.check(under_tessera=False)

    def test_loaded_by_torch_and_preloaded(self):
        self.check(under_tessera=True)


class Site(Base):
    """The optional sitecustomize: off unless its directory is on PYTHONPATH and TESSERA_TORCH
    is set; another sitecustomize further on the path still runs."""

    def setUp(self):
        super().setUp()
        self.site = subprocess.run([sys.executable, "-m", "tessera.torch", "--sitecustomize-dir"],
                                   capture_output=True, text=True, check=True).stdout.strip()
        self.other = os.path.join(self.dir, "other")
        os.mkdir(self.other)
        with open(os.path.join(self.other, "sitecustomize.py"), "w") as f:
            f.write("import os\nos.environ['OTHER_SITECUSTOMIZE_RAN'] = '1'\n")

    def run_site(self, **env):
        code = ("import json, os, sys\n"
                "calls = [c[0] for c in sys.modules['torch'].cuda.memory.CALLS] "
                "if 'torch' in sys.modules else None\n"
                "print(json.dumps({'calls': calls, "
                "'other': os.environ.get('OTHER_SITECUSTOMIZE_RAN')}))\n")
        e = helpers.clean_env(self.dir, **env)
        e["PYTHONPATH"] = os.pathsep.join([self.site, FAKE_TORCH, helpers.MODULE, self.other])
        p = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr

    def test_site_dir(self):
        self.assertTrue(os.path.isfile(os.path.join(self.site, "sitecustomize.py")), self.site)
        p = subprocess.run([sys.executable, "-m", "tessera.torch"], capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("usage:", p.stderr)

    def test_enabled_by_the_environment(self):
        got, err = self.run_site(TESSERA_TORCH="1")
        self.assertEqual(got, {"calls": ["allocator", "change"], "other": "1"})
        self.assertEqual(err, "")

    def test_off_without_the_variable(self):
        for value in (None, "0"):
            with self.subTest(value=value):
                got, err = self.run_site(**({"TESSERA_TORCH": value} if value else {}))
                self.assertEqual(got, {"calls": None, "other": "1"})  # torch not even imported

    def test_failure_is_said_and_the_program_runs(self):
        got, err = self.run_site(TESSERA_TORCH="1", TESSERA_ALLOC_CONF="turbo:1")
        self.assertEqual(got["calls"], None)
        self.assertEqual(got["other"], "1")
        self.assertRegex(err, r"^tessera: TESSERA_TORCH=1: PyTorch is not allocating through "
                              r"tessera: TESSERA_ALLOC_CONF: unknown key 'turbo'")


if __name__ == "__main__":
    helpers.main(sys.modules[__name__])
