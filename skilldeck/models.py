"""Model selection: a skill's ``execution_config`` plus host :class:`Settings`.

Every provider but ``scripted`` (cassettes) and ``rules`` (a skill's no-model mode, see
:mod:`skilldeck.rules`) goes through langchain-openai's ``ChatOpenAI``: OpenAI, OpenRouter, or
any OpenAI-compatible ``base_url`` (vLLM, Ollama, a llama.cpp server).
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from langchain_core.language_models import BaseChatModel

from skilldeck._internal import tracing
from skilldeck.errors import ModelConfigError, NoModelConfiguredError
from skilldeck.rules import DEFAULT_RULES, RulesChatModel
from skilldeck.scripted import ScriptedChatModel
from skilldeck.settings import Settings
from skilldeck.skills.bundle import ExecutionConfig

__all__ = ["PROVIDERS", "ModelSpec", "build_model", "output_mode", "resolve_model"]

PROVIDERS: dict[str, tuple[str | None, str]] = {
    # provider: (default base_url, API key environment variable)
    "openai": (None, "OPENAI_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "compatible": (None, "SKILLDECK_API_KEY"),
    "scripted": (None, ""),
    "rules": (None, ""),
}


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The resolved model of one skill."""

    provider: str
    model: str
    temperature: float
    base_url: str | None = None
    max_tokens: int | None = None
    #: Whether calls carry the host's API key. Not when an untrusted bundle chose the endpoint
    #: (``execution_config.base_url``): a folder someone sent must not learn the key by naming
    #: its own server.
    host_key: bool = True

    @property
    def label(self) -> str:
        """How the model is named in records: ``scripted:<file>`` or ``<provider>:<model>``."""
        return f"{self.provider}:{self.model}"


def _split(spec: str) -> tuple[str | None, str]:
    if spec == "rules":
        return "rules", DEFAULT_RULES
    provider, sep, rest = spec.partition(":")
    return (provider, rest) if sep and provider in PROVIDERS else (None, spec)


def resolve_model(
    execution: ExecutionConfig, settings: Settings, *, base: Path, trusted: bool = True
) -> ModelSpec:
    """Pick provider, model and temperature for a skill.

    ``settings.model`` overrides the skill's own model (hosts and tests switch models this
    way); ``settings.base_url`` sends every call to one OpenAI-compatible endpoint. A skill's
    own ``base_url`` gets the host's API key only if the deck ``trusted`` the skill's bundle.
    """
    provider, model = (None, execution.model) if not settings.model else _split(settings.model)
    provider = provider or (
        "compatible" if settings.base_url else execution.provider or settings.provider
    )
    if provider not in PROVIDERS:
        raise ModelConfigError(
            f"unknown model provider {provider!r}; use one of {', '.join(PROVIDERS)}, or set "
            "SKILLDECK_BASE_URL for any OpenAI-compatible endpoint"
        )
    if not model:
        raise NoModelConfiguredError(
            "no model configured: set execution_config.model in skill.meta.json, "
            "SKILLDECK_MODEL, or pass --model (e.g. --model scripted:turns.yaml)"
        )
    if provider in ("scripted", "rules"):
        # A skill's own cassette (or rules) is relative to its bundle. A host override is
        # relative to the working directory, or else to each skill's bundle, so `--model
        # scripted:evals/x.yaml` finds every skill's own cassette from any directory.
        path = Path(model)
        if not path.is_absolute():
            local = Path.cwd() / path
            path = local if settings.model and local.exists() else base / path
        model = str(path.resolve())
    return ModelSpec(
        provider=provider,
        model=model,
        temperature=execution.temperature
        if execution.temperature is not None
        else settings.temperature,
        base_url=settings.base_url or execution.base_url or PROVIDERS[provider][0],
        max_tokens=execution.max_tokens,
        host_key=trusted or bool(settings.base_url) or not execution.base_url,
    )


def build_model(spec: ModelSpec, settings: Settings) -> BaseChatModel:
    """Instantiate the chat model of ``spec``; raises :class:`ModelConfigError` early."""
    if spec.provider == "scripted":
        return ScriptedChatModel.from_source(spec.model)
    if spec.provider == "rules":
        return RulesChatModel.from_source(spec.model)
    env_key = PROVIDERS[spec.provider][1]
    key = settings.api_key.get_secret_value() if settings.api_key else os.environ.get(env_key)
    if not spec.host_key:
        key = "not-needed"  # the endpoint is an untrusted bundle's choice: no key of ours
    if not key:
        if spec.base_url is None or spec.provider == "openrouter":
            raise ModelConfigError(
                f"no API key for provider {spec.provider!r}: set SKILLDECK_API_KEY or {env_key}"
            )
        key = "not-needed"  # local OpenAI-compatible servers accept any key
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=spec.model,
        base_url=spec.base_url,
        api_key=key,  # type: ignore[arg-type]
        temperature=spec.temperature,
        max_tokens=spec.max_tokens or settings.max_output_tokens,  # type: ignore[call-arg]
        timeout=settings.model_timeout_s,
        # A timeout or a transient error is the skill's to re-ask (an attempt it records):
        # the client's own retries would make one call last several timeouts.
        max_retries=0,
        # Streamed calls (stream_deltas) report their token usage too, as the attempt records it.
        stream_usage=True,
        # With tracing on, clients whose requests carry the model call's traceparent.
        **tracing.http_clients(),
    )


_PROBE_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
    "additionalProperties": False,
}
_probed: dict[tuple[str | None, str], bool] = {}
_probe_lock = threading.Lock()


def output_mode(
    execution: ExecutionConfig, settings: Settings, spec: ModelSpec, model: BaseChatModel
) -> str:
    """The output mode of a skill's calls: its ``execution_config.output_mode``, else the
    host's; ``auto`` is ``schema`` where the endpoint enforces JSON Schemas (probed once per
    endpoint and model, with one tiny call), else ``tool``. Scripted models are ``tool`` in
    ``auto`` (their cassettes hold native tool calls)."""
    wanted = execution.output_mode or settings.output_mode
    if wanted != "auto":
        return wanted
    if spec.provider in ("scripted", "rules"):
        return "tool"
    key = (spec.base_url, spec.model)
    with _probe_lock:
        if key not in _probed:
            _probed[key] = _enforces_schemas(model)
        return "schema" if _probed[key] else "tool"


def _enforces_schemas(model: BaseChatModel) -> bool:
    """Whether the endpoint holds replies to a ``json_schema``: the prompt asks for prose, so
    only an endpoint that enforces the schema answers with JSON of it."""
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "probe", "strict": True, "schema": _PROBE_SCHEMA},
    }
    try:
        reply = model.bind(response_format=fmt, max_tokens=16).invoke("Say hello in one word.")
        value = json.loads(str(reply.content))
    except Exception:  # refused (400), not JSON: the endpoint does not enforce schemas
        return False
    return isinstance(value, dict) and set(value) == {"ok"} and isinstance(value["ok"], bool)
