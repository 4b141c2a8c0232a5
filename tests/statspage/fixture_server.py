"""A statspage-fixture process publishing the known page (fixture.c's `serve`), for the tests that
read it: tessera-stat's (test_cli.py) and the Python module's (tests/python/test_module.py)."""
import os
import subprocess


class Server:
    def __init__(self, fixture, d, *extra):
        env = dict(os.environ, TESSERA_STATS_DIR=d)
        self.p = subprocess.Popen([fixture, "serve", *extra], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)
        line = self.p.stdout.readline().split()
        assert line and line[0] == "ready", line
        self.pid = int(line[1])
        self.path = line[2]

    def stop(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            self.p.wait(timeout=10)
