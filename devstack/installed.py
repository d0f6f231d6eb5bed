"""Where a release installed with `DEPLOY=chart` answers, as the host reaches it: written by
devstack.chart after `helm upgrade --install`, read by everything that dials the services."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class Installed:
    """The Services' ClusterIPs (kube-proxy routes them from the host) and the names the chart's
    certificates carry (the Service DNS names), for a client that dials by IP."""

    scheduler: str
    scheduler_name: str
    syncer: str
    syncer_name: str
    hooks_url: str

    def save(self, state_dir: Path) -> None:
        path(state_dir).write_text(json.dumps(asdict(self), indent=2) + "\n")

    def server_name(self, address: str) -> str | None:
        """The name to check a service's certificate against when dialling it at `address`."""
        return {self.scheduler: self.scheduler_name, self.syncer: self.syncer_name}.get(address)


def path(state_dir: Path) -> Path:
    return state_dir / "chart.json"


def load(state_dir: Path) -> Installed:
    try:
        return Installed(**json.loads(path(state_dir).read_text()))
    except FileNotFoundError:
        raise RuntimeError(f"no release installed in {state_dir}: run `DEPLOY=chart make up`") from None
