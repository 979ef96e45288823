/**
 * The authors contract: the HTTP endpoints (docs/http-api.md#authors), and the data of the
 * WebSocket packages that read authors (docs/websocket.md#messages), which the read model decodes
 * with them (Reads.ts).
 */
import { Effect, Schema } from "effect"
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "effect/http-api"
import { Authentication, RequiredRoles } from "../Auth/Middleware.ts"
import { Author, AuthorPage, AuthorPayload } from "../Domain/Author.ts"
import { AUTHORS_MAX_PER_PAGE, clampPerPage, Cursor, INT32_MAX, MAX_PAGE } from "../Domain/Pagination.ts"
import { OperationRoles } from "../Domain/User.ts"
import { Wire } from "../Errors.ts"
import { atLeast, atMost, documentedAs, IntFromString, IntParam, ParamText } from "../Domain/Params.ts"

/**
 * Ids start at 1; a path id no author has, 0 and ids beyond the 32-bit range included, is a 404,
 * so the minimum is documented, not checked.
 */
export const AuthorId = IntFromString.annotate(documentedAs({ type: "integer", minimum: 1 }))

/** An id filter: one no author has matches nothing. */
const IdFilter = IntFromString.annotate(documentedAs({ type: "integer" }))

/** A page's defaults, written once: the decoding and the document both read them. */
const FIRST_PAGE = 1
const PER_PAGE_DEFAULT = 20

/** `per_page` above 1000 is clamped, not refused; above 32 bits it is refused (docs/http-api.md#authors). */
const PerPage = clampPerPage(IntFromString.check(atLeast(1), atMost(INT32_MAX))).annotate(documentedAs({
  type: "integer",
  minimum: 1,
  maximum: INT32_MAX,
  default: PER_PAGE_DEFAULT,
  description: `Values above ${AUTHORS_MAX_PER_PAGE} are read as ${AUTHORS_MAX_PER_PAGE}.`
}))

export const ListParams = Schema.Struct({
  id: Schema.optional(IdFilter),
  name: Schema.optional(ParamText),
  search: Schema.optional(ParamText)
})

export const PageParams = Schema.Struct({
  page: IntParam({ minimum: 1, maximum: MAX_PAGE }, { default: FIRST_PAGE }).pipe(Schema.withDecodingDefaultTypeKey(Effect.succeed(FIRST_PAGE))),
  per_page: PerPage.pipe(Schema.withDecodingDefaultTypeKey(Effect.succeed(PER_PAGE_DEFAULT))),
  id: Schema.optional(IdFilter),
  name: Schema.optional(ParamText),
  cursor: Schema.optional(Cursor)
})

export const AuthorIdParams = { author_id: AuthorId }

/** Package filters: `name` and its alias `search_term` are case-insensitive substrings (docs/websocket.md#messages). */
export const PackageFilters = Schema.Struct({
  id: Schema.optional(Schema.NullOr(Schema.Int)),
  name: Schema.optional(Schema.NullOr(ParamText)),
  search_term: Schema.optional(Schema.NullOr(ParamText))
})

/** Package 1 (`GET_AUTHORS`): the whole list, filtered. */
export const ListPackageData = Schema.Struct({ filters: Schema.optional(Schema.NullOr(PackageFilters)) })

/** Package 2 (`GET_PAGINATED_AUTHORS`): a page, as over HTTP but without defaults. */
export const PagePackageData = Schema.Struct({
  page: Schema.Int.check(atLeast(1), atMost(MAX_PAGE)),
  per_page: clampPerPage(Schema.Int.check(atLeast(1), atMost(INT32_MAX)).annotate({ description: `Clamped to ${AUTHORS_MAX_PER_PAGE}` })),
  filters: Schema.optional(Schema.NullOr(PackageFilters)),
  cursor: Schema.optional(Schema.NullOr(Cursor))
})

type OpenApiObject = Record<string, unknown>

/**
 * Conditional reads: `If-None-Match` in, `ETag` on the 200, and the 304 without a body. HttpApi
 * has no declaration for a response header or a bodiless 304 that would leave the typed client's
 * success type alone, so the operation is completed in the document.
 */
const conditional = (operation: OpenApiObject): OpenApiObject => {
  const responses = (operation["responses"] ?? {}) as OpenApiObject
  return {
    ...operation,
    parameters: [
      ...((operation["parameters"] ?? []) as Array<unknown>),
      {
        name: "If-None-Match",
        in: "header",
        required: false,
        description: "ETags of representations the client holds; when one matches the current one, the answer is 304 without a body.",
        schema: { type: "string" }
      }
    ],
    responses: {
      ...responses,
      "200": {
        ...(responses["200"] as OpenApiObject | undefined),
        headers: {
          ETag: {
            description: "The representation's tag: strong (from the body) for an answer sent whole, weak for a list streamed in batches.",
            schema: { type: "string" }
          }
        }
      },
      "304": { description: "Not Modified: `If-None-Match` matches the current representation (no body)." }
    }
  }
}

const roles = (endpoint: string, list: ReadonlyArray<string>) =>
  `${endpoint}\n\nRequires role${list.length > 1 ? "s" : ""}: ${list.map((r) => `\`${r}\``).join(", ")}.`

export class AuthorsApi extends HttpApiGroup.make("authors")
  .add(
    HttpApiEndpoint.get("list", "/authors", { query: ListParams, success: Schema.Array(Author) })
      .annotate(RequiredRoles, OperationRoles.listAuthors)
      .annotate(OpenApi.Summary, "List authors")
      .annotate(OpenApi.Description, roles("Filters combine with AND; ordered by id. `name` is exact, `search` a case-insensitive substring.", OperationRoles.listAuthors))
      .annotate(OpenApi.Transform, conditional),
    HttpApiEndpoint.get("paginated", "/authors/paginated", { query: PageParams, success: AuthorPage })
      .annotate(RequiredRoles, OperationRoles.listAuthors)
      .annotate(OpenApi.Summary, "List authors, one page at a time")
      .annotate(OpenApi.Description, roles("Offset pagination (`page`, `per_page` ≤ 1000) or keyset pagination with `cursor` from `meta.next_cursor`.", OperationRoles.listAuthors))
      .annotate(OpenApi.Transform, conditional),
    // After `paginated`: the front door matches route templates in declaration order.
    HttpApiEndpoint.get("get", "/authors/:author_id", { params: AuthorIdParams, success: Author, error: Wire.AuthorNotFound })
      .annotate(RequiredRoles, OperationRoles.getAuthor)
      .annotate(OpenApi.Summary, "Get one author")
      .annotate(OpenApi.Description, roles("An id no author has (including one beyond the 32-bit range) is a 404.", OperationRoles.getAuthor))
      .annotate(OpenApi.Transform, conditional),
    HttpApiEndpoint.post("create", "/authors", {
      payload: AuthorPayload,
      // The status is a key annotation (HttpApiSchema.status): `Author` keeps its identifier and $ref.
      success: Author.pipe(HttpApiSchema.status(201)),
      error: Wire.AuthorNameTaken
    })
      .annotate(RequiredRoles, OperationRoles.createAuthor)
      .annotate(OpenApi.Summary, "Create an author")
      .annotate(OpenApi.Description, roles("The name is trimmed and must be unique.", OperationRoles.createAuthor)),
    HttpApiEndpoint.put("update", "/authors/:author_id", {
      params: AuthorIdParams,
      payload: AuthorPayload,
      success: Author,
      error: [Wire.AuthorNotFound, Wire.AuthorNameTaken]
    })
      .annotate(RequiredRoles, OperationRoles.updateAuthor)
      .annotate(OpenApi.Summary, "Rename an author")
      .annotate(OpenApi.Description, roles("The name is trimmed and must be unique.", OperationRoles.updateAuthor)),
    HttpApiEndpoint.delete("remove", "/authors/:author_id", {
      params: AuthorIdParams,
      success: HttpApiSchema.NoContent,
      error: Wire.AuthorNotFound
    })
      .annotate(RequiredRoles, OperationRoles.deleteAuthor)
      .annotate(OpenApi.Summary, "Delete an author")
      .annotate(OpenApi.Description, roles("Answers 204 with an empty body.", OperationRoles.deleteAuthor))
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Authors")
{}
