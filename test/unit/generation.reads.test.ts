/**
 * src/RateLimit/GenerationReads.ts: a Redis Cluster's generation reads shared among concurrent
 * readers. The invariant (the read cache's I1 depends on it): every reader gets a value read by a
 * command issued after it asked — at least as new as the value when it asked — and every reader
 * gets an answer. Checked over random interleavings of asks, flushes, bumps and replies, with
 * replies that fail.
 */
import fc from "fast-check"
import { describe, expect, it } from "vitest"
import { sharedReads } from "../../src/RateLimit/GenerationReads.ts"

type Step =
  | { readonly kind: "ask"; readonly key: number }
  | { readonly kind: "flush" }
  | { readonly kind: "bump"; readonly key: number }
  | { readonly kind: "reply"; readonly fail: boolean }

const steps: fc.Arbitrary<ReadonlyArray<Step>> = fc.array(
  fc.oneof<fc.Arbitrary<Step>[]>(
    fc.record({ kind: fc.constant("ask" as const), key: fc.nat(2) }),
    fc.record({ kind: fc.constant("flush" as const) }),
    fc.record({ kind: fc.constant("bump" as const), key: fc.nat(2) }),
    fc.record({ kind: fc.constant("reply" as const), fail: fc.boolean() })
  ),
  { maxLength: 60 }
)

describe("shared generation reads", () => {
  it("each reader gets a value read after it asked, and every reader an answer", async () => {
    await fc.assert(fc.asyncProperty(steps, async (script) => {
      const values = [0, 0, 0]
      let flushes: Array<() => void> = []
      const inFlight: Array<{ readonly value: number; readonly resolve: (v: string) => void; readonly reject: (e: unknown) => void }> = []
      // Redis: a command reads the key's value when it is issued; its reply comes later.
      const read = sharedReads(
        (key) => new Promise<string>((resolve, reject) => inFlight.push({ value: values[Number(key)]!, resolve, reject })),
        (flush) => flushes.push(flush)
      )
      const asks: Array<{ readonly key: number; readonly atAsk: number; outcome?: number | "failed" }> = []
      const settle = async () => {
        for (let i = 0; i < 3; i++) await Promise.resolve()
      }
      const runFlushes = () => {
        const due = flushes
        flushes = []
        due.forEach((flush) => flush())
      }
      for (const step of script) {
        if (step.kind === "ask") {
          const ask: (typeof asks)[number] = { key: step.key, atAsk: values[step.key]! }
          asks.push(ask)
          read(String(step.key), false).then((v) => (ask.outcome = Number(v)), () => (ask.outcome = "failed"))
        } else if (step.kind === "flush") runFlushes()
        else if (step.kind === "bump") values[step.key]!++
        else {
          const command = inFlight.shift()
          if (command !== undefined && step.fail) command.reject(new Error("lost"))
          else if (command !== undefined) command.resolve(String(command.value))
        }
        await settle()
      }
      // Drain: every flush runs and every command is answered.
      while (flushes.length > 0 || inFlight.length > 0) {
        runFlushes()
        inFlight.splice(0).forEach((command) => command.resolve(String(command.value)))
        await settle()
      }
      for (const ask of asks) {
        expect(ask.outcome, "every reader is answered").toBeDefined()
        if (ask.outcome !== "failed") expect(ask.outcome, "a value read after the ask").toBeGreaterThanOrEqual(ask.atAsk)
      }
    }), { numRuns: 500 })
  })

  it("concurrent reads of one key before a flush share one command; a read after it gets a command of its own", async () => {
    const sent: Array<string> = []
    let flush: (() => void) | undefined
    const read = sharedReads(async (key) => {
      sent.push(key)
      return `${key}:${sent.length}`
    }, (f) => (flush = f))
    const first = [read("list", true), read("list", true), read("id:7", false)]
    flush!()
    const later = read("list", true)
    flush!()
    expect(await Promise.all(first)).toEqual(["list:1", "list:1", "id:7:2"])
    expect(await later).toBe("list:3")
    expect(sent).toEqual(["list", "id:7", "list"])
  })
})
