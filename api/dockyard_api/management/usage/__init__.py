"""Usage statistics of an environment (from the conversation database)."""
