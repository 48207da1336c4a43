"""Usage statistics and guardrail interventions of an environment (from the conversation database)."""
