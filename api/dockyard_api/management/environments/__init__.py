"""Environments: create, deploy, rollback, history, delete."""
