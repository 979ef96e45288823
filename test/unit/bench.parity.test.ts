/**
 * The bench compares the service with a hand-written baseline that copies a few pieces of src/
 * (bench/baseline/shared.ts: the rate-limit script, LIKE escaping, cursors, date parsing, request
 * data capture). `npm run bench` refuses to run when a copy drifts; this keeps CI from letting one
 * drift in the first place.
 */
import { describe, expect, it } from "vitest"
import { checkCodeParity } from "../../bench/lib/parity.ts"

describe("bench baseline parity", () => {
  it("bench/baseline/shared.ts still behaves as the src/ code it copies", () => {
    expect(checkCodeParity()).toEqual([])
  })
})
