/**
 * Burns CPU for the profiler tests in `burnCpuForProfilerTest`, in slices of about a millisecond,
 * each one call from the event loop (so the service can answer in between). A long-running loop
 * would be optimised on the stack (OSR), and V8 in Node 24 does not attribute samples of OSR code
 * compiled before a capture started to its function: the profile would blame the caller.
 */
function burnCpuForProfilerTest(done: () => boolean, finish: () => void) {
  let x = 1
  for (let i = 0; i < 100_000; i++) x = (x * 1103515245 + 12345) % 2147483648
  if (done()) finish()
  else setImmediate(burnCpuForProfilerTest, done, finish)
  return x
}

/** Burns CPU until `done()`. */
export const burnUntil = (done: () => boolean) => new Promise<void>((finish) => setImmediate(burnCpuForProfilerTest, done, finish))
