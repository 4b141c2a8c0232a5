#!/usr/bin/env python3
"""Mechanical mutants of C sources, and the run that judges the tests by them.

Nobody picks these mutants: every site of a kind in the files named is mutated.

  comparison  each <, <=, >, >=, ==, != negated (a < b becomes a >= b)
  bound       each <, <=, >, >= moved by one (a < b becomes a <= b)
  refusal     each if whose body returns, jumps, breaks or continues never taken
              (if (0 && (...)))
  release     each call statement that closes, frees, releases, destroys or unmaps dropped
  order       each call statement that records an event, waits for one or makes a fence or
              order point dropped

Sites come from the text with comments, strings, character constants and preprocessor lines
blanked, so only code is mutated. By default only sites on lines a change added or modified
(since --base) are mutated; --whole takes every site of every file named.

Each mutant is built in its own build directory (default build-mutate, configured without
-Werror so that a mutant that only warns still runs) and judged by the tests that execute its
line: a coverage build (default build-cov) runs every test once, alone, and records which lines
each executes (a statement of several lines counts as executed where any of its lines up to the
mutant's is: gcov counts it on one of them). A mutant on a line no test executes survives without
a run ("not executed"). The others run their tests with --maxfail 1 under a time bound; a test that fails, crashes or
times out kills the mutant. Mutants that do not compile are left out of the rate.

  scripts/mutate.sh --generate [--base REV] [--whole] [FILE.c ...]      (see --help)
"""
import argparse
import hashlib
import json
import os
import random
import re
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

RULES = ("comparison", "bound", "refusal", "release", "order")

NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
BOUND = {"<": "<=", "<=": "<", ">": ">=", ">=": ">"}

RELEASE_NAME = re.compile(
    r"(?:^|_)(?:free|close|fclose|closedir|release|destroy|delete|unmap|munmap|unlink|unref)$"
    r"|(?:Free|Close|Release|Destroy|Unmap)(?:_v\d+)?(?:_ptsz)?$")
ORDER_NAME = re.compile(
    r"(?i)fence|event_?record|order_?point|wait_?event|barrier|EventRecord|StreamWaitEvent")


class Mutant:
    __slots__ = ("file", "rule", "start", "end", "new", "line", "old", "snippet", "first")

    def __init__(self, file, rule, start, end, new, line, old, snippet):
        self.file, self.rule, self.start, self.end = file, rule, start, end
        self.new, self.line, self.old, self.snippet = new, line, old, snippet
        self.first = line   # the line its statement starts on (see find_mutants)

    def label(self):
        return "%s:%d [%s] %s" % (self.file, self.line, self.rule, self.describe())

    def describe(self):
        old = " ".join(self.old.split())
        new = " ".join(self.new.split())
        if len(old) > 70:
            old = old[:67] + "..."
        if len(new) > 70:
            new = new[:67] + "..."
        return "'%s' -> '%s'" % (old, new)

    def apply(self, text):
        return text[:self.start] + self.new + text[self.end:]


def mask_code(text):
    """The text with comments, string and character literals and preprocessor lines replaced
    by spaces (line breaks kept), so offsets match the original."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            i += 1
            continue
        if line_start and c == "#":
            # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out[i] = " "
                    i += 2
                    continue
                out[i] = " "
                i += 1
            continue
        line_start = False
        if c == "\n":
            line_start = True
            i += 1
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            for k in range(i, j):
                if out[k] != "\n":
                    out[k] = " "
            i = j
        else:
            i += 1
    return "".join(out)


def match_close(code, i, open_ch, close_ch):
    """Index just past the bracket that closes the one at i, or -1."""
    depth = 0
    for k in range(i, len(code)):
        ch = code[k]
        if ch == open_ch:
            depth += 1
        elif ch == close_ch:
            depth -= 1
            if depth == 0:
                return k + 1
    return -1


def statement_end(code, i):
    """Index just past the statement that starts at i (a block or one statement)."""
    k = i
    while k < len(code) and code[k].isspace():
        k += 1
    if k < len(code) and code[k] == "{":
        return match_close(code, k, "{", "}")
    depth = 0
    while k < len(code):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return -1
        elif ch == ";" and depth == 0:
            return k + 1
        k += 1
    return -1


COMPARISON = re.compile(r"(?<![<>=!\-])(<=|>=|==|!=|<|>)(?![<>=])")
IF_KEYWORD = re.compile(r"\bif\s*\(")
CALL_STATEMENT = re.compile(
    r"(?:(?<=[;{}):])|(?<=\belse))(\s*)((?:\(\s*void\s*\)\s*)?)"
    r"([A-Za-z_]\w*(?:\s*(?:->|\.)\s*[A-Za-z_]\w*)*)\s*\(")
JUMP = re.compile(r"\b(?:return|goto|break|continue)\b")


def find_mutants(path, text, lines=None):
    """Every mutant of the file's text; lines: the set of line numbers to keep (None: all)."""
    code = mask_code(text)
    line_of = []
    ln = 1
    for ch in text:
        line_of.append(ln)
        if ch == "\n":
            ln += 1
    line_of.append(ln)

    def keep(pos):
        return lines is None or line_of[pos] in lines

    def snippet(pos):
        a = text.rfind("\n", 0, pos) + 1
        b = text.find("\n", pos)
        return text[a:b if b >= 0 else len(text)].strip()

    found = []
    # comparisons: negated and moved by one
    for m in COMPARISON.finditer(code):
        op = m.group(1)
        pos = m.start(1)
        if not keep(pos):
            continue
        # a '<' or '>' that is not between two operands (a declaration of an array of
        # pointers, say) cannot occur in C outside preprocessor lines: no further check
        found.append(Mutant(path, "comparison", pos, m.end(1), NEGATE[op], line_of[pos], op,
                            snippet(pos)))
        if op in BOUND:
            found.append(Mutant(path, "bound", pos, m.end(1), BOUND[op], line_of[pos], op,
                                snippet(pos)))
    # refusals: an if whose body returns or jumps, never taken
    for m in IF_KEYWORD.finditer(code):
        pos = m.start()
        if not keep(pos):
            continue
        open_paren = m.end() - 1
        close = match_close(code, open_paren, "(", ")")
        if close < 0:
            continue
        body_end = statement_end(code, close)
        if body_end < 0 or not JUMP.search(code, close, body_end):
            continue
        cond = text[open_paren + 1:close - 1]
        found.append(Mutant(path, "refusal", open_paren, close, "(0 && (%s))" % cond,
                            line_of[pos], "(%s)" % cond, snippet(pos)))
    # call statements: releases and order points dropped
    for m in CALL_STATEMENT.finditer(code):
        callee = m.group(3)
        name = re.split(r"->|\.", callee)[-1].strip()
        rule = ("release" if RELEASE_NAME.search(name)
                else "order" if ORDER_NAME.search(name) else None)
        if rule is None:
            continue
        start = m.start(2) if m.group(2) else m.start(3)
        if not keep(start):
            continue
        open_paren = m.end() - 1
        close = match_close(code, open_paren, "(", ")")
        if close < 0:
            continue
        k = close
        while k < len(code) and code[k].isspace():
            k += 1
        if k >= len(code) or code[k] != ";":
            continue
        found.append(Mutant(path, rule, start, k + 1, "(void)0;", line_of[start],
                            text[start:k + 1], snippet(start)))
    # gcov counts a statement of several lines on one of them (its first, mostly): a mutant on
    # a later line of it is executed when that line is
    for mu in found:
        k = mu.start - 1
        while k >= 0 and code[k] not in ";{}":
            k -= 1
        k += 1
        while k < mu.start and code[k].isspace():
            k += 1
        mu.first = line_of[k]
    found.sort(key=lambda mu: (mu.start, RULES.index(mu.rule)))
    return found


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True,
                          text=True).stdout


def changed_files(base):
    names = set(git("diff", "--name-only", "--diff-filter=AM", base, "--").split())
    names |= set(git("ls-files", "--others", "--exclude-standard").split())
    return sorted(n for n in names if n.endswith(".c") and os.path.isfile(os.path.join(ROOT, n)))


def changed_lines(base, path):
    """Line numbers of path (in the working tree) that the change since base added or
    modified; every line for a file git does not track."""
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", path], cwd=ROOT,
                             capture_output=True).returncode == 0
    if not tracked:
        return None
    out = git("diff", "-U0", base, "--", path)
    lines = set()
    for m in re.finditer(r"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@", out, re.M):
        start, count = int(m.group(1)), int(m.group(2) or "1")
        lines.update(range(start, start + count))
    return lines


# ---- builds and tests ---------------------------------------------------------------------

def run(cmd, timeout=None, **kw):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout, **kw)


def ensure_build(build, extra):
    if not os.path.isfile(os.path.join(ROOT, build, "build.ninja")):
        r = run(["meson", "setup", build, *extra])
        if r.returncode != 0:
            sys.exit("mutants: meson setup %s failed:\n%s" % (build, r.stdout + r.stderr))
    r = run(["nice", "ninja", "-C", build])
    if r.returncode != 0:
        sys.exit("mutants: %s does not build:\n%s" % (build, r.stdout[-3000:]))


def list_tests(build):
    r = run(["meson", "test", "-C", build, "--no-rebuild", "--list"])
    names = []
    for line in r.stdout.splitlines():
        if " / " in line:
            names.append(line.split(" / ", 1)[1].strip())
    return names


def sources_digest(files):
    """The tree's sources, and those of files git does not track: the same for every run on
    one tree whatever files it names, so that one coverage pass serves them all."""
    h = hashlib.sha256()
    tracked = git("ls-files", "*.c", "*.h", "*.build", "*.py", "*.def").split()
    for f in sorted(tracked) + sorted(set(files) - set(tracked)):
        p = os.path.join(ROOT, f)
        if os.path.isfile(p):
            h.update(f.encode())
            with open(p, "rb") as fh:
                h.update(fh.read())
    return h.hexdigest()


def objects_of(build, sources):
    """gcda paths of the objects compiled from each source."""
    with open(os.path.join(ROOT, build, "compile_commands.json")) as fh:
        db = json.load(fh)
    out = {s: [] for s in sources}
    for e in db:
        src = os.path.relpath(os.path.normpath(os.path.join(e["directory"], e["file"])), ROOT)
        if src in out:
            obj = os.path.join(e["directory"], e["output"])
            out[src].append(os.path.splitext(obj)[0] + ".gcda")
    return out


def covered_lines(gcda_by_source):
    """source -> set of executed line numbers, from the gcda files present now."""
    result = {}
    for src, gcdas in gcda_by_source.items():
        lines = set()
        for g in gcdas:
            if not os.path.isfile(g):
                continue
            r = subprocess.run(["gcov", "--json-format", "--stdout", g],
                               cwd=os.path.dirname(g), capture_output=True, text=True)
            for doc in r.stdout.splitlines():
                doc = doc.strip()
                if not doc.startswith("{"):
                    continue
                data = json.loads(doc)
                for f in data.get("files", []):
                    fpath = os.path.normpath(os.path.join(data.get("current_working_directory",
                                                                   ""), f["file"]))
                    if os.path.relpath(fpath, ROOT) != src:
                        continue
                    for ln in f.get("lines", []):
                        if ln.get("count", 0) > 0:
                            lines.add(ln["line_number"])
        result[src] = lines
    return result


def coverage_map(cov_build, sources, log):
    """test name -> {source: lines}, and each test's duration and verdict; cached by digest."""
    cache = os.path.join(ROOT, cov_build, "mutants-coverage.json")
    digest = sources_digest(sources)
    if os.path.isfile(cache):
        with open(cache) as fh:
            data = json.load(fh)
        if data.get("digest") == digest and set(sources) <= set(data.get("sources", [])):
            log("coverage: cached (%s)" % cache)
            return data
    ensure_build(cov_build, ["-Db_coverage=true", "-Dwerror=false"])
    gcdas = objects_of(cov_build, sources)
    tests = list_tests(cov_build)
    per_test, info = {}, {}
    for i, t in enumerate(tests, 1):
        for dirpath, _, files in os.walk(os.path.join(ROOT, cov_build)):
            for f in files:
                if f.endswith(".gcda"):
                    os.unlink(os.path.join(dirpath, f))
        t0 = time.monotonic()
        r = run(["nice", "meson", "test", "-C", cov_build, "--no-rebuild", "-q", t])
        dt = time.monotonic() - t0
        cov = covered_lines(gcdas)
        per_test[t] = {s: sorted(v) for s, v in cov.items() if v}
        info[t] = {"seconds": round(dt, 2), "ok": r.returncode == 0}
        log("coverage: [%d/%d] %s %.1fs%s" % (i, len(tests), t, dt,
                                              "" if r.returncode == 0 else " (FAILS)"))
    data = {"digest": digest, "sources": sources, "tests": per_test, "info": info}
    with open(cache, "w") as fh:
        json.dump(data, fh)
    return data


def stop_on_signal(signum, _frame):
    raise SystemExit(128 + signum)   # runs the finally that puts the sources back


def main():
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, stop_on_signal)
    ap = argparse.ArgumentParser(
        prog="scripts/mutate.sh --generate",
        description="Mechanical mutants of C files, judged by the tests that execute them.")
    ap.add_argument("files", nargs="*", help="C files (default: those changed since --base)")
    ap.add_argument("--base", default=None,
                    help="the change starts here (default: the merge base with main, or HEAD~1)")
    ap.add_argument("--whole", action="store_true",
                    help="every site of the files, not only the lines the change touched")
    ap.add_argument("--rules", default=",".join(RULES), help="rules to apply (%(default)s)")
    ap.add_argument("--sample", type=int, default=0,
                    help="at most N mutants, chosen at random with --seed (default: all)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build", default="build-mutate")
    ap.add_argument("--coverage-build", default="build-cov")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per mutant (%(default)s)")
    ap.add_argument("--only", action="append", default=[], metavar="TEXT",
                    help="only the mutants whose label (as --list prints it) contains TEXT "
                         "(repeatable)")
    ap.add_argument("--survivors-of", metavar="JSON",
                    help="only the mutants an earlier run (its --json) left alive")
    ap.add_argument("--tests", action="append", default=[], metavar="PREFIX=T1,T2",
                    help="judge the mutants of files whose path starts with PREFIX by these "
                         "tests only, with no coverage pass (repeatable; a subset of the tests "
                         "that execute a line: a survivor may still be killed by another)")
    ap.add_argument("--list", action="store_true", help="print the mutants, run nothing")
    ap.add_argument("--json", help="write every mutant's verdict to this file")
    args = ap.parse_args()

    def log(msg):
        print(msg, flush=True)

    base = args.base
    if base is None:
        r = run(["git", "merge-base", "HEAD", "main"])
        base = r.stdout.strip() if r.returncode == 0 and r.stdout.strip() != \
            git("rev-parse", "HEAD").strip() else "HEAD~1"
    files = [os.path.relpath(os.path.abspath(f), ROOT) for f in args.files] or \
        [f for f in changed_files(base) if not f.startswith("tests/")]
    rules = [r.strip() for r in args.rules.split(",") if r.strip()]
    for r in rules:
        if r not in RULES:
            sys.exit("mutants: unknown rule %s (rules: %s)" % (r, ", ".join(RULES)))

    mutants = []
    for f in files:
        with open(os.path.join(ROOT, f)) as fh:
            text = fh.read()
        lines = None if args.whole else changed_lines(base, f)
        mutants += [m for m in find_mutants(f, text, lines) if m.rule in rules]
    if args.only:
        mutants = [m for m in mutants if any(t in m.label() for t in args.only)]
    if args.survivors_of:
        with open(args.survivors_of) as fh:
            alive = {(v["file"], v["line"], v["rule"], v["old"], v["new"])
                     for v in json.load(fh)["verdicts"] if v["verdict"] != "killed"}
        mutants = [m for m in mutants if (m.file, m.line, m.rule, m.old, m.new) in alive]
    if args.sample and len(mutants) > args.sample:
        rng = random.Random(args.seed)
        mutants = sorted(rng.sample(mutants, args.sample), key=lambda m: (m.file, m.start))
    log("mutants: %d in %d files (%s, base %s)" % (len(mutants), len(files),
                                                   "whole files" if args.whole else
                                                   "lines changed", base[:12]))
    if args.list:
        try:
            for m in mutants:
                print(m.label())
        except BrokenPipeError:
            pass
        return 0
    if not mutants:
        return 0

    chosen = {}
    for spec in args.tests:
        prefix, _, names = spec.partition("=")
        if not prefix or not names:
            ap.error("--tests wants PREFIX=TEST,TEST...")
        chosen[prefix] = [t for t in names.split(",") if t]
    if chosen and any(not any(m.file.startswith(p) for p in chosen) for m in mutants):
        ap.error("--tests names no tests for some of the files")
    # the lines of every file named, not only of the mutants chosen: a later run with another
    # sample, --only or --survivors-of reuses the pass
    cov = coverage_map(args.coverage_build, sorted(set(files)), log) if not chosen else \
        {"tests": {}, "info": {}}
    failing = {t for t, i in cov["info"].items() if not i["ok"]}
    if failing:
        log("mutants: these tests fail without any mutant and judge none: " +
            ", ".join(sorted(failing)))
    ensure_build(args.build, ["-Dwerror=false"])

    verdicts = []
    counts = {r: [0, 0] for r in RULES}   # rule -> [killed, run]
    not_built = 0
    originals = {}
    try:
        for i, m in enumerate(mutants, 1):
            span = range(m.first, m.line + 1)
            tests = sorted((t for t, by_src in cov["tests"].items()
                            if t not in failing and
                            not set(span).isdisjoint(by_src.get(m.file, []))),
                           key=lambda t: cov["info"][t]["seconds"])
            if chosen:
                tests = next(v for p, v in chosen.items() if m.file.startswith(p))
            path = os.path.join(ROOT, m.file)
            if m.file not in originals:
                with open(path) as fh:
                    originals[m.file] = fh.read()
            verdict = None
            if not tests:
                verdict = "not executed"
            else:
                with open(path, "w") as fh:
                    fh.write(m.apply(originals[m.file]))
                try:
                    r = run(["nice", "ninja", "-C", args.build], timeout=args.timeout)
                    if r.returncode != 0:
                        verdict = "no build"
                    else:
                        try:
                            r = run(["nice", "meson", "test", "-C", args.build, "--no-rebuild",
                                     "-q", "--maxfail", "1", *tests], timeout=args.timeout)
                            verdict = "survived" if r.returncode == 0 else "killed"
                        except subprocess.TimeoutExpired:
                            verdict = "killed"   # a hang is a failure the tests would see
                finally:
                    with open(path, "w") as fh:
                        fh.write(originals[m.file])
                    os.utime(path)
            if verdict == "no build":
                not_built += 1
            else:
                counts[m.rule][1] += 1
                if verdict == "killed":
                    counts[m.rule][0] += 1
            verdicts.append({"file": m.file, "line": m.line, "rule": m.rule, "old": m.old,
                             "new": m.new, "verdict": verdict, "tests": tests})
            log("[%d/%d] %-12s %s" % (i, len(mutants), verdict, m.label()))
    finally:
        for f, text in originals.items():
            with open(os.path.join(ROOT, f), "w") as fh:
                fh.write(text)
        run(["nice", "ninja", "-C", args.build])

    killed = sum(k for k, _ in counts.values())
    total = sum(n for _, n in counts.values())
    print()
    print("by rule:")
    for r in RULES:
        k, n = counts[r]
        if n:
            print("  %-10s %4d of %4d killed (%.1f%%)" % (r, k, n, 100.0 * k / n))
    survivors = [v for v in verdicts if v["verdict"] in ("survived", "not executed")]
    if survivors:
        print("survivors:")
        for v in survivors:
            print("  %s:%d [%s] %s: '%s' -> '%s'" % (v["file"], v["line"], v["rule"],
                                                    v["verdict"], " ".join(v["old"].split()),
                                                    v["new"]))
    rate = 100.0 * killed / total if total else 100.0
    print("mutants: %d run, %d killed, %d survived, %d did not build; kill rate %.1f%%"
          % (total, killed, total - killed, not_built, rate))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"base": base, "files": files, "verdicts": verdicts,
                       "kill_rate": rate}, fh, indent=1)
    return 0 if total == killed else 1


if __name__ == "__main__":
    sys.exit(main())
