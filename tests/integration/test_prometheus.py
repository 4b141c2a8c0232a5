#!/usr/bin/env python3
"""A real Prometheus server scrapes tessera-stat --serve.

Starts `tessera-stat --serve` and Debian's `prometheus` on free loopback ports (a scrape config
pointing at the first), runs a program under tessera on the simulated device, and queries
Prometheus' HTTP API until it returns that program's allocated and reserved bytes, with the
values the program's own stats page holds. Also checks what the endpoint refuses (404, 405, with
a line on stderr) and that a control byte in a command line never reaches a label. Waits are
bounded; every process is killed and the temporary directory removed at the end. Skips (exit
77) when prometheus cannot be found or tessera-stat was built without libmicrohttpd.

Environment: TS_BUILD, TS_SOURCE (as test_integration.py); PROMETHEUS (the server binary).
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_integration as it  # noqa: E402
import unittest_main  # noqa: E402

MiB = 1 << 20
WAIT_S = 90  # Prometheus start-up plus a few scrapes, on a loaded machine


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, method="GET"):
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def wait_until(what, fn, timeout=WAIT_S):
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        try:
            last = fn()
            if last:
                return last
        except (OSError, ValueError, KeyError) as e:
            last = e
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


class PrometheusScrape(unittest.TestCase):
    def setUp(self):
        self.prom_bin = os.environ.get("PROMETHEUS") or shutil.which("prometheus") or \
            ("/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None)
        if not self.prom_bin:
            self.skipTest("prometheus not found (apt-get install prometheus; scripts/setup.sh "
                          "installs it)")
        probe = subprocess.run([it.STAT, "--serve", "bad"], capture_output=True, text=True)
        if "libmicrohttpd" in probe.stderr:
            self.skipTest("tessera-stat was built without libmicrohttpd")
        self.env = it.Env()
        self.procs = []

    def tearDown(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()
            p.wait()
        shutil.rmtree(self.env.tmp, ignore_errors=True)

    def start(self, argv, **kw):
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        return p

    def test_prometheus_scrapes_the_endpoint(self):
        tmp = self.env.tmp
        serve_port, prom_port = free_port(), free_port()
        serve_err = open(os.path.join(tmp, "serve.err"), "w+")
        self.start([it.STAT, "--dir", self.env.stats_dir, "--serve", f"127.0.0.1:{serve_port}"],
                   stdout=subprocess.DEVNULL, stderr=serve_err)
        metrics = f"http://127.0.0.1:{serve_port}/metrics"
        wait_until("tessera-stat --serve", lambda: get(metrics)[0] == 200, timeout=20)

        # the program: 3 x 4 MiB + 2 x 100 KiB allocated, a 20 MiB and a 2 MiB segment; its
        # command line carries a control byte
        p = self.start(it.probe("stats_probe") + ["label\x01test"], env=self.env.base(conf=it.PYTORCH),
                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
        line = p.stdout.readline()
        self.assertTrue(line.startswith("READY"), line)
        pid = line.split()[1]

        status, body = get(metrics)
        self.assertEqual(status, 200)
        self.assertIn(f'tessera_allocated_bytes{{pid="{pid}",device="0",pool="all"', body)
        self.assertIn("label?test", body)
        self.assertFalse(any(ord(c) < 0x20 and c != "\n" for c in body), "control byte served")

        # what is refused is answered and logged
        self.assertEqual(get(f"http://127.0.0.1:{serve_port}/")[0], 404)
        self.assertEqual(get(metrics, method="POST")[0], 405)
        self.assertEqual(get(f"http://127.0.0.1:{serve_port}/metrics?x=%01")[0], 200)
        serve_err.flush()
        serve_err.seek(0)
        log = serve_err.read()
        self.assertIn("tessera-stat: 404 for GET / from 127.0.0.1", log)
        self.assertIn("tessera-stat: 405 for POST /metrics from 127.0.0.1", log)

        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: tessera\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{serve_port}']\n")
        self.start([self.prom_bin, f"--config.file={config}",
                    f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
                    f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                   stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "prom.err"), "w"))

        def query(expr):
            url = f"http://127.0.0.1:{prom_port}/api/v1/query?" + urllib.parse.urlencode(
                {"query": expr})
            status, text = get(url)
            if status != 200:
                return None
            res = json.loads(text)["data"]["result"]
            return float(res[0]["value"][1]) if res else None

        def value(name):
            return query(f'{name}{{pid="{pid}",device="0",pool="all"}}')

        want_alloc = 12 * MiB + 2 * 102400
        want_reserved = 22 * MiB
        wait_until("Prometheus to scrape the allocated bytes",
                   lambda: value("tessera_allocated_bytes") == want_alloc)
        self.assertEqual(value("tessera_reserved_bytes"), want_reserved)
        self.assertEqual(query(f'tessera_alloc_calls_total{{pid="{pid}"}}'), 5)
        # the same numbers as the program's own page
        st = self.env.page_stats(pid)
        self.assertEqual(st["allocated_bytes.all.current"], want_alloc)
        self.assertEqual(st["reserved_bytes.all.current"], want_reserved)

        p.stdin.write("go\ngo\n")
        p.stdin.flush()
        p.wait(timeout=60)


if __name__ == "__main__":
    unittest_main.run(sys.modules[__name__], sys.argv[1:])
