"""The dock-status lookup: the job record of an import, a model deployment or a tool deployment."""
