"""Suite-wide settings: deterministic under CI, exploratory locally.

Under ``CI=true`` (what ``.ci/run`` sees) hypothesis runs a derandomized profile: the same
examples every run, no example database, so a CI result never depends on luck. Locally the
default profile stays random so that new counterexamples keep being found;
``HYPOTHESIS_PROFILE=ci`` selects the CI profile anywhere.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# The CLI caches compiled models (pdsl.cache); tests run uncached unless they ask (tests/test_cache.py).
os.environ.setdefault("PDSL_NO_CACHE", "1")

settings.register_profile(
    "ci", derandomize=True, database=None, print_blob=True, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"))
