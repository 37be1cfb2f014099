"""autoscale (pure)."""
