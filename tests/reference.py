"""Access to the published reference implementation for comparison tests (see
:mod:`trinity_core.testing.reference`, which plugin test suites use too)."""

from trinity_core.testing.reference import REF_DIR, import_reference, reference_available

__all__ = ["REF_DIR", "import_reference", "reference_available"]
