/**
 * Request schemas whose failures read like FastAPI's: a message may carry its pydantic error
 * type as `type|message`, which the 422 mapper (Validation.ts) splits. In Schema 4 the text is
 * the `message` annotation of a check, or of the issue a transformation fails with; a consumer
 * reads it with `SchemaIssue.makeFormatterStandardSchemaV1()(error.issue).issues` (each
 * `{ path, message }`) and splits it with `splitIssue`.
 */
import { Effect, type JsonSchema, Schema, SchemaAST, SchemaIssue, SchemaTransformation } from "effect"

export const issue = (type: string, message: string) => `${type}|${message}`

/** The `{type, msg}` of a `type|message` text, or undefined for a message of Effect's own. */
export const splitIssue = (message: string): { readonly type: string; readonly msg: string } | undefined => {
  const bar = message.indexOf("|")
  if (bar > 0 && /^[a-z_]+$/.test(message.slice(0, bar))) return { type: message.slice(0, bar), msg: message.slice(bar + 1) }
  return undefined
}

/** The `message` annotation of a schema node, if it has one. */
export const annotatedMessage = (annotations: { readonly [key: string]: unknown } | undefined): string | undefined =>
  typeof annotations?.["message"] === "string" ? annotations["message"] : undefined

/** The one member of `X | null | undefined` a client meant (optional and nullable fields). */
export const meant = (ast: SchemaAST.AST): SchemaAST.AST => {
  if (ast._tag !== "Union") return ast
  const members = ast.types.filter((t) => t._tag !== "Null" && t._tag !== "Undefined")
  return members.length === 1 ? meant(members[0]!) : ast
}

const INT_PARSING = issue("int_parsing", "Input should be a valid integer, unable to parse string as an integer")

/** The integer a query or path string holds, as `IntFromString` reads it; undefined when it holds none. */
export const intFromText = (text: string): number | undefined => {
  const trimmed = text.trim()
  const value = Number(trimmed)
  return /^[+-]?\d+$/.test(trimmed) && Number.isSafeInteger(value) ? value : undefined
}

/** An integer in a query or path string ("abc", "1.5", "1e3" and unsafe integers are refused). */
export const IntFromString: Schema.decodeTo<Schema.Int, Schema.String> = Schema.String.pipe(
  Schema.decodeTo(
    Schema.Int,
    SchemaTransformation.transformEffect<number, string>({
      decode: (text, options) => {
        const value = intFromText(text)
        return value !== undefined
          ? Effect.succeed(value)
          : Effect.fail(new SchemaIssue.InvalidValue({ message: INT_PARSING }, text, options))
      },
      encode: (n) => Effect.succeed(String(n))
    })
  )
)

/** Checks, as Schema 4 writes them: `IntFromString.check(atLeast(1), atMost(MAX_PAGE))`. */
export const atLeast = (min: number): SchemaAST.Filter<number> =>
  Schema.isGreaterThanOrEqualTo(min, { message: issue("greater_than_equal", `Input should be greater than or equal to ${min}`) })

export const atMost = (max: number): SchemaAST.Filter<number> =>
  Schema.isLessThanOrEqualTo(max, { message: issue("less_than_equal", `Input should be less than or equal to ${max}`) })

/**
 * A free-text path or query value: bounded, and without NUL (PostgreSQL cannot compare it;
 * docs/errors-and-limits.md#validation-errors-422 — escapes that are not UTF-8 arrive as NUL: Http/UrlText.ts).
 */
export const ParamText = Schema.String.check(
  Schema.makeFilter<string>((s) => {
    if ([...s].length > 1000) return issue("string_too_long", "String should have at most 1000 characters")
    if (s.includes("\u0000")) return issue("string_pattern_mismatch", "String must not contain NUL characters or bytes that are not UTF-8")
    return true
  }, { expected: "a string of at most 1000 characters without NUL", toJsonSchema: () => ({ maxLength: 1000 }) })
)

/**
 * The annotation that describes a query or path parameter in the OpenAPI document by what it
 * decodes to (an integer, a date, one of a few words), not by the text it arrives as: HttpApi
 * documents the encoded side, which for every such parameter is a string. Api.ts puts it in the
 * document; the decoding, and so every answer, stays the schema's.
 */
export const PARAMETER_SCHEMA = "parameterSchema"

export const documentedAs = (schema: JsonSchema.JsonSchema): { readonly [PARAMETER_SCHEMA]: JsonSchema.JsonSchema } => ({
  [PARAMETER_SCHEMA]: schema
})

/** The documented schema of a parameter (optional ones included), if it has one. */
export const parameterSchemaOf = (ast: SchemaAST.AST): JsonSchema.JsonSchema | undefined => {
  const value = SchemaAST.resolve(meant(ast))?.[PARAMETER_SCHEMA]
  return typeof value === "object" && value !== null ? value as JsonSchema.JsonSchema : undefined
}

/** An integer parameter with the bounds it is checked against, documented as such (with its default, if it has one). */
export const IntParam = (
  bounds: { readonly minimum: number; readonly maximum?: number },
  doc: { readonly default?: number; readonly description?: string } = {}
) => {
  const checked = bounds.maximum === undefined
    ? IntFromString.check(atLeast(bounds.minimum))
    : IntFromString.check(atLeast(bounds.minimum), atMost(bounds.maximum))
  return checked.annotate(documentedAs({ type: "integer", ...bounds, ...doc }))
}
