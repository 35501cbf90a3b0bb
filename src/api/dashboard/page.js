// The live timeline: frames from /dashboard/events (server-sent events) are folded into
// the bars, marks and snapshot below; every animation frame redraws the timeline from
// them against a "now" that moves with the browser's clock between frames.
"use strict";

const PAST_NS = 2e9;      // how much of the past the timeline shows
const AHEAD_NS = 0.5e9;   // and of the planned future
const LANE_H = 18, ROW_GAP = 8, LABEL_W = 90, MARKS_H = 16, AXIS_H = 16;
const LANES = ["exec", "load"];

const state = {
  bars: new Map(),        // action id -> bar
  marks: [],
  snapshot: null,
  names: new Map(),       // model id -> name, from the snapshots
  devices: new Set(),     // device ids seen
  serverNow: 0,           // the controller's clock at the last frame (ns)
  localAt: 0,             // performance.now() when it came (ms)
  measured: {},           // device id -> measured bars folded in so far
  frames: 0,
  dropped: 0,
  lost: 0,
};

function now() {
  return state.serverNow + (performance.now() - state.localAt) * 1e6;
}

function fold(frame) {
  state.serverNow = frame.now;
  state.localAt = performance.now();
  state.frames += 1;
  state.dropped += frame.dropped;
  state.lost += frame.lost;
  for (const bar of frame.bars) {
    const old = state.bars.get(bar.action);
    // A failure reported after its plan left keeps the planned span.
    if (old && !bar.measured && bar.error) { bar.begin = old.begin; bar.end = old.end; }
    if (bar.measured && !old?.measured) state.measured[bar.device] = (state.measured[bar.device] || 0) + 1;
    state.bars.set(bar.action, bar);
    state.devices.add(bar.device);
  }
  state.marks.push(...frame.marks);
  if (frame.snapshot) {
    state.snapshot = frame.snapshot;
    frame.snapshot.devices.forEach((_, i) => state.devices.add(i));
    for (const m of frame.snapshot.models) state.names.set(m.id, m.name);
    table(frame.snapshot);
  }
  const oldest = frame.now - PAST_NS;
  for (const [id, bar] of state.bars) if (bar.end < oldest) state.bars.delete(id);
  state.marks = state.marks.filter(m => m.at >= oldest);
}

function esc(s) {
  return String(s).replace(/[&<>"']/g, c => "&#" + c.charCodeAt(0) + ";");
}

function markClass(outcome) {
  if (outcome === "late") return "late";
  if (outcome === "execution_failed") return "failed";
  return "refused";
}

function draw() {
  const svg = document.getElementById("lanes");
  const width = svg.clientWidth || 800;
  const devices = [...state.devices].sort((a, b) => a - b);
  const rowH = LANES.length * LANE_H + ROW_GAP;
  const height = AXIS_H + MARKS_H + devices.length * rowH + ROW_GAP;
  svg.setAttribute("height", height);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const t = now(), from = t - PAST_NS, span = PAST_NS + AHEAD_NS;
  const x = ns => LABEL_W + (ns - from) / span * (width - LABEL_W);
  const out = [];
  for (let s = Math.ceil(from / 5e8) * 5e8; s < t + AHEAD_NS; s += 5e8) {
    out.push(`<line class="grid" x1="${x(s)}" x2="${x(s)}" y1="${AXIS_H}" y2="${height}"/>`);
    out.push(`<text class="axis" x="${x(s) + 2}" y="11">${((s - t) / 1e9).toFixed(1)}s</text>`);
  }
  out.push(`<text class="label" x="4" y="${AXIS_H + 11}">answers</text>`);
  for (const m of state.marks) {
    const name = state.names.get(m.model) ?? `#${m.model}`;
    out.push(`<line class="mark ${markClass(m.outcome)}" x1="${x(m.at)}" x2="${x(m.at)}" ` +
      `y1="${AXIS_H + 2}" y2="${AXIS_H + MARKS_H - 2}"><title>${esc(name)}: ${esc(m.outcome)}</title></line>`);
  }
  const top = new Map(devices.map((d, i) => [d, AXIS_H + MARKS_H + i * rowH]));
  devices.forEach(d => {
    const y = top.get(d);
    const dev = state.snapshot?.devices[d];
    const suspect = dev?.suspect ? " (suspect)" : "";
    out.push(`<text class="label" x="4" y="${y + 12}">device ${d}${suspect}</text>`);
    out.push(`<text class="label" x="4" y="${y + LANE_H + 12}">  load</text>`);
  });
  for (const bar of state.bars.values()) {
    const y = top.get(bar.device);
    if (y === undefined || bar.end < from || bar.begin > t + AHEAD_NS) continue;
    const lane = LANES.indexOf(bar.lane);
    const x0 = Math.max(x(bar.begin), LABEL_W), x1 = x(bar.end);
    const status = bar.error ? "failed" : bar.measured ? "measured" : "planned";
    const name = state.names.get(bar.model) ?? `#${bar.model}`;
    const label = `${bar.kind} ${name}${bar.batch ? " x" + bar.batch : ""}` +
      (bar.error ? `: ${bar.error}` : "");
    out.push(`<rect class="bar ${status} lane-${bar.lane}" data-device="${bar.device}" ` +
      `data-lane="${bar.lane}" x="${x0}" y="${y + lane * LANE_H + 2}" ` +
      `width="${Math.max(x1 - x0, 1)}" height="${LANE_H - 4}"><title>${esc(label)}</title></rect>`);
  }
  out.push(`<line class="now" x1="${x(t)}" x2="${x(t)}" y1="${AXIS_H}" y2="${height}"/>`);
  svg.innerHTML = out.join("");
  requestAnimationFrame(draw);
}

function table(snap) {
  const rows = snap.models.map(m =>
    `<tr data-model="${esc(m.name)}"><td>${esc(m.name)}</td>` +
    `<td class="queued">${m.queued}</td><td class="goodput">${m.goodput.toFixed(1)}</td>` +
    `<td class="ok">${m.answers.ok}</td><td class="late">${m.answers.late}</td>` +
    `<td class="refused">${m.answers.refused}</td>` +
    `<td class="estimate">${(m.estimate / 1e6).toFixed(2)}</td></tr>`);
  document.querySelector("#models tbody").innerHTML = rows.join("");
  const hidden = snap.models_total - snap.models.length;
  document.getElementById("others").textContent =
    hidden > 0 ? `${hidden} quieter models not shown` : "";
  document.getElementById("summary").textContent =
    `${snap.devices.length} devices, ${snap.models_total} models, ` +
    `${snap.queued} queued, goodput ${snap.goodput.toFixed(1)}/s`;
}

function connect() {
  const status = document.getElementById("status");
  const source = new EventSource("/dashboard/events");
  source.onopen = () => { status.textContent = "live"; status.className = "status live"; };
  source.onerror = () => { status.textContent = "reconnecting"; status.className = "status lost"; };
  source.onmessage = e => fold(JSON.parse(e.data));
}

window.clockworkDashboard = state;
connect();
requestAnimationFrame(draw);
