/** Rate-limit admission (RateLimit/Admission.ts): the one answer every caller maps to its transport. */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option } from "effect"
import { makeAdmission } from "../../src/RateLimit/Admission.ts"
import { RateLimiterUnavailable } from "../../src/RateLimit/Decision.ts"
import { memoryRateLimiter, RateLimiter } from "../../src/RateLimit/RateLimiter.ts"

const down = RateLimiter.of({
  hit: () => Effect.fail(new RateLimiterUnavailable({ cause: new Error("down") })),
  reserve: () => Effect.fail(new RateLimiterUnavailable({ cause: new Error("down") }))
})

describe("makeAdmission", () => {
  it.effect("admits up to the limit, then refuses with the decision's Retry-After", () =>
    Effect.gen(function*() {
      const admission = makeAdmission(yield* memoryRateLimiter(), { limitType: "http", limit: 2, failMode: "open" })
      const answers = yield* Effect.forEach([1, 2, 3], () => admission.check("k"))
      expect(answers.map((a) => a._tag)).toEqual(["Admitted", "Admitted", "Refused"])
      expect(answers[2]).toMatchObject({ _tag: "Refused", retryAfterSeconds: 60, decision: { allowed: false, limit: 2, remaining: 0 } })
      expect(answers[0]).toMatchObject({ _tag: "Admitted", decision: Option.some({ allowed: true, remaining: 1 }) })
    }))

  it.effect("a store that fails admits without a decision when open, refuses for a window when closed", () =>
    Effect.gen(function*() {
      expect(yield* makeAdmission(down, { limitType: "http", limit: 5, failMode: "open" }).check("k")).toEqual({
        _tag: "Admitted",
        decision: Option.none()
      })
      expect(yield* makeAdmission(down, { limitType: "http", limit: 5, failMode: "closed" }).check("k")).toMatchObject({
        _tag: "Refused",
        retryAfterSeconds: 60
      })
    }))

  it.effect("reserve: a released admission leaves the budget as it was; a kept one uses it up", () =>
    Effect.gen(function*() {
      const admission = makeAdmission(yield* memoryRateLimiter(), { limitType: "login", limit: 1, windowMs: 900_000, failMode: "open" })
      const first = yield* admission.reserve("user")
      expect(first.admission._tag).toBe("Admitted")
      yield* first.release
      const second = yield* admission.reserve("user")
      expect(second.admission._tag).toBe("Admitted")
      expect((yield* admission.reserve("user")).admission).toMatchObject({ _tag: "Refused", retryAfterSeconds: 900 })
    }))
})
