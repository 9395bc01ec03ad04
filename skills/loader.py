"""Load and validate skill bundles (seed 004 layout, or a plain Agent Skill ``SKILL.md``).

Everything is checked here, up front: a bundle that loads never fails later for a reason that
could have been seen in its files. Errors name the file, the JSON path and the reason.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator, SchemaError
from jsonschema.exceptions import best_match

from skilldeck.errors import BundleError
from skilldeck.skills.bundle import ExecutionConfig, Reference, SkillBundle
from skilldeck.skills.conditions import Condition, ConditionError, parse_condition
from skilldeck.skills.contract import build_output_schema, compile_schema, json_path
from skilldeck.skills.tokens import estimate_tokens, truncate_to_tokens

__all__ = ["builtin_skills_dir", "load_bundle", "load_script", "load_skills"]

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_SCRIPTS = {"preprocess": "preprocess(state)", "validate": "validate(output, state)"}


def builtin_skills_dir() -> Path:
    """The folder of the skill bundles that ship with skilldeck."""
    return Path(__file__).parent


@cache
def _meta_validator() -> Draft202012Validator:
    schema = json.loads((Path(__file__).parent / "meta.schema.json").read_text("utf-8"))
    return Draft202012Validator(schema)


def _read_text(file: Path) -> str:
    try:
        return file.read_text("utf-8")
    except UnicodeDecodeError:
        raise BundleError(str(file), "$", "file is not UTF-8 text") from None


def _read_json(file: Path) -> Any:
    try:
        return json.loads(_read_text(file))
    except json.JSONDecodeError as exc:
        raise BundleError(
            str(file), "$", f"invalid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None


def _front_matter(file: Path) -> tuple[dict[str, Any] | None, str]:
    text = _read_text(file)
    match = _FRONT_MATTER.match(text)
    if not match:
        return None, text
    try:
        front = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise BundleError(
            str(file), "$.front_matter", f"invalid YAML: {' '.join(str(exc).split())}"
        ) from None
    if not isinstance(front, dict):
        raise BundleError(str(file), "$.front_matter", "front matter must be a YAML mapping")
    return front, text[match.end() :]


def _conditions(file: Path, where: str, sources: Sequence[str]) -> tuple[Condition, ...]:
    out = []
    for i, source in enumerate(sources):
        try:
            out.append(parse_condition(source))
        except ConditionError as exc:
            raise BundleError(str(file), f"{where}[{i}]", str(exc)) from None
    return tuple(out)


def load_script(
    bundle: str, file: Path, func: str, signature: str | None = None
) -> Callable[..., Any]:
    """Import ``file`` (a bundle's ``scripts/*.py``) and return its function ``func``.

    Raises:
        BundleError: naming ``file``, when it does not import or has no callable ``func``
            (``signature`` is how the message shows it, e.g. ``setup(task, trial)``).
    """
    spec = importlib.util.spec_from_file_location(f"skilldeck_skill_{bundle}_{func}", file)
    if spec is None or spec.loader is None:
        raise BundleError(str(file), "$", "cannot be imported as a Python module")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise BundleError(str(file), "$", f"import failed: {type(exc).__name__}: {exc}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        shown = signature or _SCRIPTS.get(func, f"{func}(...)")
        raise BundleError(str(file), "$", f"must define a function {shown}")
    return fn  # type: ignore[no-any-return]


def _references(folder: Path, budget: int) -> tuple[Reference, ...]:
    if not folder.is_dir():
        return ()
    refs, left = [], budget
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        text = _read_text(file)
        tokens = estimate_tokens(text)
        truncated = tokens > left
        if truncated:
            text = truncate_to_tokens(text, left)
            tokens = estimate_tokens(text)
        if text:
            refs.append(Reference(file.relative_to(folder).as_posix(), text, tokens, truncated))
        left -= tokens
        if truncated:
            break
    return tuple(refs)


def _meta(folder: Path, front: Mapping[str, Any] | None) -> tuple[Path, dict[str, Any]]:
    file = folder / "skill.meta.json"
    if file.is_file():
        meta = _read_json(file)
    elif front is not None:
        # A plain Agent Skill: it runs when the run's context is its own name.
        meta = {k: front[k] for k in ("name", "description") if k in front}
        meta["triggers"] = {"contexts": [front.get("name", folder.name)]}
        file = folder / "SKILL.md"
    else:
        raise BundleError(
            str(folder / "SKILL.md"),
            "$.front_matter",
            "a bundle without skill.meta.json needs YAML front matter with name and description",
        )
    error = best_match(_meta_validator().iter_errors(meta))
    if error is not None:
        raise BundleError(str(file), json_path(error.absolute_path), error.message)
    return file, meta


def load_bundle(
    folder: str | Path, *, order: int = 0, reference_token_budget: int = 4000
) -> SkillBundle:
    """Load one bundle folder. Raises :class:`~skilldeck.errors.BundleError` if it is invalid."""
    folder = Path(folder).resolve()
    skill_md = folder / "SKILL.md"
    if not skill_md.is_file():
        raise BundleError(str(skill_md), "$", "missing SKILL.md")
    front, body = _front_matter(skill_md)
    meta_file, meta = _meta(folder, front)
    for where, file, name in (
        ("$.front_matter.name", skill_md, (front or {}).get("name", folder.name)),
        ("$.name", meta_file, meta["name"]),
    ):
        if name != folder.name:
            raise BundleError(
                str(file), where, f"name {name!r} must equal the folder name {folder.name!r}"
            )

    schema_file = folder / "assets" / "output_schema.json"
    source: Any = _read_json(schema_file) if schema_file.is_file() else {}
    if not isinstance(source, dict):
        raise BundleError(str(schema_file), "$", "the output schema must be a JSON object")
    try:
        Draft202012Validator.check_schema(source)
    except SchemaError as exc:
        raise BundleError(str(schema_file), json_path(exc.path), exc.message) from None
    data_extra = ((source.get("properties") or {}).get("data") or {}).get("additionalProperties")
    if data_extra not in (None, False):
        raise BundleError(
            str(schema_file),
            "$.properties.data.additionalProperties",
            "data fields become state keys, so they must all be declared: set it to false",
        )
    provides = tuple((meta.get("outputs") or {}).get("provides", ()))
    output_schema, data_schema = build_output_schema(source, provides)
    try:
        validator = compile_schema(output_schema)
    except ValueError as exc:
        raise BundleError(str(schema_file), "$", f"the schema does not compile: {exc}") from None

    triggers = meta.get("triggers") or {}
    requires = meta.get("requires") or {}
    scripts = {
        func: load_script(folder.name, folder / "scripts" / f"{func}.py", func)
        for func in _SCRIPTS
        if (folder / "scripts" / f"{func}.py").is_file()
    }
    return SkillBundle(
        name=folder.name,
        description=str(meta["description"]),
        path=folder,
        instructions=body.strip(),
        meta=meta,
        contexts=tuple(triggers.get("contexts", ())),
        state_conditions=_conditions(
            meta_file, "$.triggers.state_conditions", triggers.get("state_conditions", ())
        ),
        requires_all=_conditions(meta_file, "$.requires.all", requires.get("all", ())),
        requires_any=_conditions(meta_file, "$.requires.any", requires.get("any", ())),
        tools=tuple(meta.get("tools", ())),
        provides=provides,
        priority=int(meta.get("priority", 0)),
        execution=ExecutionConfig(
            **{
                k: v
                for k, v in (meta.get("execution_config") or {}).items()
                if k in ExecutionConfig.__slots__
            }
        ),
        output_schema=output_schema,
        data_schema=data_schema,
        references=_references(folder / "references", reference_token_budget),
        order=order,
        preprocess=scripts.get("preprocess"),
        validate=scripts.get("validate"),
        validator=validator,
    )


def _bundle_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        raise BundleError(str(root), "$", "skills directory does not exist")
    if (root / "SKILL.md").is_file():
        return [root]
    folders = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name.startswith((".", "_")):
            continue
        if (child / "SKILL.md").is_file() or (child / "skill.meta.json").is_file():
            folders.append(child)
    return folders


def load_skills(
    paths: str | Path | Sequence[str | Path], *, reference_token_budget: int = 4000
) -> tuple[SkillBundle, ...]:
    """Load every bundle under ``paths`` (a skills folder, a bundle folder, or a list of them).

    Bundles are returned in load order: folders in the order given, bundles by name within a
    folder. The router breaks priority ties by this order.

    Raises:
        BundleError: a bundle is malformed, or two bundles share a name.
    """
    roots = [paths] if isinstance(paths, str | Path) else list(paths)
    bundles: list[SkillBundle] = []
    seen: dict[str, Path] = {}
    for root in roots:
        for folder in _bundle_folders(Path(root).resolve()):
            bundle = load_bundle(
                folder, order=len(bundles), reference_token_budget=reference_token_budget
            )
            if bundle.name in seen:
                raise BundleError(
                    str(folder),
                    "$.name",
                    f"skill {bundle.name!r} is also loaded from {seen[bundle.name]}",
                )
            seen[bundle.name] = folder
            bundles.append(bundle)
    return tuple(bundles)
