"""What the routes of one app share: the :class:`Service`, which ``create_app`` keeps in
``app.state.service``, and the dependency that gives it to a route (:data:`CurrentService`)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

from fastapi import Depends, Request

from skilldeck.deck import SkillDeck
from skilldeck.server.keys import ApiKeys
from skilldeck.server.runs import RunStreams
from skilldeck.server.threads import Threads

__all__ = ["CurrentService", "Service", "current_service", "service_version"]


@dataclass(frozen=True)
class Service:
    """The objects one app's routes work with.

    Attributes:
        deck: the deck runs go to (the caller keeps it open while the app serves).
        keys: the API keys, each naming its user.
        threads: who owns which thread, and who may use which matter.
        runs: the runs going on or waiting, and their logs.
    """

    deck: SkillDeck
    keys: ApiKeys
    threads: Threads
    runs: RunStreams


def current_service(request: Request) -> Service:
    """The :class:`Service` of the app that serves ``request`` (the mounted app's own, when
    the service is mounted in another app)."""
    service: Service = request.app.state.service
    return service


#: A route's parameter of this type gets the app's :class:`Service`.
CurrentService = Annotated[Service, Depends(current_service)]


def service_version() -> str:
    """The installed skilldeck's version (``"0"`` in a checkout that is not installed)."""
    try:
        return version("skilldeck")
    except PackageNotFoundError:
        return "0"
