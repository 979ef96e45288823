/**
 * The WebSocket client kit's reconnection delays (src/Client/WsProtocol.ts `reconnectDelay`): "full
 * jitter" under the documented bounds — the n-th delay is a random point below
 * `initialDelayMs·2^n`, never above `maxDelayMs` — so a fleet dropped by one restart does not come
 * back at the same instants, while the bound still doubles. Seeded random sources, no timers.
 */
import { describe, expect, it } from "vitest"
import { reconnectDelay } from "../../src/Client/WsProtocol.ts"

const BOUNDS = { initialDelayMs: 250, maxDelayMs: 10_000 }
const ATTEMPTS = 10
const FLEET = 1000
/** The documented schedule: `initialDelayMs` doubling up to `maxDelayMs` (the ceiling of each delay). */
const CEILINGS = [250, 500, 1000, 2000, 4000, 8000, 10_000, 10_000, 10_000, 10_000]

/** mulberry32: a small seeded PRNG, values in [0, 1). */
const seeded = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = seed
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

/** One client's delays for `ATTEMPTS` failed attempts in a row. */
const sequence = (random: () => number) => Array.from({ length: ATTEMPTS }, (_, n) => reconnectDelay(n, BOUNDS, random))

/** Each client of a fleet with its own seeded source. */
const fleet = () => Array.from({ length: FLEET }, (_, i) => sequence(seeded(i + 1)))

const median = (values: ReadonlyArray<number>) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!

/** The most clients whose attempt falls into one `windowMs` window. */
const crowdest = (instants: ReadonlyArray<number>, windowMs: number) => {
  const counts = new Map<number, number>()
  for (const t of instants) counts.set(Math.floor(t / windowMs), (counts.get(Math.floor(t / windowMs)) ?? 0) + 1)
  return Math.max(...counts.values())
}

describe("reconnection delays", () => {
  it("stay below the documented bounds: initialDelayMs doubling, never above maxDelayMs", () => {
    for (const delays of fleet()) {
      delays.forEach((delay, n) => {
        expect(delay).toBeGreaterThanOrEqual(0)
        expect(delay).toBeLessThan(CEILINGS[n]!)
      })
    }
    // At the extremes of the random source: 0, and (just below) the documented schedule itself.
    expect(sequence(() => 0)).toEqual(Array.from({ length: ATTEMPTS }, () => 0))
    expect(sequence(() => 1 - Number.EPSILON).map(Math.round)).toEqual(CEILINGS)
    // Far past the attempts a client makes, the bound stays maxDelayMs (no overflow).
    expect(reconnectDelay(5000, BOUNDS, () => 0.5)).toBe(BOUNDS.maxDelayMs / 2)
  })

  it("back off: the typical delay doubles from attempt to attempt until the cap", () => {
    const delays = fleet()
    const byAttempt = Array.from({ length: ATTEMPTS }, (_, n) => median(delays.map((d) => d[n]!)))
    for (let n = 0; n < ATTEMPTS; n++) {
      // Uniform below the ceiling: the median is about half of it.
      expect(byAttempt[n]! / CEILINGS[n]!, `attempt ${n}`).toBeGreaterThan(0.4)
      expect(byAttempt[n]! / CEILINGS[n]!, `attempt ${n}`).toBeLessThan(0.6)
    }
  })

  it("spread a fleet: each retry brings back at most a bound-sized share of the clients per 100 ms (fixed delays would bring them all at once)", () => {
    const delays = fleet()
    for (let n = 0; n < ATTEMPTS; n++) {
      // When each client's attempt n starts, counted from the common drop.
      const instants = delays.map((d) => d.slice(0, n + 1).reduce((a, b) => a + b, 0))
      // Each delay is uniform below its bound, so a 100 ms window holds about 100/bound of the
      // fleet at most (the sum's density is at most its widest part's), give or take the draw:
      // 40 % for the first retry's 250 ms, under 5 % once the bound passes 2 s.
      const share = crowdest(instants, 100) / FLEET
      expect(share, `attempt ${n}`).toBeLessThanOrEqual(Math.max(100 / CEILINGS[n]! * 1.5, 0.05))
    }
    // The first retry covers its whole window: every 25 ms of [0, 250) gets its share of the fleet.
    const first = delays.map((d) => d[0]!)
    for (let from = 0; from < 250; from += 25) {
      const share = first.filter((t) => t >= from && t < from + 25).length / FLEET
      expect(share, `${from}–${from + 25} ms`).toBeGreaterThan(0.05)
      expect(share, `${from}–${from + 25} ms`).toBeLessThan(0.15)
    }
  })

  it("draw once per attempt from the injected source (Math.random by default)", () => {
    let draws = 0
    const half = () => {
      draws++
      return 0.5
    }
    expect([0, 1, 2].map((n) => reconnectDelay(n, BOUNDS, half))).toEqual([125, 250, 500])
    expect(draws).toBe(3)
    const unseeded = reconnectDelay(0, BOUNDS)
    expect(unseeded).toBeGreaterThanOrEqual(0)
    expect(unseeded).toBeLessThan(BOUNDS.initialDelayMs)
  })
})
