"""Test-wide settings: hypothesis profiles (quick locally, larger in CI), and the
tests folder on the import path for the shared helpers (``waiting``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow],
                          derandomize=False, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

# tests in every folder import the shared waiting helpers as ``from waiting import ...``
sys.path.insert(0, str(Path(__file__).resolve().parent))
