"""What the service is and offers: its health (no API key needed: ``/health``, and the probes
an orchestrator asks, ``/livez`` and ``/readyz``), the deck's skills, and its metrics
(:data:`metrics_router`, included when they are on)."""

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from langchain_core.runnables import RunnableConfig
from starlette.concurrency import run_in_threadpool

from skilldeck.errors import ErrorCode
from skilldeck.server.dependencies import CurrentService, User
from skilldeck.server.errors import responses
from skilldeck.server.metrics import CONTENT_TYPE
from skilldeck.server.schemas import Health, SkillList, SkillRow
from skilldeck.server.service import Service, service_version
from skilldeck.skills.bundle import SkillBundle

__all__ = ["metrics_router", "router"]

router = APIRouter(tags=["service"])

# A checkpoint read of a thread that never exists: it reaches the database and finds nothing.
_HEALTH_PROBE: RunnableConfig = {
    "configurable": {"thread_id": "__skilldeck_health__", "checkpoint_ns": ""}
}


@router.get("/health", response_model=Health, responses=responses(503))
async def health(service: CurrentService) -> Any:
    """Liveness and checkpoint database reachability (no API key needed)."""
    return await _database_health(service) or Health(status="ok", version=service_version())


@router.get("/livez", response_model=Health)
async def livez() -> Health:
    """Liveness: the process is up and answers (no API key needed). It stays ``ok`` while
    the process drains before a restart: restarting it then would cut its runs short."""
    return Health(status="ok", version=service_version())


@router.get("/readyz", response_model=Health, responses=responses(503))
async def readyz(service: CurrentService) -> Any:
    """Readiness: the process accepts runs and reaches its checkpoint database (no API key
    needed); 503 ``draining`` from the moment it begins to shut down (SIGTERM), so a load
    balancer sends it nothing new."""
    if service.runs.draining:
        code = ErrorCode.SHUTTING_DOWN.value
        body = Health(status="draining", version=service_version(), detail=code)
        return JSONResponse(body.model_dump(), status_code=503, headers={"Retry-After": "1"})
    return await _database_health(service) or Health(status="ok", version=service_version())


async def _database_health(service: Service) -> JSONResponse | None:
    """503 ``unavailable`` if the checkpoint database cannot be read, else ``None``."""
    try:
        await run_in_threadpool(service.deck.checkpointer.get_tuple, _HEALTH_PROBE)
    except Exception as exc:
        body = Health(status="unavailable", version=service_version(), detail=type(exc).__name__)
        return JSONResponse(body.model_dump(), status_code=503)
    return None


#: ``GET /metrics``, behind the API keys (``create_app`` includes it when the metrics are on
#: and served by the app itself, not at their own address).
metrics_router = APIRouter(tags=["service"])


@metrics_router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE: {}}}, **responses(401)},
)
async def metrics(user: User, service: CurrentService) -> Response:
    """The service's Prometheus metrics, in the text format (any API key may read them: they
    name skills, models and tools, never users or threads)."""
    assert service.metrics is not None  # the route is included only with them
    body = await run_in_threadpool(service.metrics.exposition)
    return Response(body, media_type=CONTENT_TYPE)


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
