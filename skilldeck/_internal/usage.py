"""The token usage a model's reply reports, as the service's metrics and the run's trace read
it."""

from __future__ import annotations

from langchain_core.outputs import LLMResult

__all__ = ["reply_tokens"]


def reply_tokens(response: LLMResult) -> dict[str, int]:
    """The tokens the endpoint reported for a reply (LangChain's ``usage_metadata``, else the
    OpenAI-style ``token_usage``); none when it reported none (the scripted model)."""
    for generations in response.generations:
        for generation in generations:
            usage = getattr(getattr(generation, "message", None), "usage_metadata", None)
            if usage:
                return {
                    "input": int(usage.get("input_tokens", 0)),
                    "output": int(usage.get("output_tokens", 0)),
                }
    usage = (response.llm_output or {}).get("token_usage") or {}
    if not usage:
        return {}
    return {
        "input": int(usage.get("prompt_tokens", 0)),
        "output": int(usage.get("completion_tokens", 0)),
    }
