/** The HTTP API: every group, one document (served at /openapi.json). */
import { HttpApi, OpenApi } from "@effect/platform"
import { AuditLogsApi } from "./AuditLogs/Api.ts"
import { LoginApi } from "./Auth/Api.ts"
import { AuthorsApi } from "./Authors/Api.ts"
import { Wire } from "./Errors.ts"
import { openApi422 } from "./Http/Validation.ts"
import { SystemApi } from "./Observability/Api.ts"
import { ProfilingApi } from "./Profiling/Api.ts"

export class Api extends HttpApi.make("author-directory")
  .add(AuthorsApi)
  .add(LoginApi)
  .add(AuditLogsApi)
  .add(SystemApi)
  .add(ProfilingApi)
  // Answered by the front door for any endpoint (Http/FrontDoor.ts).
  .addError(Wire.PayloadTooLarge)
  .addError(Wire.RateLimited)
  .addError(Wire.InternalError)
  .annotate(OpenApi.Title, "Author Directory Service")
  .annotate(OpenApi.Version, "1.0.0")
  .annotate(OpenApi.Description, "Authors over HTTP and WebSocket (`/web`, see `/asyncapi.json`), with OIDC bearer authentication and role-based access.")
  .annotate(OpenApi.Transform, openApi422)
{}
