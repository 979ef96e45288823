/**
 * The one way a test waits for something it cannot be told about: poll a probe until it passes.
 * A probe passes when it returns without throwing and returns anything but `false`; it may assert
 * with `expect` (the last failed assertion is what a timeout reports). The deadline is a give-up
 * for a test that would otherwise hang, not a measure of the behaviour: it is generous, so that a
 * loaded machine only makes the wait longer.
 */

/** The give-up of `eventually` unless a call names one: under the test timeout (vitest.config.ts), so the failure names what was awaited. */
export const EVENTUALLY_TIMEOUT_MS = 60_000

export class EventuallyTimeout extends Error {
  constructor(what: string, timeoutMs: number, attempts: number, last: unknown) {
    const detail = last === undefined ? "the probe said false" : last instanceof Error ? last.message : String(last)
    super(`timed out after ${timeoutMs} ms (${attempts} attempts) waiting for ${what}; last: ${detail}`, { cause: last })
    this.name = "EventuallyTimeout"
  }
}

/**
 * Polls `probe` until it passes and resolves with what it returned; rejects with `EventuallyTimeout`
 * (naming `what` and the probe's last error) once `timeoutMs` has passed. The pause between attempts
 * grows from 10 ms to 250 ms: quick when the event is close, light on a busy machine when it is not.
 */
export const eventually = async <A>(
  probe: () => A | Promise<A>,
  what: string,
  timeoutMs: number = EVENTUALLY_TIMEOUT_MS
): Promise<Exclude<A, false>> => {
  const deadline = performance.now() + timeoutMs
  let last: unknown
  let attempts = 0
  let pause = 10
  for (;;) {
    attempts++
    try {
      const value = await probe()
      if (value !== false) return value as Exclude<A, false>
      last = undefined
    } catch (error) {
      last = error
    }
    if (performance.now() >= deadline) throw new EventuallyTimeout(what, timeoutMs, attempts, last)
    await new Promise((resolve) => setTimeout(resolve, pause))
    pause = Math.min(pause * 2, 250)
  }
}

/** `value`, or a throw naming `what` while it is undefined: for a probe that looks something up (`eventually(() => defined(find(), "the span"), …)`). */
export const defined = <A>(value: A | undefined, what: string): A => {
  if (value === undefined) throw new Error(`no ${what} yet`)
  return value
}
