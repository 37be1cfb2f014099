"""``kubectl llms``, the kubectl plugin that steers LLMService rollouts (:mod:`.cli`; what it
shows and sends is computed in :mod:`.view`, pure)."""
