"""Any generated spec either renders, or fails with a SpecError naming a spec field."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmservice_operator.api import SpecError, parse_llmservice
from llmservice_operator.service_plan import plan_service
from llmservice_operator.sizing import builtin_model_ids, load_catalog

CATALOG = load_catalog()

specs = st.fixed_dictionaries(
    {
        "model": st.fixed_dictionaries(
            {
                "id": st.sampled_from([*builtin_model_ids(), "acme/unknown-model"]),
                "dtype": st.sampled_from(["auto", "bfloat16", "float16", "float32", "int4"]),
                "quantization": st.sampled_from(["none", "fp8", "int8", "awq", "gptq"]),
            }
        ),
        "engine": st.fixed_dictionaries(
            {
                "maxModelLen": st.integers(min_value=-10, max_value=300_000),
                "kvCacheDtype": st.sampled_from(["auto", "fp8"]),
                "gpuMemoryUtilization": st.floats(min_value=0.05, max_value=1.2),
            },
            optional={
                "maxNumSeqs": st.integers(min_value=0, max_value=5000),
                "vllmVersion": st.sampled_from(["0.33.0", "0.10.2", "0.4.0", "1"]),
            },
        ),
        "resources": st.fixed_dictionaries(
            {
                "gpu": st.sampled_from(["auto", *CATALOG.names(), "TPU-v5"]),
                "minConcurrency": st.integers(min_value=0, max_value=600),
            }
        ),
        "scaling": st.fixed_dictionaries(
            {
                "minReplicas": st.integers(min_value=-1, max_value=5),
                "maxReplicas": st.integers(min_value=0, max_value=5),
                "mode": st.sampled_from(["operator", "hpa", "keda", "manual"]),
            }
        ),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs)
def test_any_spec_renders_or_names_the_field(spec: dict[str, Any]) -> None:
    doc = {
        "apiVersion": "serving.llmservice.dev/v1alpha1",
        "kind": "LLMService",
        "metadata": {"name": "svc", "namespace": "ns"},
        "spec": spec,
    }
    error: SpecError | None = None
    try:
        plan = plan_service(parse_llmservice(doc), CATALOG)
    except SpecError as err:
        error = err
    if error is not None:
        assert error.field.startswith("spec"), error.field
        assert error.message.strip()
        return
    kinds = {o["kind"] for o in plan.objects}
    # One workload: a Deployment, or a LeaderWorkerSet when a replica spans nodes.
    workload = "LeaderWorkerSet" if plan.shape.multi_node else "Deployment"
    assert {workload, "Service"} <= kinds
    assert len(kinds & {"Deployment", "LeaderWorkerSet"}) == 1
    assert plan.sizing.fits
