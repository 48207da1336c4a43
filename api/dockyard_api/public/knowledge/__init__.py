"""Knowledge bases through the public API (docs/knowledge-bases.md): their versions, documents attached from
the chunked import, deleted, and re-indexing."""
