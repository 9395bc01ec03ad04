"""Model selection, and the OpenAI-compatible path end to end against a local endpoint."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DEMO_FILES, INTAKE_FINAL
from endpoint import call, serve

from skilldeck import ModelConfigError, Settings, SkillDeck
from skilldeck.models import build_model, resolve_model
from skilldeck.skills.bundle import ExecutionConfig

pytestmark = pytest.mark.L2

SEED = ExecutionConfig(provider="openrouter", model="qwen/qwen3-32b", temperature=0.2)


def _settings(**kw: Any) -> Settings:
    kw.setdefault("api_key", None)
    return Settings(_env_file=None, **kw)  # type: ignore[call-arg]


def test_execution_config_picks_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("SKILLDECK_MODEL", "SKILLDECK_BASE_URL", "SKILLDECK_PROVIDER"):
        monkeypatch.delenv(var, raising=False)
    spec = resolve_model(SEED, _settings(), base=Path("."))
    assert (spec.provider, spec.model, spec.temperature) == ("openrouter", "qwen/qwen3-32b", 0.2)
    assert spec.base_url == "https://openrouter.ai/api/v1"
    default = resolve_model(ExecutionConfig(model="m"), _settings(temperature=0.7), base=Path("."))
    assert (default.provider, default.temperature) == ("openai", 0.7)


def test_host_settings_override_the_skill(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local = resolve_model(SEED, _settings(base_url="http://127.0.0.1:8080/v1"), base=tmp_path)
    assert (local.provider, local.model, local.base_url) == (
        "compatible",
        "qwen/qwen3-32b",
        "http://127.0.0.1:8080/v1",
    )
    forced = resolve_model(SEED, _settings(model="openai:gpt-4o-mini"), base=tmp_path)
    assert (forced.provider, forced.model) == ("openai", "gpt-4o-mini")
    ollama = resolve_model(SEED, _settings(model="llama3:8b", provider="openai"), base=tmp_path)
    assert ollama.model == "llama3:8b"  # a colon that names no provider stays in the name
    # A host cassette is found in the working directory, or else in each skill's folder.
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    scripted = resolve_model(SEED, _settings(model="scripted:turns.yaml"), base=tmp_path)
    assert scripted.label == f"scripted:{tmp_path / 'turns.yaml'}"
    (cwd / "turns.yaml").write_text("skills: {}\n", "utf-8")
    scripted = resolve_model(SEED, _settings(model="scripted:turns.yaml"), base=tmp_path)
    assert scripted.label == f"scripted:{cwd / 'turns.yaml'}"
    own = resolve_model(
        ExecutionConfig(provider="scripted", model="t.yaml"), _settings(), base=tmp_path
    )
    assert own.model == str(tmp_path / "t.yaml")


def test_model_configuration_errors_are_specific(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.delenv("SKILLDECK_MODEL", raising=False)
    with pytest.raises(ModelConfigError, match="OPENROUTER_API_KEY"):
        build_model(resolve_model(SEED, _settings(), base=Path(".")), _settings())
    with pytest.raises(ModelConfigError, match="unknown model provider 'acme'"):
        resolve_model(ExecutionConfig(provider="acme", model="m"), _settings(), base=Path("."))
    with pytest.raises(ModelConfigError, match="no model configured"):
        resolve_model(ExecutionConfig(), _settings(), base=Path("."))
    with pytest.raises(ModelConfigError, match="does not exist"):
        build_model(
            resolve_model(SEED, _settings(model="scripted:/no/such.yaml"), base=Path(".")),
            _settings(),
        )


def test_a_deck_without_credentials_fails_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    monkeypatch.delenv("SKILLDECK_API_KEY", raising=False)
    monkeypatch.delenv("SKILLDECK_MODEL", raising=False)
    monkeypatch.delenv("SKILLDECK_BASE_URL", raising=False)
    with SkillDeck(checkpointer="memory://", settings=_settings()) as deck:
        with pytest.raises(ModelConfigError):
            deck.run({}, context="matter", matter_id="m")
        assert deck.threads() == []


@pytest.fixture
def endpoint() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    steps: list[Any] = [
        call("file__parse", {"file_id": "complaint.txt"}, "c1"),
        call("submit_output", INTAKE_FINAL, "c2"),
    ]
    with serve(steps) as server:
        yield server.url, server.requests


def test_openai_compatible_endpoint_with_function_calling(
    endpoint: tuple[str, list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, requests = endpoint
    monkeypatch.delenv("SKILLDECK_MODEL", raising=False)
    settings = _settings(base_url=url, files_root=str(DEMO_FILES), output_mode="tool")
    with SkillDeck(checkpointer="memory://", settings=settings) as deck:
        result = deck.run(
            {"documents": ["complaint.txt"]}, context="matter", matter_id="demo-matter"
        )
    assert result.status == "finished", result.error
    assert result.state["profile"]["defendant"]["name"] == "Acme"
    first, second = requests
    # max_output_tokens on every call, in the field current OpenAI endpoints read
    assert first["max_completion_tokens"] == second["max_completion_tokens"] == 1024
    assert first["model"] == "qwen/qwen3-32b" and first["temperature"] == 0.2
    # The intake starts by reading its documents (tool_choice: file__parse), then may do
    # anything its contract allows.
    assert [t["function"]["name"] for t in first["tools"]] == ["file__parse"]
    assert first["tool_choice"] == {"type": "function", "function": {"name": "file__parse"}}
    names = [t["function"]["name"] for t in second["tools"]]
    assert names == ["file__get_info", "file__parse", "element__extract", "submit_output"]
    params = first["tools"][0]["function"]["parameters"]
    assert "matter_id" not in params.get("properties", {})  # identity is never offered
    assert "response_format" not in first  # function calling, not json_schema
    tool_message = second["messages"][-1]
    assert tool_message["role"] == "tool" and "Jane Doe" in tool_message["content"]
    attempt = result.state["attempt"]
    assert attempt["model"] == "compatible:qwen/qwen3-32b"
    assert attempt["tokens"] == {"input_tokens": 22, "output_tokens": 14, "total_tokens": 36}


def test_a_run_needs_models_only_for_the_skills_of_its_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import output, write_bundle

    from skilldeck.errors import NoModelConfiguredError

    monkeypatch.delenv("SKILLDECK_MODEL", raising=False)
    script = tmp_path / "turns.json"
    script.write_text(json.dumps({"skills": {"ready": [output(response="done")]}}), "utf-8")
    skills = tmp_path / "skills"
    ready = {
        "triggers": {"contexts": ["a"]},
        "execution_config": {"provider": "scripted", "model": str(script)},
    }
    write_bundle(skills, "ready", meta=ready)
    write_bundle(skills, "unset", meta={"triggers": {"contexts": ["b"]}})
    with SkillDeck(skills, checkpointer="memory://", settings=Settings()) as deck:
        assert deck.run({}, context="a").state["response"] == "done"
        with pytest.raises(NoModelConfiguredError):
            deck.run({}, context="b")
        with pytest.raises(NoModelConfiguredError):
            deck.check_models()
