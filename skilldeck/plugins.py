"""Plugins: installed packages that add tools, execution modes, output modes and graders.

A plugin is a module whose decorators register what it adds, one decorator per extension
point (see docs/plugins.md):

- ``@tool_family(name)`` (:mod:`skilldeck.tools.registry`): a function that makes a family of
  tools from the deck's :class:`~skilldeck.tools.registry.ToolHost`;
- ``@execution_mode(name)`` (:mod:`skilldeck.nodes.modes`): a skill node class;
- ``@output_mode(name)`` (:mod:`skilldeck.nodes.output_modes`): how a model is asked and how
  its reply is read;
- ``@grader(name)`` and ``@environment(skill)`` (:mod:`skilldeck.evals.graders`,
  :mod:`skilldeck.evals.environment`): how an eval scores a trial.

An installed distribution makes its module a plugin with an entry point in the
``skilldeck.plugins`` group naming the module (not an attribute of it)::

    [project.entry-points."skilldeck.plugins"]
    weather = "weather_skills.plugin"

Plugins load once per process, on the first lookup in any registry (building a deck, loading
eval tasks), never on ``import skilldeck``. skilldeck's own tool families, the planner and
retrieval modes and the domain graders are the plugin :data:`BUILTIN`, loaded first by the same
code; the engine core imports none of them. A plugin that fails to import, or registers a name
another one holds, stops the load with a :class:`~skilldeck.errors.PluginError` that names it.
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from skilldeck.errors import PluginError

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "Plugin", "load_plugins"]

#: The entry point group installed plugins declare.
ENTRY_POINT_GROUP = "skilldeck.plugins"
#: skilldeck's own plugin module: its tool families, modes and graders.
BUILTIN = "skilldeck.builtins"


@dataclass(frozen=True, slots=True)
class Plugin:
    """A loaded plugin: its entry point's ``name``, its ``module`` and the distribution that
    declares it (``None`` for :data:`BUILTIN`)."""

    name: str
    module: str
    distribution: str | None = None


_lock = threading.RLock()
_loaded: tuple[Plugin, ...] | None = None
_failed: PluginError | None = None
_loading = False


def load_plugins() -> tuple[Plugin, ...]:
    """Import :data:`BUILTIN`, then every module the ``skilldeck.plugins`` entry points name
    (by entry point name); once per process. A lookup made while the plugins load (by a
    plugin's own module) sees what is registered so far.

    Raises:
        PluginError: a plugin failed to import or to register (the same error on every later
            call: its half-registered names are not retried).
    """
    global _loaded, _failed, _loading
    if _loaded is not None:
        return _loaded
    with _lock:
        if _failed is not None:
            raise _failed
        if _loaded is not None or _loading:
            return _loaded or ()
        _loading = True
        try:
            plugins = [Plugin("builtins", BUILTIN)]
            seen = {BUILTIN}
            for point in sorted(entry_points(group=ENTRY_POINT_GROUP), key=_order):
                plugin = _plugin(point)
                if plugin.module not in seen:
                    seen.add(plugin.module)
                    plugins.append(plugin)
            for plugin in plugins:
                _import(plugin)
        except PluginError as exc:
            _failed = exc
            raise
        finally:
            _loading = False
        _loaded = tuple(plugins)
        return _loaded


def _order(point: EntryPoint) -> tuple[str, str]:
    return point.name, point.value


def _plugin(point: EntryPoint) -> Plugin:
    dist = point.dist.name if point.dist is not None else None
    if point.attr:
        raise PluginError(
            f"plugin {point.name!r} of {dist or 'an unknown distribution'}: its entry point "
            f"{point.value!r} names an attribute; a skilldeck plugin's entry point names the "
            f"module whose decorators register what it adds ({point.name} = "
            f'"{point.module}")'
        )
    return Plugin(point.name, point.module, dist)


def _import(plugin: Plugin) -> None:
    try:
        importlib.import_module(plugin.module)
    except PluginError as exc:  # a name it registers is taken
        raise PluginError(f"{_who(plugin)}: {exc}") from exc
    except Exception as exc:
        how = f" (pip uninstall {plugin.distribution})" if plugin.distribution else ""
        raise PluginError(
            f"{_who(plugin)} failed to load: {type(exc).__name__}: {exc}; fix the plugin, or "
            f"uninstall it{how}"
        ) from exc


def _who(plugin: Plugin) -> str:
    where = f" of {plugin.distribution}" if plugin.distribution else ""
    return f"plugin {plugin.name!r}{where} (module {plugin.module})"
