/**
 * Prints a `password_hash` for the built-in provider's users file (docs/configuration.md):
 *   npm run hash-password -- <password>
 *   printf '%s' "$PASSWORD" | npm run hash-password     (keeps the password out of shell history)
 */
import { hashPassword } from "../src/Auth/Passwords.ts"

const readStdin = async (): Promise<string> => {
  const chunks: Array<Buffer> = []
  for await (const chunk of process.stdin) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(String(chunk)))
  // One trailing newline (from echo or a here-string) is not part of the password.
  return Buffer.concat(chunks).toString("utf8").replace(/\r?\n$/, "")
}

const main = async () => {
  const argument = process.argv[2]
  const password = argument ?? await readStdin()
  if (password === "") {
    process.stderr.write("usage: npm run hash-password -- <password>   (or pipe the password on stdin)\n")
    process.exitCode = 2
    return
  }
  process.stdout.write(`${await hashPassword(password)}\n`)
}

await main()
