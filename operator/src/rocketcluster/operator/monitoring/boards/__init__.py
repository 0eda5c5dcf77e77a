"""The dashboards, grouped by what they show (built with the foundation SDK: generator
only)."""
