"""llmservice-operator: serve LLMs with vLLM on Kubernetes from one LLMService resource."""

__version__ = "0.1.0"
