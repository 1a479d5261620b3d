from trinity_core.testing import PluginConformance


class TestConformance(PluginConformance):
    distribution = "trinity-plugin-buffer"
