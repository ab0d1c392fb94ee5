"""Spec limits under attack: peak memory and time of the CLI and of a module refusing bombs.

Each bomb (alias expansion, deep nesting, /dev/zero as spec or manifest, 50,000 objects, a
50 MiB ConfigMap value, 10^9 replicas with the Borda scorer, a flood of YAML nodes) is written
to a temporary folder and given to ``qonnect plan`` and to the deploy module (run as Ansible
runs it: ``python -m`` with an args file). Every run is a child of a small launcher that reads
the child's peak RSS and CPU time with getrusage(RUSAGE_CHILDREN) (a child forked from this
process directly would inherit its size in ru_maxrss). The bound is the documented worst case:
200 MB and 2 s.

    .venv/bin/python benchmarks/spec_limits.py --json [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
COLLECTIONS = ROOT / ".venv" / "collections"
INVENTORY = ROOT / "examples" / "inventories" / "paper.json"
MAX_RSS_MB = 200
MAX_SECONDS = 2.0

HEAD = "apiVersion: qonnect.io/v1\nkind: Application\nmetadata:\n  name: bomb\n"
SERVICE = (
    "spec:\n  objective: {{energy: 1}}\n  services:\n  - name: web\n    tier: cloud\n"
    "{extra}    manifests:\n{manifests}"
)
CONFIGMAP = "    - {apiVersion: v1, kind: ConfigMap, metadata: {name: c}}\n"

_LAUNCHER = """
import json, resource, subprocess, sys
with open(sys.argv[1], "wb") as out:
    rc = subprocess.call(sys.argv[3:], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(sys.argv[2], "w") as res:
    json.dump({"rc": rc, "maxrss_kb": usage.ru_maxrss, "cpu": usage.ru_utime + usage.ru_stime}, res)
"""


def spec(extra: str = "", manifests: str = CONFIGMAP, meta: str = "", top: str = "") -> str:
    return HEAD + meta + top + SERVICE.format(extra=extra, manifests=manifests)


def alias_bomb(levels: int = 9) -> str:
    lines = ["    a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "  labels:\n" + "\n".join(lines) + "\n"


def bombs(folder: Path) -> dict[str, Path]:
    """Bomb name -> spec file (written into folder)."""
    files = {
        "alias_bomb": spec(meta=alias_bomb()),
        "nested_20000": spec(top="x: " + "[" * 20000 + "]" * 20000 + "\n"),
        "manifest_dev_zero": spec(manifests="    - file: /dev/zero\n"),
        "configmaps_50000": spec(manifests="    - file: many.yaml\n"),
        "configmap_value_50mib": spec(manifests="    - file: big.yaml\n"),
        "replicas_1e9_borda": spec(extra="    replicas: 1000000000\n"),
        "nodes_flood": spec(meta="  labels: {" + ", ".join(f"k{i}: v" for i in range(200_000)) + "}\n"),
    }
    out = {}
    for name, text in files.items():
        path = folder / f"{name}.yml"
        path.write_text(text)
        out[name] = path
    (folder / "many.yaml").write_text(
        "".join(f"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}}}\n" for i in range(50_000))
    )
    with open(folder / "big.yaml", "wb") as handle:
        handle.write(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  v: ")
        handle.write(b"x" * (50 * 2**20))
        handle.write(b"\n")
    out["spec_dev_zero"] = Path("/dev/zero")
    return out


def measure(cmd: list[str], cwd: Path, env: dict | None = None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out, res = Path(tmp) / "out", Path(tmp) / "res.json"
        start = time.monotonic()
        subprocess.run(
            [sys.executable, "-c", _LAUNCHER, str(out), str(res), *cmd],
            cwd=cwd,
            env=env,
            check=True,
            timeout=600,
        )
        wall = time.monotonic() - start
        usage = json.loads(res.read_text())
        return {
            "rc": usage["rc"],
            "rss_mb": round(usage["maxrss_kb"] / 1024, 1),
            "cpu_s": round(usage["cpu"], 3),
            "wall_s": round(wall, 3),
            "output": out.read_text(errors="replace")[-4000:],
        }


def message(output: str) -> str:
    """The error a run gave: a module's msg, or the CLI's last line."""
    try:
        return json.loads(output)["msg"][:200]
    except (ValueError, KeyError, TypeError):
        lines = output.strip().splitlines()
        return lines[-1][:200] if lines else ""


def cli(path: Path, folder: Path) -> list[str]:
    return [
        str(BIN / "qonnect"),
        "plan",
        "--spec",
        str(path),
        "--inventory",
        str(INVENTORY),
        "--scorer",
        "borda",
    ]


def module(path: Path, folder: Path) -> list[str]:
    args = folder / f"args-{path.name}.json"
    args.write_text(
        json.dumps(
            {"ANSIBLE_MODULE_ARGS": {"src": str(path), "scorer": "borda", "kb_url": "http://127.0.0.1:9"}}
        )
    )
    return [sys.executable, "-m", "ansible_collections.qonnect.core.plugins.modules.deploy", str(args)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON only")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    rows = []
    with tempfile.TemporaryDirectory(prefix="qonnect-spec-limits-") as tmp:
        folder = Path(tmp)
        for name, path in bombs(folder).items():
            for via, build in (("cli", cli), ("module", module)):
                runs = [measure(build(path, folder), folder, env) for _run in range(args.repeat)]
                rows.append(
                    {
                        "bomb": name,
                        "via": via,
                        "refused": all(r["rc"] != 0 for r in runs),
                        "rss_mb_max": max(r["rss_mb"] for r in runs),
                        "cpu_s_median": statistics.median(r["cpu_s"] for r in runs),
                        "cpu_s_max": max(r["cpu_s"] for r in runs),
                        "wall_s_median": statistics.median(r["wall_s"] for r in runs),
                        "wall_s_max": max(r["wall_s"] for r in runs),
                        "message": message(runs[0]["output"]),
                    }
                )
    worst = {
        "rss_mb": max(r["rss_mb_max"] for r in rows),
        "cpu_s": max(r["cpu_s_max"] for r in rows),
        "wall_s": max(r["wall_s_max"] for r in rows),
    }
    report = {
        "benchmark": "spec_limits",
        "repeat": args.repeat,
        "bound": {"rss_mb": MAX_RSS_MB, "seconds": MAX_SECONDS},
        "worst": worst,
        "all_refused": all(r["refused"] for r in rows),
        "within_bound": worst["rss_mb"] < MAX_RSS_MB and worst["cpu_s"] < MAX_SECONDS,
        "runs": rows,
    }
    print(json.dumps(report, indent=None if args.json else 2))
    return 0 if report["within_bound"] and report["all_refused"] else 1


if __name__ == "__main__":
    sys.exit(main())
