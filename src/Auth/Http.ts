/** The login HTTP handlers: the `Login` service (Login.ts) does the work; a refused attempt is answered by the error table. */
import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import { Api } from "../Api.ts"
import { clientErrorResponse } from "../Http/ErrorResponse.ts"
import { Login } from "./Login.ts"

export const layer = HttpApiBuilder.group(
  Api,
  "login",
  Effect.fn(function*(handlers) {
    const login = yield* Login
    return handlers
      .handle("login", ({ payload }) =>
        login.login(payload.username, payload.password).pipe(
          // The declared error (Errors.ts) would be answered without Retry-After (docs/errors-and-limits.md#failed-logins).
          Effect.catchTag("TooManyFailedLogins", (error) => Effect.succeed(clientErrorResponse(error)))
        ))
      .handle("refresh", ({ payload }) => login.refresh(payload.refresh_token))
  })
)
