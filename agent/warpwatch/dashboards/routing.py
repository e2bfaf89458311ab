"""Alertmanager routing for warpwatch's alerts (`alerts/alertmanager.yaml`): how notifications are
grouped and which alerts hold others back, from `alerts.NOTIFY_GROUP_BY` and `alerts.INHIBITIONS`.

Merge the route into your Alertmanager's tree (it matches `alertname=~"Warpwatch.*"`) and append
the inhibit rules; the receiver is a placeholder for yours.
"""

from __future__ import annotations

from typing import Any

from .alerts import INHIBITIONS, NOTIFY_GROUP_BY, alerts
from .settings import Settings

RECEIVER = "warpwatch"


def alertmanager_config(s: Settings, webhook_url: str = "http://alert-receiver.example:9095/") -> dict[str, Any]:
    """An Alertmanager configuration: one route for every warpwatch alert, grouped by
    `NOTIFY_GROUP_BY` (one notification per alert kind and deployment), and the inhibitions."""
    names = {a.name for a in alerts(s)}
    for source, target, _ in INHIBITIONS:
        if source not in names or target not in names:
            raise AssertionError(f"INHIBITIONS names an alert that does not exist: {source} -> {target}")
    return {
        "route": {
            "receiver": RECEIVER,
            "group_by": list(NOTIFY_GROUP_BY),
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "4h",
            "routes": [
                {"receiver": RECEIVER, "matchers": ['alertname=~"Warpwatch.*"'], "group_by": list(NOTIFY_GROUP_BY)}
            ],
        },
        "receivers": [{"name": RECEIVER, "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
        "inhibit_rules": [
            {
                "source_matchers": [f'alertname="{source}"'],
                "target_matchers": [f'alertname="{target}"'],
                "equal": list(equal),
            }
            for source, target, equal in INHIBITIONS
        ],
    }
