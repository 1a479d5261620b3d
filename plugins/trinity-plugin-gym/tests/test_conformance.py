from trinity_core.testing import WorkflowConformance


class TestGymWorkflow(WorkflowConformance):
    component = "gym"
