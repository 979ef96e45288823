/**
 * What a heap snapshot holds, by kind: `node bench/heap-summary.ts <file.heapsnapshot> [top]`.
 * Self sizes summed by node type and constructor name (strings by type, code by type), the
 * biggest first; with `BENCH_HEAP_SNAPSHOT_DIR` set, `npm run bench` writes one per server at the
 * end of the run.
 */
import { readFileSync } from "node:fs"

interface Snapshot {
  readonly snapshot: { readonly meta: { readonly node_fields: ReadonlyArray<string>; readonly node_types: ReadonlyArray<ReadonlyArray<string> | string> } }
  readonly nodes: ReadonlyArray<number>
  readonly strings: ReadonlyArray<string>
}

const [file, topText] = process.argv.slice(2)
if (file === undefined) {
  process.stderr.write("usage: node bench/heap-summary.ts <file.heapsnapshot> [top]\n")
  process.exit(2)
}
const snap = JSON.parse(readFileSync(file, "utf8")) as Snapshot
const fields = snap.snapshot.meta.node_fields
const types = snap.snapshot.meta.node_types[0] as ReadonlyArray<string>
const width = fields.length
const typeAt = fields.indexOf("type")
const nameAt = fields.indexOf("name")
const sizeAt = fields.indexOf("self_size")
const byKind = new Map<string, { bytes: number; count: number }>()
let total = 0
for (let i = 0; i < snap.nodes.length; i += width) {
  const type = types[snap.nodes[i + typeAt]!]!
  const size = snap.nodes[i + sizeAt]!
  const name = snap.strings[snap.nodes[i + nameAt]!]!
  const kind = type === "object" || type === "closure" || type === "native" ? `${type} ${name.slice(0, 60)}` : type
  const entry = byKind.get(kind) ?? { bytes: 0, count: 0 }
  entry.bytes += size
  entry.count++
  byKind.set(kind, entry)
  total += size
}
const top = Number(topText ?? 25)
process.stdout.write(`${file}: ${(total / 1e6).toFixed(1)} MB in ${snap.nodes.length / width} objects\n`)
for (const [kind, { bytes, count }] of [...byKind].sort((a, b) => b[1].bytes - a[1].bytes).slice(0, top)) {
  process.stdout.write(`${(bytes / 1e6).toFixed(2).padStart(8)} MB ${String(count).padStart(9)}  ${kind}\n`)
}
