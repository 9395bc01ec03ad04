"""The evaluation harness (tasks, graders, suites, reports); see the eval-harness issue."""
