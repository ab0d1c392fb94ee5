"""Exact scorer: the default objective and every hard constraint as a MILP solved by HiGHS.

Variables: m[s,v] replicas of service s on node v (integer), u[s,c] 'service s uses cluster c'
(binary, only for spread > 1), and w[s,d,c] >= 0, the latency term of s's replicas on cluster c
towards dependency d. w linearises the product f[s,c] * Ldep_d(c) by McCormick's envelope with
per-cluster bounds lo_c <= Ldep_d(c) <= hi_c: w >= lo_c * f[s,c] and
w >= Ldep_d(c) - hi_c * (1 - f[s,c]), exact whenever a service sits on one cluster (a lower
bound otherwise; the plan is then evaluated exactly by the shared objective). Capacity is a
row per node and resource. The weighted scorer's plan, when it finds one, is the MIP start. The objective is scaled by the number of services (same optimum,
better-conditioned costs). Meant for small fleets and to measure the default scorer's gap.
"""

from __future__ import annotations

import os
import sys

from ansible_collections.qonnect.core.plugins.module_utils.placement.criteria import (
    evaluate,
    normalised_weights,
    service_scores,
    static_scores,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.errors import PlacementError
from ansible_collections.qonnect.core.plugins.module_utils.placement.explain import weighted_rows
from ansible_collections.qonnect.core.plugins.module_utils.placement.filters import (
    CONSTRAINT_FILTERS,
    Capacity,
    ServiceContext,
    run_filters,
)
from ansible_collections.qonnect.core.plugins.module_utils.placement.fleet import np

try:
    import highspy
except ImportError:  # pragma: no cover - exercised only without highspy
    highspy = None  # type: ignore[assignment]  # optional dependency

TIME_LIMIT = 60.0
# stop when the plan is proven within this fraction of the optimum (exact proofs on 100x100
# fleets with dependencies take minutes; the benchmark compares at this precision)
MIP_GAP = 0.001
# rows are scaled so memory and storage are in GiB (keeps coefficients near 1)
SCALE = (1.0, 2.0**30, 2.0**30)


class SolverTimeout(ValueError):
    """HiGHS did not prove a plan within TIME_LIMIT seconds: the request is too large for the
    exact scorer (a ValueError, so callers reporting bad requests report this one too)."""


class _Model:
    """Columns and coordinate-form rows, assembled into one HighsLp at the end."""

    def __init__(self) -> None:
        self.cost: list = []
        self.lower: list = []
        self.upper: list = []
        self.integer: list = []
        self.ncol = 0
        self.rows: list = []
        self.cols: list = []
        self.vals: list = []
        self.row_lo: list = []
        self.row_hi: list = []
        self.nrow = 0

    def add_cols(self, cost, lower, upper, integer: bool) -> int:
        n = len(cost)
        first = self.ncol
        self.cost.append(np.asarray(cost, dtype=float))
        self.lower.append(np.broadcast_to(np.asarray(lower, dtype=float), (n,)))
        self.upper.append(np.broadcast_to(np.asarray(upper, dtype=float), (n,)))
        self.integer.append(np.full(n, integer))
        self.ncol += n
        return first

    def add_rows(self, lo, hi) -> int:
        lo = np.atleast_1d(np.asarray(lo, dtype=float))
        first = self.nrow
        self.row_lo.append(lo)
        self.row_hi.append(np.broadcast_to(np.asarray(hi, dtype=float), lo.shape))
        self.nrow += len(lo)
        return first

    def add_entries(self, rows, cols, vals) -> None:
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        self.rows.append(rows)
        self.cols.append(np.broadcast_to(np.asarray(cols, dtype=np.int64), rows.shape))
        self.vals.append(np.broadcast_to(np.asarray(vals, dtype=float), rows.shape))

    def solve(self, time_limit: float, start: dict[int, float] | None = None):
        rows, cols = np.concatenate(self.rows), np.concatenate(self.cols)
        vals = np.concatenate(self.vals)
        order = np.lexsort((rows, cols))
        rows, cols, vals = rows[order], cols[order], vals[order]
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = self.ncol, self.nrow
        lp.col_cost_ = np.concatenate(self.cost)
        lp.col_lower_ = np.concatenate(self.lower)
        lp.col_upper_ = np.concatenate(self.upper)
        lp.row_lower_ = np.concatenate(self.row_lo)
        lp.row_upper_ = np.concatenate(self.row_hi)
        lp.sense_ = highspy.ObjSense.kMaximize
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.searchsorted(cols, np.arange(self.ncol + 1)).astype(np.int32)
        lp.a_matrix_.index_ = rows.astype(np.int32)
        lp.a_matrix_.value_ = vals
        lp.integrality_ = [
            highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
            for i in np.concatenate(self.integer)
        ]
        solver = _quiet_highs()
        solver.setOptionValue("time_limit", float(time_limit))
        solver.setOptionValue("threads", 1)
        solver.setOptionValue("mip_rel_gap", MIP_GAP)
        solver.passModel(lp)
        if start:
            cols = np.fromiter(start, dtype=np.int32)
            solver.setSolution(len(cols), cols, np.array([start[c] for c in cols], dtype=float))
        solver.run()
        status = solver.getModelStatus()
        if status == highspy.HighsModelStatus.kOptimal:
            return np.asarray(solver.getSolution().col_value)
        if status == highspy.HighsModelStatus.kInfeasible:
            return None
        raise SolverTimeout(
            f"HiGHS stopped with {solver.modelStatusToString(status)} after "
            f"{time_limit:g} s; use the weighted scorer for this fleet"
        )


def _quiet_highs():
    """A Highs instance whose start-up banner (written to fd 1 by C++) is discarded.

    Ansible modules speak JSON on stdout, so nothing else may reach it.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 1)
            solver = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    solver.setOptionValue("output_flag", False)
    return solver


def assign(problem, time_limit: float | None = None) -> tuple[dict, dict]:  # noqa: C901 - over the budget before it was set; split when next changed
    if highspy is None:
        raise ImportError("the optimal scorer needs highspy: install it with 'pip install highspy'")
    fleet, app = problem.fleet, problem.app
    weights = normalised_weights(app.objective)
    static = static_scores(fleet, weights)
    wl, lmax = weights["latency"], fleet.lmax
    model = _Model()
    cap_row = model.add_rows(
        np.full(fleet.num_nodes * 3, -np.inf), (np.maximum(fleet.free, 0.0) / SCALE).reshape(-1)
    )
    info: dict[str, dict] = {}
    for svc in problem.order:
        ctx = ServiceContext(fleet, svc, problem.exclude, problem.current_clusters(svc.name))
        ok, culprit, reasons = run_filters(ctx, CONSTRAINT_FILTERS, problem.explain)
        cand = np.nonzero(ctx.fits() & ok[fleet.node_cluster])[0]
        if culprit or not len(cand):
            raise PlacementError(svc.name, culprit or Capacity().constraint(ctx))
        clusters = fleet.node_cluster[cand]
        uniq = np.unique(clusters)
        if len(uniq) < svc.spread:
            raise PlacementError(
                svc.name, f"spread {svc.spread}", f"only {len(uniq)} cluster(s) meet every other constraint"
            )
        nrefs = len(svc.depends_on) + len(svc.max_latency)
        coef = static[cand] + wl
        if nrefs and lmax > 0:
            for limit in svc.max_latency:
                vec = fleet.latency_from(limit["from"])
                coef = coef - wl * np.where(np.isnan(vec), lmax, vec)[clusters] / (nrefs * lmax)
        coef = coef * np.where(problem.current_clusters(svc.name)[clusters], 1.0 + problem.hysteresis, 1.0)
        room = np.full(len(cand), float(svc.replicas))
        for j in range(3):
            if ctx.req[j] > 0:
                room = np.minimum(room, np.floor(fleet.free[cand, j] / ctx.req[j] + 1e-9))
        first = model.add_cols(coef / svc.replicas, 0.0, room, True)
        cols = first + np.arange(len(cand))
        row = model.add_rows([svc.replicas], [svc.replicas])
        model.add_entries(np.full(len(cand), row), cols, 1.0)
        for j in range(3):
            if ctx.req[j] > 0:
                model.add_entries(cap_row + cand * 3 + j, cols, ctx.req[j] / SCALE[j])
        if svc.spread > 1:
            _spread(model, svc, cols, clusters, uniq)
        info[svc.name] = {
            "cand": cand,
            "cols": cols,
            "clusters": clusters,
            "uniq": uniq,
            "nrefs": nrefs,
            "ok": ok,
            "reasons": reasons,
        }
    if wl > 0 and lmax > 0:
        for svc in app.services:
            for dep in svc.depends_on:
                _dependency(
                    model,
                    fleet,
                    svc,
                    info[svc.name],
                    app.service(dep),
                    info[dep],
                    wl / (info[svc.name]["nrefs"] * lmax),
                )
    greedy = _greedy(problem)
    solution = model.solve(TIME_LIMIT if time_limit is None else time_limit, _warm_start(greedy, info))
    if solution is None:
        if greedy is None:
            raise PlacementError(
                ", ".join(s.name for s in problem.order),
                "capacity (the services' combined requests do not fit together)",
            )
        placed = greedy
    else:
        placed = {}
        for name, data in info.items():
            counts = np.rint(solution[data["cols"]]).astype(int)
            placed[name] = [int(v) for v in np.repeat(data["cand"], counts)]
        # The model's dependency-latency term is a lower bound when a service spans clusters,
        # so its optimum can score below the greedy plan on the exact objective: keep the better.
        if greedy is not None and evaluate(fleet, app, greedy) > evaluate(fleet, app, placed) + 1e-9:
            placed = greedy
    return placed, _explain(problem, weights, placed, info) if problem.explain else {}


def _greedy(problem) -> dict | None:
    """The weighted scorer's assignment (the MIP start and the floor), or None if it fails."""
    from ansible_collections.qonnect.core.plugins.module_utils.placement import weighted

    fleet = problem.fleet
    saved, explain = fleet.free.copy(), problem.explain
    problem.explain = False
    try:
        return weighted.assign(problem)[0]
    except PlacementError:
        return None
    finally:
        fleet.free, problem.explain = saved, explain


def _warm_start(placed: dict | None, info) -> dict[int, float] | None:
    """Replica counts of an assignment as a (partial) MIP start, or None."""
    if placed is None:
        return None
    start: dict[int, float] = {}
    for name, data in info.items():
        col_of = dict(zip(np.asarray(data["cand"]).tolist(), np.asarray(data["cols"]).tolist(), strict=True))
        start.update(dict.fromkeys(col_of.values(), 0.0))
        for v in placed[name]:
            if v not in col_of:
                return None
            start[col_of[v]] += 1.0
    return start


def _spread(model: _Model, svc, cols, clusters, uniq) -> None:
    """At least ``spread`` distinct clusters: u[c] <= replicas on c <= replicas * u[c]."""
    u = model.add_cols(np.zeros(len(uniq)), 0.0, 1.0, True) + np.arange(len(uniq))
    pos = np.searchsorted(uniq, clusters)
    hi = model.add_rows(np.full(len(uniq), -np.inf), 0.0) + np.arange(len(uniq))
    lo = model.add_rows(np.zeros(len(uniq)), np.inf) + np.arange(len(uniq))
    model.add_entries(hi[pos], cols, 1.0)
    model.add_entries(hi, u, -float(svc.replicas))
    model.add_entries(lo[pos], cols, 1.0)
    model.add_entries(lo, u, -1.0)
    need = model.add_rows([svc.spread], [np.inf])
    model.add_entries(np.full(len(uniq), need), u, 1.0)


def _dependency(model: _Model, fleet, svc, mine: dict, dep, theirs: dict, penalty: float) -> None:
    """w[c] >= lo_c f[c] and w[c] >= Ldep(c) - hi_c (1 - f[c]) for each cluster c of s."""
    uniq = mine["uniq"]
    n = len(uniq)
    lat_all = fleet.latency[np.ix_(uniq, theirs["uniq"])]
    lo, hi = lat_all.min(axis=1), lat_all.max(axis=1)
    w = model.add_cols(np.full(n, -penalty), 0.0, np.inf, False) + np.arange(n)
    pos = np.searchsorted(uniq, mine["clusters"])
    # w - lo_c / r_s * sum_{v in c} m[s, v] >= 0
    low = model.add_rows(np.zeros(n), np.inf) + np.arange(n)
    model.add_entries(low, w, 1.0)
    model.add_entries(low[pos], mine["cols"], -lo[pos] / svc.replicas)
    # w - sum_v' L[c, c_v'] / r_d * m[d, v'] - hi_c / r_s * sum_{v in c} m[s, v] >= -hi_c
    rows = model.add_rows(-hi, np.inf) + np.arange(n)
    model.add_entries(rows, w, 1.0)
    lat = fleet.latency[np.ix_(uniq, theirs["clusters"])] / dep.replicas
    model.add_entries(np.repeat(rows, len(theirs["cols"])), np.tile(theirs["cols"], n), -lat.reshape(-1))
    model.add_entries(rows[pos], mine["cols"], -hi[pos] / svc.replicas)


def _explain(problem, weights, placed, info) -> dict:
    fleet = problem.fleet
    out = {}
    for svc in problem.order:
        lat, score = service_scores(fleet, weights, svc, placed)
        data = info[svc.name]
        out[svc.name] = weighted_rows(fleet, weights, lat, score, data["ok"], data["reasons"])
    return out
