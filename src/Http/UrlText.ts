/**
 * Control characters (docs/errors-and-limits.md#validation-errors-422): a path or query value whose percent-escapes are not UTF-8 is a
 * client error, a 422 naming the parameter — never a 404 (the router cannot decode the path) nor
 * a silent U+FFFD (URLSearchParams replaces what it cannot decode). Such a run of escapes is
 * rewritten to `%00` before routing, so the parameter's own schema (Domain/Params.ts `ParamText`,
 * which refuses NUL) answers the 422 in its place, after authentication and the role check. A
 * profiling report name is the exception: the profiler refuses it with 400 `Invalid filename`,
 * as it refuses every name outside its pattern (Profiling/Api.ts).
 * A `%` that starts no escape is taken literally, as URLSearchParams takes it (`%25`): the
 * router's decoder would otherwise give up on the whole value and pass its escapes through raw.
 */
import { isUtf8 } from "node:buffer"

const ESCAPE_RUN = /(?:%[0-9A-Fa-f]{2})+/g
const STRAY_PERCENT = /%(?![0-9A-Fa-f]{2})/g

/** The URL unchanged (the same string) when every run of escapes is UTF-8 and every `%` escapes. */
export const markInvalidUtf8 = (url: string): string =>
  url.includes("%")
    ? url.replace(ESCAPE_RUN, (run) => isUtf8(Buffer.from(run.replaceAll("%", ""), "hex")) ? run : "%00").replace(STRAY_PERCENT, "%25")
    : url
