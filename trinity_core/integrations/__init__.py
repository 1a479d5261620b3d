"""Our components inside other trainers: TRL's ``GRPOTrainer`` and verl's registries.

Nothing here is imported by the core. Each integration is a module of its own and needs its optional
extra:

* :mod:`trinity_core.integrations.trl` (``pip install 'trinity-core[trl]'``): ``TrinityGRPOTrainer``, a
  TRL ``GRPOTrainer`` whose advantages and loss come from installed plugins;
* :mod:`trinity_core.integrations.verl` (``pip install 'trinity-core[verl]'``): ``register()`` puts every
  installed policy loss and advantage function into verl's registries as ``trinity.<name>``;
  :mod:`trinity_core.integrations.verl_plugin` calls it on import, for verl's external-module setting.

The shared pieces are framework-free: :mod:`~trinity_core.integrations.components` builds the
components from config-style names, :mod:`~trinity_core.integrations.rows` turns padded rows into
experiences and advantages back into rows.
"""
