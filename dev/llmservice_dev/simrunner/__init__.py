"""Live simulator pods: a runner that gives every LLMService pod on the local cluster's fake
(kwok) nodes a ``llmservice sim`` process bound to the pod's IP, and reports its readiness.

    python -m llmservice_dev.simrunner --kubeconfig KUBECONFIG [--port 0] [--time-scale 10]

``LocalCluster.up()`` starts it with the cluster; see :mod:`.runner` for how it works and
:mod:`.podspec` for what a pod's simulator is configured from.
"""

from .podspec import READY_ANNOTATION, RESTARTS_ANNOTATION, Probe, SimLaunch, launch_for
from .runner import PodSim, Runner, RunnerConfig

__all__ = [
    "READY_ANNOTATION",
    "RESTARTS_ANNOTATION",
    "PodSim",
    "Probe",
    "Runner",
    "RunnerConfig",
    "SimLaunch",
    "launch_for",
]
