"""trinity-plugin-example: the components of docs/authoring.md, as an installable distribution."""

TRINITY_API_VERSION = "1"
"""The trinity-core plugin API this distribution was built for (checked when it loads)."""
