"""Load and validate skill bundles (seed 004 layout, or a plain Agent Skill ``SKILL.md``).

Everything is checked here, up front, and completely: a bundle that loads never fails later for
a reason that could have been seen in its files, and a bundle that does not load reports every
problem at once (file, JSON path, reason; :func:`inspect_bundle` returns them, ``skilldeck
check`` prints them).

The loader reads only inside the bundle: a file that is a symlink out of it is refused, and so
is a file over :data:`MAX_FILE_BYTES`. It imports a bundle's scripts only when the deck trusts
the bundle (:mod:`skilldeck.skills.trust`); an untrusted bundle loads without them, with a
warning that says how to trust it. Progressive disclosure (Agent Skills): the bundle's other
files (``references/``, ``scripts/``, ``assets/``...) are listed for the model to read on demand
(``skill__read_file``); ``"references": "inline"`` in the meta puts ``references/`` in the prompt
instead. JSON and YAML go through
:mod:`skilldeck._internal.documents` (no duplicate keys, no alias bombs).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from skilldeck._internal.documents import DocumentError, parse_json
from skilldeck._internal.pyfile import import_function
from skilldeck.errors import BundleError, UntrustedScriptsError
from skilldeck.skills.agentskills import (
    allowed_tools,
    parse_front_matter,
    skill_name,
    spec_warnings,
)
from skilldeck.skills.bundle import (
    ENGINE_FILES,
    INPUT_SCHEMA_FILE,
    READ_FILE_TOOL,
    SCRIPTS,
    Reference,
    SkillBundle,
)
from skilldeck.skills.contract import (
    OutputContract,
    build_output_schema,
    compile_schema,
    control_actions,
    format_errors,
    response_schema,
)
from skilldeck.skills.examples import EXAMPLES_FILE, Examples, parse_examples
from skilldeck.skills.meta import SkillMeta, Triggers
from skilldeck.skills.pins import (
    CALLS_KEYWORD,
    RESULT_KEYWORD,
    AnyPin,
    CallsPin,
    Pin,
    find_pins,
)
from skilldeck.skills.problems import Problems
from skilldeck.skills.tokens import estimate_tokens, truncate_to_tokens
from skilldeck.skills.trust import TRUSTED_ENV, TrustPolicy, TrustSource, split_paths

__all__ = [
    "MAX_FILE_BYTES",
    "builtin_skills_dir",
    "inspect_bundle",
    "load_bundle",
    "load_script",
    "load_skills",
    "skill_folders",
    "trust_policy",
]

log = logging.getLogger("skilldeck")

#: The largest file the loader reads (SKILL.md, metadata, schema, an inlined reference).
MAX_FILE_BYTES = 1 << 20
META_FILE = "skill.meta.json"

_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
#: Each script's function, as an error message shows it.
_FUNCTIONS = {
    "preprocess": ("preprocess", "preprocess(state)"),
    "validate": ("validate", "validate(output, state) or validate(output, state, turn)"),
    "eval_setup": ("setup", "setup(task, trial)"),
    "rules": ("respond", "respond(state, results)"),
    "migrate": ("migrate", "migrate(state, old_fingerprint)"),
}
#: The scripts a run of the skill calls (the others serve evals and the ``rules`` provider).
_RUN_SCRIPTS = ("preprocess", "validate")
#: The scripts whose bytes join the fingerprint: what a run executes (not its eval hook, nor
#: the migration that exists because the skill changed).
_RUN_CODE = (*_RUN_SCRIPTS, "rules")
# The spec's name; lowercase skill.md is accepted too, as the Agent Skills clients do.
_SKILL_FILES = ("SKILL.md", "skill.md")


def builtin_skills_dir() -> Path:
    """The folder of the skill bundles that ship with skilldeck."""
    return Path(__file__).parent


@cache
def _metaschema() -> Draft202012Validator:
    """JSON Schema's own meta-schema: a bundle's schemas must be schemas."""
    return Draft202012Validator(Draft202012Validator.META_SCHEMA)


class _Reader:
    """Reads one bundle's files for the loader, reporting problems instead of raising, and
    keeps a digest of what it read (the bundle's fingerprint)."""

    def __init__(self, folder: Path, problems: Problems) -> None:
        self.folder, self.problems = folder, problems
        self._digest = hashlib.sha256()

    def inside(self, file: Path) -> bool:
        """Whether ``file`` (after symlinks) is in the bundle; a problem if not."""
        try:
            file.resolve().relative_to(self.folder)
        except ValueError:
            self.problems.error(
                file, "$", f"links to {file.resolve()}, outside the bundle: copy the file in"
            )
            return False
        return True

    def text(self, file: Path) -> str | None:
        """The file's UTF-8 text, or ``None`` (with a problem)."""
        if not self.inside(file):
            return None
        size = file.stat().st_size
        if size > MAX_FILE_BYTES:
            self.problems.error(
                file,
                "$",
                f"is {size:,} bytes; the loader reads files of at most {MAX_FILE_BYTES:,} bytes",
            )
            return None
        data = file.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.problems.error(file, "$", "file is not UTF-8 text")
            return None
        self._digest.update(file.relative_to(self.folder).as_posix().encode("utf-8") + b"\0")
        self._digest.update(data)
        return text

    def listed(self, file: Path) -> int | None:
        """The size of a file the model may read on demand, or ``None`` (with a problem if it
        links out of the bundle); its bytes join the fingerprint."""
        if not self.inside(file):
            return None
        size = file.stat().st_size
        self._digest.update(file.relative_to(self.folder).as_posix().encode("utf-8") + b"\0")
        # A large asset counts by its size: hashing it would slow every load.
        self._digest.update(file.read_bytes() if size <= MAX_FILE_BYTES else str(size).encode())
        return size

    def json(self, file: Path) -> Any:
        """The file's JSON value, or ``None`` (with a problem)."""
        text = self.text(file)
        if text is None:
            return None
        try:
            return parse_json(text)
        except DocumentError as exc:
            self.problems.error(file, "$", exc.reason)
            return None

    @property
    def fingerprint(self) -> str:
        return self._digest.hexdigest()[:16]


def _front_matter(reader: _Reader, file: Path) -> tuple[dict[str, Any] | None, str] | None:
    """``(front matter or None, body)`` of ``SKILL.md``; ``None`` if it cannot be read."""
    text = reader.text(file)
    if text is None:
        return None
    match = _FRONT_MATTER.match(text)
    if not match:
        return None, text
    try:
        front, quoted = parse_front_matter(match.group(1))
    except DocumentError as exc:
        reader.problems.error(file, "$.front_matter", exc.reason)
        return None, text[match.end() :]
    if not isinstance(front, dict):
        reader.problems.error(file, "$.front_matter", "front matter must be a YAML mapping")
        return None, text[match.end() :]
    for line in quoted:
        reader.problems.warn(
            file,
            "$.front_matter",
            f"line {line + 1} has ': ' inside an unquoted value, which is not YAML; read it as "
            "a quoted string (quote it to be sure)",
            "agent-skills",
        )
    return front, text[match.end() :]


def load_script(bundle: SkillBundle, name: str) -> Callable[..., Any]:
    """Import the script ``name`` of a loaded bundle (a key of
    :data:`~skilldeck.skills.bundle.SCRIPTS`, e.g. ``eval_setup``) and return its function.

    Raises:
        UntrustedScriptsError: the bundle is not trusted; nothing was imported.
        BundleError: naming the file, when it does not import or lacks its function.
    """
    bundle.require_trust(name)
    return _import(bundle.path, name)


def _import(folder: Path, name: str) -> Callable[..., Any]:
    func, signature = _FUNCTIONS[name]
    return import_function(folder.name, folder / SCRIPTS[name], func, signature)


def _files(reader: _Reader, folder: Path, inline: bool) -> tuple[tuple[str, int], ...]:
    """The files the model may read on demand: every file of the bundle (``references/``,
    ``scripts/``, ``assets/``, and whatever else an Agent Skill ships, like a root
    ``reference.md``) but ``SKILL.md`` itself, the engine's own files, the eval data
    (``cases.yaml``, ``evals/``, ``fixtures/``: a model must not read its answers), hidden files,
    caches, and ``references/`` when it is inlined."""
    skip_dirs = {"evals", "fixtures", "__pycache__", *(("references",) if inline else ())}
    out = []
    for file in sorted(folder.rglob("*")):
        rel = file.relative_to(folder)
        name = rel.as_posix()
        if (
            name in ENGINE_FILES
            or name in (*_SKILL_FILES, META_FILE, "cases.yaml")
            or rel.parts[0] in skip_dirs
            or any(p.startswith(".") or p == "__pycache__" for p in rel.parts)
        ):
            continue
        if file.is_file() or file.is_symlink():
            size = reader.listed(file)
            if size is not None:
                out.append((name, size))
    return tuple(out)


def _references(reader: _Reader, folder: Path, budget: int) -> tuple[Reference, ...]:
    if not folder.is_dir():
        return ()
    refs, left = [], budget
    for file in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        text = reader.text(file)
        if text is None or left <= 0:
            continue
        tokens = estimate_tokens(text)
        truncated = tokens > left
        if truncated:
            text = truncate_to_tokens(text, left)
            tokens = estimate_tokens(text)
        if text:
            refs.append(Reference(file.relative_to(folder).as_posix(), text, tokens, truncated))
        left -= tokens if not truncated else left
    return tuple(refs)


def _meta(
    reader: _Reader, folder: Path, skill_md: Path, front: Mapping[str, Any] | None
) -> SkillMeta | None:
    """``skill.meta.json``, parsed and held together (``None`` with its problems); without
    it, what a plain Agent Skill's front matter says."""
    problems = reader.problems
    file = folder / META_FILE
    if file.is_file():
        before = len(problems.errors)
        value = reader.json(file)  # None: unreadable (a problem), or the JSON null
        meta = SkillMeta.parse(value, file, problems) if len(problems.errors) == before else None
        if meta is None:
            return None
        if meta.name != folder.name:
            problems.error(
                file, "$.name", f"name {meta.name!r} must equal the folder name {folder.name!r}"
            )
        for where, reason in meta.conflicts():
            problems.error(file, where, reason)
        return meta
    if front is None:
        problems.error(
            skill_md,
            "$.front_matter",
            "a bundle without skill.meta.json needs YAML front matter with name and description",
        )
        return None
    # A plain Agent Skill: it runs when the run's context is its own name, or when routing
    # by description picks it (context "auto").
    name, renamed = skill_name(front, folder)
    if renamed:
        problems.warn(skill_md, "$.front_matter.name", renamed, "agent-skills")
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        problems.error(
            skill_md,
            "$.front_matter.description",
            "a plain Agent Skill needs a description: it is what a router chooses it by",
        )
        return None
    # Not validated as a skill.meta.json: the name follows the Agent Skills rules (warned of).
    return SkillMeta.model_construct(
        name=name, description=description.strip(), triggers=Triggers(contexts=(name,))
    )


def _front_problems(
    problems: Problems, skill_md: Path, folder: Path, front: Mapping[str, Any]
) -> list[str]:
    """Warn of every Agent Skills rule the front matter breaks; the ``allowed-tools`` names."""
    for reason in spec_warnings(front, folder):
        problems.warn(skill_md, "$.front_matter", reason, "agent-skills")
    tools, problem = allowed_tools(front.get("allowed-tools"))
    if problem:
        problems.warn(skill_md, "$.front_matter.allowed-tools", problem, "agent-skills")
    return tools


def trust_policy(trust: TrustSource = ()) -> TrustPolicy:
    """The bundles whose scripts a load may import: the built-in ones, those with a trust
    record (``skilldeck new``, ``skilldeck trust``), those ``SKILLDECK_TRUSTED_SKILLS`` names,
    and those ``trust`` names."""
    named = split_paths(os.environ.get(TRUSTED_ENV))
    return TrustPolicy.of(builtin_skills_dir(), named, trust)


def inspect_bundle(
    folder: str | Path,
    *,
    order: int = 0,
    reference_token_budget: int = 4000,
    trust: TrustSource = (),
) -> tuple[SkillBundle | None, Problems]:
    """Check one bundle folder completely: the bundle (``None`` if it has an error) and every
    problem found. Its scripts are imported only if :func:`trust_policy` trusts it."""
    folder = Path(folder).resolve()
    trusted = trust_policy(trust).trusts(folder)
    problems = Problems()
    reader = _Reader(folder, problems)
    skill_md = next((folder / f for f in _SKILL_FILES if (folder / f).is_file()), None)
    if skill_md is None:
        problems.error(folder / "SKILL.md", "$", "missing SKILL.md")
        return None, problems
    read = _front_matter(reader, skill_md)
    front, body = read if read is not None else (None, "")
    meta = _meta(reader, folder, skill_md, front)
    allowed = _front_problems(problems, skill_md, folder, front) if front is not None else []

    schema = _output_schema(reader, folder, meta)
    input_schema, input_validator = _input_schema(reader, folder)
    has = tuple(name for name, file in SCRIPTS.items() if (folder / file).is_file())
    for name in has:
        if name in _RUN_CODE:  # the code a run executes is part of the skill's version
            reader.listed(folder / SCRIPTS[name])
    scripts = _scripts(problems, folder, has) if trusted else _untrusted(problems, folder, has)
    if meta is None:
        return None, problems
    inline = meta.references == "inline"
    references = (
        _references(reader, folder / "references", reference_token_budget) if inline else ()
    )
    files = _files(reader, folder, inline)
    # Only a skill-mode model calls tools; in the planner and retrieval modes the runtime runs
    # them, and a file the model cannot read is no reason to offer a tool.
    reads = bool(files) and meta.execution_config.single
    examples = _examples(reader, folder, meta, _contract(meta, schema) if schema else None)
    _example_inputs(problems, folder, examples, input_validator)
    if problems.errors or schema is None:
        return None, problems
    output_schema, data_schema, validator, pins = schema
    bundle = SkillBundle(
        meta=meta,
        path=folder,
        instructions=body.strip(),
        tools=tuple(dict.fromkeys((*meta.tools, *((READ_FILE_TOOL,) if reads else ())))),
        allowed_tools=tuple(allowed),
        output_schema=output_schema,
        data_schema=data_schema,
        references=references,
        files=files,
        order=order,
        preprocess=scripts.get("preprocess"),
        validate=scripts.get("validate"),
        validator=validator,
        pins=pins,
        examples=examples,
        fingerprint=reader.fingerprint,
        input_schema=input_schema,
        input_validator=input_validator,
        trusted=trusted,
        scripts=has,
    )
    return bundle, problems


def _contract(
    meta: SkillMeta, schema: tuple[dict[str, Any], dict[str, Any], Any, Any]
) -> OutputContract:
    """The rules the skill's final outputs are held to, before the bundle exists."""
    output_schema, _, validator, _ = schema
    return OutputContract(validator, output_schema, meta.outputs.provides)


def _examples(
    reader: _Reader, folder: Path, meta: SkillMeta, contract: OutputContract | None
) -> Examples | None:
    """The bundle's worked examples, or ``None`` (with problems if they are wrong)."""
    file = folder / EXAMPLES_FILE
    if not file.is_file():
        if meta.examples is not None:
            reader.problems.error(
                folder / META_FILE,
                "$.examples",
                f"says how to show examples, but the bundle has no {EXAMPLES_FILE}: add it "
                "(one JSON object per line) or drop the setting",
            )
        return None
    if not meta.execution_config.single:
        reader.problems.error(
            file,
            "$",
            "examples show the model replies of a single-mode skill; in the planner and "
            "retrieval modes the runtime makes the calls: delete the file",
        )
        return None
    text = reader.text(file)
    if text is None:
        return None
    return parse_examples(text, file, reader.problems, meta=meta, contract=contract)


def _input_schema(reader: _Reader, folder: Path) -> tuple[dict[str, Any] | None, Any]:
    """The bundle's input schema and its compiled validator; ``(None, None)`` when it has none,
    or (with problems) when it is wrong."""
    file = folder / INPUT_SCHEMA_FILE
    source: Any = reader.json(file) if file.is_file() else None
    if source is None:
        return None, None
    problems = reader.problems
    if not isinstance(source, dict):
        problems.error(file, "$", 'the input schema must be a JSON object: {"type": "object", ...}')
        return None, None
    before = len(problems.errors)
    problems.schema_errors(file, _metaschema().iter_errors(source))
    if len(problems.errors) > before:
        return None, None
    given = source.get("type", "object")
    if "object" not in ([given] if isinstance(given, str) else given):
        problems.error(
            file, "$.type", f'a run input is a JSON object, never {given!r}: write "type": "object"'
        )
        return None, None
    try:
        return source, compile_schema(source)
    except ValueError as exc:
        problems.error(file, "$", f"the schema does not compile: {exc}")
        return None, None


def _example_inputs(
    problems: Problems, folder: Path, examples: Examples | None, validator: Any
) -> None:
    """Each worked example's input must be one a run could be given (it fits the input schema):
    an example of an input the skill refuses teaches the model nothing it will see."""
    if examples is None or validator is None:
        return
    for example in examples.items:
        for error in format_errors(validator, example.input, plain=True):
            where = f"$[line {example.line}].input{error['path'].removeprefix('$')}"
            problems.error(
                folder / EXAMPLES_FILE,
                where,
                f"{error['message']} (the input schema, {INPUT_SCHEMA_FILE}, refuses it)",
            )


def _output_schema(
    reader: _Reader, folder: Path, meta: SkillMeta | None
) -> tuple[dict[str, Any], dict[str, Any], Any, tuple[AnyPin, ...]] | None:
    """The full output schema, the data schema, the compiled validator and the pins; ``None``
    (with problems) if the bundle's schema is wrong. ``meta``: ``None`` if it is wrong itself
    (the schema is checked all the same, as if the skill provided and called nothing)."""
    problems = reader.problems
    file = folder / "assets" / "output_schema.json"
    source: Any = reader.json(file) if file.is_file() else {}
    if source is None:
        return None
    if not isinstance(source, dict):
        problems.error(file, "$", "the output schema must be a JSON object")
        return None
    before = len(problems.errors)
    problems.schema_errors(file, _metaschema().iter_errors(source))
    if len(problems.errors) > before:
        return None
    data_extra = ((source.get("properties") or {}).get("data") or {}).get("additionalProperties")
    if data_extra not in (None, False):
        problems.error(
            file,
            "$.properties.data.additionalProperties",
            "data fields become state keys, so they must all be declared: set it to false",
        )
        return None
    for key, check in (("response", response_schema), ("control", control_actions)):
        try:
            check((source.get("properties") or {}).get(key))
        except ValueError as exc:
            problems.error(file, f"$.properties.{key}", str(exc))
            return None
    provides, tools = (meta.outputs.provides, set(meta.tools)) if meta else ((), set())
    output_schema, data_schema = build_output_schema(source, provides)
    try:
        pins = find_pins(output_schema)
    except ValueError as exc:
        problems.error(file, "$", str(exc))
        return None
    for pin in pins:
        if isinstance(pin, Pin):
            continue
        unknown = [t for t in pin.tools if t not in tools]
        if unknown:
            keyword = CALLS_KEYWORD if isinstance(pin, CallsPin) else RESULT_KEYWORD
            where = "$" + "".join(f".properties.{name}" for name in pin.path) + f".{keyword}"
            problems.error(
                file,
                where,
                f"{', '.join(unknown)} is not one of the skill's tools: list it in "
                "skill.meta.json's tools, or name a tool the skill has",
            )
            return None
    try:
        validator = compile_schema(output_schema)
    except ValueError as exc:
        problems.error(file, "$", f"the schema does not compile: {exc}")
        return None
    return output_schema, data_schema, validator, pins


def _scripts(problems: Problems, folder: Path, has: Sequence[str]) -> dict[str, Callable[..., Any]]:
    """The run's scripts of a trusted bundle, imported now (an import error is a problem)."""
    scripts = {}
    for name in _RUN_SCRIPTS:
        if name in has:
            try:
                scripts[name] = _import(folder, name)
            except BundleError as exc:
                problems.extend(exc.problems)
    if "validate" in scripts:
        scripts["validate"] = _with_turn(scripts["validate"], folder / SCRIPTS["validate"])
    return scripts


def _untrusted(
    problems: Problems, folder: Path, has: Sequence[str]
) -> dict[str, Callable[..., Any]]:
    """No scripts: the bundle is not trusted. A warning names those it has and how to trust
    it."""
    if has:
        files = ", ".join(SCRIPTS[name] for name in has)
        needed = [SCRIPTS[name] for name in has if name in _RUN_SCRIPTS]
        effect = (
            f"a run of this skill fails with {UntrustedScriptsError.code.value} until then"
            if needed
            else "its eval setup, rules and migration fail until then"
        )
        problems.warn(
            folder / "scripts",
            "$",
            f"not imported: {files}. skilldeck runs a bundle's scripts (in its own process, with "
            f"its environment) only when it trusts the bundle, and {effect}. Read them, then "
            f"{UntrustedScriptsError.how_to_trust(str(folder))}",
            "trust",
        )
    return {}


def _with_turn(fn: Callable[..., Any], file: Path) -> Callable[..., Any]:
    """``validate`` as the runner calls it, ``(output, state, turn)``: a
    ``validate(output, state)`` that does not read the turn is called without it."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return fn
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params) or len(positional) >= 3:
        return fn

    @functools.wraps(fn)
    def two(output: Any, state: Any, turn: Any) -> Any:
        return fn(output, state)

    return two


def load_bundle(
    folder: str | Path,
    *,
    order: int = 0,
    reference_token_budget: int = 4000,
    trust: TrustSource = (),
) -> SkillBundle:
    """Load one bundle folder (its scripts only if :func:`trust_policy` trusts it).

    Raises:
        BundleError: the bundle has errors; ``problems`` lists every one of them.
    """
    bundle, problems = inspect_bundle(
        folder, order=order, reference_token_budget=reference_token_budget, trust=trust
    )
    problems.raise_errors()
    assert bundle is not None  # no errors means it loaded
    return bundle


def skill_folders(root: Path) -> list[Path]:
    """The bundle folders under ``root``: ``root`` itself if it is one, else its children that
    have a ``SKILL.md`` or a ``skill.meta.json`` (not hidden, not ``_`` fixtures)."""
    if not root.is_dir():
        raise BundleError(str(root), "$", "skills directory does not exist")
    if any((root / f).is_file() for f in _SKILL_FILES):
        return [root]
    folders = []
    for child in sorted(root.iterdir()):
        if not child.is_dir() or child.name.startswith((".", "_")):
            continue
        if any((child / f).is_file() for f in (*_SKILL_FILES, META_FILE)):
            folders.append(child)
    return folders


def load_skills(
    paths: str | Path | Sequence[str | Path],
    *,
    reference_token_budget: int = 4000,
    trust: TrustSource = (),
) -> tuple[SkillBundle, ...]:
    """Load every bundle under ``paths`` (a skills folder, a bundle folder, or a list of them).

    Bundles are returned in load order: folders in the order given, bundles by name within a
    folder. The router breaks priority ties by this order. A bundle's scripts are imported
    only if it is trusted: built in, recorded (``skilldeck new``, ``skilldeck trust``), or
    named by ``trust`` (``True``: every bundle; a path or glob; a list of them); an untrusted
    bundle with scripts loads without them, and its warning is logged.

    Raises:
        BundleError: bundles are malformed, or two share a name; ``problems`` lists every
            problem of every bundle.
    """
    roots = [paths] if isinstance(paths, str | Path) else list(paths)
    policy = trust_policy(trust)
    bundles: list[SkillBundle] = []
    problems = Problems()
    seen: dict[str, Path] = {}
    for root in roots:
        for folder in skill_folders(Path(root).resolve()):
            bundle, found = inspect_bundle(
                folder,
                order=len(bundles),
                reference_token_budget=reference_token_budget,
                trust=policy,
            )
            problems.extend(found.items)
            for warning in found.warnings:
                if warning.rule == "trust":
                    log.warning("%s", warning)
            if bundle is None:
                continue
            if bundle.name in seen:
                problems.error(
                    folder,
                    "$.name",
                    f"skill {bundle.name!r} is also loaded from {seen[bundle.name]}",
                )
                continue
            seen[bundle.name] = folder
            bundles.append(bundle)
    problems.raise_errors()
    return tuple(bundles)
