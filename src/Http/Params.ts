/**
 * Request schemas whose failures read like FastAPI's: a message may carry its pydantic error
 * type as `type|message`, which the 422 mapper (Validation.ts) splits.
 */
import { ParseResult, Schema } from "effect"

export const issue = (type: string, message: string) => `${type}|${message}`

/** An integer in a query or path string ("abc", "1.5", "1e3" and unsafe integers are refused). */
export const IntFromString = Schema.transformOrFail(Schema.String, Schema.Int, {
  strict: true,
  decode: (text, _, ast) => {
    const trimmed = text.trim()
    const value = Number(trimmed)
    return /^[+-]?\d+$/.test(trimmed) && Number.isSafeInteger(value)
      ? ParseResult.succeed(value)
      : ParseResult.fail(
        new ParseResult.Type(ast, text, issue("int_parsing", "Input should be a valid integer, unable to parse string as an integer"))
      )
  },
  encode: (n) => ParseResult.succeed(String(n))
}).annotations({ jsonSchema: { type: "integer" } })

type NumberSchema<S extends Schema.Schema.Any> = S & Schema.Schema<number, Schema.Schema.Encoded<S>, Schema.Schema.Context<S>>

export const atLeast = (min: number) => <S extends Schema.Schema.Any>(self: NumberSchema<S>) =>
  Schema.greaterThanOrEqualTo<S>(min, {
    message: () => issue("greater_than_equal", `Input should be greater than or equal to ${min}`)
  })(self)

export const atMost = (max: number) => <S extends Schema.Schema.Any>(self: NumberSchema<S>) =>
  Schema.lessThanOrEqualTo<S>(max, { message: () => issue("less_than_equal", `Input should be less than or equal to ${max}`) })(self)

/**
 * A free-text path or query value: bounded, and without NUL (PostgreSQL cannot compare it;
 * CONTRACT §9 "Control characters" — escapes that are not UTF-8 arrive as NUL: Http/UrlText.ts).
 */
export const ParamText = Schema.String.pipe(
  Schema.filter((s) => {
    if ([...s].length > 1000) return issue("string_too_long", "String should have at most 1000 characters")
    if (s.includes("\u0000")) return issue("string_pattern_mismatch", "String must not contain NUL characters or bytes that are not UTF-8")
    return true
  }, { jsonSchema: { maxLength: 1000 } })
)
