"""Model downloads for the storage initializer of model pods (signed, short-lived tokens)."""
