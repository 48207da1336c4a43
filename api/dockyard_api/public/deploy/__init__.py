"""Model and tool deployment through the public API: a new dock job per call."""
