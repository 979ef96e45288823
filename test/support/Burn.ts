/**
 * Burns CPU for the profiler tests in `burnCpuForProfilerTest`, in slices of about a millisecond,
 * each one call from the event loop (so the service can answer in between).
 *
 * The function has no loop: V8 compiles a hot loop while it runs (on-stack replacement), and Node
 * 24's V8 charges the samples of such code, when it was compiled before a capture started, to the
 * caller (`processImmediate`) — until the function's ordinary optimised code replaces it, which a
 * busy machine delays (half of a capture, once). Recursion gives the profile the same function in
 * every frame.
 */
function burnCpuForProfilerTest(depth: number): number {
  return depth < 2 ? depth : burnCpuForProfilerTest(depth - 1) + burnCpuForProfilerTest(depth - 2)
}

const slice = (done: () => boolean, finish: () => void) => {
  burnCpuForProfilerTest(20)
  if (done()) finish()
  else setImmediate(slice, done, finish)
}

/** Burns CPU until `done()`. */
export const burnUntil = (done: () => boolean) => new Promise<void>((finish) => setImmediate(slice, done, finish))

/**
 * What a capture taken while burning guarantees, whatever else the machine runs: the busy function
 * is among the report's hot functions by self time, with at least a quarter of the samples. V8's
 * sampler ticks only while this thread runs, so a busy core lowers the number of samples, not the
 * share of them that lands in the burn (beside two CPU-bound processes it stayed at 88–98 %). The
 * rank is not asserted: it says as much about what else the process ran as about the burn.
 */
export const MIN_BURN_SHARE_PERCENT = 25

/** The rows of the report's "by self time" table: function, location, self %. */
export const selfRows = (html: string) => {
  const table = html.slice(html.indexOf(`id="by-self"`), html.indexOf("</table>", html.indexOf(`id="by-self"`)))
  return [...table.matchAll(/<td class="fn">([^<]*)<\/td><td class="loc">([^<]*)<\/td><td class="n">[^<]*<\/td><td class="n">([\d.]+)%<\/td>/g)]
    .map((m) => ({ name: m[1]!, location: m[2]!, selfPercent: Number(m[3]) }))
}
