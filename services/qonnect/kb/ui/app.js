// qonnect status page: reads the KB API with a bearer token and redraws every few seconds.
// Read-only. The token comes from the URL fragment (#token=...) or the form, is kept in this
// tab's sessionStorage and is sent only to this KB, as an Authorization header. Every value
// from the KB is inserted as text (never as HTML).
"use strict";

const API = "/api/v1";
const KEY = "qonnect.kb.token";
const REFRESH_MS = 3000;
const TIERS = ["cloud", "fog", "edge"];

let timer = null;
let latest = null;
// the controller's last fleet survivability verdict (controller/survival.py): the newest
// controller.survivability.fleet event, found once among the newest events, then kept current
// from the events after the last one seen
const FLEET_VERDICT = "controller.survivability.fleet";
const survival = { cursor: null, verdict: null };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("data-")) node.setAttribute(key, value);
    else node[key] = value;
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function $(id) { return document.getElementById(id); }

function tokenFromFragment() {
  const params = new URLSearchParams(location.hash.slice(1));
  const token = params.get("token");
  if (token) {
    sessionStorage.setItem(KEY, token.trim());
    history.replaceState(null, "", location.pathname + location.search);  // out of the address bar
  }
}

class AuthError extends Error {}

async function get(path) {
  const token = sessionStorage.getItem(KEY);
  const resp = await fetch(API + path, {
    headers: { Authorization: "Bearer " + token, Accept: "application/json" },
    credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer",
  });
  let body = null;
  try { body = await resp.json(); } catch (err) { body = null; }
  if (resp.status === 401) throw new AuthError((body && body.detail) || "the token was refused");
  if (!resp.ok) throw new Error(`${path}: ${resp.status} ${(body && body.detail) || resp.statusText}`);
  return body;
}

async function load() {
  const [clusters, inventory, placements, workloads, events] = await Promise.all([
    get("/clusters"), get("/inventory"), get("/placements"), get("/workloads"), get("/events?limit=100"),
  ]);
  await loadSurvival();
  return {
    clusters: clusters.clusters, inventory, placements: placements.placements,
    workloads: workloads.workloads, events: events.events, at: new Date(), verdict: survival.verdict,
  };
}

async function loadSurvival() {
  for (let page = 0; page < 5; page++) {  // bounded: a few pages of new events per refresh
    const path = survival.cursor === null ? "/events?limit=1000" : `/events?after_id=${survival.cursor}&limit=1000`;
    const found = (await get(path)).events;
    for (const e of found) {
      if (e.type === FLEET_VERDICT && e.role === "controller" && (!survival.verdict || e.id > survival.verdict.id)) {
        survival.verdict = e;
      }
      survival.cursor = Math.max(survival.cursor ?? 0, e.id);
    }
    if (survival.cursor === null) survival.cursor = 0;
    if (found.length < 1000) break;
  }
}

// -- derived views ---------------------------------------------------------------------------

// Where an application runs and how much room a cluster has are the KB's answers (its inventory:
// placements hold current-else-desired, clusters their free capacity, both from the collection's
// placement/model.py), never recomputed here, so this page shows what `qonnect status` shows.
function where(inventory, application) { return (inventory.placements || {})[application] || {}; }

// Per cluster/application/service: ready pods over its workloads and, when the agent reports one
// not Healthy, its status and reason (its pods' own, the deploy's answer too): the counts may be
// an old revision's pods still serving while the new one fails, as `qonnect status` says.
function readyCounts(workloads) {
  const ready = new Map();
  for (const w of workloads) {
    if (!w.application || !w.service) continue;
    const key = `${w.cluster}/${w.application}/${w.service}`;
    const cur = ready.get(key) || { ready: 0, status: null, reason: "" };
    cur.ready += w.ready_replicas || 0;
    if (w.status && w.status !== "Healthy" &&
        (!cur.status || (w.status === "Failed" && cur.status !== "Failed"))) {
      cur.status = w.status;
      cur.reason = `${w.kind || "workload"}/${w.name || "?"}: ${w.reason || "not ready"}`;
    }
    ready.set(key, cur);
  }
  return ready;
}

function readyText(r, replicas) {
  if (r === undefined) return "-";
  return r.status ? `${r.status}: ${r.reason}` : `${r.ready}/${replicas}`;
}

function runningByCluster(placements, inventory, ready) {
  const out = new Map();
  for (const p of placements) {
    for (const [service, entries] of Object.entries(where(inventory, p.application))) {
      for (const e of entries) {
        const list = out.get(e.cluster) || [];
        list.push({ app: p.application, service, replicas: e.replicas ?? 1,
                    ready: ready.get(`${e.cluster}/${p.application}/${service}`) });  // undefined: no report
        out.set(e.cluster, list);
      }
    }
  }
  return out;
}

// term 0: written without a controller's fencing token (e.g. by an admin's deploy)
function fenced(p) { return Boolean(p.fencing && (p.fencing.term > 0 || p.fencing.seq > 0)); }

function fencingTerm(placements, events) {
  let term = null;
  for (const p of placements) if (fenced(p)) term = Math.max(term ?? 0, p.fencing.term);
  for (const e of events) {  // the structured reference of events a controller token wrote
    if (e.role === "controller" && e.ref) term = Math.max(term ?? 0, Number(e.ref.term));
  }
  return term;
}

function health(status) {
  if (status.healthy) return "healthy";
  if (status.heartbeat_age === null || status.heartbeat_age === undefined) return "no reports";
  if (status.reachable === false) return "unreachable";
  return "stale";
}

function kind(event) {
  const t = event.type;
  if (/^controller\.survivability\./.test(t)) {
    return /regained$/.test(t) || (event.data && event.data.survivable === true) ? "success" : "failure";
  }
  if (/succeeded$|recovered/.test(t)) return "success";
  if (/fail|down|lost|error|cancel/.test(t)) return "failure";
  if (/migrat|decision|deploy|placement|failover/.test(t)) return "migration";
  return "other";
}

function fmtTime(ts) { return new Date(ts * 1000).toLocaleTimeString([], { hour12: false }); }
function fmtNum(v, digits) { return v === null || v === undefined ? "-" : String(Number(Number(v).toPrecision(digits))); }
function mean(values) {
  const known = values.filter((v) => v !== null && v !== undefined);
  return known.length ? known.reduce((a, b) => a + b, 0) / known.length : null;
}

// -- drawing ---------------------------------------------------------------------------------

function drawTiers(data, running) {
  const facts = new Map(data.inventory.clusters.map((c) => [c.name, c]));
  const byTier = new Map(TIERS.map((t) => [t, []]));
  for (const c of [...data.clusters].sort((a, b) => a.name.localeCompare(b.name))) {
    if (!byTier.has(c.tier)) byTier.set(c.tier, []);
    byTier.get(c.tier).push(c);
  }
  const columns = [];
  for (const [tier, clusters] of byTier) {
    const up = clusters.filter((c) => c.status.healthy).length;
    const cards = clusters.map((c) => clusterCard(c, facts.get(c.name) || { nodes: [], free: null }, running.get(c.name) || []));
    columns.push(el("div", { class: "tier", id: `tier-${tier}`, "data-tier": tier },
      el("h3", {}, tier, " ", el("span", { class: "count" }, `${up}/${clusters.length} healthy`)),
      cards.length ? cards : el("p", { class: "empty" }, "no clusters")));
  }
  $("tiers").replaceChildren(...columns);
}

function clusterCard(c, inventoried, apps) {
  const state = health(c.status);
  const nodes = inventoried.nodes || [];
  const free = inventoried.free;
  const age = c.status.heartbeat_age === null || c.status.heartbeat_age === undefined
    ? "never reported" : `report ${Math.round(c.status.heartbeat_age)} s ago`;
  const list = apps.length
    ? el("ul", { class: "apps" }, apps.map((a) => el("li", {
        class: a.ready !== undefined && (a.ready.status || a.ready.ready < a.replicas) ? "notready" : "",
        "data-status": a.ready && a.ready.status ? a.ready.status : null },
        `${a.app}/${a.service} ×${a.replicas}`,
        a.ready === undefined ? "" : a.ready.status ? ` (${readyText(a.ready, a.replicas)})`
          : ` (${a.ready.ready}/${a.replicas} ready)`)))
    : el("p", { class: "empty" }, "nothing placed here");
  return el("div", { class: "cluster" + (c.status.healthy ? "" : " unhealthy"), "data-cluster": c.name, "data-health": state },
    el("div", { class: "head" }, el("span", { class: "name" }, c.name),
      el("span", { class: "badge" + (c.status.healthy ? "" : " bad") }, state)),
    el("div", { class: "facts" },
      `${nodes.filter((n) => n.ready).length}/${nodes.length} nodes ready · ${age}`),
    el("div", { class: "facts" },
      (free ? `free ${free.cpu.toFixed(2)} CPU, ${(free.memory / 2 ** 30).toFixed(1)} GiB · ` : "free - · ") +
      `energy ${fmtNum(mean(nodes.map((n) => n.energy_kwh)), 4)} kWh · ` +
      `price ${fmtNum(mean(nodes.map((n) => n.price_eur_h)), 4)} EUR/h`),
    c.status.error ? el("div", { class: "facts error" }, c.status.error) : null,
    list);
}

function drawPlacements(data, ready) {
  const rows = [];
  for (const p of [...data.placements].sort((a, b) => a.application.localeCompare(b.application))) {
    const current = where(data.inventory, p.application);
    for (const service of Object.keys(current).sort()) {
      const entries = current[service];
      const desired = p.desired && p.desired[service];
      const moving = p.current && desired && JSON.stringify(desired.map((e) => e.cluster)) !==
        JSON.stringify(entries.map((e) => e.cluster));
      const readyCell = entries.map((e) =>
        readyText(ready.get(`${e.cluster}/${p.application}/${service}`), e.replicas ?? 1)).join(", ");
      rows.push(el("tr", { "data-app": p.application, "data-service": service },
        el("td", {}, p.application), el("td", {}, service),
        el("td", { class: moving ? "moved" : "" }, entries.map((e) => `${e.cluster} ×${e.replicas ?? 1}`).join(", "),
          moving ? ` (moving to ${desired.map((e) => e.cluster).join(", ")})` : ""),
        el("td", { class: readyCell.includes(": ") ? "notready" : "" }, readyCell),
        el("td", {}, fenced(p) ? `${p.fencing.term}/${p.fencing.seq}` : "-"),
        el("td", {}, fmtTime(p.updated))));
    }
  }
  if (!rows.length) rows.push(el("tr", {}, el("td", { colSpan: 6, class: "empty" }, "no placements yet")));
  $("placements").tBodies[0].replaceChildren(...rows);
}

function drawTimeline(events) {
  const all = $("all-events").checked;
  const shown = events.filter((e) => all || kind(e) !== "other").reverse();
  const items = shown.map((e) => el("li", { class: kind(e), "data-type": e.type, "data-event": e.id },
    el("span", { class: "when" }, fmtTime(e.ts)),
    el("span", { class: "type" }, e.type),
    el("span", { class: "scope" }, [e.application, e.cluster].filter(Boolean).join(" @ ")),
    el("span", { class: "message" }, e.message || e.reason || "")));
  $("timeline").replaceChildren(...(items.length ? items
    : [el("li", { class: "empty" }, all ? "no events yet" : "no failovers or migrations yet")]));
}

// Survivable or not per application, as the controller's last fleet verdict says (as of then:
// an application deployed since is judged at the next verdict), the first shortfall, and the
// least spare capacity per tier over every failure scenario.
function drawSurvival(data) {
  const v = data.verdict;
  const rows = [];
  if (!v) {
    $("survival-summary").textContent =
      "no verdict recorded yet (the controller's leader records one after its first survivability check)";
    $("survival-spare").textContent = "";
    $("survivability").dataset.survivable = "unknown";
  } else {
    const d = v.data || {};
    const bad = d.not_survivable || {};
    const first = d.first_shortfall;
    $("survivability").dataset.survivable = d.survivable ? "yes" : "no";
    $("survival-summary").textContent = (d.survivable
      ? `survivable: every application outlives the failures it states`
      : `NOT survivable: ${d.not_survivable_count ?? Object.keys(bad).length} application(s) would not be re-placed`) +
      (first ? ` · first shortfall: ${first.scenario}: ${first.application}: ${first.text}` : "") +
      ` · as of ${fmtTime(v.ts)}`;
    const apps = [...new Set([...data.placements.map((p) => p.application), ...Object.keys(bad)])].sort();
    for (const app of apps) {
      const ok = !(app in bad);
      rows.push(el("tr", { "data-app": app, "data-survivable": ok ? "yes" : "no" },
        el("td", {}, app), el("td", { class: ok ? "" : "notready" }, ok ? "yes" : "no"),
        el("td", {}, ok ? "-" : bad[app] || "-")));
    }
    const hidden = (d.not_survivable_count || 0) - Object.keys(bad).length;
    if (hidden > 0) {
      rows.push(el("tr", {}, el("td", { colSpan: 3, class: "empty" },
        `and ${hidden} more not survivable (qonnect status --controller URL lists them all)`)));
    }
    $("survival-spare").textContent = Object.entries(d.spare || {}).sort()
      .map(([tier, free]) => `least spare in ${tier}: ${free.cpu_text || "-"}, ${free.memory_text || "-"}`).join(" · ");
  }
  if (!rows.length) rows.push(el("tr", {}, el("td", { colSpan: 3, class: "empty" }, "no verdict yet")));
  $("survival").tBodies[0].replaceChildren(...rows);
}

function draw(data) {
  const ready = readyCounts(data.workloads);
  const running = runningByCluster(data.placements, data.inventory, ready);
  drawTiers(data, running);
  drawPlacements(data, ready);
  drawTimeline(data.events);
  drawSurvival(data);
  const up = data.clusters.filter((c) => c.status.healthy).length;
  const term = fencingTerm(data.placements, data.events);
  $("summary").textContent = [
    `${data.clusters.length} clusters, ${up} healthy`,
    `${data.placements.length} application${data.placements.length === 1 ? "" : "s"} placed`,
    `controller fencing term ${term ?? "-"} (leader: see qonnect controller status)`,
    `updated ${data.at.toLocaleTimeString([], { hour12: false })}`,
  ].join(" · ");
}

// -- placement history (issue 34.5): one application's changes, newest first -------------------

async function loadHistory(apps) {
  const select = $("history-app");
  const chosen = apps.includes(select.value) ? select.value : apps[0];
  select.replaceChildren(...apps.map((a) => el("option", { value: a }, a)));
  if (!chosen) { drawHistory([]); return; }
  select.value = chosen;
  drawHistory((await get(`/applications/${encodeURIComponent(chosen)}/history?limit=20`)).history);
}

function drawHistory(rows) {
  const items = rows.map((r) => el("tr", { "data-history": r.id, "data-outcome": r.outcome },
    el("td", {}, fmtTime(r.ended)), el("td", {}, r.version ?? "-"), el("td", {}, r.service),
    el("td", {}, `${r.from.join(", ") || "-"} → ${r.to.join(", ") || "-"}`), el("td", {}, r.trigger),
    el("td", {}, r.by === "admin" ? "user" : r.by || "-"), el("td", {}, r.decision || "-"),
    el("td", { class: r.outcome === "succeeded" ? "" : "notready", title: r.detail || "" },
      r.outcome, r.outcome === "succeeded" || !r.detail ? "" : `: ${r.detail}`),
    el("td", {}, `${Number(r.duration).toFixed(1)} s`)));
  $("history").tBodies[0].replaceChildren(...(items.length ? items
    : [el("tr", {}, el("td", { colSpan: 9, class: "empty" }, "no placement changes recorded"))]));
}

function historyApps(data) {
  return [...new Set(data.placements.map((p) => p.application))].sort();
}

// -- control ---------------------------------------------------------------------------------

function showLogin(message) {
  clearTimeout(timer);
  sessionStorage.removeItem(KEY);
  $("content").hidden = true;
  $("forget").hidden = true;
  $("banner").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("summary").textContent = "not connected";
  latest = null;
  survival.cursor = null;
  survival.verdict = null;
  $("token").focus();
}

async function refresh() {
  try {
    latest = await load();
    $("banner").hidden = true;
    $("login").hidden = true;
    $("content").hidden = false;
    $("forget").hidden = false;
    draw(latest);
    await loadHistory(historyApps(latest));
  } catch (err) {
    if (err instanceof AuthError) { showLogin(err.message); return; }
    $("banner").textContent = `cannot read the KB: ${err.message}` +
      (latest ? ` (showing data from ${latest.at.toLocaleTimeString([], { hour12: false })})` : "");
    $("banner").hidden = false;
  }
  timer = setTimeout(refresh, REFRESH_MS);
}

function start() {
  clearTimeout(timer);
  if (sessionStorage.getItem(KEY)) refresh();
  else showLogin("");
}

document.addEventListener("DOMContentLoaded", () => {
  $("login").addEventListener("submit", (ev) => {
    ev.preventDefault();
    sessionStorage.setItem(KEY, $("token").value.trim());
    $("token").value = "";
    start();
  });
  $("forget").addEventListener("click", () => showLogin("token forgotten"));
  $("all-events").addEventListener("change", () => { if (latest) drawTimeline(latest.events); });
  $("history-app").addEventListener("change", () => {
    if (latest) loadHistory(historyApps(latest)).catch(() => {});
  });
  window.addEventListener("hashchange", () => { tokenFromFragment(); start(); });
  tokenFromFragment();
  start();
});
