"""An environment's API keys: generate, list, revoke."""
