"""Settings of the model store that the facade and the operator share (each with its own prefix:
``DOCKYARD_API_MODEL_STORE_BACKEND``, ``DOCKYARD_OPERATOR_MODEL_STORE_BACKEND``, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings

from dockyard_core.downloadtokens import load_key
from dockyard_core.modelstore import ModelStore, default_root
from dockyard_core.s3store import S3Config, open_store

if TYPE_CHECKING:
    from dockyard_core.knowledge.files import DocumentFiles


class ModelStoreSettings(BaseSettings):
    model_store: Path = Field(
        default_factory=default_root,
        description="filesystem backend: the model store directory, shared by the facade and the operator; s3 "
        "backend: a local spool and work directory. Default <checkout>/.dockyard/model-store",
    )
    model_store_backend: Literal["filesystem", "s3"] = Field(
        default="filesystem", description="filesystem (a directory, the embedded default) or s3 (object storage)"
    )
    s3_endpoint: str = Field(default="", description="S3 endpoint URL, e.g. https://s3.eu-west-1.amazonaws.com")
    s3_bucket: str = Field(default="", description="bucket of the model store")
    s3_prefix: str = Field(default="", description="key prefix inside the bucket (several installs, one bucket)")
    s3_region: str | None = Field(default=None, description="region (AWS); unset: asked from the endpoint")
    s3_access_key: str | None = Field(default=None, description="access key id")
    s3_secret_key: SecretStr | None = Field(default=None, description="secret access key")
    s3_create_bucket: bool = Field(default=False, description="create the bucket when it is missing")
    s3_ca_bundle: str | None = Field(default=None, description="PEM CA bundle of a private endpoint")
    download_token_key: SecretStr | None = Field(
        default=None,
        description="HMAC key of model download tokens (at least 32 characters), shared by the facade and the "
        "operator; unset: the file download_token_key_file",
    )
    download_token_key_file: Path | None = Field(
        default=None, description="file holding the key; unset: download-token.key beside the model store"
    )

    knowledge_index: str = Field(
        default="",
        description="the knowledge bases' index (docs/knowledge-bases.md): sqlite:///<path> (embedded) or "
        "postgresql://user:password@host/db; empty: sqlite:///<model store>/knowledge/index.sqlite",
    )

    def knowledge_index_url(self) -> str:
        """The knowledge index's URL (:func:`dockyard_core.knowledge.job.open_index`)."""
        return self.knowledge_index or f"sqlite:///{self.model_store.resolve() / 'knowledge' / 'index.sqlite'}"

    def knowledge_files(self) -> Path:
        """The directory of imported documents (``<namespace>/<fileId>`` under it): in the model store."""
        return self.model_store / "knowledge" / "files"

    def document_files(self, store: ModelStore | None = None) -> DocumentFiles:
        """Where imported documents are kept: beside the models, on either backend (``store``: the model store
        already opened, else opened here)."""
        from dockyard_core.knowledge.files import document_files

        return document_files(store or self.open_model_store(), self.knowledge_files())

    def s3_config(self) -> S3Config:
        return S3Config(
            endpoint=self.s3_endpoint,
            bucket=self.s3_bucket,
            access_key=self.s3_access_key,
            secret_key=self.s3_secret_key.get_secret_value() if self.s3_secret_key else None,
            region=self.s3_region,
            prefix=self.s3_prefix,
            create_bucket=self.s3_create_bucket,
            ca_bundle=self.s3_ca_bundle,
        )

    def open_model_store(self) -> ModelStore:
        config = self.s3_config() if self.model_store_backend == "s3" else None
        return open_store(self.model_store_backend, self.model_store, config)

    def token_key(self) -> bytes:
        value = self.download_token_key.get_secret_value() if self.download_token_key else None
        path = self.download_token_key_file or self.model_store.parent / "download-token.key"
        return load_key(value, path)
