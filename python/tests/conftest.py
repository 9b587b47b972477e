import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))


def pytest_configure(config):
    # python/ci.sh sets FA4_REQUIRE_TORCH=1 when it installed torch: the torch tests (which
    # importorskip torch) must then run, so a torch that does not import fails the run instead.
    if os.environ.get("FA4_REQUIRE_TORCH") == "1":
        try:
            import torch  # noqa: F401
        except Exception as e:  # ImportError, or a broken install (OSError from its libraries)
            raise pytest.UsageError(f"FA4_REQUIRE_TORCH=1 but torch does not import: {type(e).__name__}: {e}") from e


@pytest.fixture
def rng(request):
    # Fresh random inputs every run (DESIGN.md §4); the seed is printed on failure.
    seed = int.from_bytes(os.urandom(4), "little")
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)
