"""The roadmap's hardware routes (matrix columns) and the targets each deploys to.

Data: ``exporter/data/routes.toml``; every target named there must exist in the
target registry (checked on load).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Deployment:
    name: str
    targets: tuple[str, ...]
    host: str


@dataclass(frozen=True)
class Route:
    id: str
    title: str
    deployments: tuple[Deployment, ...]

    def to_json(self) -> dict:
        return {"id": self.id, "title": self.title,
                "deployments": [{"name": d.name, "targets": list(d.targets), "host": d.host} for d in self.deployments]}


@lru_cache(maxsize=1)
def all_routes() -> tuple[Route, ...]:
    from exporter.targets import get_target

    data = tomllib.loads(resources.files("exporter").joinpath("data/routes.toml").read_text())
    routes = tuple(
        Route(r["id"], r["title"], tuple(Deployment(d["name"], tuple(d["targets"]), d["host"]) for d in r["deployment"]))
        for r in data["route"]
    )
    for r in routes:
        for d in r.deployments:
            for t in (*d.targets, d.host):
                if get_target(t).name != t:
                    raise ValueError(f"exporter/data/routes.toml: route {r.id} names {t!r}; use the registry name {get_target(t).name!r}")
    return routes
