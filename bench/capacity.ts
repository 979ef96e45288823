/**
 * `node bench/capacity.ts [bench/results/<file>.json] [--write] [options]`: the capacity model of
 * docs/scaling.md from one bench result file (the newest in bench/results/ when none is named),
 * printed as Markdown. `--write` puts the tables into docs/scaling.md, between its markers, and
 * keeps the figures they came from in bench/capacity-figures.json (the result file itself is not
 * committed); the page shows the default assumptions, so `--write` takes no other option.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join, relative, resolve } from "node:path"
import { type Assumptions, DEFAULTS } from "./lib/capacity.ts"
import { type PgFigure, readFigures, trimResult } from "./lib/capacity-figures.ts"
import { BEGIN, END, renderCapacity } from "./lib/capacity-report.ts"

const ROOT = resolve(import.meta.dirname, "..")
const FIGURES_FILE = "bench/capacity-figures.json"
const PAGE = "docs/scaling.md"

const usage = "usage: node bench/capacity.ts [bench/results/<file>.json] [--write] [--authors N] [--utilisation 0.65] [--instance-cores 1]\n" +
  "                              [--flush-ms 1] [--pg-cores 64] [--pg-figure cluster|own]\n"
const fail = (message: string): never => {
  process.stderr.write(`${message}\n`)
  process.exit(2)
}

const args = process.argv.slice(2)
if (args.includes("--help")) {
  process.stdout.write(usage)
  process.exit(0)
}
const write = args.includes("--write")
const NUMERIC = { "--authors": "authors", "--utilisation": "utilisation", "--instance-cores": "instanceCores", "--flush-ms": "flushMs", "--pg-cores": "pgCores" } as const
const overrides: Partial<Record<(typeof NUMERIC)[keyof typeof NUMERIC], number>> = {}
let pgFigure: PgFigure = "cluster"
let file: string | undefined
for (let i = 0; i < args.length; i++) {
  const arg = args[i]!
  if (arg === "--write") continue
  if (arg === "--pg-figure") {
    const value = args[++i]
    if (value !== "cluster" && value !== "own") fail(`--pg-figure is cluster or own\n${usage}`)
    pgFigure = value as PgFigure
  } else if (arg in NUMERIC) {
    const value = Number(args[++i])
    if (!Number.isFinite(value) || value <= 0) fail(`${arg} takes a positive number\n${usage}`)
    overrides[NUMERIC[arg as keyof typeof NUMERIC]] = value
  } else if (arg.startsWith("--") || file !== undefined) {
    fail(`unknown argument ${arg}\n${usage}`)
  } else {
    file = arg
  }
}
if (overrides.utilisation !== undefined && overrides.utilisation > 1) fail("--utilisation is a share: at most 1")
if (write && (Object.keys(overrides).length > 0 || pgFigure !== "cluster")) fail(`--write puts the default assumptions on ${PAGE}: drop the other options`)

if (file === undefined) {
  const results = join(ROOT, "bench", "results")
  const newest = !existsSync(results) ? undefined : readdirSync(results, { withFileTypes: true }).filter((e) => e.isFile() && e.name.endsWith(".json")).map((e) => e.name).sort().at(-1)
  if (newest === undefined) fail(`no result file in bench/results/: run \`npm run bench\` first\n${usage}`)
  file = join(results, newest!)
  process.stderr.write(`reading ${relative(ROOT, file)}\n`)
}
const path = resolve(file)
const source = relative(ROOT, path)
let result: unknown
try {
  result = JSON.parse(readFileSync(path, "utf8"))
} catch (error) {
  fail(`${source}: ${error instanceof Error ? error.message : String(error)}`)
}
const assumptions: Assumptions = { ...DEFAULTS, ...overrides }
let markdown = ""
try {
  markdown = renderCapacity(readFigures(result, source, pgFigure), assumptions)
} catch (error) {
  fail(error instanceof Error ? error.message : String(error))
}

if (write) {
  const page = readFileSync(join(ROOT, PAGE), "utf8")
  const begin = page.indexOf(BEGIN)
  const end = page.indexOf(END)
  if (begin < 0 || end < begin) fail(`${PAGE} has no ${BEGIN} … ${END} markers`)
  writeFileSync(join(ROOT, PAGE), page.slice(0, begin) + markdown + page.slice(end + END.length))
  writeFileSync(join(ROOT, FIGURES_FILE), `${JSON.stringify(trimResult(result, source), null, 2)}\n`)
  process.stdout.write(`wrote the tables of ${PAGE} and their figures to ${FIGURES_FILE}\n`)
} else {
  process.stdout.write(`${markdown}\n`)
}
