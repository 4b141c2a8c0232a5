"""The command line of the integration test files that are not test_integration.py: run the named
tests (or all of a module), exit 0 on success, 1 on failure, 77 (meson: skipped) when every test
ran was skipped, printing why."""
import sys
import unittest


def run(module, names):
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromName(n, module) for n in names) if names \
        else loader.loadTestsFromModule(module)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    if result.wasSuccessful() and result.testsRun and len(result.skipped) == result.testsRun:
        for _, why in result.skipped:
            print(f"skipped: {why}")
        sys.exit(77)
    sys.exit(0 if result.wasSuccessful() else 1)
