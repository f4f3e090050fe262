import atexit
import itertools
import os
import shutil
import tempfile

import matplotlib
import pytest

matplotlib.use("Agg")
os.environ.setdefault("GLOG_minloglevel", "2")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Commands measure into the results store by default: tests never touch the user's ~/.cache/fairvision/store
# or a $FAIRVISION_STORE of the environment. This one covers session- and module-scoped fixtures; every test
# gets a fresh one of its own (below).
_SESSION_STORE = tempfile.mkdtemp(prefix="fairvision-test-store-")
atexit.register(shutil.rmtree, _SESSION_STORE, ignore_errors=True)
os.environ["FAIRVISION_STORE"] = os.path.join(_SESSION_STORE, "session")
_STORE_NUMBERS = itertools.count()


@pytest.fixture(autouse=True)
def _private_results_store(monkeypatch):
    """A results store of this test's own (created on its first write)."""
    monkeypatch.setenv("FAIRVISION_STORE", os.path.join(_SESSION_STORE, f"test-{next(_STORE_NUMBERS)}"))
