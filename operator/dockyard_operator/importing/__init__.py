"""The file work of the operator's import job (pure, no Kubernetes): a completed chunked upload becomes a model.

:func:`.run.run_import` turns the chunks of a session into ``models/<namespace>/<modelId>/`` of the model
store, or raises :class:`ImportFailed` with a CamelCase reason and a message:

1. The chunks are read in order as one file (:class:`.chunks.ChunkReader`, no assembled copy on disk for
   archives); its size must be ``fileSize`` (``SizeMismatch``) and, when the start call gave one, its
   SHA-256 must match (``ChecksumMismatch``). A session whose chunks are gone fails (``UploadMissing``).
2. A single weights file (safetensors, gguf, bin, pt, pth) is copied into the model directory under its
   file name. A tar, tar.gz/tgz or zip archive is extracted safely (:mod:`.archives`): only regular files
   and directories; absolute paths, ``..``, backslashes, drive letters, control characters, symbolic
   links, device files and FIFOs are refused (``UnsafeArchive``); a hard link becomes a copy of an
   earlier regular member of the archive; at most ``max_members`` members and ``max_extracted_bytes``
   bytes (``ArchiveTooLarge``); an unreadable archive is ``InvalidArchive``. ``__MACOSX/`` entries are
   skipped. When everything sits in one top-level directory, that directory is the model.
3. The model must look like one (:func:`.run.check_model`, ``InvalidModel``): its top level holds
   ``config.json`` (a JSON object) or, for an adapter, ``adapter_config.json``, or at least one weights
   file (``*.safetensors``, ``*.bin`` — also CTranslate2's ``model.bin`` —, ``*.gguf``, ``*.pt``,
   ``*.pth``); every ``*.safetensors`` file has a valid header and every ``*.gguf`` file the GGUF magic.

Everything is written to a staging directory beside the destination and renamed into place at the end,
with a manifest (``.dockyard-import.json``) naming the job: re-running the same job after a crash finds
the finished directory and reports it, or starts over from the chunks.

Modules: :mod:`.results` (:class:`~.results.ImportFailed`, :class:`~.results.Limits`,
:class:`~.results.Imported`), :mod:`.chunks` (the chunks read as one file), :mod:`.archives` (safe
extraction), :mod:`.run` (the model check, :func:`~.run.run_import` and :func:`~.run.import_into` on
either backend). The Kubernetes side is :mod:`dockyard_operator.reconcile.model`.
"""
