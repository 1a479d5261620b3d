"""Stand-ins for the reference's heavy dependencies; this folder is put on ``sys.path`` by
:func:`trinity_core.testing.reference.import_reference` (the ``__init__`` only makes it packaged)."""
