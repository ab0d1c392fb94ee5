"""QONNECT's evaluation data (../shared/qonnect-reference/evaluation-info) as a qonnect inventory.

Read from the reference files, never copied: examples/inventories/qonnect-evaluation.json is
this conversion, and the tests check it still matches the files.
"""

from __future__ import annotations

import csv
from pathlib import Path

from support import qonnect_reference

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = qonnect_reference()
EVALUATION = REFERENCE / "evaluation-info"
SAMPLE = REFERENCE / "sample-application"


def inventory_from_csv(folder: Path = EVALUATION) -> dict:
    """One cluster per QONNECT cluster (named after its worker), its node's numbers unrounded."""
    tiers = {row["id"]: row["type"] for row in csv.DictReader((folder / "clusters.csv").open())}
    clusters = []
    for row in sorted(csv.DictReader((folder / "nodes.csv").open()), key=lambda r: r["name"]):
        name = row["name"].removesuffix("-worker")
        tier = tiers[row["cluster_id"]]
        profile = name.split("-", 1)[1]
        truth = {"True": True, "False": False}
        clusters.append(
            {
                "name": name,
                "tier": tier,
                "location": name,
                "healthy": True,
                "heartbeat_age": 0.0,
                "labels": {"qonnect.io/tier": tier, "qonnect.io/profile": profile},
                "nodes": [
                    {
                        "name": row["name"],
                        "ready": truth[row["is_ready"]],
                        "schedulable": truth[row["is_schedulable"]],
                        "pressure": {
                            "memory": truth[row["is_memory_pressure_exists"]],
                            "disk": truth[row["is_disk_pressure_exists"]],
                            "pid": truth[row["is_pid_pressure_exists"]],
                        },
                        "allocatable": {
                            "cpu": float(row["cpu"]),
                            "memory": int(row["memory"]),
                            "ephemeral_storage": int(row["ephemeral_storage"]),
                        },
                        "requested": {"cpu": 0.0, "memory": 0, "ephemeral_storage": 0},
                        "bandwidth_gbps": int(row["network_bandwidth"]) / 1e9,
                        "energy_kwh": float(row["energy"]),
                        "price_eur_h": float(row["pricing"]),
                        "heartbeat_age": 0.0,
                        "labels": {"kubernetes.io/hostname": row["name"], "qonnect.io/tier": tier},
                    }
                ],
            }
        )
    return {"clusters": clusters, "latency_ms": {}, "placements": {}}
