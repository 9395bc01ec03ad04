"""Which bundles' code may run: a bundle's scripts are imported only when the deck trusts it.

A bundle's ``scripts/*.py`` (``preprocess``, ``validate``, ``eval_setup``, ``rules``) run in the
deck's process, with its privileges and its environment (API keys included), so skilldeck
treats them as the Agent Skills ecosystem does: untrusted until someone says otherwise. A
bundle is trusted when

- it ships with skilldeck (the built-in bundles);
- ``skilldeck new`` wrote it, or ``skilldeck trust`` recorded it: a record in the state home
  (``SKILLDECK_HOME/trusted/``) names the bundle's resolved path and a random token, which the
  bundle keeps in ``.skilldeck-trust``. Editing the bundle keeps it trusted; another folder put
  in its place (a clone, a download, a copy) has no matching token and is not; a bundle moved
  elsewhere must be trusted again. Deleting either file takes the trust back;
- the host names it: ``SKILLDECK_TRUSTED_SKILLS``, ``--trust`` or ``trust=``, each a bundle
  folder, a folder of bundles (all of them), or a glob of either.

An untrusted bundle loads without its scripts, with a warning that says how to trust it; a run
that would need them fails with ``UNTRUSTED_SCRIPTS`` (see :class:`TrustPolicy`).
"""

from __future__ import annotations

import glob
import hashlib
import hmac
import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from skilldeck._internal.home import state_home

__all__ = [
    "MARKER",
    "TRUSTED_ENV",
    "TrustPolicy",
    "TrustSource",
    "is_recorded",
    "record_trust",
    "split_paths",
]

#: The file that holds a trusted bundle's token (hidden: never offered to a model).
MARKER = ".skilldeck-trust"
#: The setting that names trusted bundles (``Settings.trusted_skills``), read by every load.
TRUSTED_ENV = "SKILLDECK_TRUSTED_SKILLS"
_RECORDS = "trusted"
_GLOB = frozenset("*?[")


@dataclass(frozen=True, slots=True)
class TrustPolicy:
    """The bundles whose scripts may be imported: those under ``folders`` (resolved), those
    with a trust record, or every bundle (``everything``)."""

    folders: tuple[Path, ...] = ()
    everything: bool = False

    @classmethod
    def of(cls, *sources: TrustSource) -> TrustPolicy:
        """One policy trusting what each of ``sources`` trusts; a path may be a glob."""
        folders: list[Path] = []
        everything = False
        for source in sources:
            if isinstance(source, TrustPolicy):
                folders += source.folders
                everything = everything or source.everything
            elif isinstance(source, bool):
                everything = everything or source
            else:
                names = [source] if isinstance(source, str | Path) else list(source)
                folders += (f for name in names for f in _expand(name))
        return cls(tuple(dict.fromkeys(folders)), everything)

    def trusts(self, folder: Path) -> bool:
        """Whether the bundle in ``folder`` may run its scripts."""
        folder = folder.resolve()
        return (
            self.everything
            or any(folder.is_relative_to(f) for f in self.folders)
            or is_recorded(folder)
        )


#: What a ``trust=`` argument takes: ``True`` (every bundle loaded), a path or a glob, several
#: of them, or a policy.
TrustSource = bool | str | Path | Sequence[str | Path] | TrustPolicy


def split_paths(text: str | None) -> list[str]:
    """The paths and globs of a ``SKILLDECK_TRUSTED_SKILLS`` value (``os.pathsep`` between)."""
    return [p for p in (text or "").split(os.pathsep) if p.strip()]


def _expand(name: str | Path) -> list[Path]:
    """The folders ``name`` stands for: a string may be a glob (and start with ``~``); a
    :class:`~pathlib.Path` is taken as it is."""
    if isinstance(name, Path):
        return [name.resolve()]
    text = os.path.expanduser(name)
    if _GLOB.isdisjoint(text):
        return [Path(text).resolve()]
    return [Path(p).resolve() for p in sorted(glob.glob(text, recursive=True))]


def _record_file(folder: Path) -> Path:
    digest = hashlib.sha256(str(folder).encode("utf-8")).hexdigest()[:32]
    return state_home().path / _RECORDS / f"{digest}.json"


def record_trust(folder: str | Path) -> Path:
    """Trust the bundle in ``folder`` from now on, in this state home (a new token, in the
    bundle and in its record); the record's file."""
    folder = Path(folder).resolve()
    token = secrets.token_hex(16)
    marker = {
        "about": "skilldeck runs this bundle's scripts: it was created or trusted here "
        "(skilldeck new / skilldeck trust). Delete this file to stop.",
        "token": token,
    }
    _write(folder / MARKER, marker)
    record = _record_file(folder)
    _write(record, {"path": str(folder), "token": token})
    return record


def is_recorded(folder: Path) -> bool:
    """Whether ``folder`` (resolved) has a trust record and still holds its token."""
    marker = folder / MARKER
    try:
        if marker.is_symlink():
            return False
        record = json.loads(_record_file(folder).read_text("utf-8"))
        kept = json.loads(marker.read_text("utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or not isinstance(kept, dict):
        return False
    token, given = record.get("token"), kept.get("token")
    return (
        record.get("path") == str(folder)
        and isinstance(token, str)
        and isinstance(given, str)
        and hmac.compare_digest(token, given)
    )


def _write(file: Path, value: object) -> None:
    """Write ``value`` as JSON atomically (a reader never sees half a file)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    temporary = file.with_name(f".{file.name}.{secrets.token_hex(4)}.tmp")
    temporary.write_text(json.dumps(value, indent=2) + "\n", "utf-8")
    os.replace(temporary, file)
