/** Units of the SQL instrumentation labels and the profile analysis behind the HTML reports. */
import { describe, expect, it } from "vitest"
import { errorTypeOf, operationOf } from "../../src/Db/Instrumentation.ts"
import { analyse, type CpuProfile, renderReport } from "../../src/Profiling/Report.ts"
import { REPORT_NAME } from "../../src/Profiling/Profiler.ts"

describe("db metric labels", () => {
  it("labels a statement by its leading keyword, past comments, with a bounded set", () => {
    expect(operationOf("SELECT 1")).toBe("select")
    expect(operationOf("  \n insert into authors (name) values ($1)")).toBe("insert")
    expect(operationOf("-- why\n/* block */ UPDATE authors SET name = $1")).toBe("update")
    expect(operationOf("delete from authors where id = $1")).toBe("delete")
    expect(operationOf("WITH x AS (SELECT 1) SELECT * FROM x")).toBe("with")
    expect(operationOf("BEGIN")).toBe("begin")
    expect(operationOf("VACUUM")).toBe("other")
    expect(operationOf("")).toBe("other")
  })

  it("names SQLSTATE errors, and anything without a code is a connection error", () => {
    expect(errorTypeOf({ code: "23505" })).toBe("unique_violation")
    expect(errorTypeOf({ code: "57014" })).toBe("query_canceled")
    expect(errorTypeOf({ code: "XX000" })).toBe("sqlstate_XX000")
    expect(errorTypeOf({ code: "ECONNREFUSED" })).toBe("connection")
    expect(errorTypeOf(new Error("Connection terminated unexpectedly"))).toBe("connection")
  })
})

const frame = (functionName: string, line = 0) => ({ functionName, url: functionName.startsWith("(") ? "" : "file:///app/x.js", lineNumber: line, columnNumber: 0 })

/** root → main → (fib → fib → leaf), main → idle work; 10 samples of 1 ms. */
const profile: CpuProfile = {
  startTime: 0,
  endTime: 10_000,
  samples: Array.from({ length: 10 }, (_, i) => i),
  nodes: [
    { id: 1, callFrame: frame("(root)", -1), hitCount: 0, children: [2, 7] },
    { id: 2, callFrame: frame("main", 0), hitCount: 1, children: [3] },
    { id: 3, callFrame: frame("fib", 9), hitCount: 2, children: [4] },
    { id: 4, callFrame: frame("fib", 9), hitCount: 3, children: [5] },
    { id: 5, callFrame: frame("leaf", 19), hitCount: 2, children: [] },
    { id: 7, callFrame: frame("(idle)", -1), hitCount: 2, children: [] }
  ]
}

describe("profile analysis", () => {
  it("ranks functions by self time, counts recursion once in total time, reports file:line", () => {
    const a = analyse(profile)
    expect(a.sampleCount).toBe(10)
    expect(a.durationMs).toBe(10)
    expect(a.hot.map((f) => [f.name, f.location, f.selfMs, f.totalMs])).toEqual([
      ["fib", "/app/x.js:10", 5, 7],
      ["leaf", "/app/x.js:20", 2, 2],
      ["main", "/app/x.js:1", 1, 8]
    ])
    expect(a.meta).toEqual([{ name: "(idle)", ms: 2 }])
    expect(a.root.value).toBe(10)
  })

  it("renders a page with both tables and a flame graph, escaping names", () => {
    const evil: CpuProfile = { ...profile, nodes: profile.nodes.map((n) => n.id === 5 ? { ...n, callFrame: frame("<script>alert(1)</script>", 19) } : n) }
    const html = renderReport(evil, { title: "t", startedAt: new Date(0), command: "c" })
    expect(html).toContain(`id="by-self"`)
    expect(html).toContain(`id="by-total"`)
    expect(html).toContain(`<svg id="flame"`)
    expect(html).not.toContain("<script>alert(1)</script>")
    expect(html).toContain("&lt;script&gt;alert(1)&lt;/script&gt;")
  })

  it("accepts only plain report names", () => {
    for (const ok of ["profile-1.html", "a.html", "A_b-c.d.html"]) expect(REPORT_NAME.test(ok), ok).toBe(true)
    for (const bad of ["../a.html", ".a.html", "a/b.html", "a\\b.html", "a.htm", "a.html/", "", "a b.html", "a.html\u0000"]) {
      expect(REPORT_NAME.test(bad), JSON.stringify(bad)).toBe(false)
    }
  })
})
