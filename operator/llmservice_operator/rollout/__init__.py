"""rollout (pure)."""
