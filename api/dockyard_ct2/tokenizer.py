"""The model directory's tokenizer and chat template.

- ``tokenizer.json`` (the Hugging Face ``tokenizers`` format) encodes prompts and decodes tokens.
- ``tokenizer_config.json`` may carry a Jinja2 ``chat_template`` (a string, or a list of named
  templates of which ``default`` is used) and the ``bos_token`` / ``eos_token`` the template refers to.
  Without one, the server uses ChatML (:data:`CHATML_TEMPLATE`).
- End tokens: the CTranslate2 ``config.json``'s ``eos_token``, ``generation_config.json``'s
  ``eos_token_id`` (an id or a list), the tokenizer config's ``eos_token``, and ``<|im_end|>`` when the
  ChatML default is in use and the vocabulary has it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from jinja2 import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""The default chat template (ChatML), used when the model directory has none."""

CHATML_END = "<|im_end|>"


class ModelDirError(ValueError):
    """The model directory lacks a file the server needs, or a file is unreadable."""


class ChatTemplateError(ValueError):
    """The chat template refused the conversation (it raised, or failed to render)."""


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelDirError(f"{path.name} is not readable JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelDirError(f"{path.name} is not a JSON object")
    return data


def _token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken object."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _raise_exception(message: str) -> NoReturn:
    raise ChatTemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now(UTC).strftime(fmt)


class IncrementalDecoder:
    """Turns token ids into text as they arrive, without re-decoding the whole sequence each step
    and without cutting a multi-byte character in half (the prefix/read offsets of TGI and vLLM)."""

    __slots__ = ("_decode", "_ids", "_prefix", "_read")

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def push(self, token_id: int) -> str:
        """Add one token; return the text it completes (possibly empty)."""
        self._ids.append(token_id)
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        full_text = self._decode(self._ids[self._prefix :])
        if len(full_text) > len(prefix_text) and not full_text.endswith("\ufffd"):
            self._prefix = self._read
            self._read = len(self._ids)
            return full_text[len(prefix_text) :]
        return ""

    def decode_all(self, ids: list[int]) -> str:
        """The text of ``ids`` in one go (when nothing needed it token by token)."""
        return self._decode(ids)

    def flush(self) -> str:
        """Text held back at the end (an incomplete character decodes to U+FFFD)."""
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        full_text = self._decode(self._ids[self._prefix :])
        self._prefix = self._read = len(self._ids)
        return full_text[len(prefix_text) :]


class ModelTokenizer:
    """Encoding, decoding, the chat template and the end tokens of one model directory."""

    def __init__(self, model_dir: Path, chat_template: str | None = None) -> None:
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise ModelDirError(f"{model_dir} has no tokenizer.json (the Hugging Face tokenizers format)")
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the Rust side raises plain Exception on a bad file
            raise ModelDirError(f"tokenizer.json cannot be loaded: {exc}") from exc
        config = _read_json(model_dir / "tokenizer_config.json")
        ct2_config = _read_json(model_dir / "config.json")
        generation = _read_json(model_dir / "generation_config.json")

        self.bos_token = _token_text(config.get("bos_token")) or _token_text(ct2_config.get("bos_token")) or ""
        self.eos_token = _token_text(config.get("eos_token")) or _token_text(ct2_config.get("eos_token")) or ""

        template = chat_template
        self.chat_template_source = "--chat-template" if chat_template else "tokenizer_config.json"
        if template is None:
            template = self._template_from_config(config.get("chat_template"))
        if template is None:
            template = CHATML_TEMPLATE
            self.chat_template_source = "default ChatML"
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(template)
        except TemplateError as exc:
            raise ModelDirError(f"the chat template does not compile: {exc}") from exc

        ends: set[int] = set()
        for name in (ct2_config.get("eos_token"), config.get("eos_token")):
            token = _token_text(name)
            if token is not None and (tid := self.tokenizer.token_to_id(token)) is not None:
                ends.add(tid)
        gen_eos = generation.get("eos_token_id")
        for tid in gen_eos if isinstance(gen_eos, list) else [gen_eos]:
            if isinstance(tid, int) and 0 <= tid < self.vocab_size:
                ends.add(tid)
        if (
            self.chat_template_source == "default ChatML"
            and (tid := self.tokenizer.token_to_id(CHATML_END)) is not None
        ):
            ends.add(tid)
        self.end_ids: frozenset[int] = frozenset(ends)

    @staticmethod
    def _template_from_config(value: object) -> str | None:
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list):
            named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
            chosen = named.get("default")
            return chosen if isinstance(chosen, str) else None
        return None

    @property
    def vocab_size(self) -> int:
        return int(self.tokenizer.get_vocab_size(with_added_tokens=True))

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True))

    def render_chat(self, messages: list[dict[str, Any]], extra: dict[str, Any] | None = None) -> str:
        """The prompt text for a conversation, ending with the assistant's turn."""
        try:
            return str(
                self._template.render(
                    messages=messages,
                    add_generation_prompt=True,
                    bos_token=self.bos_token,
                    eos_token=self.eos_token,
                    **(extra or {}),
                )
            )
        except ChatTemplateError:
            raise
        except (TemplateError, TypeError, KeyError, ValueError) as exc:
            raise ChatTemplateError(f"the chat template cannot render these messages: {exc}") from exc

    def decoder(self) -> IncrementalDecoder:
        return IncrementalDecoder(self.decode)
