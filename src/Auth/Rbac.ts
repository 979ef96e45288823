/**
 * RBAC: an operation that lists several roles needs all of them (docs/http-api.md#conventions).
 * Which roles each operation needs is vocabulary, in Domain/User.ts (`OperationRoles`).
 */
import { Effect } from "effect"
import type { Role, User } from "../Domain/User.ts"
import { Forbidden } from "../Errors.ts"

export const hasRoles = (user: Pick<User, "roles">, required: ReadonlyArray<Role>): boolean =>
  required.every((role) => user.roles.includes(role))

export const requireRoles = (user: Pick<User, "roles">, required: ReadonlyArray<Role>) =>
  hasRoles(user, required) ? Effect.void : Effect.fail(Forbidden.instance)
