/** The authors HTTP contract (INTERFACE §Endpoints, CONTRACT §3). */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication, RequiredRoles } from "../Auth/Authentication.ts"
import { OperationRoles } from "../Auth/Rbac.ts"
import { Author, AuthorPage, AuthorPayload } from "../Domain/Author.ts"
import { AUTHORS_MAX_PER_PAGE, decodeCursor, MAX_PAGE } from "../Domain/Pagination.ts"
import { Wire } from "../Errors.ts"
import { atLeast, atMost, IntFromString, issue, ParamText } from "../Http/Params.ts"
import { Option, ParseResult } from "effect"

export const AuthorId = IntFromString

const authorIdParam = HttpApiSchema.param("author_id", AuthorId)

/** `per_page` above 1000 is clamped, not refused (CONTRACT §3). */
const PerPage = IntFromString.pipe(atLeast(1), Schema.transform(Schema.Int, {
  strict: true,
  decode: (n) => Math.min(n, AUTHORS_MAX_PER_PAGE),
  encode: (n) => n
}))

/** The opaque keyset cursor from `meta.next_cursor`; decodes to the last id seen. */
export const Cursor = Schema.transformOrFail(Schema.String, Schema.Int, {
  strict: true,
  decode: (text, _, ast) =>
    Option.match(decodeCursor(text), {
      onNone: () => ParseResult.fail(new ParseResult.Type(ast, text, issue("value_error", "Invalid cursor"))),
      onSome: ParseResult.succeed
    }),
  encode: (_, __, ast) => ParseResult.fail(new ParseResult.Forbidden(ast, _, "cursors are encoded by the service"))
})

export const ListParams = Schema.Struct({
  id: Schema.optional(IntFromString),
  name: Schema.optional(ParamText),
  search: Schema.optional(ParamText)
})

export const PageParams = Schema.Struct({
  page: Schema.optionalWith(IntFromString.pipe(atLeast(1), atMost(MAX_PAGE)), { default: () => 1 }),
  per_page: Schema.optionalWith(PerPage, { default: () => 20 }),
  id: Schema.optional(IntFromString),
  name: Schema.optional(ParamText),
  cursor: Schema.optional(Cursor)
})

const roles = (endpoint: string, list: ReadonlyArray<string>) =>
  `${endpoint}\n\nRequires role${list.length > 1 ? "s" : ""}: ${list.map((r) => `\`${r}\``).join(", ")}.`

export class AuthorsApi extends HttpApiGroup.make("authors")
  .add(
    HttpApiEndpoint.get("list", "/authors")
      .setUrlParams(ListParams)
      .addSuccess(Schema.Array(Author))
      .annotate(RequiredRoles, OperationRoles.listAuthors)
      .annotate(OpenApi.Summary, "List authors")
      .annotate(OpenApi.Description, roles("Filters combine with AND; ordered by id. `name` is exact, `search` a case-insensitive substring.", OperationRoles.listAuthors))
  )
  .add(
    HttpApiEndpoint.get("paginated", "/authors/paginated")
      .setUrlParams(PageParams)
      .addSuccess(AuthorPage)
      .annotate(RequiredRoles, OperationRoles.listAuthors)
      .annotate(OpenApi.Summary, "List authors, one page at a time")
      .annotate(OpenApi.Description, roles("Offset pagination (`page`, `per_page` ≤ 1000) or keyset pagination with `cursor` from `meta.next_cursor`.", OperationRoles.listAuthors))
  )
  .add(
    HttpApiEndpoint.post("create", "/authors")
      .setPayload(AuthorPayload)
      // Suspended and described: the status annotation on the struct itself would cost it its `Author` $ref in the docs.
      .addSuccess(Schema.suspend(() => Author).annotations({ description: "Author" }), { status: 201 })
      .addError(Wire.AuthorNameTaken)
      .annotate(RequiredRoles, OperationRoles.createAuthor)
      .annotate(OpenApi.Summary, "Create an author")
      .annotate(OpenApi.Description, roles("The name is trimmed and must be unique.", OperationRoles.createAuthor))
  )
  .add(
    HttpApiEndpoint.put("update")`/authors/${authorIdParam}`
      .setPayload(AuthorPayload)
      .addSuccess(Author)
      .addError(Wire.AuthorNotFound)
      .addError(Wire.AuthorNameTaken)
      .annotate(RequiredRoles, OperationRoles.updateAuthor)
      .annotate(OpenApi.Summary, "Rename an author")
      .annotate(OpenApi.Description, roles("The name is trimmed and must be unique.", OperationRoles.updateAuthor))
  )
  .add(
    HttpApiEndpoint.del("remove")`/authors/${authorIdParam}`
      .addSuccess(HttpApiSchema.NoContent)
      .addError(Wire.AuthorNotFound)
      .annotate(RequiredRoles, OperationRoles.deleteAuthor)
      .annotate(OpenApi.Summary, "Delete an author")
      .annotate(OpenApi.Description, roles("Answers 204 with an empty body.", OperationRoles.deleteAuthor))
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Authors")
{}
