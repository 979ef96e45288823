import { Context } from "effect"

/** The six roles of the realm (deploy/keycloak, config/dev-users.json). */
export const Roles = ["admin", "user", "get-authors", "create-author", "update-author", "delete-author"] as const
export type Role = (typeof Roles)[number]

/** The role each operation needs (docs/http-api.md#conventions), shared by the HTTP contracts and the WebSocket packages. */
export const OperationRoles = {
  listAuthors: ["get-authors"],
  getAuthor: ["get-authors"],
  createAuthor: ["create-author"],
  updateAuthor: ["update-author"],
  deleteAuthor: ["delete-author"],
  readAuditLogs: ["admin"]
} as const satisfies Record<string, ReadonlyArray<Role>>

/** The user model built from token claims (docs/http-api.md#conventions). */
export interface User {
  readonly id: string
  readonly username: string
  readonly roles: ReadonlyArray<string>
}

/** A verified bearer token's user and expiry (epoch seconds). */
export interface Principal extends User {
  readonly expiresAt: number
}

export class CurrentUser extends Context.Service<CurrentUser, Principal>()("Auth/CurrentUser") {}
