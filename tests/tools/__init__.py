"""Tests that run a tool besides Python: helm (the chart), hadolint (the Dockerfile), MinIO (the S3 model
store), PostgreSQL (the conversation store). Marker ``tools``; `make test-tools`."""
