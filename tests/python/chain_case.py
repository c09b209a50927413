"""What the tests of the Python module share: options for a chain directory, a test case with a
temporary chain directory, and environment variables put back as they were."""

import contextlib
import os
import tempfile
import unittest

import baton


def options(chain_dir):
    result = baton.Options()
    result.chain_dir = chain_dir
    return result


class TempChain(unittest.TestCase):
    def setUp(self):
        self._dir = tempfile.TemporaryDirectory(prefix="baton-binding-")
        self.chain = os.path.join(self._dir.name, "chain")

    def tearDown(self):
        self._dir.cleanup()


@contextlib.contextmanager
def saved_environment(*keys):
    """Restores the variables `keys` (set or unset) as they were before the block, whatever it did."""
    saved = {k: os.environ.get(k) for k in keys}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
