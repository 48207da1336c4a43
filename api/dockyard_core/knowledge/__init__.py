"""Knowledge bases' core (docs/knowledge-bases.md): documents parsed (:mod:`.parsing`) and chunked
(:mod:`.chunking`), indexed in generations switched atomically (:mod:`.index`; backends :mod:`.sqlite` and
:mod:`.postgres`), searched by keywords, vectors or both fused by RRF (:mod:`.fusion`), with vectors from
an embedding model (:mod:`.embeddings`). Neither kopf nor FastAPI: the operator's indexing job and the
facade's retrieval tool both build on it."""

from dockyard_core.knowledge.chunking import Chunk, ChunkSettings, chunk_document
from dockyard_core.knowledge.embeddings import Embedder, EmbeddingError, OpenAIEmbedder
from dockyard_core.knowledge.fusion import RRF_K, reciprocal_rank_fusion
from dockyard_core.knowledge.index import DocumentRecord, Generation, Hit, IndexStats, KnowledgeIndex
from dockyard_core.knowledge.parsing import Block, DocumentError, ParsedDocument, parse_document

__all__ = [
    "RRF_K",
    "Block",
    "Chunk",
    "ChunkSettings",
    "DocumentError",
    "DocumentRecord",
    "Embedder",
    "EmbeddingError",
    "Generation",
    "Hit",
    "IndexStats",
    "KnowledgeIndex",
    "OpenAIEmbedder",
    "ParsedDocument",
    "chunk_document",
    "parse_document",
    "reciprocal_rank_fusion",
]
