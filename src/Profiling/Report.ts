/**
 * Renders a V8 CPU profile (`Profiler.stop` of the inspector) as one self-contained HTML page
 * (docs/operations.md#profiling): the hottest functions by self and by total time with file:line, and a flame graph
 * as inline SVG with a little inline script to zoom. No external assets: it opens offline.
 */

export interface CallFrame {
  readonly functionName: string
  readonly url: string
  readonly lineNumber: number
  readonly columnNumber: number
}

export interface ProfileNode {
  readonly id: number
  readonly callFrame: CallFrame
  readonly hitCount?: number
  readonly children?: ReadonlyArray<number>
}

export interface CpuProfile {
  readonly nodes: ReadonlyArray<ProfileNode>
  readonly startTime: number
  readonly endTime: number
  readonly samples?: ReadonlyArray<number>
  readonly timeDeltas?: ReadonlyArray<number>
}

export interface HotFunction {
  readonly name: string
  /** `file:line` (1-based line), or the V8 pseudo-frame's name. */
  readonly location: string
  readonly selfMs: number
  readonly totalMs: number
  readonly selfPercent: number
  readonly totalPercent: number
}

/** Frames that are not code: shown in the summary, left out of the ranking. */
const META_FRAMES: ReadonlySet<string> = new Set(["(root)", "(idle)", "(program)", "(garbage collector)"])

const displayName = (frame: CallFrame) => frame.functionName === "" ? "(anonymous)" : frame.functionName

const locationOf = (frame: CallFrame) => {
  if (frame.url === "") return frame.functionName.startsWith("(") ? "" : "(native)"
  const file = frame.url.replace(/^file:\/\//, "")
  return frame.lineNumber >= 0 ? `${file}:${frame.lineNumber + 1}` : file
}

const keyOf = (frame: CallFrame) => `${displayName(frame)}\u0000${locationOf(frame)}`

interface Analysis {
  readonly durationMs: number
  readonly sampleCount: number
  readonly msPerSample: number
  readonly hot: ReadonlyArray<HotFunction>
  readonly meta: ReadonlyArray<{ readonly name: string; readonly ms: number }>
  readonly root: FlameNode
}

export interface FlameNode {
  readonly name: string
  readonly location: string
  /** Samples in this subtree (mutable while sibling subtrees are merged). */
  value: number
  self: number
  readonly children: Array<FlameNode>
}

/** Self and total time per function (recursion counted once), and the merged call tree. */
export const analyse = (profile: CpuProfile): Analysis => {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]))
  const childIds = new Set(profile.nodes.flatMap((n) => n.children ?? []))
  const rootNode = profile.nodes.find((n) => !childIds.has(n.id)) ?? profile.nodes[0]
  const sampleCount = profile.samples?.length ?? profile.nodes.reduce((s, n) => s + (n.hitCount ?? 0), 0)
  const durationMs = Math.max(0, (profile.endTime - profile.startTime) / 1000)
  const msPerSample = sampleCount > 0 ? durationMs / sampleCount : 0

  const self = new Map<string, number>()
  const total = new Map<string, number>()
  const frames = new Map<string, CallFrame>()

  // Builds the flame tree (children merged by function) and returns the subtree's sample count.
  const visit = (node: ProfileNode, stack: Map<string, number>): FlameNode => {
    const key = keyOf(node.callFrame)
    frames.set(key, node.callFrame)
    const hits = node.hitCount ?? 0
    self.set(key, (self.get(key) ?? 0) + hits)
    stack.set(key, (stack.get(key) ?? 0) + 1)
    const merged = new Map<string, FlameNode>()
    let value = hits
    for (const id of node.children ?? []) {
      const child = byId.get(id)
      if (child === undefined) continue
      const sub = visit(child, stack)
      value += sub.value
      const existing = merged.get(sub.name + "\u0000" + sub.location)
      if (existing === undefined) merged.set(sub.name + "\u0000" + sub.location, sub)
      else mergeInto(existing, sub)
    }
    stack.set(key, stack.get(key)! - 1)
    // Total time counts a function once per sample, even when it recurses.
    if (stack.get(key) === 0) total.set(key, (total.get(key) ?? 0) + value)
    return {
      name: displayName(node.callFrame),
      location: locationOf(node.callFrame),
      value,
      self: hits,
      children: [...merged.values()].sort((a, b) => b.value - a.value)
    }
  }
  const root = rootNode === undefined
    ? { name: "(root)", location: "", value: 0, self: 0, children: [] }
    : visit(rootNode, new Map())

  const percent = (samples: number) => sampleCount > 0 ? (100 * samples) / sampleCount : 0
  const all = [...frames.entries()].map(([key, frame]) => ({
    key,
    name: displayName(frame),
    location: locationOf(frame),
    self: self.get(key) ?? 0,
    total: total.get(key) ?? 0
  }))
  const hot = all
    .filter((f) => !META_FRAMES.has(f.name))
    .sort((a, b) => b.self - a.self || b.total - a.total)
    .map((f): HotFunction => ({
      name: f.name,
      location: f.location,
      selfMs: f.self * msPerSample,
      totalMs: f.total * msPerSample,
      selfPercent: percent(f.self),
      totalPercent: percent(f.total)
    }))
  const meta = all.filter((f) => META_FRAMES.has(f.name) && f.name !== "(root)").map((f) => ({ name: f.name, ms: f.self * msPerSample }))
  return { durationMs, sampleCount, msPerSample, hot, meta, root }
}

const mergeInto = (target: FlameNode, source: FlameNode) => {
  target.value += source.value
  target.self += source.self
  for (const child of source.children) {
    const same = target.children.find((c) => c.name === child.name && c.location === child.location)
    if (same === undefined) target.children.push(child)
    else mergeInto(same, child)
  }
  target.children.sort((a, b) => b.value - a.value)
}

const escapeHtml = (text: string) =>
  text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;")

const WIDTH = 1200
const ROW = 18
const MIN_WIDTH = 1

/** Warm colours by name, stable across reports (the classic flame graph palette). */
const colourOf = (name: string) => {
  let h = 0
  for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0
  return `hsl(${10 + (h % 40)}, ${70 + (h % 20)}%, ${55 + (h % 15)}%)`
}

/** The flame graph as SVG: root at the bottom, width proportional to samples. */
const flameGraph = (root: FlameNode, msPerSample: number) => {
  let depthMax = 0
  const rects: Array<string> = []
  const walk = (node: FlameNode, x: number, depth: number, scale: number) => {
    const width = node.value * scale
    if (width < MIN_WIDTH) return
    depthMax = Math.max(depthMax, depth)
    const label = `${node.name}${node.location === "" ? "" : ` (${node.location})`} — ${(node.value * msPerSample).toFixed(1)} ms`
    rects.push(
      `<g class="f" data-x="${x.toFixed(2)}" data-w="${width.toFixed(2)}" data-d="${depth}"><title>${escapeHtml(label)}</title>` +
        `<rect x="${x.toFixed(2)}" y="{Y${depth}}" width="${width.toFixed(2)}" height="${ROW - 1}" fill="${colourOf(node.name)}"/>` +
        `<text x="${(x + 3).toFixed(2)}" y="{T${depth}}">${width > 40 ? escapeHtml(node.name.slice(0, Math.floor(width / 7))) : ""}</text></g>`
    )
    let cx = x
    for (const child of node.children) {
      walk(child, cx, depth + 1, scale)
      cx += child.value * scale
    }
  }
  if (root.value > 0) walk(root, 0, 0, WIDTH / root.value)
  const height = (depthMax + 1) * ROW
  const body = rects.join("\n").replace(/\{Y(\d+)\}/g, (_, d: string) => String(height - (Number(d) + 1) * ROW))
    .replace(/\{T(\d+)\}/g, (_, d: string) => String(height - (Number(d) + 1) * ROW + 12))
  return `<svg id="flame" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 ${WIDTH} ${height}" width="100%" preserveAspectRatio="none" style="height:${height}px">${body}</svg>`
}

const fmt = (ms: number) => ms >= 100 ? ms.toFixed(0) : ms.toFixed(1)

export interface ReportMeta {
  readonly title: string
  readonly startedAt: Date
  readonly command: string
}

export const renderReport = (profile: CpuProfile, meta: ReportMeta): string => {
  const a = analyse(profile)
  const rows = (list: ReadonlyArray<HotFunction>) =>
    list.slice(0, 30).map((f, i) =>
      `<tr><td class="n">${i + 1}</td><td class="fn">${escapeHtml(f.name)}</td><td class="loc">${escapeHtml(f.location)}</td>` +
      `<td class="n">${fmt(f.selfMs)}</td><td class="n">${f.selfPercent.toFixed(1)}%</td>` +
      `<td class="n">${fmt(f.totalMs)}</td><td class="n">${f.totalPercent.toFixed(1)}%</td></tr>`
    ).join("\n")
  const byTotal = [...a.hot].sort((x, y) => y.totalMs - x.totalMs)
  const metaLine = a.meta.map((m) => `${escapeHtml(m.name)} ${fmt(m.ms)} ms`).join(" · ")
  const header = `<tr><th>#</th><th>Function</th><th>Location</th><th>Self ms</th><th>Self %</th><th>Total ms</th><th>Total %</th></tr>`
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(meta.title)}</title>
<style>
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px}
.sub{color:#666;margin:0 0 16px}
table{border-collapse:collapse;width:100%;background:#fff;font-size:13px}
th,td{border-bottom:1px solid #e4e4e4;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0;position:sticky;top:0}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.fn{font-family:ui-monospace,Menlo,Consolas,monospace;font-weight:600}
td.loc{font-family:ui-monospace,Menlo,Consolas,monospace;color:#555;word-break:break-all}
#flamebox{background:#fff;border:1px solid #ddd;padding:4px;overflow:hidden}
#flame g.f{cursor:pointer}#flame text{font:11px ui-monospace,Menlo,monospace;fill:#111;pointer-events:none}
#flame rect{stroke:#fff;stroke-width:.5}
#detail{font-family:ui-monospace,Menlo,monospace;min-height:1.4em;color:#333;margin:6px 0}
button{font:inherit;margin-left:8px}
</style>
</head>
<body>
<h1>CPU profile</h1>
<p class="sub">${escapeHtml(meta.startedAt.toISOString())} · ${fmt(a.durationMs)} ms · ${a.sampleCount} samples · ${escapeHtml(meta.command)}${metaLine === "" ? "" : ` · ${metaLine}`}</p>
<h2>Hot functions by self time</h2>
<table id="by-self"><thead>${header}</thead><tbody>
${rows(a.hot.filter((f) => f.selfMs > 0))}
</tbody></table>
<h2>Flame graph <button id="reset" type="button">Reset zoom</button></h2>
<div id="detail">Click a frame to zoom; hover for details.</div>
<div id="flamebox">${flameGraph(a.root, a.msPerSample)}</div>
<h2>Hot functions by total time</h2>
<table id="by-total"><thead>${header}</thead><tbody>
${rows(byTotal)}
</tbody></table>
<script>
(function(){
  var svg=document.getElementById("flame"),detail=document.getElementById("detail"),W=${WIDTH};
  if(!svg)return;
  var gs=[].slice.call(svg.querySelectorAll("g.f"));
  function zoom(x,w,d){gs.forEach(function(g){
    var gx=+g.dataset.x,gw=+g.dataset.w,gd=+g.dataset.d,r=g.querySelector("rect"),t=g.querySelector("text");
    var inside=gd<d?(gx<=x&&gx+gw>=x+w):(gx>=x-1e-6&&gx+gw<=x+w+1e-6);
    if(!inside){g.style.display="none";return}
    g.style.display="";var nx=gd<d?0:(gx-x)*W/w,nw=gd<d?W:gw*W/w;
    r.setAttribute("x",nx);r.setAttribute("width",nw);t.setAttribute("x",nx+3);
    var name=g.querySelector("title").textContent.split(" (")[0].split(" — ")[0];
    t.textContent=nw>40?name.slice(0,Math.floor(nw/7)):"";
  })}
  gs.forEach(function(g){
    g.addEventListener("click",function(){zoom(+g.dataset.x,+g.dataset.w,+g.dataset.d)});
    g.addEventListener("mouseenter",function(){detail.textContent=g.querySelector("title").textContent});
  });
  document.getElementById("reset").addEventListener("click",function(){zoom(0,W,0)});
})();
</script>
</body>
</html>
`
}
