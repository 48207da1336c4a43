"""Chunked model import: sessions, chunks, completion (the Model resource and the model store)."""
