#!/usr/bin/env python3
"""scripts/mutants.py: which sites of a C file become mutants, and that each mutant compiles
to the change it names (the runner's verdicts are checked by running it, not here)."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("TS_SOURCE", os.path.join(os.path.dirname(__file__), "..", ".."))
spec = importlib.util.spec_from_file_location("mutants",
                                              os.path.join(SOURCE, "scripts", "mutants.py"))
mutants = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mutants)

SAMPLE = r'''#include <stdlib.h>
#define LIMIT(x) ((x) < 10 ? (x) : 10)
/* a comment: if (a < b) return 1; free(p); */
struct s { int n; int *p; };
static const char *msg = "a < b && c >= d; close(fd);";
static int check(struct s *s, int fd, int k)
{
    if (!s || s->n <= 0)
        return -1;
    for (int i = 0; i < s->n; i++) {
        if (s->p[i] == k)
            break;
    }
    if (k != 3) {
        close(fd);
        return 1;
    }
    (void)close(fd);
    free(s->p);
    s->p = NULL;
    fence_record(s);
    int r = release_it(s);
    if (s->n > 4)
        s->n = 4;
    return r >> 1 > 2;
}
'''


def sites(text, lines=None):
    return [(m.line, m.rule, m.old.strip(), m.new) for m in mutants.find_mutants("x.c", text, lines)]


class Generate(unittest.TestCase):
    def test_every_kind_found_in_code_only(self):
        got = sites(SAMPLE)
        # nothing in the comment, the string, the #define or the -> and >> operators
        for line, _, _, _ in got:
            self.assertGreater(line, 5, got)
        comparisons = [(l, o, n) for l, r, o, n in got if r == "comparison"]
        self.assertEqual(comparisons, [(8, "<=", ">"), (10, "<", ">="), (11, "==", "!="),
                                       (14, "!=", "=="), (23, ">", "<="), (25, ">", "<=")])
        bounds = [(l, o, n) for l, r, o, n in got if r == "bound"]
        self.assertEqual(bounds, [(8, "<=", "<"), (10, "<", "<="), (23, ">", ">="),
                                  (25, ">", ">=")])
        refusals = [(l, o) for l, r, o, _ in got if r == "refusal"]
        # the ifs that return or break; not the one that only assigns
        self.assertEqual(refusals, [(8, "(!s || s->n <= 0)"), (11, "(s->p[i] == k)"),
                                    (14, "(k != 3)")])
        releases = [(l, o) for l, r, o, _ in got if r == "release"]
        self.assertEqual(releases, [(15, "close(fd);"), (18, "(void)close(fd);"),
                                    (19, "free(s->p);")])  # not r = release_it(s): a value
        orders = [(l, o) for l, r, o, _ in got if r == "order"]
        self.assertEqual(orders, [(21, "fence_record(s);")])

    def test_changed_lines_only(self):
        got = sites(SAMPLE, lines={15, 23})
        self.assertEqual(sorted({l for l, _, _, _ in got}), [15, 23])

    def test_statement_of_several_lines_starts_at_its_first(self):
        # gcov counts such a statement on one line: the runner asks for any from its first on
        text = "int f(int a, int b)\n{\n    int ok = a == 1 &&\n             b < 2;\n" \
               "    if (ok)\n        return 1;\n    for (int i = 0;\n         i < b; i++)\n" \
               "        a++;\n    return a;\n}\n"
        got = [(m.line, m.first, m.rule) for m in mutants.find_mutants("x.c", text)]
        self.assertEqual(got, [(3, 3, "comparison"), (4, 3, "comparison"), (4, 3, "bound"),
                               (5, 5, "refusal"), (8, 8, "comparison"), (8, 8, "bound")])

    def test_each_mutant_is_the_named_change_and_compiles(self):
        with tempfile.TemporaryDirectory() as d:
            for m in mutants.find_mutants("x.c", SAMPLE):
                text = m.apply(SAMPLE)
                # the original text replaced at its place, nothing else touched
                self.assertEqual(SAMPLE[m.start:m.end].strip(), m.old.strip(), m.label())
                self.assertEqual(text[:m.start], SAMPLE[:m.start], m.label())
                self.assertEqual(text[m.start:m.start + len(m.new)], m.new, m.label())
                self.assertEqual(text[m.start + len(m.new):], SAMPLE[m.end:], m.label())
                path = os.path.join(d, "m.c")
                with open(path, "w") as f:
                    f.write(text.replace("#include <stdlib.h>",
                                         "#include <stdlib.h>\n#include <unistd.h>\n"
                                         "void fence_record(void *);\nint release_it(void *);"))
                r = subprocess.run(["cc", "-std=c11", "-fsyntax-only", path],
                                   capture_output=True, text=True)
                self.assertEqual(r.returncode, 0, (m.label(), r.stderr))

    def test_list_of_a_real_file(self):
        r = subprocess.run([sys.executable, os.path.join(SOURCE, "scripts", "mutants.py"),
                            "--whole", "--list", "core/release.c"], cwd=SOURCE,
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        rules = {line.split("[")[1].split("]")[0] for line in r.stdout.splitlines()[1:]}
        self.assertEqual(rules, {"comparison", "bound", "refusal", "release", "order"}, r.stdout)


    def test_only_and_survivors_of_choose_the_mutants(self):
        script = os.path.join(SOURCE, "scripts", "mutants.py")

        def listed(*extra):
            r = subprocess.run([sys.executable, script, "--whole", "--list", "core/release.c",
                                *extra], cwd=SOURCE, capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            return r.stdout.splitlines()[1:]

        every = listed()
        orders = listed("--only", "[order]")
        self.assertEqual(orders, [l for l in every if "[order]" in l])
        self.assertGreater(len(orders), 0)
        both = listed("--only", "[order]", "--only", "[release]")
        self.assertEqual(both, [l for l in every if "[order]" in l or "[release]" in l])
        # an earlier run's verdicts: only those it left alive come back
        mine = [m for m in mutants.find_mutants("core/release.c",
                                                open(os.path.join(SOURCE, "core/release.c")).read())
                if m.rule == "order"]
        verdicts = [{"file": m.file, "line": m.line, "rule": m.rule, "old": m.old, "new": m.new,
                     "verdict": "killed" if k else "survived"} for k, m in enumerate(mine)]
        with tempfile.NamedTemporaryFile("w", suffix=".json") as fh:
            json.dump({"verdicts": verdicts}, fh)
            fh.flush()
            self.assertEqual(listed("--survivors-of", fh.name), [mine[0].label()])

if __name__ == "__main__":
    unittest.main()
