#!/usr/bin/env python3
"""`tessera run`: the front door, from the build tree and from an installed tree.

Checks what a user sees: the program's exit status and signals pass through, a bad --conf stops
before the program starts, LD_PRELOAD keeps what the user had, nothing lands on stdout, and the
--summary numbers are the program's own (cross-checked with the program's RESULT line and the
simulator's report of the driver calls that reached it).

Run one test:  test_run.py TestName   (meson registers each class separately)
Environment:   TS_BUILD (the build directory).
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BUILD = os.path.abspath(os.environ.get("TS_BUILD", os.path.join(os.path.dirname(__file__), "..", "..", "build")))
TESSERA = os.path.join(BUILD, "tools", "tessera")
SHIM = os.path.join(BUILD, "shim", "libtessera.so")
CHURN = os.path.join(BUILD, "tests", "programs", "churn")
CHURN_ARGS = ["--threads", "2", "--iters", "200", "--live", "8", "--max-size", "4M", "--small-max", "64K"]
PROBE = os.path.join(BUILD, "tests", "integration", "stats_probe")
STAT = os.path.join(BUILD, "tools", "tessera-stat")
SIM = os.path.join(BUILD, "tests", "sim")
STATIC = os.path.join(BUILD, "tests", "programs", "seed_middle_static")
MiB = 1 << 20


def clean_env(extra=None):
    """The environment of a user who has not set anything up: no simulator on the library path,
    no tessera variables. A sanitizer runtime (UBSan build) stays first in LD_PRELOAD."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("TESSERA_", "PYTORCH_")) and k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
    runtime = os.environ.get("TS_SANITIZER_RUNTIME", "")
    if runtime:
        env["LD_PRELOAD"] = runtime
    env["TESSERA_SIM_MEMORY"] = "256M"
    env.update(extra or {})
    return env


def summary_of(stderr):
    """Per device: {counter expression: value} from the summary lines."""
    devices, dev = {}, None
    for line in stderr.splitlines():
        m = re.match(r"tessera:\s+device (\d+)$", line)
        if m:
            dev = devices.setdefault(int(m.group(1)), {})
            continue
        m = re.match(r"tessera:\s+[a-z ]+?\s+(-?[\d.]+)\s.*\(([a-z_.]+)[):]", line)
        if m and dev is not None:
            dev[m.group(2)] = float(m.group(1))
    return devices


class Base(unittest.TestCase):
    tessera = TESSERA

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tessera-run-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.pages = os.path.join(self.tmp, "pages")  # the user's TESSERA_STATS_DIR
        os.mkdir(self.pages)

    def run_tool(self, args, extra=None, timeout=120):
        env = clean_env(dict({"TESSERA_STATS_DIR": self.pages}, **(extra or {})))
        return subprocess.run([self.tessera, "run"] + args, env=env, capture_output=True,
                              text=True, timeout=timeout)

    def check_churn_summary(self):
        report = os.path.join(self.tmp, "sim.json")
        p = self.run_tool(["--summary", "--sim", "--", CHURN] + CHURN_ARGS,
                          extra={"TESSERA_SIM_REPORT": report, "TMPDIR": self.tmp})
        self.assertEqual(p.returncode, 0, p.stderr)
        result = dict(f.split("=", 1) for f in p.stdout.splitlines()[-1].split()[1:])
        self.assertEqual(result["status"], "ok", p.stdout)
        devices = summary_of(p.stderr)
        self.assertEqual(list(devices), [0], p.stderr)
        d = devices[0]
        # what the program did, counted by the program itself
        self.assertEqual(d["num_alloc_calls"], int(result["allocs"]), p.stderr)
        self.assertEqual(d["num_free_calls"], int(result["frees"]), p.stderr)
        # what reached the (simulated) driver, counted by the driver
        sim = [json.loads(l) for l in open(report)]
        self.assertEqual(len(sim), 1, sim)
        # cuMemAlloc, or cuMemCreate for memory tessera maps itself (the default), and back
        self.assertEqual(d["num_device_alloc"], sim[0]["alloc_calls"] + sim[0]["set_access_calls"],
                         p.stderr)
        self.assertEqual(d["num_device_free"], sim[0]["free_calls"] + sim[0]["release_calls"],
                         p.stderr)
        # "driver calls" means every driver call for memory (tessera-replay's column), which
        # the page does not count: the summary names the two counters it shows instead
        self.assertNotIn("driver calls", p.stderr)
        self.assertGreater(sim[0]["alloc_calls"] + sim[0]["set_access_calls"], 0)
        self.assertEqual(d["reserved_bytes.all.peak"], sim[0]["peak_bytes_in_use"], p.stderr)
        self.assertGreater(d["allocated_bytes.all.peak"], 0)
        self.assertLessEqual(d["allocated_bytes.all.peak"], d["reserved_bytes.all.peak"])
        util = 100.0 * d["allocated_bytes.all.peak"] / d["reserved_bytes.all.peak"]
        self.assertIn("%.1f %%" % util, p.stderr)
        # how far the peak was from the floor, in bytes and in % of peak allocated
        above = d["reserved_bytes.all.peak"] - d["allocated_bytes.all.peak"]
        m = re.search(r"^tessera:\s+above the floor\s+(\d+) B .* \+([\d.]+) % of peak allocated "
                      r"\(reserved_bytes.all.peak - allocated_bytes.all.peak\)$", p.stderr, re.M)
        self.assertTrue(m, p.stderr)
        self.assertEqual(int(m.group(1)), above)
        self.assertEqual(m.group(2), "%.1f" % (100.0 * above / d["allocated_bytes.all.peak"]))
        self.assertEqual(d["num_alloc_retries"], 0)
        self.assertEqual(d["num_ooms"], 0)
        for name in ("allocated_bytes.all.peak", "reserved_bytes.all.peak", "num_alloc_calls",
                     "num_device_alloc", "num_device_free", "num_stitches", "num_alloc_retries",
                     "num_ooms"):
            self.assertIn("(" + name, p.stderr)
        # the run's private directory is gone, and nothing but the program wrote to stdout
        self.assertEqual([f for f in os.listdir(self.pages) if f.startswith(".tessera-run.")], [])
        self.assertNotIn("tessera:", p.stdout)
        return p


class Summary(Base):
    def test_churn_from_the_build_tree(self):
        self.check_churn_summary()

    def test_stitch_count(self):
        # 100 x 8 MiB on 1 GiB, every other freed, then 64 MiB: defragment serves the request by
        # stitching free pages, and the summary counts it
        seed_even = os.path.join(BUILD, "tests", "programs", "seed_even")
        p = self.run_tool(["--summary", "--sim", "--conf", "defragment:True", "--", seed_even,
                           "--unit", "8M", "--count", "100", "--request", "64M"],
                          extra={"TESSERA_SIM_MEMORY": "1G", "TMPDIR": self.tmp})
        self.assertEqual(p.returncode, 0, p.stderr)
        d = summary_of(p.stderr)[0]
        self.assertGreaterEqual(d["num_stitches"], 1, p.stderr)

    def test_pinned_host_memory(self):
        # staging's pinned buffers, one per step (8 warm-up steps and 32): served by the cache,
        # and only a few pinned; churn, which pins nothing, shows no such line
        staging = os.path.join(BUILD, "tests", "programs", "staging")
        p = self.run_tool(["--summary", "--sim", "--", staging, "--mode", "host", "--steps", "32",
                           "--size", "64K"], extra={"TMPDIR": self.tmp})
        self.assertEqual(p.returncode, 0, p.stderr)
        d = summary_of(p.stderr)[0]
        self.assertEqual(d["num_host_alloc_calls"], 40, p.stderr)
        self.assertGreaterEqual(d["num_host_alloc"], 1, p.stderr)
        self.assertLessEqual(d["num_host_alloc"], 8, p.stderr)
        churn = self.check_churn_summary()
        self.assertNotIn("num_host_alloc", churn.stderr)

    def start_probe(self, extra=None):
        """stats_probe under tessera run --summary --sim, stopped at its first READY."""
        env = clean_env(dict({"TESSERA_STATS_DIR": self.pages}, **(extra or {})))
        proc = subprocess.Popen([self.tessera, "run", "--summary", "--sim", "--", PROBE], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            self.fail(line + proc.communicate(timeout=60)[1])
        return proc, int(line.split()[1])

    def test_watched_live_and_summarised(self):
        proc, pid = self.start_probe()
        # the page is where the user looks for it, and tessera-stat shows the running program
        page = os.path.join(self.pages, "tessera.%d" % pid)
        self.assertTrue(os.path.isfile(page))
        listing = subprocess.run([STAT, "--dir", self.pages], capture_output=True, text=True)
        self.assertIn(str(pid), listing.stdout)
        self.assertIn("stats_probe", listing.stdout)
        # and a second name of it in the run's private directory beside it
        runs = [f for f in os.listdir(self.pages) if f.startswith(".tessera-run.")]
        self.assertEqual(len(runs), 1, os.listdir(self.pages))
        run_dir = os.path.join(self.pages, runs[0])
        self.assertEqual(os.stat(run_dir).st_mode & 0o777, 0o700)
        self.assertEqual(os.stat(os.path.join(run_dir, "tessera.%d" % pid)).st_ino,
                         os.stat(page).st_ino)
        out, err = proc.communicate("go\ngo\n", timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        d = summary_of(err)[0]
        self.assertEqual(d["allocated_bytes.all.peak"], 12 * MiB + 2 * 102400, err)
        self.assertEqual(d["num_alloc_calls"], 5, err)
        self.assertEqual(os.listdir(self.pages), [])  # page removed at exit, run directory too

    def test_user_keeps_pages(self):
        proc, pid = self.start_probe({"TESSERA_STATS_KEEP": "1"})
        out, err = proc.communicate("go\ngo\n", timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        self.assertEqual(summary_of(err)[0]["num_free_calls"], 5, err)
        self.assertEqual(os.listdir(self.pages), ["tessera.%d" % pid])  # as the user asked
        # killed by a signal too: a page the user keeps is not collected
        os.unlink(os.path.join(self.pages, "tessera.%d" % pid))
        proc, pid = self.start_probe({"TESSERA_STATS_KEEP": "1"})
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 128 + signal.SIGKILL, err)
        self.assertEqual(os.listdir(self.pages), ["tessera.%d" % pid])

    def test_killed_program_summarised(self):
        proc, pid = self.start_probe()
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 128 + signal.SIGKILL, err)
        self.assertEqual(summary_of(err)[0]["num_alloc_calls"], 5, err)  # its last numbers
        self.assertIn("tessera: program exit status %d" % (128 + signal.SIGKILL), err)
        self.assertEqual(os.listdir(self.pages), [])  # its stale page collected

    def test_summary_link_only_into_a_private_directory(self):
        """What the shim links into TESSERA_SUMMARY_DIR, whoever set it."""
        own = os.path.join(self.tmp, "own")
        os.mkdir(own, 0o700)
        shared = os.path.join(self.tmp, "shared")
        os.mkdir(shared)
        os.chmod(shared, 0o755)
        alias = os.path.join(self.tmp, "alias")
        os.symlink(own, alias)
        cases = [(own, True), (shared, False), (alias, False), ("own", False)]
        if os.geteuid() == 0:
            other = os.path.join(self.tmp, "other")
            os.mkdir(other, 0o700)
            os.chown(other, 65534, 65534)
            cases.append((other, False))
        for where, linked in cases:
            with self.subTest(where=where):
                for f in os.listdir(own):
                    os.unlink(os.path.join(own, f))
                env = clean_env({"TESSERA_STATS_DIR": self.pages, "TESSERA_STATS_KEEP": "1",
                                 "TESSERA_SUMMARY_DIR": where, "LD_LIBRARY_PATH": SIM})
                env["LD_PRELOAD"] = ":".join(filter(None, [env.get("LD_PRELOAD"), SHIM]))
                p = subprocess.run([PROBE], input="go\ngo\n", env=env, capture_output=True,
                                   text=True, timeout=60, cwd=self.tmp)
                self.assertEqual(p.returncode, 0, p.stderr)
                pid = int(p.stdout.split()[1])
                page = os.path.join(self.pages, "tessera.%d" % pid)
                self.assertTrue(os.path.isfile(page))
                self.assertEqual(os.stat(page).st_nlink, 2 if linked else 1)
                self.assertEqual(os.listdir(own), ["tessera.%d" % pid] if linked else [])
                if os.path.isdir(os.path.join(self.tmp, "other")):
                    self.assertEqual(os.listdir(os.path.join(self.tmp, "other")), [])
                os.unlink(page)

    def test_summary_directory_refused(self):
        # a stats page directory where no directory can be made (procfs): the system's reason,
        # exit status 125, and the program never started
        p = self.run_tool(["--summary", "--", "sh", "-c", "echo started"],
                          extra={"TESSERA_STATS_DIR": "/proc/self"})
        self.assertEqual((p.returncode, p.stdout), (125, ""), p.stderr)
        self.assertRegex(p.stderr, r"tessera: run: --summary: cannot create a directory in "
                                   r"/proc/\d+: \w")
        self.assertNotIn("name too long", p.stderr)

    def test_no_cuda_program(self):
        p = self.run_tool(["--summary", "--", "true"], extra={"TMPDIR": self.tmp})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertIn("no stats page was written", p.stderr)


class Installed(Base):
    """`meson install --destdir` into a temporary tree, moved elsewhere: the same checks."""

    def test_churn_from_an_installed_tree(self):
        staged = os.path.join(self.tmp, "stage")
        p = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet", "--destdir", staged],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        moved = os.path.join(self.tmp, "moved")
        os.rename(staged, moved)  # found relative to itself, not from the prefix it was built for
        tools = [os.path.join(r, f) for r, _, fs in os.walk(moved) for f in fs if f == "tessera"]
        self.assertEqual(len(tools), 1, tools)
        self.tessera = tools[0]
        for header in ("stats_page.h", "stats_fields.h"):
            self.assertEqual(len([r for r, _, fs in os.walk(moved) if header in fs and r.endswith("include/tessera")]), 1)
        pcs = [os.path.join(r, f) for r, _, fs in os.walk(moved) for f in fs if f == "tessera.pc"]
        self.assertEqual(len(pcs), 1, pcs)
        self.assertIn("preload=${libdir}/libtessera.so", open(pcs[0]).read())
        self.check_churn_summary()
        # the program got the installed library and the installed simulator
        p = self.run_tool(["--sim", "--", "sh", "-c", 'printf "%s\\n%s\\n" "$LD_PRELOAD" "$LD_LIBRARY_PATH" >&2'])
        self.assertEqual(p.returncode, 0, p.stderr)
        preload, libpath = p.stderr.splitlines()[:2]
        self.assertTrue(preload.split(":")[0].startswith(moved + "/"), preload)
        self.assertTrue(preload.split(":")[0].endswith("/libtessera.so"), preload)
        self.assertTrue(os.path.exists(os.path.join(libpath.split(":")[0], "libcuda.so.1")), libpath)
        self.assertTrue(libpath.startswith(moved + "/"), libpath)


class Status(Base):
    def test_exit_status(self):
        self.assertEqual(self.run_tool(["--", "sh", "-c", "exit 3"]).returncode, 3)
        self.assertEqual(self.run_tool(["sh", "-c", "exit 0"]).returncode, 0)

    def test_killed_by_a_signal(self):
        p = self.run_tool(["--", "sh", "-c", "kill -TERM $$"])
        self.assertEqual(p.returncode, 128 + signal.SIGTERM)
        p = self.run_tool(["--", "sh", "-c", "kill -KILL $$"])
        self.assertEqual(p.returncode, 128 + signal.SIGKILL)

    def test_program_not_found(self):
        p = self.run_tool(["--", os.path.join(self.tmp, "no-such-program")])
        self.assertEqual(p.returncode, 127)
        self.assertRegex(p.stderr, r"^tessera: run: cannot run .*no-such-program")

    def test_usage_errors(self):
        # tessera run's own: 125, never a status its program could have given
        for args in (["--no-such-option", "--", "true"], ["--conf"], []):
            p = self.run_tool(args)
            self.assertEqual(p.returncode, 125, (args, p.stderr))
            self.assertTrue(p.stderr.startswith("tessera: "), p.stderr)
            self.assertEqual(p.stdout, "")
        # tessera's own (no program involved): 2, as every tool's
        for args in ([], ["frob"], ["--frob"]):
            p = subprocess.run([self.tessera] + args, env=clean_env(), capture_output=True,
                               text=True)
            self.assertEqual((p.returncode, p.stdout), (2, ""), args)
            self.assertTrue(p.stderr.startswith(("tessera: ", "usage: ")), p.stderr)


class Help(Base):
    """--help and --version on stdout, exit 0; usage errors on stderr, exit 2: every tool."""

    def test_every_tool(self):
        tools = {t: os.path.join(BUILD, "tools", t)
                 for t in ("tessera", "tessera-stat", "tessera-replay", "tessera-costs")}
        version = None
        for name, path in tools.items():
            with self.subTest(tool=name):
                p = subprocess.run([path, "--help"], capture_output=True, text=True)
                self.assertEqual((p.returncode, p.stderr), (0, ""))
                self.assertTrue(p.stdout.startswith("usage: "), p.stdout[:80])
                p = subprocess.run([path, "--version"], capture_output=True, text=True)
                self.assertEqual((p.returncode, p.stderr), (0, ""))
                m = re.match(r"^%s (\S+)" % re.escape(name), p.stdout)
                self.assertTrue(m, p.stdout)
                version = version or m.group(1)
                self.assertEqual(m.group(1), version)  # one version, said the same way
                p = subprocess.run([path, "--no-such-option"], capture_output=True, text=True)
                self.assertEqual((p.returncode, p.stdout), (2, ""))
                self.assertNotEqual(p.stderr, "")
        p = subprocess.run([TESSERA, "run", "--help"], capture_output=True, text=True)
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        self.assertIn("TESSERA_SIM_MEMORY", p.stdout)


class Signals(Base):
    """SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to tessera run reach the program."""

    HANDLER = ("import signal, sys, time\n"
               "def h(s, f):\n"
               "    sys.stderr.write('got %d\\n' % s); sys.stderr.flush(); sys.exit(10 + s)\n"
               "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):\n"
               "    signal.signal(s, h)\n"
               "sys.stderr.write('READY\\n'); sys.stderr.flush()\n"
               "time.sleep(60)\n"
               "sys.exit(99)\n")

    def test_forwarded(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            proc = subprocess.Popen([self.tessera, "run", "--", sys.executable, "-c", self.HANDLER],
                                    env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            self.assertEqual(proc.stderr.readline(), "READY\n")
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 10 + sig, err)
            self.assertIn("got %d" % sig, err)


class Configuration(Base):
    def test_bad_conf_stops_before_the_program(self):
        marker = os.path.join(self.tmp, "started")
        p = self.run_tool(["--conf", "max_split_size_mb:lots", "--", "touch", marker])
        self.assertEqual(p.returncode, 125)
        lines = p.stderr.splitlines()
        self.assertEqual(len(lines), 1, p.stderr)
        self.assertRegex(lines[0], r"^tessera: TESSERA_ALLOC_CONF: key 'max_split_size_mb'")
        self.assertFalse(os.path.exists(marker))

    def test_bad_environment_conf_stops_before_the_program(self):
        marker = os.path.join(self.tmp, "started")
        p = self.run_tool(["--", "touch", marker], extra={"TESSERA_ALLOC_CONF": "expandable_segmnets:True"})
        self.assertEqual(p.returncode, 125)
        self.assertEqual(p.stderr.splitlines(),
                         ["tessera: TESSERA_ALLOC_CONF: unknown key 'expandable_segmnets' at "
                          "position 0 (did you mean 'expandable_segments'?)"])
        self.assertFalse(os.path.exists(marker))
        # the PyTorch variables are lenient: the program runs (and says what it ignores)
        p = self.run_tool(["--", "touch", marker], extra={"PYTORCH_CUDA_ALLOC_CONF": "turbo:1"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertTrue(os.path.exists(marker))

    def test_policy_names(self):
        """--conf pytorch and --conf default, as tessera-replay takes them: PyTorch's policy
        asks the driver for segments (cuMemAlloc), tessera's maps its own (cuMemCreate)."""
        calls = {}
        for name in ("pytorch", "default"):
            report = os.path.join(self.tmp, name + ".json")
            p = self.run_tool(["--sim", "--conf", name, "--", CHURN] + CHURN_ARGS,
                              extra={"TESSERA_SIM_REPORT": report})
            self.assertEqual(p.returncode, 0, p.stderr)
            sim = [json.loads(l) for l in open(report)][0]
            calls[name] = (sim["alloc_calls"] > 0, sim["create_calls"] > 0)
        self.assertEqual(calls, {"pytorch": (True, False), "default": (False, True)})
        p = self.run_tool(["--conf", "PyTorch", "--", "true"])
        self.assertEqual(p.returncode, 125)

    def test_conf_reaches_the_program(self):
        p = self.run_tool(["--conf=defragment:True", "--", "sh", "-c", 'printf %s "$TESSERA_ALLOC_CONF" >&2'])
        self.assertEqual(p.returncode, 0)
        self.assertEqual(p.stderr, "defragment:True")

    def test_static_runtime_under_sim(self):
        if not os.path.exists(STATIC):
            self.skipTest("seed_middle_static not built (no libcudart_static.a in the toolkit)")
        p = self.run_tool(["--sim", "--", STATIC], extra={"TESSERA_SIM_MEMORY": "64M"})
        said = [l for l in p.stderr.splitlines() if l.startswith("tessera:")]
        self.assertEqual(said, ["tessera: run: --sim: %s was built with NVIDIA's static CUDA "
                                "runtime (nvcc's default), which the simulated device cannot run "
                                "(it needs the real driver); rebuild it with -cudart=shared, or "
                                "run it on a GPU" % STATIC], p.stderr)
        self.assertEqual(p.returncode, 1)  # the program ran, and failed its own way
        # found on PATH too; a shared-runtime program, or no --sim, gets no such line
        p = self.run_tool(["--sim", "--", os.path.basename(STATIC)],
                          extra={"PATH": os.path.dirname(STATIC) + ":" + os.environ["PATH"]})
        self.assertIn("static CUDA runtime", p.stderr)
        for args in (["--sim", "--", CHURN, "--iters", "1"], ["--", STATIC]):
            p = self.run_tool(args)
            self.assertNotIn("static CUDA runtime", p.stderr, args)

    def test_static_runtime_told_from_the_bytes(self):
        """NVIDIA's runtime names without libcudart.so's: read in chunks, a name across two
        chunks is found; a name of the shared runtime anywhere in the file clears it; only ELF
        files are read."""
        chunk = 1 << 20
        runtime, shared = b"cudaErrorCudartUnloading", b"libcudart.so.13"
        cases = {
            "across": (b"\x7fELF" + b"\0" * (chunk - 14) + runtime + b"\0" * 64, True),
            "shared later": (b"\x7fELF" + runtime + b"\0" * (2 * chunk) + shared, False),
            "shared across": (b"\x7fELF" + runtime + b"\0" * (chunk - 40) + shared, False),
            "not ELF": (b"#!/bin/sh\n" + runtime + b"\nexit 1\n", False),
        }
        for name, (data, said) in cases.items():
            with self.subTest(case=name):
                prog = os.path.join(self.tmp, name.replace(" ", "-"))
                with open(prog, "wb") as f:
                    f.write(data)
                os.chmod(prog, 0o755)
                p = self.run_tool(["--sim", "--", prog])
                self.assertEqual("static CUDA runtime" in p.stderr, said, p.stderr)

    def test_ld_preload_kept(self):
        # the user's own preload (here the simulator's libcuda, any library would do) stays, after tessera
        own = os.path.join(BUILD, "tests", "sim", "libcuda.so.1")
        env = clean_env()
        env["LD_PRELOAD"] = (env["LD_PRELOAD"] + ":" if env.get("LD_PRELOAD") else "") + own
        p = subprocess.run([TESSERA, "run", "--", "sh", "-c", 'printf %s "$LD_PRELOAD" >&2'], env=env,
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, os.path.realpath(SHIM) + ":" + env["LD_PRELOAD"])


def main():
    names = sys.argv[1:]
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    mod = sys.modules[__name__]
    for name in names or ["Summary", "Installed", "Status", "Signals", "Configuration", "Help"]:
        suite.addTests(loader.loadTestsFromName(name, mod))
    if not os.path.exists(TESSERA):
        print("SKIP: %s is not built" % TESSERA)
        sys.exit(77)
    ok = unittest.TextTestRunner(verbosity=2).run(suite).wasSuccessful()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
