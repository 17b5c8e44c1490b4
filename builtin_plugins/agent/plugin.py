"""Agent wiring."""
from pathlib import Path

from hookspecs import hookimpl


@hookimpl
def register_routes(host):
    from .routes import bp
    return [bp]


@hookimpl
def register_models(host):
    return [Path(__file__).with_name("migrations")]


@hookimpl
def startup(host):
    from .service import AgentService
    agent = AgentService(host)
    if host.role == "host":  # a `core worker` must not touch the runs the host is serving
        agent.recover()
    if host.config.get("service.redis-url"):
        agent.engine.listen()
    host.provide("agent", agent)
    host.tasks.register_kind("agent_run", agent.run_task, agent.cancel_task, agent.start_task)


@hookimpl
def shutdown(host):
    agent = host.service("agent")
    if agent is not None:
        agent.shutdown()
