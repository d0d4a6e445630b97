// api.js — the only module that talks to the server (docs/api.md, JSON API v1).
// Contract: every function returns parsed JSON or throws ApiError {status, message}
// (message = the server's "error" text). Requests given an AbortSignal throw an
// AbortError when cancelled; callers ignore those. `inflight` counts open requests
// (test hook: the page is idle when it is 0).

export class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

export const counters = { inflight: 0, total: 0 };

const enc = encodeURIComponent;

async function call(path, { method = "GET", body, signal } = {}) {
  counters.inflight += 1;
  counters.total += 1;
  try {
    let res;
    try {
      res = await fetch(path, {
        method,
        signal,
        headers: body !== undefined ? { "Content-Type": "application/json" } : {},
        body: body !== undefined ? JSON.stringify(body) : undefined,
      });
    } catch (e) {
      if (e.name === "AbortError") throw e;
      throw new ApiError(0, `cannot reach the nprof server (${e.message}); is \`nprof view\` still running?`, path);
    }
    let data = null;
    const text = await res.text();
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = null;
    }
    if (!res.ok) {
      const msg = data && typeof data.error === "string" ? data.error : `${res.status} ${res.statusText}`;
      throw new ApiError(res.status, msg, path);
    }
    if (data === null) throw new ApiError(res.status, `the server sent no JSON for ${path}`, path);
    return data;
  } finally {
    counters.inflight -= 1;
  }
}

function qs(params) {
  const parts = [];
  for (const [k, v] of Object.entries(params)) {
    if (v === undefined || v === null || v === "") continue;
    parts.push(`${enc(k)}=${enc(v)}`);
  }
  return parts.length ? `?${parts.join("&")}` : "";
}

const P = (id) => `/api/profiles/${enc(id)}`;

export const api = {
  profiles: () => call("/api/profiles"),
  profile: (id) => call(P(id)),
  rename: (id, name) => call(P(id), { method: "PATCH", body: { display_name: name } }),
  remove: (id) => call(P(id), { method: "DELETE" }),
  links: (id) => call(`${P(id)}/links`),
  summary: (id) => call(`${P(id)}/summary`),
  table: (id, name, offset = 0, limit = 1000) => call(`${P(id)}/tables/${enc(name)}${qs({ offset, limit })}`),
  rows: (id) => call(`${P(id)}/rows`),
  viewport: (id, params, signal) => call(`${P(id)}/viewport${qs(params)}`, { signal }),
  operators: (id) => call(`${P(id)}/operators`),
  tensors: (id) => call(`${P(id)}/tensors`),
  memory: (id) => call(`${P(id)}/memory`),
  source: (id) => call(`${P(id)}/source`),
  roofline: (id) => call(`${P(id)}/roofline`),
  boxes: (id, params, signal) => call(`${P(id)}/boxes${qs(params)}`, { signal }),
  event: (id, eventId, signal) => call(`${P(id)}/events/${enc(eventId)}`, { signal }),
  /** fields: [[field, value], ...] (ANDed). */
  search: (id, fields, extra, signal) => {
    const parts = fields.map(([k, v]) => `${enc(k)}=${enc(v)}`);
    const rest = qs(extra).slice(1);
    if (rest) parts.push(rest);
    return call(`${P(id)}/search?${parts.join("&")}`, { signal });
  },
  select: (id, params, signal) => call(`${P(id)}/select${qs(params)}`, { signal }),
  markers: (id) => call(`${P(id)}/markers`),
  addMarker: (id, ts, label) => call(`${P(id)}/markers`, { method: "POST", body: label ? { ts, label } : { ts } }),
  patchMarker: (id, mid, body) => call(`${P(id)}/markers/${enc(mid)}`, { method: "PATCH", body }),
  deleteMarker: (id, mid) => call(`${P(id)}/markers/${enc(mid)}`, { method: "DELETE" }),
  clearMarkers: (id) => call(`${P(id)}/markers`, { method: "DELETE" }),
  markerSets: (id) => call(`${P(id)}/marker-sets`),
  saveMarkerSet: (id, name) => call(`${P(id)}/marker-sets/${enc(name)}`, { method: "PUT" }),
  loadMarkerSet: (id, name) => call(`${P(id)}/marker-sets/${enc(name)}/load`, { method: "POST" }),
  deleteMarkerSet: (id, name) => call(`${P(id)}/marker-sets/${enc(name)}`, { method: "DELETE" }),
  formats: () => call("/api/formats"),
  downloadUrl: (id, format) => `${P(id)}/download${qs({ format })}`,
  group: (gid) => call(`/api/groups/${enc(gid)}`),
  groupCollectives: (gid, bins = 16) => call(`/api/groups/${enc(gid)}/collectives${qs({ bins })}`),
  ensureRank: (gid, rank) => call(`/api/groups/${enc(gid)}/ranks/${enc(rank)}`, { method: "POST" }),
};
