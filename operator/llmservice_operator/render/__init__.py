"""Rendering (pure): desired Kubernetes objects from spec + sizing, via jinja2 templates."""

from .objects import RenderInput, render_service_objects, revision_hash
from .shape import ServingShape

__all__ = ["RenderInput", "ServingShape", "render_service_objects", "revision_hash"]
