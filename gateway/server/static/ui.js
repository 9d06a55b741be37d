// The repair inspector: a few views over /ui/api, rendered with DOM nodes only (every value
// is set as text, never as HTML, so message content cannot inject markup).
"use strict";

const app = document.getElementById("app");

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin" });
  const body = await response.json();
  if (!response.ok) throw new Error((body.error && body.error.message) || response.statusText);
  return body;
}

function when(ts) {
  return new Date(ts * 1000).toLocaleTimeString();
}

function statusCell(status) {
  return el("span", { class: "status-" + String(status)[0] }, status);
}

function repairBadges(repairs) {
  const kinds = Object.entries(repairs || {});
  if (!kinds.length) return el("span", { class: "muted" }, "—");
  return kinds.map(([kind, n]) => el("span", { class: "badge", "data-kind": kind }, `${kind}×${n}`));
}

function requestLink(id) {
  return el("a", { href: `#/request/${encodeURIComponent(id)}`, class: "request-link" }, id);
}

function sessionLink(id) {
  return id ? el("a", { href: `#/session/${encodeURIComponent(id)}` }, id) : el("span", { class: "muted" }, "—");
}

function requestTable(rows) {
  return el("table", { id: "requests" },
    el("thead", {}, el("tr", {}, ["time", "request", "owner", "model", "status", "ms", "added ms",
      "attempts", "repairs", "recovery", "compaction", "session"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", { "data-request-id": r.request_id },
      el("td", {}, when(r.time)),
      el("td", {}, requestLink(r.request_id)),
      el("td", { class: "owner" }, r.owner_name || "—"),
      el("td", {}, r.model || "—"),
      el("td", {}, statusCell(r.status)),
      el("td", { class: "num" }, r.ms.toFixed(1)),
      el("td", { class: "num" }, r.added_ms.toFixed(2)),
      el("td", { class: "num" }, r.attempts),
      el("td", {}, repairBadges(r.repairs),
        Object.keys(r.would_repair || {}).length ? [" would: ", repairBadges(r.would_repair)] : null,
        r.rejected ? el("span", { class: "badge" }, "rejected") : null,
        r.invisible ? el("span", { class: "badge" }, `invisible×${r.invisible}`) : null,
        r.condensed_outputs ? el("span", { class: "badge condensed" },
          `${r.condensed_action === "report" ? "would condense" : "condensed"}×`
          + `${r.condensed_outputs} (−${r.condensed_saved_chars} chars)`) : null),
      el("td", {}, r.recovery || "—"),
      el("td", {}, r.compaction || "—"),
      el("td", {}, sessionLink(r.session_id))))));
}

const KINDS = ["orphan_tool_result_dropped", "tool_result_reordered", "tool_result_synthesized",
  "duplicate_tool_result_dropped", "empty_content_dropped", "user_messages_merged",
  "tool_result_rendered", "duplicate_tool_call_deduped", "assistant_messages_merged",
  "leading_non_user_dropped", "user_placeholder_inserted", "invisible_chars_stripped"];

async function listView(params) {
  const query = new URLSearchParams(params);
  const data = await api(`/ui/api/requests?${query}`);
  const select = (name, options) => el("label", {}, name,
    el("select", { name, onchange: (e) => {
      const next = new URLSearchParams(params);
      if (e.target.value) next.set(name, e.target.value); else next.delete(name);
      location.hash = `#/?${next}`;
    } }, el("option", { value: "" }, "all"),
    options.map((o) => el("option", params.get(name) === o ? { value: o, selected: "" } : { value: o }, o))));
  app.replaceChildren(
    el("h1", {}, "Recent requests"),
    el("div", { class: "filters" },
      select("model", data.models),
      select("status", ["2xx", "4xx", "5xx", "200", "400", "429", "500", "502", "503"]),
      select("kind", KINDS),
      select("owner", data.owners || []),
      el("button", { onclick: () => route() }, "Refresh"),
      data.capture_bodies ? null : el("span", { class: "muted" },
        "body capture is off (gateway.capture_bodies): diffs are not recorded")),
    data.requests.length ? requestTable(data.requests)
      : el("p", { class: "muted" }, "No requests match."));
}

function fact(label, value) {
  return el("div", { class: "fact" }, el("b", {}, label), value === "" || value === null || value === undefined ? "—" : value);
}

function contentText(content) {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((part) => part.type === "text" ? part.text
      : part.type === "image_url" ? `[image ${String((part.image_url || {}).url || "").slice(0, 40)}…]`
        : JSON.stringify(part)).join("\n");
  }
  return JSON.stringify(content);
}

function messageNode(message, tag) {
  if (!message) return null;
  const extra = [];
  if (message.tool_call_id) extra.push(`tool_call_id: ${message.tool_call_id}`);
  for (const call of message.tool_calls || []) {
    const fn = call.function || {};
    extra.push(`→ ${fn.name}(${fn.arguments || ""})  [${call.id}]`);
  }
  return el("div", { class: "msg" },
    el("span", { class: "role" }, message.role),
    tag ? el("span", { class: "tag badge" }, tag) : null,
    el("pre", {}, [contentText(message.content), ...extra].filter(Boolean).join("\n")));
}

// Align two message lists: equal messages pair up (longest common subsequence), the rest
// show as removed (only in what the client sent) or added (only in what the provider got).
function align(left, right) {
  const key = (m) => JSON.stringify(m);
  const a = left.map(key), b = right.map(key);
  const n = a.length, m = b.length;
  const lcs = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i][j] = a[i] === b[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  const rows = [];
  let i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { rows.push(["same", left[i++], right[j++]]); }
    else if (j < m && (i >= n || lcs[i][j + 1] >= lcs[i + 1][j])) { rows.push(["added", null, right[j++]]); }
    else { rows.push(["removed", left[i++], null]); }
  }
  return rows;
}

function diffView(sent, received) {
  const cells = [el("div", { class: "head" }, `As the client sent it (${sent.length} messages)`),
    el("div", { class: "head" }, `As the provider received it (${received.length} messages)`)];
  for (const [kind, l, r] of align(sent, received)) {
    cells.push(el("div", { class: `cell ${l ? kind : "empty"}`, "data-side": "client" },
      messageNode(l, kind === "removed" ? "removed" : null)));
    cells.push(el("div", { class: `cell ${r ? kind : "empty"}`, "data-side": "provider" },
      messageNode(r, kind === "added" ? "added by the gateway" : null)));
  }
  return el("div", { class: "diff", id: "diff" }, cells);
}

async function requestView(id) {
  const r = await api(`/ui/api/requests/${encodeURIComponent(id)}`);
  const parts = [
    el("p", {}, el("a", { href: "#/" }, "← all requests")),
    el("h1", {}, "Request ", el("code", {}, r.request_id)),
    el("div", { class: "facts" },
      fact("status", statusCell(r.status)), fact("model", r.model),
      fact("deployment", r.deployment), fact("wire", r.wire + (r.stream ? " (stream)" : "")),
      fact("total ms", r.ms.toFixed(1)), fact("gateway added ms", r.added_ms.toFixed(2)),
      fact("upstream ms", r.upstream_ms.toFixed(1)),
      fact("time to first byte ms", r.ttfb_ms === null ? "" : r.ttfb_ms.toFixed(1)),
      fact("tokens in / out", `${r.input_tokens ?? "—"} / ${r.output_tokens ?? "—"}`),
      fact("client key id", r.client_key_id), fact("owner", r.owner_name),
      fact("session", sessionLink(r.session_id)),
      fact("response model", r.response_model)),
  ];
  if (r.error) parts.push(el("p", { class: "note" }, r.error));
  parts.push(el("h2", {}, "Anomalies repaired", r.strict ? " (strict projection)" : ""));
  parts.push(r.anomalies.length ? el("table", { id: "anomalies" },
    el("thead", {}, el("tr", {}, ["kind", "message", "tool call", "trailing"].map((h) => el("th", {}, h)))),
    el("tbody", {}, r.anomalies.map((a) => el("tr", {},
      el("td", {}, el("span", { class: "badge" }, a.kind)),
      el("td", {}, a.index === null ? "new" : `#${a.index}`),
      el("td", {}, a.tool_call_id || "—"), el("td", {}, a.trailing ? "yes" : "no")))))
    : el("p", { class: "muted" }, "None: the request was valid as sent."));
  if (r.policy && r.policy !== "repair") parts.push(el("p", {}, `Repair policy: ${r.policy}`));
  if ((r.would_repair_anomalies || []).length) {
    parts.push(el("h2", {}, "Would have been repaired (report policy: sent as written)"));
    parts.push(el("table", { id: "would-repair" },
      el("thead", {}, el("tr", {}, ["kind", "message", "tool call"].map((h) => el("th", {}, h)))),
      el("tbody", {}, r.would_repair_anomalies.map((a) => el("tr", {},
        el("td", {}, el("span", { class: "badge" }, a.kind)),
        el("td", {}, a.index === null ? "—" : `#${a.index}`), el("td", {}, a.tool_call_id || "—"))))));
  }
  if ((r.violations || []).length) {
    parts.push(el("h2", {}, "Rejected: violations"));
    parts.push(el("pre", { id: "violations" }, r.violations.map((v) => JSON.stringify(v)).join("\n")));
  }
  if (r.invisible_detail) {
    const inv = r.invisible_detail;
    parts.push(el("h2", {}, `Invisible characters: ${inv.total} (${inv.action})`));
    parts.push(el("table", { id: "invisible" },
      el("thead", {}, el("tr", {}, ["where", "offset", "kind", "count", "code points", "hidden text"].map((h) => el("th", {}, h)))),
      el("tbody", {}, inv.findings.map((f) => el("tr", {},
        el("td", {}, f.path), el("td", { class: "num" }, f.offset), el("td", {}, f.kind),
        el("td", { class: "num" }, f.count), el("td", {}, f.code_points.join(" ")),
        el("td", { class: "hidden-text" }, f.hidden_text || "—"))))));
  }
  parts.push(el("h2", {}, "Ladder attempts"));
  parts.push(el("table", { id: "attempts" },
    el("thead", {}, el("tr", {}, ["#", "step", "deployment", "status", "verdict", "started at ms", "took ms"].map((h) => el("th", {}, h)))),
    el("tbody", {}, r.attempts_detail.map((a) => el("tr", {},
      el("td", {}, a.number), el("td", {}, a.step), el("td", {}, a.deployment),
      el("td", {}, a.status === null ? "—" : statusCell(a.status)), el("td", {}, a.verdict),
      el("td", { class: "num" }, a.started_ms.toFixed(1)), el("td", { class: "num" }, a.ms.toFixed(1)))))));
  if (r.context) {
    const c = r.context;
    parts.push(el("h2", {}, `Context window: ${c.level || "—"}` + (c.used === null ? "" : `, ${(c.used * 100).toFixed(0)}% used`)));
    parts.push(el("table", { id: "context" },
      el("thead", {}, el("tr", {}, ["source", "tokens (estimate)", "share"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ["system", "tools", "history", "tool_results", "summary", "images", "turn"].map((k) => el("tr", {},
        el("td", {}, ["tool_results", "summary", "images"].includes(k) ? `  of which ${k}` : k),
        el("td", { class: "num" }, c[k]),
        el("td", { class: "num" }, c.total ? `${((c[k] / c.total) * 100).toFixed(0)}%` : "—"))))));
  }
  parts.push(el("h2", {}, "Compaction"));
  parts.push(el("p", {}, r.compaction_header || r.compaction_failed || el("span", { class: "muted" }, "none")));
  parts.push(el("h2", {}, "Messages: sent vs. received"));
  if (r.client_messages && r.upstream_messages) parts.push(diffView(r.client_messages, r.upstream_messages));
  else parts.push(el("p", { class: "muted" }, "Not captured: set gateway.capture_bodies: true to record the messages."));
  app.replaceChildren(...parts);
}

async function sessionView(id) {
  const s = await api(`/ui/api/sessions/${encodeURIComponent(id)}`);
  app.replaceChildren(
    el("p", {}, el("a", { href: "#/" }, "← all requests")),
    el("h1", {}, "Session ", el("code", {}, s.session_id)),
    el("h2", {}, "Compactions"),
    s.compactions.length ? el("table", { id: "compactions" },
      el("thead", {}, el("tr", {}, ["time", "request", "how", "detail"].map((h) => el("th", {}, h)))),
      el("tbody", {}, s.compactions.map((c) => el("tr", {},
        el("td", {}, when(c.time)), el("td", {}, requestLink(c.request_id)),
        el("td", {}, c.how), el("td", {}, c.header || c.failed)))))
      : el("p", { class: "muted" }, "No compaction in the recent requests."),
    el("p", {}, el("a", { href: s.archive, id: "archive" }, "Archived messages (JSON)")),
    ...(s.cache ? cacheView(s.cache, s.requests)
      : s.caches.flatMap((c) => cacheView(c, s.requests.filter((r) => r.owner_name === c.owner), c.owner))),
    el("h2", {}, "Requests"),
    requestTable(s.requests));
}

function cacheView(c, requests, owner) {
  // Prefix stability per turn (oldest first), the two versions at the first difference, advice
  // (one section per owner when teams share the session id).
  if (!c || !c.turns) return [];
  const turns = requests.filter((r) => r.prefix).reverse();
  const ratio = c.hit_ratio === null ? "not reported" : `${(c.hit_ratio * 100).toFixed(0)}%`;
  const whose = owner === undefined ? "" : ` (${owner || "no owner"})`;
  return [
    el("h2", {}, `Prompt cache${whose}: hit ratio ${ratio}, ~${c.lost_tokens} tokens out of the cached prefix`),
    el("ul", { class: "cache-advice", id: owner === undefined ? "cache-advice" : null }, c.advice.map((a) => el("li", {}, a))),
    el("table", { class: "prefix", id: owner === undefined ? "prefix" : null },
      el("thead", {}, el("tr", {}, ["request", "prefix", "at message", "field", "tokens out", "hit", "before", "after"].map((h) => el("th", {}, h)))),
      el("tbody", {}, turns.map((r) => el("tr", {},
        el("td", {}, requestLink(r.request_id)), el("td", {}, el("span", { class: "badge" }, r.prefix.cause)),
        el("td", {}, r.prefix.index === null ? "—" : `#${r.prefix.index}`), el("td", {}, r.prefix.field || "—"),
        el("td", { class: "num" }, r.prefix.lost_tokens),
        el("td", { class: "num" }, r.cache_hit_ratio === null ? "—" : `${(r.cache_hit_ratio * 100).toFixed(0)}%`),
        el("td", {}, el("pre", {}, r.prefix.before || "")), el("td", {}, el("pre", {}, r.prefix.after || "")))))),
  ];
}

async function route() {
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  try {
    if (path.startsWith("/request/")) await requestView(decodeURIComponent(path.slice(9)));
    else if (path.startsWith("/session/")) await sessionView(decodeURIComponent(path.slice(9)));
    else await listView(new URLSearchParams(query || ""));
  } catch (err) {
    app.replaceChildren(el("p", { class: "note" }, `Could not load: ${err.message}`));
  }
}

window.addEventListener("hashchange", route);
route();
