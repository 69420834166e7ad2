"""Qualcomm AI Hub validation: a bundle meets a real device (never a dependency of deployment or tests).

``client.HubClient`` is the interface; ``qai_hub_client`` the real service; ``replay`` the labelled
simulation; ``validate`` the flow; ``records`` the signed device-validation record beside a bundle.
"""

from __future__ import annotations

from pathlib import Path


def make_client(simulate: bool, store: Path | None = None, profile: str | None = None):
    """The real client, or with ``simulate`` the replay (its results are labelled simulated)."""
    if simulate:
        from exporter.hub.replay import ReplayHub

        return ReplayHub(store or Path(".edge-export-replay"))
    from exporter.hub.qai_hub_client import QaiHubClient

    return QaiHubClient(profile=profile)
