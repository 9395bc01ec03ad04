"""Extension points with equal footing: tool families, execution modes, output modes and
graders register through one decorator each and through the ``skilldeck.plugins`` entry
points; skilldeck's own register from its built-in plugin, and the engine core imports none of
them."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import write_bundle
from langchain_core.tools import BaseTool

from skilldeck.errors import PluginError, SkillDeckError
from skilldeck.evals.graders import base as graders
from skilldeck.graph import deck_problems
from skilldeck.nodes import modes
from skilldeck.nodes import output_modes as outputs
from skilldeck.plugins import BUILTIN, load_plugins
from skilldeck.skills import load_bundle
from skilldeck.tools import default_registry
from skilldeck.tools import registry as tools

pytestmark = [pytest.mark.L2, pytest.mark.wheel]

ROOT = Path(__file__).resolve().parents[1]

#: The nodes every deck has: the skill runner, router, card, tools node and model calls.
NODES = [
    "card",
    "context",
    "examples",
    "model_call",
    "modes",
    "offer",
    "output_modes",
    "prompt",
    "route_lexical",
    "route_model",
    "router",
    "skill",
    "tools",
    "transcript",
]
#: The engine core: the graph, those nodes, the driver (``_internal``), contract and loader.
CORE = (
    *(f"skilldeck.graph.{p.stem}" for p in (ROOT / "graph").glob("*.py")),
    *(f"skilldeck.nodes.{name}" for name in NODES),
    *(f"skilldeck._internal.{p.stem}" for p in (ROOT / "skilldeck" / "_internal").glob("*.py")),
    "skilldeck.skills.contract",
    "skilldeck.skills.loader",
)


def _registered_from_builtins() -> set[str]:
    """The modules that define what skilldeck's built-in plugin registers (besides what the
    core registers itself: the ``single`` mode and the output modes)."""
    load_plugins()
    found = {f.make.__module__ for _, f in tools._FAMILIES.items()}
    found |= {cls.__module__ for _, cls in modes._MODES.items()}
    found |= {cls.__module__ for _, cls in graders._REGISTRY.items()}
    return found - {"skilldeck.nodes.skill"}


def _forbidden(name: str, applications: set[str]) -> bool:
    """Whether the core may not import ``name``: a module of an application (a tool family,
    a mode or a grader skilldeck's plugin registers, its package, the stores behind them), or
    the eval harness."""
    packages = {"skilldeck.nodes.planner", "skilldeck.nodes.retrieval", "skilldeck.evals"}
    stores = {f"skilldeck.tools.{m}" for m in ("memory", "knowledge", "vectors", "messages")}
    return (
        name in applications | stores | {BUILTIN}
        or any(name == p or name.startswith(p + ".") for p in packages)
        or name.endswith(("_rules",))  # planner_rules, retrieval_rules: the modes' rules
    )


def _imports(module: str) -> Iterator[tuple[str, int]]:
    """The ``skilldeck`` modules ``module``'s source imports (anywhere but under ``if
    TYPE_CHECKING:``, which never runs), with the line, parents included."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin, module
    tree = ast.parse(Path(spec.origin).read_text("utf-8"))
    package = module if spec.submodule_search_locations else module.rpartition(".")[0]
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for n in ast.walk(node)
    }
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1]])
                base = f"{base}.{node.module}" if node.module else base
            names = [base]
            for alias in node.names:  # ``from package import module``
                sub = f"{base}.{alias.name}"
                if importlib.util.find_spec(base) and _is_module(sub):
                    names.append(sub)
        for name in names:
            if name.startswith("skilldeck"):
                parts = name.split(".")
                for i in range(1, len(parts) + 1):
                    yield ".".join(parts[:i]), node.lineno


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


def test_the_engine_core_imports_no_application() -> None:
    """The import graph of the core's sources, followed through every ``skilldeck`` module it
    reaches, holds no tool family, no mode but ``single``, no grader and no eval module."""
    applications = _registered_from_builtins()
    assert {"skilldeck.tools.pkm", "skilldeck.nodes.planner.node"} <= applications
    reached: dict[str, str] = {m: "core" for m in CORE}
    queue = list(CORE)
    while queue:
        module = queue.pop()
        for name, line in _imports(module):
            if name not in reached:
                reached[name] = f"{module}:{line}"
                queue.append(name)
    bad = {}
    for name in sorted(n for n in reached if _forbidden(n, applications)):
        chain, at = [name], name
        while reached[at] != "core":
            chain.append(reached[at])
            at = reached[at].split(":")[0]
        bad[name] = " <- ".join(chain)
    assert not bad, json.dumps(bad, indent=1)


def test_importing_the_core_loads_no_application() -> None:
    """At run time too: a process that imports every core module holds none of the built-in
    plugin's modules until a registry is asked."""
    code = textwrap.dedent(
        f"""
        import importlib, json, sys
        for name in {list(CORE)!r} + ["skilldeck.tools"]:
            importlib.import_module(name)
        before = sorted(sys.modules)
        from skilldeck.nodes.modes import execution_modes
        execution_modes()
        print(json.dumps([before, sorted(sys.modules)]))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    before, after = json.loads(done.stdout)
    applications = _registered_from_builtins()
    assert [m for m in before if _forbidden(m, applications)] == []
    # The first lookup loads the built-in plugin: then they are there.
    assert {BUILTIN, "skilldeck.tools.pkm", "skilldeck.nodes.planner.node"} <= set(after)


# -- the decorators -----------------------------------------------------------------------------
class _Other(modes.SkillNode):
    pass


class _OtherOutput(outputs.JsonMode):
    pass


def test_a_taken_or_malformed_name_is_refused_and_registers_nothing() -> None:
    taken = r"tool family 'pkm' is already registered by skilldeck\.tools\.pkm\._pkm_family; "
    with pytest.raises(PluginError, match=taken + ".*_make must use another name"):

        @tools.tool_family("pkm")
        def _make(host: tools.ToolHost) -> list[BaseTool]:
            return []

    with pytest.raises(PluginError, match="execution mode 'planner' is already registered"):
        modes.execution_mode("planner")(_Other)
    with pytest.raises(PluginError, match="output mode 'schema' is already registered"):
        outputs.output_mode("schema")(_OtherOutput)
    with pytest.raises(PluginError, match="grader name 'Half Or' is not allowed"):
        graders.grader("Half Or")(graders.Grader)
    with pytest.raises(TypeError, match="must be a SkillNode subclass"):
        modes.execution_mode("not-a-node")(int)  # type: ignore[type-var]
    assert "not-a-node" not in modes.execution_modes()
    # The same class again under its own name changes nothing.
    planner = modes.find_execution_mode("planner")
    assert modes.execution_mode("planner")(planner) is planner


def test_unknown_names_say_what_is_registered_and_how_to_add_one(tmp_path: Path) -> None:
    unknown = r"no output mode named 'yaml'; available: schema, tool, json \(a plugin adds one"
    with pytest.raises(SkillDeckError, match=unknown):
        outputs.find_output_mode("yaml")
    with pytest.raises(SkillDeckError, match="no tool family named 'wether'; available: ") as e:
        tools.family_tools(tools.ToolHost(), ["wether"])
    assert e.value.code == "UNKNOWN_TOOL"
    with pytest.raises(SkillDeckError, match="no execution mode named 'loop'") as e:
        modes.find_execution_mode("loop")
    assert e.value.code == "INVALID_BUNDLE"
    bundle = load_bundle(
        write_bundle(
            tmp_path, "odd", meta={"execution_config": {"mode": "loop", "output_mode": "yaml"}}
        )
    )
    problems = [(p.json_path, p.message) for p in deck_problems([bundle], default_registry())]
    assert problems == [
        (
            "$.execution_config.mode",
            "execution mode 'loop' is not available; available: single, planner, retrieval "
            "(a plugin adds modes: see docs/plugins.md)",
        ),
        (
            "$.execution_config.output_mode",
            "output mode 'yaml' is not available; available: auto, schema, tool, json "
            "(a plugin adds output modes: see docs/plugins.md)",
        ),
    ]


# -- entry points -------------------------------------------------------------------------------
PLUGIN = """
from dataclasses import dataclass
from langchain_core.tools import StructuredTool
from skilldeck.evals.graders import Grader, GradeResult, grader
from skilldeck.nodes.modes import execution_mode
from skilldeck.nodes.output_modes import JsonMode, output_mode
from skilldeck.nodes.skill import SkillNode
from skilldeck.tools.registry import tool_family

def say(text: str) -> str:
    "Say it back."
    return text

@tool_family("echo", aliases={"echo__say": "say"})
def echo_tools(host):
    return [StructuredTool.from_function(say, name="echo__say")]

@execution_mode("echo")
class Echo(SkillNode):
    rules_fallback = True

@output_mode("echo-json")
class EchoJson(JsonMode):
    pass

@grader("echo_said")
@dataclass(frozen=True)
class Said(Grader):
    def evaluate(self, ctx):
        return GradeResult.check(True, "said")
"""

_LOAD = """
import json
from skilldeck.errors import PluginError
from skilldeck.plugins import load_plugins
from skilldeck.tools import default_registry
from skilldeck.nodes.modes import execution_modes
from skilldeck.nodes.output_modes import output_modes
from skilldeck.evals.graders import registered_graders

def attempt(load):
    try:
        return load()
    except PluginError as exc:
        return f"{exc.code}: {exc}"

registry = attempt(lambda: default_registry())
print(json.dumps({
    "plugins": attempt(lambda: [[p.name, p.module, p.distribution] for p in load_plugins()]),
    "again": attempt(lambda: [p.name for p in load_plugins()]),
    "modes": attempt(execution_modes),
    "outputs": attempt(output_modes),
    "graders": attempt(registered_graders),
    "say": registry if isinstance(registry, str) else registry.resolve("say"),
}))
"""


def _installed(site: Path, dist: str, entry_point: str, module: str, code: str) -> None:
    """A distribution installed in ``site`` as importlib.metadata finds one: a ``.dist-info``
    folder with its metadata and entry points, beside its module."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[skilldeck.plugins]\n{entry_point}\n")
    (site / f"{module}.py").write_text(textwrap.dedent(code))


def _load_with(site: Path) -> dict[str, Any]:
    """What a process with ``site`` on its path loads and registers."""
    env = {**os.environ, "PYTHONPATH": str(site)}
    done = subprocess.run(
        [sys.executable, "-c", _LOAD], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_an_installed_plugin_registers_at_every_extension_point(tmp_path: Path) -> None:
    _installed(tmp_path, "echo-plugin", "echo = echo_plugin", "echo_plugin", PLUGIN)
    seen = _load_with(tmp_path)
    assert seen["plugins"] == [
        ["builtins", "skilldeck.builtins", None],
        ["echo", "echo_plugin", "echo-plugin"],
    ]
    assert seen["again"] == ["builtins", "echo"]
    assert seen["modes"] == ["single", "planner", "retrieval", "echo"]
    assert seen["outputs"] == ["schema", "tool", "json", "echo-json"]
    assert "echo_said" in seen["graders"] and "pkm_completion" in seen["graders"]
    assert seen["say"] == "echo__say"  # the family's tool, under its alias too


@pytest.mark.parametrize(
    ("entry_point", "code", "message"),
    [
        (
            "echo = echo_plugin:register",
            "def register(api): pass",
            "PLUGIN_ERROR: plugin 'echo' of echo-plugin: its entry point "
            "'echo_plugin:register' names an attribute; a skilldeck plugin's entry point names "
            'the module whose decorators register what it adds (echo = "echo_plugin")',
        ),
        (
            "echo = echo_plugin",
            "raise RuntimeError('WEATHER_KEY is not set')",
            "PLUGIN_ERROR: plugin 'echo' of echo-plugin (module echo_plugin) failed to load: "
            "RuntimeError: WEATHER_KEY is not set; fix the plugin, or uninstall it "
            "(pip uninstall echo-plugin)",
        ),
        (
            "echo = echo_plugin",
            PLUGIN.replace('tool_family("echo"', 'tool_family("pkm"'),
            "PLUGIN_ERROR: plugin 'echo' of echo-plugin (module echo_plugin): tool family "
            "'pkm' is already registered by skilldeck.tools.pkm._pkm_family; "
            "echo_plugin.echo_tools must use another name",
        ),
    ],
    ids=["an-attribute", "fails-to-import", "a-taken-name"],
)
def test_a_broken_plugin_stops_every_lookup_with_the_same_error(
    tmp_path: Path, entry_point: str, code: str, message: str
) -> None:
    _installed(tmp_path, "echo-plugin", entry_point, "echo_plugin", code)
    seen = _load_with(tmp_path)
    # The deck's registry, the plugins, and every registry after: one error, named.
    assert set(seen.values()) == {message}, seen
