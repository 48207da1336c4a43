"""Analytics of an environment per app version and day (from the conversation database)."""
