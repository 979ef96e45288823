/** RBAC: an operation that lists several roles needs all of them (INTERFACE §Authentication 4). */
import { Effect } from "effect"
import type { Role, User } from "../Domain/User.ts"
import { Forbidden } from "../Errors.ts"

export const hasRoles = (user: Pick<User, "roles">, required: ReadonlyArray<Role>): boolean =>
  required.every((role) => user.roles.includes(role))

export const requireRoles = (user: Pick<User, "roles">, required: ReadonlyArray<Role>) =>
  hasRoles(user, required) ? Effect.void : Effect.fail(Forbidden.instance)

/** The role each operation needs (INTERFACE §Authentication 5), shared by HTTP and WebSocket. */
export const OperationRoles = {
  listAuthors: ["get-authors"],
  getAuthor: ["get-authors"],
  createAuthor: ["create-author"],
  updateAuthor: ["update-author"],
  deleteAuthor: ["delete-author"],
  readAuditLogs: ["admin"]
} as const satisfies Record<string, ReadonlyArray<Role>>
