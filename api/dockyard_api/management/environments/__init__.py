"""Environments: create, deploy, rollback, history, delete; their API keys."""
