/**
 * Front door, last stage: the headers every response carries (docs/http-api.md#conventions), with
 * a CSP strict enough for JSON and one that still lets the self-contained pages (/docs, /redoc,
 * profiling reports) run their inline script and style.
 */
import type { HttpServerResponse } from "effect/http"

const STRICT_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
/** Swagger UI, ReDoc and profiling reports are self-contained pages with inline script and style. */
const PAGE_CSP = "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; " +
  "img-src 'self' data: blob:; font-src 'self' data:; worker-src 'self' blob:; connect-src 'self'; " +
  "frame-ancestors 'none'; base-uri 'self'; form-action 'self'"

/** A response's content type: set as a header, or carried by its body. */
export const contentTypeOf = (response: HttpServerResponse.HttpServerResponse): string => {
  const header = response.headers["content-type"]
  if (header !== undefined) return header
  const body = response.body
  return "contentType" in body && typeof body.contentType === "string" ? body.contentType : ""
}

export const securityHeaders = (response: HttpServerResponse.HttpServerResponse): Record<string, string> => ({
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  "referrer-policy": "no-referrer",
  "content-security-policy": contentTypeOf(response).startsWith("text/html") ? PAGE_CSP : STRICT_CSP,
  ...(response.status === 401 ? { "www-authenticate": "Bearer" } : {})
})
