"""What the service is and offers: its health (no API key needed) and the deck's skills."""

from typing import Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from langchain_core.runnables import RunnableConfig
from starlette.concurrency import run_in_threadpool

from skilldeck.server.dependencies import CurrentService, User
from skilldeck.server.errors import responses
from skilldeck.server.schemas import Health, SkillList, SkillRow
from skilldeck.server.service import service_version
from skilldeck.skills.bundle import SkillBundle

__all__ = ["router"]

router = APIRouter(tags=["service"])

# A checkpoint read of a thread that never exists: it reaches the database and finds nothing.
_HEALTH_PROBE: RunnableConfig = {
    "configurable": {"thread_id": "__skilldeck_health__", "checkpoint_ns": ""}
}


@router.get("/health", response_model=Health, responses=responses(503))
async def health(service: CurrentService) -> Any:
    """Liveness and checkpoint database reachability (no API key needed)."""
    try:
        await run_in_threadpool(service.deck.checkpointer.get_tuple, _HEALTH_PROBE)
    except Exception as exc:
        body = Health(status="unavailable", version=service_version(), detail=type(exc).__name__)
        return JSONResponse(body.model_dump(), status_code=503)
    return Health(status="ok", version=service_version())


@router.get("/skills", response_model=SkillList, responses=responses(401))
async def list_skills(user: User, service: CurrentService) -> SkillList:
    """The deck's skills: their descriptions, the contexts that run them, whether a run
    needs a matter, and the input a run that starts with the skill takes."""
    in_matter = set(await run_in_threadpool(service.deck.matter_skills))
    return SkillList(skills=[_skill_row(b, b.name in in_matter) for b in service.deck.bundles])


def _skill_row(bundle: SkillBundle, needs_matter: bool) -> SkillRow:
    schema = bundle.input_schema
    return SkillRow(
        name=bundle.name,
        description=bundle.description,
        contexts=list(bundle.contexts),
        needs_matter=needs_matter,
        input_schema=None if schema is None else dict(schema),
    )
