"""The command line of the integration test files: run the named tests (or all of a module) and
exit as meson expects: 1 on failure; 77 (meson: skipped) when any test was skipped and none
failed, so that a partial skip shows in meson's and scripts/test.sh's skipped count instead of
passing silently; 0 when every test ran and passed. Skips are printed with their reasons."""
import sys
import unittest


def finish(result):
    """Exit with meson's status for a finished unittest result, reporting its skips."""
    for test, why in result.skipped:
        print(f"skipped: {test.id()}: {why}")
    if not result.wasSuccessful():
        sys.exit(1)
    if result.skipped:
        print(f"skipped {len(result.skipped)} of {result.testsRun} tests: reported as skipped")
        sys.exit(77)
    sys.exit(0)


def run(module, names):
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromName(n, module) for n in names) if names \
        else loader.loadTestsFromModule(module)
    finish(unittest.TextTestRunner(verbosity=2).run(suite))
