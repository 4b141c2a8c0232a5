#!/usr/bin/env python3
"""The samples in the docs are what the programs print: README's `tessera run --summary` sample
(its lines, in order, exit status included), docs/configuration.md's effective configuration,
docs/stats-page.md's tessera-stat synopsis and layout version, every tessera-replay exit status in README, and
scripts/with-sim --help on kernels.

Environment: TS_BUILD, TS_SOURCE.
"""
import os
import re
import subprocess
import sys
import unittest

BUILD = os.environ["TS_BUILD"]
SOURCE = os.environ["TS_SOURCE"]


def read(*parts):
    with open(os.path.join(SOURCE, *parts)) as f:
        return f.read()


def labels(lines):
    """The words before the number of each 'tessera:' summary line."""
    out = []
    for l in lines:
        m = re.match(r"tessera:\s+([a-z ]+?)\s+-?[\d.]+\s", l + " ")
        if m:
            out.append(m.group(1))
        elif re.match(r"tessera: program exit status \d+$", l):
            out.append("program exit status")
    return out


class Docs(unittest.TestCase):
    def test_readme_summary_sample(self):
        readme = read("README.md")
        start = readme.index("tessera: summary of pid")
        sample = readme[start:readme.index("```", start)].strip().splitlines()
        churn = os.path.join(BUILD, "tests", "programs", "churn")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TESSERA_", "PYTORCH_"))}
        runtime = os.environ.get("TS_SANITIZER_RUNTIME", "")
        if runtime:  # a sanitizer build: its runtime first in every process
            env["LD_PRELOAD"] = runtime
        p = subprocess.run([os.path.join(BUILD, "tools", "tessera"), "run", "--summary", "--sim",
                            "--", churn, "--threads", "2", "--iters", "300"],
                           capture_output=True, text=True, timeout=120, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        got = [l for l in p.stderr.splitlines() if l.startswith("tessera: summary of pid")]
        self.assertEqual(len(got), 1, p.stderr)
        lines = p.stderr[p.stderr.index(got[0]):].strip().splitlines()
        self.assertEqual(labels(sample), labels(lines), p.stderr)
        self.assertIn("program exit status", labels(sample))
        # and each counter named as the program names it
        self.assertEqual(re.findall(r"\(([a-z_. /+]+)\)$", "\n".join(sample), re.M),
                         re.findall(r"\(([a-z_. /+]+)\)$", "\n".join(lines), re.M))

    def test_configuration_sample(self):
        doc = read("docs", "configuration.md")
        m = re.search(r'For example `TESSERA_ALLOC_CONF="([^"]+)"` prints:\s*```\s*(\S+)\s*```',
                      doc)
        self.assertTrue(m, "the sample is gone")
        conf = m.group(1).replace("\n", "").replace(" ", "")
        p = subprocess.run([os.path.join(BUILD, "tests", "config", "config-describe"), conf],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(m.group(2), p.stdout.strip())

    def test_stats_page_synopsis(self):
        doc = read("docs", "stats-page.md")
        start = doc.index("## tessera-stat")
        synopsis = doc[doc.index("```", start) + 3:doc.index("```", doc.index("```", start) + 3)]
        commands = {l.split("  ")[0].strip() for l in synopsis.strip().splitlines()}
        p = subprocess.run([os.path.join(BUILD, "tools", "tessera-stat"), "--help"],
                           capture_output=True, text=True)
        usage = []
        for l in p.stdout.splitlines():
            l = re.sub(r"^(usage:)?\s+", "", l)
            if l.startswith("tessera-stat"):
                usage.append(l.split("  ")[0].strip())
        self.assertTrue(usage)
        for u in usage:
            # the synopsis may show an optional argument in brackets
            self.assertTrue(u in commands or u.replace("ADDR:PORT", "[ADDR:PORT]") in commands,
                            "%r is not in docs/stats-page.md's synopsis" % u)

    def test_stats_page_layout_version(self):
        header = read("include", "tessera", "stats_page.h")
        version = re.search(r"#define TESSERA_PAGE_LAYOUT_VERSION (\d+)u", header).group(1)
        doc = read("docs", "stats-page.md")
        self.assertEqual(re.findall(r"layout version (\d+)\)", doc), [version])
        self.assertEqual(re.findall(r"^## Layout \(version (\d+)\)", doc, re.M), [version])
        self.assertEqual(re.findall(r"^\| 8 \| 4 \| u32 \| `layout_version` \| (\d+) \|", doc,
                                    re.M), [version])
        p = subprocess.run([os.path.join(BUILD, "tools", "tessera-stat"), "--version"],
                           capture_output=True, text=True)
        self.assertIn("(stats page layout %s)" % version, p.stdout)

    def test_replay_exit_statuses(self):
        p = subprocess.run([os.path.join(BUILD, "tools", "tessera-replay"), "--help"],
                           capture_output=True, text=True)
        codes = re.findall(r"^  (\d)  ", p.stdout[p.stdout.index("Exit status:"):], re.M)
        self.assertEqual(codes, ["0", "1", "2", "3"])
        readme = read("README.md")
        section = readme[readme.index("### Would tessera have saved my run?"):
                         readme.index("## What tessera guarantees")]
        section = " ".join(section.split())
        self.assertIn("`tessera-replay` exits 0 when", section)
        for code in codes:
            self.assertRegex(section, r"\b%s when" % code)

    def test_with_sim_help_on_kernels(self):
        p = subprocess.run([os.path.join(SOURCE, "scripts", "with-sim"), "--help"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0)
        text = " ".join(p.stdout.split())
        self.assertNotIn("There are no kernels", text)
        self.assertIn("Kernels are registered, checked and queued on their streams", text)
        self.assertIn("not executed", text)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
