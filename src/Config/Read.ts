/**
 * How a setting is read (docs/configuration.md#settings): the shapes most settings share — a
 * positive or non-negative integer, a port, a string or secret that counts as unset when empty, a
 * value checked by a parser — each with its default, and the refusal that names the variable. What
 * Config.ts and Config/Redis.ts read every variable with.
 */
import { Config, Effect, Option, Redacted, Result, Schema, SchemaIssue } from "effect"

/** A failure that names the variable: the message is shown as is, `at ["NAME"]` follows it. */
export const invalid = (name: string, input: unknown, message: string) =>
  new Config.ConfigError(
    new Schema.SchemaError(new SchemaIssue.Pointer([name], new SchemaIssue.InvalidValue({ message }, input)))
  )

const intAtLeast = (name: string, fallback: number, min: number, message: string) =>
  Config.schema(Schema.Int.check(Schema.isGreaterThanOrEqualTo(min, { message })), name).pipe(Config.withDefault(fallback))

export const positiveInt = (name: string, fallback: number) =>
  intAtLeast(name, fallback, 1, `${name} must be a positive integer`)

export const nonNegativeInt = (name: string, fallback: number) =>
  intAtLeast(name, fallback, 0, `${name} must be a non-negative integer`)

export const nonEmpty = (name: string) =>
  Config.String(name).pipe(Config.option, Config.map(Option.filter((s) => s.trim() !== "")))

export const nonEmptyRedacted = (name: string) =>
  Config.Redacted(name).pipe(Config.option, Config.map(Option.filter((s) => Redacted.value(s).trim() !== "")))

/** A port, or none when unset or empty. */
export const optionalPort = (name: string) =>
  nonEmpty(name).pipe(
    Config.mapEffect((raw) =>
      Option.match(raw, {
        onNone: () => Effect.succeed(Option.none<number>()),
        onSome: (text) => {
          const port = Number(text.trim())
          return Number.isInteger(port) && port >= 1 && port <= 65535
            ? Effect.succeed(Option.some(port))
            : Effect.fail(invalid(name, text, `${name} must be a port number (1-65535) or empty`))
        }
      })
    )
  )

export const fromParser = <A>(name: string, fallback: string, parse: (raw: string) => Result.Result<A, string>) =>
  Config.String(name).pipe(
    Config.withDefault(fallback),
    Config.mapEffect((raw) =>
      Result.match(parse(raw), {
        onSuccess: (a) => Effect.succeed(a),
        onFailure: (message) => Effect.fail(invalid(name, raw, `${name} ${message}`))
      })
    )
  )
