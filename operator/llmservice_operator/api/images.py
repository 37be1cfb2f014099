"""The images a spec chooses, and the defaults the operator renders when it does not.

One place for both, so that what the renderer runs and what the admin policy checks
(:mod:`.policy`) cannot drift apart.
"""

from __future__ import annotations

from .inference_pool import EPP_VERSION, EndpointPickerSpec
from .spec import EngineSpec, LLMServiceSpec

__all__ = ["engine_image", "picker_image", "spec_images"]


def engine_image(engine: EngineSpec) -> str:
    return engine.image or f"vllm/vllm-openai:v{engine.vllm_version}"


def picker_image(picker: EndpointPickerSpec) -> str:
    return picker.image or f"registry.k8s.io/gateway-api-inference-extension/epp:{EPP_VERSION}"


def spec_images(spec: LLMServiceSpec) -> list[tuple[str, str, bool]]:
    """Every image the spec's objects run, as (field, image, whether the spec set it)."""
    images = [("spec.engine.image", engine_image(spec.engine), spec.engine.image is not None)]
    pool = spec.serving.inference_pool
    if pool is not None:
        picker = pool.endpoint_picker
        field = "spec.serving.inferencePool.endpointPicker.image"
        images.append((field, picker_image(picker), picker.image is not None))
    return images
